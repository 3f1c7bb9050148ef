"""The Broker gRPC servicer: thin request -> processor/store -> response.

Each handler catches what a client can cause and answers with a code. An unexpected
exception in one request is logged and answered SYSTEM_ERROR; only a broken invariant of
our own (`InvariantViolation`) brings the node down (exit 70).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc.aio

from nodes.broker.ha_master import ReplicationState
from nodes.broker.offsets import ConsumerOffsetTable
from nodes.broker.pull import PullProcessor
from nodes.broker.send import SendProcessor
from nodes.broker.topics import TopicConfigManager
from nodes.common import constants as c
from nodes.common import wire
from nodes.common.clock import Clock
from nodes.common.errors import InvalidMessageError, InvariantViolation
from nodes.common.node import crash_node
from nodes.common.types import TopicConfig, validate_topic
from nodes.store.message_store import MessageStore
from proto import broker_pb2, broker_pb2_grpc, common_pb2

log = logging.getLogger(__name__)

_STREAM_END = object()
# A batched pull stream message takes ready answers until it holds this many record bytes:
# small answers share a message, large ones go one by one (grpc moves multi-MiB messages
# markedly slower per byte than ~1 MiB ones; rpc.MESSAGE_BYTES_MAX is the hard limit).
BATCH_RECORD_BYTES_MAX = 1024 * 1024


def _guarded(what: str, fail: Callable[[str], Any], fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except InvariantViolation as exc:
        crash_node(exc)
        raise
    except Exception as exc:
        log.exception("%s failed", what)
        return fail(f"{what} failed on the broker: {exc!r}")


class BrokerServicer(broker_pb2_grpc.BrokerServicer):
    def __init__(self, *, store: MessageStore, topics: TopicConfigManager, offsets: ConsumerOffsetTable,
                 pull: PullProcessor, send: SendProcessor, clock: Clock,
                 on_topics_changed: Callable[[], Awaitable[None]], replication: ReplicationState,
                 queue_count_max: int = 1024) -> None:
        self._store = store
        self._topics = topics
        self._offsets = offsets
        self._pull = pull
        self._send = send
        self._clock = clock
        self._on_topics_changed = on_topics_changed
        self._replication = replication
        self._queue_count_max = queue_count_max
        self._stream_ids = itertools.count(1)
        self.open_pull_streams = 0

    async def SendMessage(self, request: broker_pb2.SendMessageRequest, context: grpc.aio.ServicerContext
                          ) -> broker_pb2.SendMessageResponse:
        version = self._topics.data_version
        response = _guarded("send", lambda r: broker_pb2.SendMessageResponse(code=common_pb2.SYSTEM_ERROR, remark=r),
                            lambda: self._send.process(request))
        if response.code != common_pb2.SUCCESS:
            return response
        end_offset = self._send.last_put_end_offset
        self._replication.log_grew()
        if self._topics.data_version != version:
            # RocketMQ registers an auto-created topic with the name servers before it answers,
            # so a client that saw SEND_OK can already find the route.
            await self._on_topics_changed()
        if self._send.sync_master:
            response.code = await self._wait_for_slave(end_offset)
        return response

    async def _wait_for_slave(self, end_offset: int) -> int:
        """SYNC_MASTER: any slave's ack within slave_timeout; the message is stored either way."""
        config = self._send.config
        if not self._replication.is_slave_ok(end_offset, config.slave_fall_behind_bytes_max):
            return common_pb2.SLAVE_NOT_AVAILABLE
        if await self._replication.wait_acked(end_offset, config.timing.slave_timeout_ms):
            return common_pb2.SUCCESS
        return common_pb2.FLUSH_SLAVE_TIMEOUT

    @contextlib.asynccontextmanager
    async def _pull_session(self, requests: AsyncIterator[broker_pb2.PullRequest], name: str
                            ) -> AsyncIterator[_PullSession]:
        """A session fed from `requests` by a reader task, counted open until the stream ends."""
        session = _PullSession(self._pull, next(self._stream_ids))

        async def read_requests() -> None:
            try:
                async for req in requests:
                    session.handle(req)
            except (asyncio.CancelledError, grpc.aio.AioRpcError):
                pass
            finally:
                session.out.put_nowait(_STREAM_END)

        self.open_pull_streams += 1
        reader = asyncio.create_task(read_requests(), name=f"{name}-{session.stream_id}")
        try:
            yield session
        finally:
            self.open_pull_streams -= 1
            session.close(reader)

    async def Pull(self, request_iterator: AsyncIterator[broker_pb2.PullRequest],
                   context: grpc.aio.ServicerContext) -> AsyncIterator[broker_pb2.PullResponse]:
        async with self._pull_session(request_iterator, "pull-stream") as session:
            while (answer := await session.next_answer()) is not None:
                response, records = answer
                if records:
                    response.records = records
                yield response

    async def PullBatch(self, request_iterator: AsyncIterator[broker_pb2.PullRequestBatch],
                        context: grpc.aio.ServicerContext) -> AsyncIterator[broker_pb2.PullResponseBatch]:
        """Pull's semantics; every answer ready when the stream can write goes out in one message."""
        async def requests() -> AsyncIterator[broker_pb2.PullRequest]:
            async for batch in request_iterator:
                for req in batch.requests:
                    yield req

        async with self._pull_session(requests(), "pull-batch-stream") as session:
            while (first := await session.next_answer()) is not None:
                yield session.batch_of_ready_answers(first)

    async def QueryConsumerOffset(self, request: broker_pb2.QueryConsumerOffsetRequest,
                                  context: grpc.aio.ServicerContext) -> broker_pb2.QueryConsumerOffsetResponse:
        offset = self._offsets.query(request.consumer_group, request.topic, request.queue_id)
        if offset >= 0:
            return broker_pb2.QueryConsumerOffsetResponse(code=common_pb2.SUCCESS, offset=offset)
        # A new group on a young queue starts at 0 (ConsumerManageProcessor#queryConsumerOffset):
        # the queue's first message is still "in memory", or the queue does not exist yet.
        min_offset = self._store.min_queue_offset(request.topic, request.queue_id)
        first_phys = self._store.queue_first_phys_offset(request.topic, request.queue_id)
        if min_offset <= 0 and (first_phys is None or self._store.is_in_memory(first_phys)):
            return broker_pb2.QueryConsumerOffsetResponse(code=common_pb2.SUCCESS, offset=0)
        return broker_pb2.QueryConsumerOffsetResponse(
            code=common_pb2.QUERY_NOT_FOUND, remark=f"no committed offset for {request.consumer_group}")

    async def UpdateConsumerOffset(self, request: broker_pb2.UpdateConsumerOffsetRequest,
                                   context: grpc.aio.ServicerContext) -> broker_pb2.UpdateConsumerOffsetResponse:
        if request.offset < 0:
            return broker_pb2.UpdateConsumerOffsetResponse(
                code=common_pb2.INVALID_ARGUMENT, remark=f"offset must be >= 0, got {request.offset}")
        if not request.consumer_group or not request.topic:
            return broker_pb2.UpdateConsumerOffsetResponse(
                code=common_pb2.INVALID_ARGUMENT, remark="consumer_group and topic are required")
        self._offsets.commit(request.consumer_group, request.topic, request.queue_id, request.offset,
                             client_id=request.client_id or None, commit_seq=request.commit_seq)
        return broker_pb2.UpdateConsumerOffsetResponse(code=common_pb2.SUCCESS)

    async def GetQueueOffset(self, request: broker_pb2.GetQueueOffsetRequest,
                             context: grpc.aio.ServicerContext) -> broker_pb2.GetQueueOffsetResponse:
        topic = self._topics.get(request.topic)
        if topic is None:
            return broker_pb2.GetQueueOffsetResponse(
                code=common_pb2.TOPIC_NOT_EXIST, remark=f"topic {request.topic!r} does not exist here")
        if not 0 <= request.queue_id < max(topic.read_queue_nums, topic.write_queue_nums):
            return broker_pb2.GetQueueOffsetResponse(
                code=common_pb2.INVALID_ARGUMENT,
                remark=f"queue id {request.queue_id} is outside [0, {topic.read_queue_nums}) of {request.topic}")
        if request.kind == broker_pb2.MIN:
            offset = self._store.min_queue_offset(request.topic, request.queue_id)
        elif request.kind == broker_pb2.MAX:
            offset = self._store.max_queue_offset(request.topic, request.queue_id)
        elif request.kind == broker_pb2.BY_TIMESTAMP:
            offset = self._store.search_queue_offset(request.topic, request.queue_id, request.timestamp_ms)
        else:
            return broker_pb2.GetQueueOffsetResponse(code=common_pb2.INVALID_ARGUMENT,
                                                     remark="kind must be MIN, MAX or BY_TIMESTAMP")
        return broker_pb2.GetQueueOffsetResponse(code=common_pb2.SUCCESS, offset=offset)

    async def CreateTopic(self, request: broker_pb2.CreateTopicRequest,
                          context: grpc.aio.ServicerContext) -> broker_pb2.CreateTopicResponse:
        cfg = wire.topic_config_from_pb(request.config)
        try:
            validate_topic(cfg.topic)
        except InvalidMessageError as exc:
            return broker_pb2.CreateTopicResponse(code=common_pb2.INVALID_ARGUMENT, remark=str(exc))
        if cfg.topic == c.AUTO_CREATE_TOPIC_KEY:
            return broker_pb2.CreateTopicResponse(code=common_pb2.INVALID_ARGUMENT,
                                                  remark=f"{cfg.topic} is reserved for auto-creation")
        if not (0 < cfg.read_queue_nums <= self._queue_count_max and 0 < cfg.write_queue_nums <= self._queue_count_max):
            return broker_pb2.CreateTopicResponse(
                code=common_pb2.INVALID_ARGUMENT,
                remark=f"queue counts must be in 1..{self._queue_count_max}")
        perm = cfg.perm or c.PERM_DEFAULT
        self._topics.put(TopicConfig(cfg.topic, cfg.read_queue_nums, cfg.write_queue_nums, perm,
                                     cfg.topic_sys_flag, cfg.order), self._clock.wall_ms())
        await self._on_topics_changed()
        return broker_pb2.CreateTopicResponse(code=common_pb2.SUCCESS)


