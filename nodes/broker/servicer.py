"""The Broker gRPC servicer: thin request -> processor/store -> response.

Each handler catches what a client can cause and answers with a code. An unexpected
exception in one request is logged and answered SYSTEM_ERROR; only a broken invariant of
our own (`InvariantViolation`) brings the node down (exit 70).
"""

from __future__ import annotations

import asyncio
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

    async def Pull(self, request_iterator: AsyncIterator[broker_pb2.PullRequest],
                   context: grpc.aio.ServicerContext) -> AsyncIterator[broker_pb2.PullResponse]:
        stream_id = next(self._stream_ids)
        out: asyncio.Queue[Any] = asyncio.Queue()
        open_ = True

        def respond(response: broker_pb2.PullResponse) -> None:
            if open_:
                out.put_nowait(response)

        def handle(req: broker_pb2.PullRequest) -> None:
            outcome = _guarded(
                "pull",
                lambda r: _PullFailure(broker_pb2.PullResponse(request_id=req.request_id,
                                                               code=common_pb2.SYSTEM_ERROR, remark=r)),
                lambda: self._pull.process(req, allow_suspend=True, respond=respond, stream_id=stream_id))
            if outcome.response is not None:
                out.put_nowait(outcome.response)

        async def read_requests() -> None:
            try:
                async for req in request_iterator:
                    handle(req)
            except (asyncio.CancelledError, grpc.aio.AioRpcError):
                pass
            finally:
                out.put_nowait(_STREAM_END)

        self.open_pull_streams += 1
        reader = asyncio.create_task(read_requests(), name=f"pull-stream-{stream_id}")
        try:
            reading = True
            while reading or not out.empty() or self._pull.holds.count_stream(stream_id):
                # After the client half-closes, held pulls still get their answers.
                item = await out.get()
                if item is _STREAM_END:
                    reading = False
                    continue
                yield item
        finally:
            open_ = False
            self.open_pull_streams -= 1
            reader.cancel()
            dropped = self._pull.holds.drop_stream(stream_id)
            if dropped:
                log.info("pull stream %d closed with %d held pulls; dropped them", stream_id, dropped)

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
        self._offsets.commit(request.consumer_group, request.topic, request.queue_id, request.offset)
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
