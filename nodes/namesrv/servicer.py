"""The name server process: NameServer gRPC servicer, broker expiry, and the app wiring.

Owns the RouteTable of this process. Does not persist anything: like RocketMQ's name
server, it rebuilds its state from broker registrations after a restart.

A broker's liveness has two signals, as in RocketMQ: its periodic registration (silence past
`broker_expiry_ms` expires it) and its channel, here the `WatchChannel` stream each broker
keeps open. gRPC cancels the stream's handler when the broker's connection closes or resets
(a killed process, a REJECT partition), which removes the route at once (RocketMQ's
BrokerHousekeepingService -> onChannelDestroy). A silent partition closes nothing, so only
expiry notices it, as in RocketMQ. For that reason no keepalive is configured on either side
(nodes.common.rpc): pings would turn a blackhole into a close after the ping timeout; gRPC's
own server default pings only after 2 h idle, far beyond broker_expiry_ms.
"""

from __future__ import annotations

import asyncio
import logging

import grpc.aio

from nodes.common import wire
from nodes.common.clock import SYSTEM_CLOCK, Clock
from nodes.common.config import NamesrvConfig
from nodes.common.node import NodeStatus, add_control_plane, set_serving
from nodes.common.rpc import bind, make_server
from nodes.common.service import Lifecycle, LifecycleState, Service
from nodes.namesrv.route_table import RouteTable
from proto import common_pb2, namesrv_pb2, namesrv_pb2_grpc

log = logging.getLogger(__name__)


class NameServerServicer(namesrv_pb2_grpc.NameServerServicer):
    def __init__(self, table: RouteTable, clock: Clock) -> None:
        self._table = table
        self._clock = clock
        # Set before the server stops: it ends every channel stream normally (not by a broker).
        self._closing = asyncio.Event()
        self.open_channels = 0

    async def RegisterBroker(self, request: namesrv_pb2.RegisterBrokerRequest,
                             context: grpc.aio.ServicerContext) -> namesrv_pb2.RegisterBrokerResponse:
        if not request.broker_name or not request.broker_addr or request.broker_id < 0:
            return namesrv_pb2.RegisterBrokerResponse(
                code=common_pb2.INVALID_ARGUMENT,
                remark="broker_name, broker_addr and a broker_id >= 0 are required")
        result = self._table.register(
            cluster=request.cluster_name, broker_name=request.broker_name, broker_id=request.broker_id,
            broker_addr=request.broker_addr, ha_server_addr=request.ha_server_addr,
            topic_configs=[wire.topic_config_from_pb(t) for t in request.topic_configs],
            data_version=(request.data_version.timestamp_ms, request.data_version.counter),
            now_ms=self._clock.monotonic_ms(), node_id=request.node_id, channel_token=request.channel_token)
        return namesrv_pb2.RegisterBrokerResponse(code=common_pb2.SUCCESS, master_addr=result.master_addr,
                                                  ha_server_addr=result.ha_server_addr)

    async def UnregisterBroker(self, request: namesrv_pb2.UnregisterBrokerRequest,
                               context: grpc.aio.ServicerContext) -> namesrv_pb2.UnregisterBrokerResponse:
        self._table.unregister(broker_name=request.broker_name, broker_id=request.broker_id,
                               broker_addr=request.broker_addr)
        return namesrv_pb2.UnregisterBrokerResponse(code=common_pb2.SUCCESS)

    async def WatchChannel(self, request: namesrv_pb2.WatchChannelRequest,
                           context: grpc.aio.ServicerContext) -> None:
        if not request.broker_addr or not request.channel_token:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "broker_addr and channel_token are required")
        addr, token = request.broker_addr, request.channel_token
        live = self._table.live.get(addr)
        self.open_channels += 1
        log.debug("channel of broker %s at %s open (token %s)", request.broker_name, addr, token)
        try:
            # context.write, not a generator's yield: a cancellation during the write must still
            # reach the finally below.
            await context.write(namesrv_pb2.WatchChannelEvent(
                registered=live is not None and live.channel_token == token))
            # Nothing more to say: the stream's only job is to end when the broker's connection does.
            await self._closing.wait()
        except asyncio.CancelledError:
            # grpc cancels the handler (or fails its write) when the peer cancels the call or its
            # connection closes or resets; the call is over, re-raising would only log an error.
            pass
        finally:
            self.open_channels -= 1
            # Only this server's own shutdown ends a stream without the broker's channel being gone.
            if not self._closing.is_set():
                self._table.on_channel_destroy(addr, token)

    def close_channels(self) -> None:
        """End every channel stream before the server stops (they end with OK, removing nothing)."""
        self._closing.set()

    async def GetRouteInfo(self, request: namesrv_pb2.GetRouteInfoRequest,
                           context: grpc.aio.ServicerContext) -> namesrv_pb2.GetRouteInfoResponse:
        route = self._table.route(request.topic)
        if route is None:
            return namesrv_pb2.GetRouteInfoResponse(
                code=common_pb2.TOPIC_ROUTE_NOT_EXIST,
                remark=f"no route for topic {request.topic!r}: no live broker serves it")
        return namesrv_pb2.GetRouteInfoResponse(code=common_pb2.SUCCESS, route=namesrv_pb2.TopicRouteData(
            queue_datas=[namesrv_pb2.QueueData(broker_name=q.broker_name, read_queue_nums=q.read_queue_nums,
                                               write_queue_nums=q.write_queue_nums, perm=q.perm,
                                               topic_sys_flag=q.topic_sys_flag) for q in route.queue_datas],
            broker_datas=[namesrv_pb2.BrokerData(cluster=b.cluster, broker_name=b.broker_name,
                                                 broker_addrs=b.broker_addrs) for b in route.broker_datas]))

    async def GetClusterInfo(self, request: namesrv_pb2.GetClusterInfoRequest,
                             context: grpc.aio.ServicerContext) -> namesrv_pb2.GetClusterInfoResponse:
        return namesrv_pb2.GetClusterInfoResponse(
            code=common_pb2.SUCCESS,
            brokers=[namesrv_pb2.BrokerData(cluster=b.cluster, broker_name=b.broker_name,
                                            broker_addrs=b.broker_addrs)
                     for b in sorted(self._table.brokers.values(), key=lambda b: b.broker_name)],
            # liveness is judged on the monotonic clock; report it as wall time for humans
            live=[namesrv_pb2.BrokerLiveInfo(
                broker_addr=addr, node_id=live.node_id,
                last_update_timestamp_ms=self._clock.wall_ms() - (self._clock.monotonic_ms() - live.last_update_ms))
                for addr, live in sorted(self._table.live.items())],
            topics=self._table.topics())