class _PullFailure:
    def __init__(self, response: broker_pb2.PullResponse) -> None:
        self.response = response
        self.records = b""


# An answer waiting to be written: the response and, beside it, its records (PullOutcome).
_Answer = tuple[broker_pb2.PullResponse, bytes]


class _PullSession:
    """One open pull stream: requests are handled as they arrive, answers queue up in `out`.

    A long-polled request answers later through `respond`, from the processor's wake-up. After
    the client half-closes, held pulls still get their answers; when the stream ends, what is
    still held for it is dropped. Loop-confined.
    """

    def __init__(self, processor: PullProcessor, stream_id: int) -> None:
        self._processor = processor
        self.stream_id = stream_id
        self.out: asyncio.Queue[Any] = asyncio.Queue()
        self._open = True
        self._reading = True

    def respond(self, response: broker_pb2.PullResponse) -> None:
        if self._open:
            self.out.put_nowait((response, b""))

    def handle(self, req: broker_pb2.PullRequest) -> None:
        outcome = _guarded(
            "pull",
            lambda r: _PullFailure(broker_pb2.PullResponse(request_id=req.request_id,
                                                           code=common_pb2.SYSTEM_ERROR, remark=r)),
            lambda: self._processor.process(req, allow_suspend=True, respond=self.respond,
                                            stream_id=self.stream_id))
        if outcome.response is not None:
            self.out.put_nowait((outcome.response, outcome.records))

    def _more_to_come(self) -> bool:
        return self._reading or not self.out.empty() or bool(self._processor.holds.count_stream(self.stream_id))

    async def next_answer(self) -> _Answer | None:
        """The next answer to write, or None once the client is done and nothing is held."""
        while self._more_to_come():
            item = await self.out.get()
            if item is _STREAM_END:
                self._reading = False
                continue
            return item
        return None

    def batch_of_ready_answers(self, first: _Answer) -> broker_pb2.PullResponseBatch:
        """`first` and every answer already queued behind it, up to BATCH_RECORD_BYTES_MAX of
        records, built in place (each record blob is copied once, into this message)."""
        batch = broker_pb2.PullResponseBatch()
        add = batch.responses.add
        out = self.out
        answer: Any = first
        size = 0
        while True:
            response, records = answer
            entry = add()
            entry.CopyFrom(response)
            if records:
                entry.records = records
            size += len(records) + len(response.records)
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
        dropped = self._processor.holds.drop_stream(self.stream_id)
        if dropped:
            log.info("pull stream %d closed with %d held pulls; dropped them", self.stream_id, dropped)
