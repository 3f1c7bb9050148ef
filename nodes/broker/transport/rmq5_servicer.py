"""RocketMQ 5's MessagingService on a broker's rocketmq5 endpoint: the caller from its metadata,
decode, call the handler, encode.

Every answer carries a `Status` and every expected error goes there with gRPC OK, as the 5.x
clients expect: a call without `x-mq-client-id` is CLIENT_ID_REQUIRED, a failing handler is
INTERNAL_SERVER_ERROR with the failure in the message (logged once here; a broken invariant of
our own still stops the node), and the calls mqlab does not implement answer NOT_IMPLEMENTED.

A client's Telemetry stream stays open until the client ends it: each settings command it
writes is answered with OK and the merged settings, and the registry keeps the stream's push
handle for server-initiated commands (a half message's check).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
import grpc.aio
from google.protobuf import timestamp_pb2

from nodes.broker.rmq5.clients import CallContext
from nodes.broker.rmq5.codes import OK, Rmq5Code, Status
from nodes.broker.rmq5.service import Rmq5Service
from nodes.broker.transport import rmq5_convert as conv
from nodes.common.grpc_adapter import failure_remark
from proto import rmq5_definition_pb2 as d
from proto import rmq5_service_pb2 as s
from proto import rmq5_service_pb2_grpc

log = logging.getLogger(__name__)

_Response = TypeVar("_Response")
_CLIENT_ID_REQUIRED = Status(Rmq5Code.CLIENT_ID_REQUIRED,
                             "every call needs the x-mq-client-id header; a RocketMQ 5 client library sends it")
_END = object()  # ends a Telemetry stream's outgoing queue


def _not_implemented(call: str) -> Status:
    return Status(Rmq5Code.NOT_IMPLEMENTED, f"{call} is not implemented by mqlab")


class MessagingServicer(rmq5_service_pb2_grpc.MessagingServiceServicer):
    def __init__(self, service: Rmq5Service) -> None:
        self._svc = service

    async def _unary(self, what: str, response_type: Callable[..., _Response], context: grpc.aio.ServicerContext,
                     body: Callable[[CallContext], Awaitable[_Response]]) -> _Response:
        ctx = conv.call_context(context.invocation_metadata(), context.peer())
        if ctx is None:
            return response_type(status=conv.status_to_pb(_CLIENT_ID_REQUIRED))
        try:
            return await body(ctx)
        except Exception as exc:
            remark = failure_remark(f"rocketmq5 {what}", exc)
            return response_type(status=conv.status_to_pb(Status(Rmq5Code.INTERNAL_SERVER_ERROR, remark)))

    async def QueryRoute(self, request: s.QueryRouteRequest, context: grpc.aio.ServicerContext) -> s.QueryRouteResponse:
        async def body(ctx: CallContext) -> s.QueryRouteResponse:
            answer = await self._svc.routes.query_route(ctx, request.topic.name)
            return s.QueryRouteResponse(status=conv.status_to_pb(answer.status),
                                        message_queues=[conv.queue_to_pb(request.topic, q) for q in answer.queues])
        return await self._unary("QueryRoute", s.QueryRouteResponse, context, body)

    async def QueryAssignment(self, request: s.QueryAssignmentRequest, context: grpc.aio.ServicerContext
                              ) -> s.QueryAssignmentResponse:
        async def body(ctx: CallContext) -> s.QueryAssignmentResponse:
            answer = await self._svc.routes.query_assignment(ctx, request.topic.name, request.group.name)
            return s.QueryAssignmentResponse(
                status=conv.status_to_pb(answer.status),
                assignments=[d.Assignment(message_queue=conv.queue_to_pb(request.topic, q)) for q in answer.queues])
        return await self._unary("QueryAssignment", s.QueryAssignmentResponse, context, body)

    async def Heartbeat(self, request: s.HeartbeatRequest, context: grpc.aio.ServicerContext) -> s.HeartbeatResponse:
        async def body(ctx: CallContext) -> s.HeartbeatResponse:
            self._svc.clients.heartbeat(ctx, conv.client_type_name(request.client_type), request.group.name)
            return s.HeartbeatResponse(status=conv.status_to_pb(OK))
        return await self._unary("Heartbeat", s.HeartbeatResponse, context, body)

    async def NotifyClientTermination(self, request: s.NotifyClientTerminationRequest,
                                      context: grpc.aio.ServicerContext) -> s.NotifyClientTerminationResponse:
        async def body(ctx: CallContext) -> s.NotifyClientTerminationResponse:
            self._svc.clients.terminate(ctx, request.group.name)
            await self._svc.consume.client_gone(ctx.client_id)
            return s.NotifyClientTerminationResponse(status=conv.status_to_pb(OK))
        return await self._unary("NotifyClientTermination", s.NotifyClientTerminationResponse, context, body)

    async def SendMessage(self, request: s.SendMessageRequest, context: grpc.aio.ServicerContext
                          ) -> s.SendMessageResponse:
        async def body(ctx: CallContext) -> s.SendMessageResponse:
            answer = await self._svc.send.send(ctx, [conv.message_from_pb(m) for m in request.messages],
                                               conv.peer_host(ctx.peer))
            return s.SendMessageResponse(
                status=conv.status_to_pb(answer.status),
                entries=[s.SendResultEntry(status=conv.status_to_pb(e.status), message_id=e.message_id,
                                           offset=e.queue_offset, transaction_id=e.transaction_id)
                         for e in answer.entries])
        return await self._unary("SendMessage", s.SendMessageResponse, context, body)

    async def ReceiveMessage(self, request: s.ReceiveMessageRequest, context: grpc.aio.ServicerContext
                             ) -> AsyncIterator[s.ReceiveMessageResponse]:
        # The proxy's shape: the status, then each message, then the server's time, and the
        # stream ends at once: the client collects every response until the end, and a stream
        # held open fails the whole call at its deadline.
        ctx = conv.call_context(context.invocation_metadata(), context.peer())
        messages: tuple[Any, ...] = ()
        if ctx is None:
            status = _CLIENT_ID_REQUIRED
        else:
            try:
                answer = await self._svc.consume.receive(ctx, conv.receive_request_from_pb(request,
                                                                                           context.time_remaining()))
                status, messages = answer.status, answer.messages
            except Exception as exc:
                status = Status(Rmq5Code.INTERNAL_SERVER_ERROR, failure_remark("rocketmq5 ReceiveMessage", exc))
        yield s.ReceiveMessageResponse(status=conv.status_to_pb(status))
        for message in messages:
            yield s.ReceiveMessageResponse(message=conv.popped_to_pb(message))
        now = timestamp_pb2.Timestamp()
        now.GetCurrentTime()
        yield s.ReceiveMessageResponse(delivery_timestamp=now)

    async def AckMessage(self, request: s.AckMessageRequest, context: grpc.aio.ServicerContext) -> s.AckMessageResponse:
        async def body(ctx: CallContext) -> s.AckMessageResponse:
            if not request.entries:
                return s.AckMessageResponse(status=conv.status_to_pb(Status(Rmq5Code.BAD_REQUEST,
                                                                            "the ack carries no entry")))
            entries = []
            for e in request.entries:
                answer = await self._svc.consume.ack(ctx, request.group.name, request.topic.name, e.message_id,
                                                     e.receipt_handle)
                entries.append(s.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle,
                                                       status=conv.status_to_pb(answer.status)))
            codes = {e.status.code for e in entries}
            top = entries[0].status if len(codes) == 1 else d.Status(code=d.MULTIPLE_RESULTS, message="see each entry")
            return s.AckMessageResponse(status=top, entries=entries)
        return await self._unary("AckMessage", s.AckMessageResponse, context, body)

    async def ChangeInvisibleDuration(self, request: s.ChangeInvisibleDurationRequest,
                                      context: grpc.aio.ServicerContext) -> s.ChangeInvisibleDurationResponse:
        async def body(ctx: CallContext) -> s.ChangeInvisibleDurationResponse:
            invisible_ms = conv.duration_ms(request.invisible_duration)
            answer = await self._svc.consume.change_invisible(ctx, request.group.name, request.topic.name,
                                                              request.message_id, request.receipt_handle, invisible_ms)
            return s.ChangeInvisibleDurationResponse(status=conv.status_to_pb(answer.status),
                                                     receipt_handle=answer.receipt_handle)
        return await self._unary("ChangeInvisibleDuration", s.ChangeInvisibleDurationResponse, context, body)

    async def ForwardMessageToDeadLetterQueue(self, request: s.ForwardMessageToDeadLetterQueueRequest,
                                              context: grpc.aio.ServicerContext
                                              ) -> s.ForwardMessageToDeadLetterQueueResponse:
        async def body(ctx: CallContext) -> s.ForwardMessageToDeadLetterQueueResponse:
            answer = await self._svc.consume.forward_to_dlq(ctx, request.group.name, request.topic.name,
                                                            request.message_id, request.receipt_handle)
            return s.ForwardMessageToDeadLetterQueueResponse(status=conv.status_to_pb(answer.status))
        return await self._unary("ForwardMessageToDeadLetterQueue", s.ForwardMessageToDeadLetterQueueResponse,
                                 context, body)

    async def EndTransaction(self, request: s.EndTransactionRequest, context: grpc.aio.ServicerContext
                             ) -> s.EndTransactionResponse:
        async def body(ctx: CallContext) -> s.EndTransactionResponse:
            status = await self._svc.transactions.end(
                ctx, request.message_id, request.transaction_id, conv.enum_name(d.TransactionResolution, request.resolution),
                conv.enum_name(d.TransactionSource, request.source))
            return s.EndTransactionResponse(status=conv.status_to_pb(status))
        return await self._unary("EndTransaction", s.EndTransactionResponse, context, body)

    async def Telemetry(self, request_iterator: AsyncIterator[s.TelemetryCommand], context: grpc.aio.ServicerContext
                        ) -> AsyncIterator[s.TelemetryCommand]:
        ctx = conv.call_context(context.invocation_metadata(), context.peer())
        if ctx is None:
            yield s.TelemetryCommand(status=conv.status_to_pb(_CLIENT_ID_REQUIRED))
            return
        outgoing: asyncio.Queue[Any] = asyncio.Queue()
        token = self._svc.clients.open_stream(ctx, outgoing.put_nowait)
        reader = asyncio.create_task(self._read_telemetry(ctx, request_iterator, outgoing),
                                     name=f"rmq5-telemetry-{ctx.client_id}")
        try:
            while (command := await outgoing.get()) is not _END:
                yield command
        finally:
            reader.cancel()
            self._svc.clients.close_stream(ctx.client_id, token)

    async def _read_telemetry(self, ctx: CallContext, commands: AsyncIterator[s.TelemetryCommand],
                              outgoing: asyncio.Queue[Any]) -> None:
        """Answer each settings command; the client's end of the stream ends ours."""
        try:
            async for command in commands:
                if command.HasField("settings"):
                    client_type, group, topics = conv.settings_identity(command.settings)
                    self._svc.clients.settings(ctx, client_type, group, topics)
                    server = self._svc.consume.subscription_settings(group, self._svc.settings)
                    outgoing.put_nowait(s.TelemetryCommand(
                        status=conv.status_to_pb(OK), settings=conv.merged_settings(command.settings, server)))
                # thread stack traces and verify results answer commands mqlab never sends
        except (grpc.RpcError, asyncio.CancelledError):
            pass
        except Exception as exc:
            failure_remark(f"rocketmq5 Telemetry of {ctx.client_id}", exc)
        finally:
            outgoing.put_nowait(_END)

    # ---- calls mqlab does not implement: a status the client understands ---------------------

    async def PullMessage(self, request: s.PullMessageRequest, context: grpc.aio.ServicerContext
                          ) -> AsyncIterator[s.PullMessageResponse]:
        yield s.PullMessageResponse(status=conv.status_to_pb(_not_implemented("PullMessage")))

    async def UpdateOffset(self, request: s.UpdateOffsetRequest, context: grpc.aio.ServicerContext
                           ) -> s.UpdateOffsetResponse:
        return s.UpdateOffsetResponse(status=conv.status_to_pb(_not_implemented("UpdateOffset")))

    async def GetOffset(self, request: s.GetOffsetRequest, context: grpc.aio.ServicerContext) -> s.GetOffsetResponse:
        return s.GetOffsetResponse(status=conv.status_to_pb(_not_implemented("GetOffset")))

    async def QueryOffset(self, request: s.QueryOffsetRequest, context: grpc.aio.ServicerContext
                          ) -> s.QueryOffsetResponse:
        return s.QueryOffsetResponse(status=conv.status_to_pb(_not_implemented("QueryOffset")))


    async def RecallMessage(self, request: s.RecallMessageRequest, context: grpc.aio.ServicerContext
                            ) -> s.RecallMessageResponse:
        return s.RecallMessageResponse(status=conv.status_to_pb(_not_implemented("RecallMessage")))

    async def SyncLiteSubscription(self, request: s.SyncLiteSubscriptionRequest, context: grpc.aio.ServicerContext
                                   ) -> s.SyncLiteSubscriptionResponse:
        return s.SyncLiteSubscriptionResponse(status=conv.status_to_pb(_not_implemented("SyncLiteSubscription")))
