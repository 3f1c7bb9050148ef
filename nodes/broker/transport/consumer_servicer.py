"""The ConsumerManager gRPC servicer: decode, call the handler from the request table, encode.

A client's Notifications stream is its notification channel: the stream carries the
channel's notices (a group whose consumer ids changed in `consumer_group`, an offset reset in
`reset`, which a client that predates it reads as a notice for group ""), and the stream's end
is the channel's end.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import grpc.aio

from nodes.broker.request_table import RequestKind, RequestTable
from nodes.broker.transport import convert
from nodes.common.grpc_adapter import CODE_TO_PB, answers_errors
from proto import consumer_pb2, consumer_pb2_grpc


class ConsumerManagerServicer(consumer_pb2_grpc.ConsumerManagerServicer):
    def __init__(self, table: RequestTable) -> None:
        self._heartbeat = table[RequestKind.HEART_BEAT]
        self._unregister = table[RequestKind.UNREGISTER_CLIENT]
        self._consumer_list = table[RequestKind.GET_CONSUMER_LIST_BY_GROUP]
        self._open_channel = table[RequestKind.NOTIFY_CONSUMER_IDS_CHANGED]
        self._send_back = table[RequestKind.CONSUMER_SEND_MSG_BACK]
        self._lock_batch = table[RequestKind.LOCK_BATCH_MQ]
        self._unlock_batch = table[RequestKind.UNLOCK_BATCH_MQ]

    @answers_errors(consumer_pb2.HeartbeatResponse, "heartbeat")
    async def Heartbeat(self, request: consumer_pb2.HeartbeatRequest, context: grpc.aio.ServicerContext
                        ) -> consumer_pb2.HeartbeatResponse:
        answer = await self._heartbeat(convert.heartbeat_from_pb(request, context.peer()))
        return consumer_pb2.HeartbeatResponse(code=CODE_TO_PB[answer.code], remark=answer.remark)

    @answers_errors(consumer_pb2.UnregisterClientResponse, "unregister client")
    async def UnregisterClient(self, request: consumer_pb2.UnregisterClientRequest,
                               context: grpc.aio.ServicerContext) -> consumer_pb2.UnregisterClientResponse:
        answer = self._unregister(convert.unregister_from_pb(request))
        return consumer_pb2.UnregisterClientResponse(code=CODE_TO_PB[answer.code], remark=answer.remark)

    @answers_errors(consumer_pb2.GetConsumerListResponse, "get consumer list")
    async def GetConsumerList(self, request: consumer_pb2.GetConsumerListRequest,
                              context: grpc.aio.ServicerContext) -> consumer_pb2.GetConsumerListResponse:
        answer = self._consumer_list(convert.consumer_list_from_pb(request))
        return consumer_pb2.GetConsumerListResponse(code=CODE_TO_PB[answer.code], remark=answer.remark,
                                                    client_ids=answer.client_ids)

    async def Notifications(self, request: consumer_pb2.NotificationsRequest, context: grpc.aio.ServicerContext
                            ) -> AsyncIterator[consumer_pb2.ConsumerNotification]:
        if not request.client_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "client_id is required")
        channel = self._open_channel(request.client_id, context.peer())
        try:
            while (notices := await channel.next_notices()) is not None:
                for notice in notices:
                    yield convert.notice_to_pb(notice)
        finally:
            channel.end()

    @answers_errors(consumer_pb2.ConsumerSendMsgBackResponse, "send back")
    async def ConsumerSendMsgBack(self, request: consumer_pb2.ConsumerSendMsgBackRequest,
                                  context: grpc.aio.ServicerContext) -> consumer_pb2.ConsumerSendMsgBackResponse:
        answer = await self._send_back(convert.send_back_from_pb(request))
        return consumer_pb2.ConsumerSendMsgBackResponse(code=CODE_TO_PB[answer.code], remark=answer.remark)

    @answers_errors(consumer_pb2.LockBatchResponse, "lock batch")
    async def LockBatchMQ(self, request: consumer_pb2.LockBatchRequest, context: grpc.aio.ServicerContext
                          ) -> consumer_pb2.LockBatchResponse:
        answer = self._lock_batch(convert.lock_batch_from_pb(request))
        return consumer_pb2.LockBatchResponse(code=CODE_TO_PB[answer.code], remark=answer.remark,
                                              locked=convert.mqs_to_pb(answer.locked))

    @answers_errors(consumer_pb2.UnlockBatchResponse, "unlock batch")
    async def UnlockBatchMQ(self, request: consumer_pb2.UnlockBatchRequest, context: grpc.aio.ServicerContext
                            ) -> consumer_pb2.UnlockBatchResponse:
        answer = self._unlock_batch(convert.lock_batch_from_pb(request))
        return consumer_pb2.UnlockBatchResponse(code=CODE_TO_PB[answer.code], remark=answer.remark)