class BrokerExpiryService(Service):
    """RocketMQ scanNotActiveBroker: drop brokers silent for longer than broker_expiry_ms."""

    name = "broker-expiry"

    def __init__(self, table: RouteTable, clock: Clock, scan_ms: int, expiry_ms: int) -> None:
        super().__init__(scan_ms)
        self._table = table
        self._clock = clock
        self._expiry_ms = expiry_ms

    async def tick(self) -> None:
        self._table.expire(self._clock.monotonic_ms(), self._expiry_ms)


class NamesrvApp:
    role = "namesrv"

    def __init__(self, config: NamesrvConfig, shutdown_requested: asyncio.Event,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.node_id = config.node_id
        self._clock = clock
        self._shutdown_requested = shutdown_requested
        self.table = RouteTable()
        self.lifecycle = LifecycleState(f"namesrv {config.node_id}", clock)
        self._server: grpc.aio.Server | None = None
        self._servicer: NameServerServicer | None = None
        self._expiry = BrokerExpiryService(self.table, clock, config.timing.broker_expiry_scan_ms,
                                           config.timing.broker_expiry_ms)
        self.addr = ""

    async def start(self) -> str:
        self.lifecycle.transition(Lifecycle.STARTING)
        server = make_server()
        self._servicer = NameServerServicer(self.table, self._clock)
        namesrv_pb2_grpc.add_NameServerServicer_to_server(self._servicer, server)
        health_servicer = add_control_plane(server, self, self._shutdown_requested)
        port = bind(server, self.config.listen_host, self.config.port)
        await server.start()
        self._server = server
        self.addr = f"{self.config.listen_host}:{port}"
        self._expiry.start()
        await set_serving(health_servicer, True)
        self.lifecycle.transition(Lifecycle.RUNNING)
        return self.addr

    async def stop(self) -> None:
        self.lifecycle.transition(Lifecycle.STOPPING)
        await self._expiry.stop()
        if self._servicer is not None:
            self._servicer.close_channels()
        if self._server is not None:
            await self._server.stop(grace=0.5)
        self.lifecycle.transition(Lifecycle.STOPPED)

    def status(self) -> NodeStatus:
        brokers = {name: {str(k): v for k, v in b.broker_addrs.items()} for name, b in self.table.brokers.items()}
        return NodeStatus(
            node_id=self.node_id, role=self.role, state=self.lifecycle.state.name,
            status_line=f"{self.node_id} N {self.lifecycle.state.name} brokers={len(self.table.live)} "
                        f"topics={len(self.table.topic_queues)}",
            details={"addr": self.addr, "brokers": brokers, "topics": self.table.topics(),
                     "open_channels": self._servicer.open_channels if self._servicer else 0})
