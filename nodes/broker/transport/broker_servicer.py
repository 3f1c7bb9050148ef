"""The Broker gRPC servicer: decode, call the handler from the request table, encode.

Errors map in one place (nodes.common.grpc_adapter; bytes that are no request are refused
before this, by nodes.common.grpc_guard). The streams are the only plumbing here: each pull
stream is one `PullSession`; answers queue up and are written as the stream can take them, a
batch stream packing every ready answer into one message. A send stream runs each request
exactly as `SendMessage` runs one, and writes each answer (tagged with its request id) when
its send is done.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc.aio

from nodes.broker.admin_queries import BrokerRuntimeRequest, ListConsumerGroupsRequest
from nodes.broker.pull import PullAnswer, PullSession
from nodes.broker.request_table import RequestKind, RequestTable
from nodes.broker.transport import admin_convert, convert, lookup_convert, pop_convert
from nodes.common.codes import ResponseCode
from nodes.common.grpc_adapter import CODE_TO_PB, answers_errors, failure_remark
from proto import broker_pb2, broker_pb2_grpc

log = logging.getLogger(__name__)

_STREAM_END = object()
# A batched pull stream message takes ready answers until it holds this many record bytes:
# small answers share a message, large ones go one by one (grpc moves multi-MiB messages
# markedly slower per byte than ~1 MiB ones; rpc.MESSAGE_BYTES_MAX is the hard limit).
BATCH_RECORD_BYTES_MAX = 1024 * 1024


class BrokerServicer(broker_pb2_grpc.BrokerServicer):
    def __init__(self, table: RequestTable) -> None:
        self._send = table[RequestKind.SEND_MESSAGE]
        self._open_pull_session = table[RequestKind.PULL_MESSAGE]
        self._query_offset = table[RequestKind.QUERY_CONSUMER_OFFSET]
        self._update_offset = table[RequestKind.UPDATE_CONSUMER_OFFSET]
        self._queue_offset = table[RequestKind.GET_QUEUE_OFFSET]
        self._create_topic = table[RequestKind.CREATE_TOPIC]
        self._delete_topic = table[RequestKind.DELETE_TOPIC]
        self._topic_stats = table[RequestKind.TOPIC_STATS]
        self._consume_stats = table[RequestKind.CONSUME_STATS]
        self._connections = table[RequestKind.CONSUMER_CONNECTIONS]
        self._list_groups = table[RequestKind.LIST_CONSUMER_GROUPS]
        self._runtime = table[RequestKind.BROKER_RUNTIME]
        self._query_message = table[RequestKind.QUERY_MESSAGE]
        self._view_message = table[RequestKind.VIEW_MESSAGE]
        self._view_queue_message = table[RequestKind.VIEW_QUEUE_MESSAGE]
        self._update_group = table[RequestKind.UPDATE_SUBSCRIPTION_GROUP]
        self._pop = table[RequestKind.POP_MESSAGE]
        self._pop_ack = table[RequestKind.POP_ACK]
        self._pop_change = table[RequestKind.POP_CHANGE_INVISIBLE]
        self._pop_forward = table[RequestKind.POP_FORWARD_TO_DLQ]
        self._reset_offset = table[RequestKind.RESET_CONSUMER_OFFSET]
        self.open_pull_streams = 0
        self.open_send_streams = 0

    @answers_errors(broker_pb2.SendMessageResponse, "send")
    async def SendMessage(self, request: broker_pb2.SendMessageRequest, context: grpc.aio.ServicerContext
                          ) -> broker_pb2.SendMessageResponse:
        return convert.send_response_to_pb(await self._send(convert.send_request_from_pb(request)))

    async def SendStream(self, request_iterator: AsyncIterator[broker_pb2.SendMessageRequest],
                         context: grpc.aio.ServicerContext) -> None:
        """`SendMessage` for every request of the stream; each answer carries its request's id.

        Answers go out as sends finish, not in request order: a send that waits (SYNC_FLUSH's
        fsync, SYNC_MASTER's slave ack, an auto-created topic's registration) holds back no
        other, and the client matches answers by id (so it can also drop one that came after its
        timeout). Stores still happen in request order: each request's task is created as it is
        read, and asyncio runs tasks' first steps (where the put happens) in creation order.
        After the client half-closes, the sends already read still get their answers; when the
        call ends (the client went away), sends still running finish and their answers are dropped.
        Answers are written straight from the task that made them (no queue or generator between).
        """
        loop = asyncio.get_running_loop()
        writer = _AnswerWriter(context)
        running: set[asyncio.Task[None]] = set()

        async def send_one(req: broker_pb2.SendMessageRequest) -> None:
            response = await self.SendMessage(req, context)
            response.request_id = req.request_id
            await writer.write(response)

        self.open_send_streams += 1
        try:
            async for req in request_iterator:
                task = loop.create_task(send_one(req))
                running.add(task)
                task.add_done_callback(running.discard)
            if running:
                await asyncio.wait(running)
        finally:
            self.open_send_streams -= 1

    @contextlib.asynccontextmanager
    async def _pull_stream(self, requests: AsyncIterator[Any], name: str, *, batched: bool
                           ) -> AsyncIterator[_PullStream]:
        """A stream fed from `requests` (PullRequests, or PullRequestBatches when `batched`) by a
        reader task, counted open until it ends."""
        stream = _PullStream()
        stream.session = self._open_pull_session(stream.respond)
        handle = stream.handle

        async def read_requests() -> None:
            try:
                if batched:  # the batch's requests in place: no generator layer per stream message
                    async for batch in requests:
                        for req in batch.requests:
                            handle(req)
                else:
                    async for req in requests:
                        handle(req)
            except (asyncio.CancelledError, grpc.aio.AioRpcError):
                pass
            finally:
                stream.out.put_nowait(_STREAM_END)

        self.open_pull_streams += 1
        reader = asyncio.create_task(read_requests(), name=f"{name}-{stream.session.stream_id}")
        try:
            yield stream
        finally:
            self.open_pull_streams -= 1
            stream.close(reader)

    async def Pull(self, request_iterator: AsyncIterator[broker_pb2.PullRequest],
                   context: grpc.aio.ServicerContext) -> AsyncIterator[broker_pb2.PullResponse]:
        async with self._pull_stream(request_iterator, "pull-stream", batched=False) as stream:
            while (answer := await stream.next_answer()) is not None:
                response = broker_pb2.PullResponse()
                convert.fill_pull_response(response, answer)
                yield response

    async def PullBatch(self, request_iterator: AsyncIterator[broker_pb2.PullRequestBatch],
                        context: grpc.aio.ServicerContext) -> None:
        """Pull's semantics; every answer ready when the stream can write goes out in one message.

        Written with `context.write` rather than yielded: a generator would be iterated through
        two more generator layers (the request guard's and gRPC's) per message."""
        write = context.write
        async with self._pull_stream(request_iterator, "pull-batch-stream", batched=True) as stream:
            while (first := await stream.next_answer()) is not None:
                await write(stream.batch_of_ready_answers(first))

    @answers_errors(broker_pb2.QueryConsumerOffsetResponse, "query consumer offset")
    async def QueryConsumerOffset(self, request: broker_pb2.QueryConsumerOffsetRequest,
                                  context: grpc.aio.ServicerContext) -> broker_pb2.QueryConsumerOffsetResponse:
        answer = self._query_offset(convert.query_offset_from_pb(request))
        return broker_pb2.QueryConsumerOffsetResponse(**convert.offset_answer_fields(answer))

    @answers_errors(broker_pb2.UpdateConsumerOffsetResponse, "update consumer offset")
    async def UpdateConsumerOffset(self, request: broker_pb2.UpdateConsumerOffsetRequest,
                                   context: grpc.aio.ServicerContext) -> broker_pb2.UpdateConsumerOffsetResponse:
        answer = self._update_offset(convert.update_offset_from_pb(request))
        return broker_pb2.UpdateConsumerOffsetResponse(code=CODE_TO_PB[answer.code], remark=answer.remark)

    @answers_errors(broker_pb2.GetQueueOffsetResponse, "get queue offset")
    async def GetQueueOffset(self, request: broker_pb2.GetQueueOffsetRequest,
                             context: grpc.aio.ServicerContext) -> broker_pb2.GetQueueOffsetResponse:
        answer = self._queue_offset(convert.queue_offset_from_pb(request))
        return broker_pb2.GetQueueOffsetResponse(**convert.offset_answer_fields(answer))

    @answers_errors(broker_pb2.CreateTopicResponse, "create topic")
    async def CreateTopic(self, request: broker_pb2.CreateTopicRequest,
                          context: grpc.aio.ServicerContext) -> broker_pb2.CreateTopicResponse:
        answer = await self._create_topic(convert.create_topic_from_pb(request))
        return broker_pb2.CreateTopicResponse(code=CODE_TO_PB[answer.code], remark=answer.remark)

    # --- operator queries ------------------------------------------------------------------------

    @answers_errors(broker_pb2.DeleteTopicResponse, "delete topic")
    async def DeleteTopic(self, request: broker_pb2.DeleteTopicRequest,
                          context: grpc.aio.ServicerContext) -> broker_pb2.DeleteTopicResponse:
        return admin_convert.delete_topic_to_pb(await self._delete_topic(admin_convert.delete_topic_from_pb(request)))

    @answers_errors(broker_pb2.GetTopicStatsResponse, "get topic stats")
    async def GetTopicStats(self, request: broker_pb2.GetTopicStatsRequest,
                            context: grpc.aio.ServicerContext) -> broker_pb2.GetTopicStatsResponse:
        return admin_convert.topic_stats_to_pb(self._topic_stats(admin_convert.topic_stats_from_pb(request)))

    @answers_errors(broker_pb2.GetConsumeStatsResponse, "get consume stats")
    async def GetConsumeStats(self, request: broker_pb2.GetConsumeStatsRequest,
                              context: grpc.aio.ServicerContext) -> broker_pb2.GetConsumeStatsResponse:
        return admin_convert.consume_stats_to_pb(self._consume_stats(admin_convert.consume_stats_from_pb(request)))

    @answers_errors(broker_pb2.GetConsumerConnectionsResponse, "get consumer connections")
    async def GetConsumerConnections(self, request: broker_pb2.GetConsumerConnectionsRequest,
                                     context: grpc.aio.ServicerContext) -> broker_pb2.GetConsumerConnectionsResponse:
        return admin_convert.connections_to_pb(self._connections(admin_convert.connections_from_pb(request)))

    @answers_errors(broker_pb2.ListConsumerGroupsResponse, "list consumer groups")
    async def ListConsumerGroups(self, request: broker_pb2.ListConsumerGroupsRequest,
                                 context: grpc.aio.ServicerContext) -> broker_pb2.ListConsumerGroupsResponse:
        return admin_convert.groups_to_pb(self._list_groups(ListConsumerGroupsRequest()))

    @answers_errors(broker_pb2.GetBrokerRuntimeResponse, "get broker runtime")
    async def GetBrokerRuntime(self, request: broker_pb2.GetBrokerRuntimeRequest,
                               context: grpc.aio.ServicerContext) -> broker_pb2.GetBrokerRuntimeResponse:
        return admin_convert.runtime_to_pb(self._runtime(BrokerRuntimeRequest()))

    @answers_errors(broker_pb2.MessageLookupResponse, "query message")
    async def QueryMessage(self, request: broker_pb2.QueryMessageRequest,
                           context: grpc.aio.ServicerContext) -> broker_pb2.MessageLookupResponse:
        return lookup_convert.lookup_to_pb(self._query_message(lookup_convert.query_from_pb(request)))

    @answers_errors(broker_pb2.MessageLookupResponse, "view message")
    async def ViewMessage(self, request: broker_pb2.ViewMessageRequest,
                          context: grpc.aio.ServicerContext) -> broker_pb2.MessageLookupResponse:
        return lookup_convert.lookup_to_pb(self._view_message(lookup_convert.view_from_pb(request)))

    @answers_errors(broker_pb2.MessageLookupResponse, "view queue message")
    async def ViewQueueMessage(self, request: broker_pb2.ViewQueueMessageRequest,
                               context: grpc.aio.ServicerContext) -> broker_pb2.MessageLookupResponse:
        return lookup_convert.lookup_to_pb(self._view_queue_message(lookup_convert.queue_view_from_pb(request)))

    @answers_errors(broker_pb2.UpdateSubscriptionGroupResponse, "update subscription group")
    async def UpdateSubscriptionGroup(self, request: broker_pb2.UpdateSubscriptionGroupRequest,
                                      context: grpc.aio.ServicerContext) -> broker_pb2.UpdateSubscriptionGroupResponse:
        return admin_convert.update_group_to_pb(self._update_group(admin_convert.update_group_from_pb(request)))

    # --- POP consumption ----------------------------------------------------------------------

    @answers_errors(broker_pb2.PopMessageResponse, "pop")
    async def PopMessage(self, request: broker_pb2.PopMessageRequest, context: grpc.aio.ServicerContext
                         ) -> broker_pb2.PopMessageResponse:
        return pop_convert.pop_result_to_pb(await self._pop(pop_convert.pop_request_from_pb(request)))

    @answers_errors(broker_pb2.AckPopMessageResponse, "pop ack")
    async def AckPopMessage(self, request: broker_pb2.AckPopMessageRequest, context: grpc.aio.ServicerContext
                            ) -> broker_pb2.AckPopMessageResponse:
        return pop_convert.ack_result_to_pb(await self._pop_ack(pop_convert.ack_request_from_pb(request)))

    @answers_errors(broker_pb2.ChangePopInvisibleTimeResponse, "pop change invisible time")
    async def ChangePopInvisibleTime(self, request: broker_pb2.ChangePopInvisibleTimeRequest,
                                     context: grpc.aio.ServicerContext) -> broker_pb2.ChangePopInvisibleTimeResponse:
        return pop_convert.change_result_to_pb(await self._pop_change(pop_convert.change_request_from_pb(request)))

    @answers_errors(broker_pb2.AckPopMessageResponse, "pop forward to DLQ")
    async def ForwardPopToDeadLetter(self, request: broker_pb2.AckPopMessageRequest,
                                     context: grpc.aio.ServicerContext) -> broker_pb2.AckPopMessageResponse:
        return pop_convert.ack_result_to_pb(await self._pop_forward(pop_convert.ack_request_from_pb(request)))

    @answers_errors(broker_pb2.ResetConsumerOffsetResponse, "reset consumer offset")
    async def ResetConsumerOffset(self, request: broker_pb2.ResetConsumerOffsetRequest,
                                  context: grpc.aio.ServicerContext) -> broker_pb2.ResetConsumerOffsetResponse:
        return admin_convert.reset_offset_to_pb(self._reset_offset(admin_convert.reset_offset_from_pb(request)))


class _AnswerWriter:
    """Writes a send stream's answers one at a time (gRPC takes one write per call at a time):
    the first answer ready writes, answers ready meanwhile queue behind it and that same writer
    writes them too. Once a write fails (the call is over), later answers are dropped."""

    def __init__(self, context: grpc.aio.ServicerContext) -> None:
        self._context = context
        self._queue: collections.deque[broker_pb2.SendMessageResponse] = collections.deque()
        self._writing = False
        self._closed = False

    async def write(self, answer: broker_pb2.SendMessageResponse) -> None:
        if self._closed:
            return
        self._queue.append(answer)
        if self._writing:
            return
        self._writing = True
        try:
            while self._queue:
                await self._context.write(self._queue.popleft())
        except Exception as exc:  # the client went away: nobody is left to answer
            log.debug("send stream closed under its answers: %r", exc)
            self._closed = True
            self._queue.clear()
        finally:
            self._writing = False


class _PullStream:
    """One open pull stream: requests are handled as they arrive, answers queue up in `out`.

    A held request answers later through `respond`, from the hold service's task. After the
    client half-closes, held pulls still get their answers; when the stream ends, what is
    still held for it is dropped. Loop-confined.
    """

    session: PullSession

    def __init__(self) -> None:
        self.out: asyncio.Queue[Any] = asyncio.Queue()
        self._open = True
        self._reading = True

    def respond(self, answer: PullAnswer) -> None:
        if self._open:
            self.out.put_nowait(answer)

    def handle(self, req: broker_pb2.PullRequest) -> None:
        try:
            answer = self.session.handle(convert.pull_request_from_pb(req))
        except Exception as exc:
            answer = PullAnswer(request_id=req.request_id, code=ResponseCode.SYSTEM_ERROR,
                                remark=failure_remark("pull", exc))
        if answer is not None:
            self.out.put_nowait(answer)

    def _more_to_come(self) -> bool:
        return self._reading or not self.out.empty() or bool(self.session.held())

    async def next_answer(self) -> PullAnswer | None:
        """The next answer to write, or None once the client is done and nothing is held."""
        while self._more_to_come():
            item = await self.out.get()
            if item is _STREAM_END:
                self._reading = False
                continue
            return item
        return None

    def batch_of_ready_answers(self, first: PullAnswer) -> broker_pb2.PullResponseBatch:
        """`first` and every answer already queued behind it, up to BATCH_RECORD_BYTES_MAX of
        records, built in place (each record blob is copied once, into this message)."""
        batch = broker_pb2.PullResponseBatch()
        add = batch.responses.add
        fill = convert.fill_pull_response
        out = self.out
        answer: Any = first
        size = 0
        while True:
            fill(add(), answer)
            size += len(answer.records)
            if size >= BATCH_RECORD_BYTES_MAX or out.empty():
                return batch
            answer = out.get_nowait()
            while answer is _STREAM_END:
                self._reading = False
                if out.empty():
                    return batch
                answer = out.get_nowait()

    def close(self, reader: asyncio.Task[None]) -> None:
        self._open = False
        reader.cancel()
        dropped = self.session.close()
        if dropped:
            log.info("pull stream %d closed with %d held pulls; dropped them", self.session.stream_id, dropped)
