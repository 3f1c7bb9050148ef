"""The NameServer gRPC servicer: decode, call the handler, encode.

A broker's channel is its `WatchChannel` stream. gRPC cancels the stream's handler when the
broker's connection closes or resets (a killed process, a REJECT partition), which removes
the route at once (RocketMQ's BrokerHousekeepingService -> onChannelDestroy). A silent
partition closes nothing, so only expiry notices it, as in RocketMQ. For that reason no
keepalive is configured on either side (nodes.common.rpc): pings would turn a blackhole into
a close after the ping timeout; gRPC's own server default pings only after 2 h idle, far
beyond broker_expiry_ms.
"""

from __future__ import annotations

import asyncio
import logging

import grpc
import grpc.aio

from nodes.common.credential import CredentialCheck
from nodes.common.grpc_adapter import CODE_TO_PB, answers_errors
from nodes.namesrv.handlers import NameServerHandler
from nodes.namesrv.transport import convert
from proto import namesrv_pb2, namesrv_pb2_grpc

log = logging.getLogger(__name__)


class NameServerServicer(namesrv_pb2_grpc.NameServerServicer):
    """RegisterBroker, UnregisterBroker and WatchChannel change routes: they need the cluster
    credential (when the name server has one). Routes and cluster info stay open."""

    def __init__(self, handler: NameServerHandler, credential: str = "") -> None:
        self._handler = handler
        self._check = CredentialCheck(credential)

    @answers_errors(namesrv_pb2.RegisterBrokerResponse, "register broker")
    async def RegisterBroker(self, request: namesrv_pb2.RegisterBrokerRequest,
                             context: grpc.aio.ServicerContext) -> namesrv_pb2.RegisterBrokerResponse:
        await self._check.require(context, "RegisterBroker")
        return convert.register_to_pb(self._handler.register_broker(convert.register_from_pb(request)))

    @answers_errors(namesrv_pb2.UnregisterBrokerResponse, "unregister broker")
    async def UnregisterBroker(self, request: namesrv_pb2.UnregisterBrokerRequest,
                               context: grpc.aio.ServicerContext) -> namesrv_pb2.UnregisterBrokerResponse:
        await self._check.require(context, "UnregisterBroker")
        code = self._handler.unregister_broker(convert.broker_ref_from_pb(request))
        return namesrv_pb2.UnregisterBrokerResponse(code=CODE_TO_PB[code])

    async def WatchChannel(self, request: namesrv_pb2.WatchChannelRequest,
                           context: grpc.aio.ServicerContext) -> None:
        await self._check.require(context, "WatchChannel")
        if not request.broker_addr or not request.channel_token:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "broker_addr and channel_token are required")
        broker = convert.broker_ref_from_pb(request)
        registered = self._handler.channel_opened(broker)
        log.debug("channel of broker %s at %s open (token %s)", broker.broker_name, broker.broker_addr,
                  broker.channel_token)
        try:
            # context.write, not a generator's yield: a cancellation during the write must still
            # reach the finally below.
            await context.write(namesrv_pb2.WatchChannelEvent(registered=registered))
            # Nothing more to say: the stream's only job is to end when the broker's connection does.
            await self._handler.until_closing()
        except asyncio.CancelledError:
            # grpc cancels the handler (or fails its write) when the peer cancels the call or its
            # connection closes or resets; the call is over, re-raising would only log an error.
            pass
        finally:
            self._handler.channel_closed(broker)

    @answers_errors(namesrv_pb2.GetRouteInfoResponse, "get route info")
    async def GetRouteInfo(self, request: namesrv_pb2.GetRouteInfoRequest,
                           context: grpc.aio.ServicerContext) -> namesrv_pb2.GetRouteInfoResponse:
        answer = self._handler.route(request.topic)
        if answer.route is None:
            return namesrv_pb2.GetRouteInfoResponse(code=CODE_TO_PB[answer.code], remark=answer.remark)
        return namesrv_pb2.GetRouteInfoResponse(code=CODE_TO_PB[answer.code],
                                                route=convert.route_to_pb(answer.route))

    @answers_errors(namesrv_pb2.GetClusterInfoResponse, "get cluster info")
    async def GetClusterInfo(self, request: namesrv_pb2.GetClusterInfoRequest,
                             context: grpc.aio.ServicerContext) -> namesrv_pb2.GetClusterInfoResponse:
        return convert.cluster_info_to_pb(self._handler.cluster_info())

    @answers_errors(namesrv_pb2.GetTopicListResponse, "get topic list")
    async def GetTopicList(self, request: namesrv_pb2.GetTopicListRequest,
                           context: grpc.aio.ServicerContext) -> namesrv_pb2.GetTopicListResponse:
        return convert.topic_list_to_pb(self._handler.topic_list())
