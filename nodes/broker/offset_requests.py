"""Offset requests (RocketMQ ConsumerManageProcessor's offset parts and the queue-offset admin
requests): query and update a group's consumer offset, and a queue's min, max or by-time offset.

Owns: the answers, including RocketMQ's young-queue rule for a group with no committed offset.
Does not own the offset table (offsets.py) or the queues (the store).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from nodes.broker import validation
from nodes.broker.offsets import ConsumerOffsetTable
from nodes.broker.topics import TopicConfigManager
from nodes.common.codes import ResponseCode
from nodes.store.message_store import MessageStore


@dataclass(frozen=True, slots=True)
class QueryConsumerOffsetRequest:
    consumer_group: str
    topic: str
    queue_id: int


@dataclass(frozen=True, slots=True)
class UpdateConsumerOffsetRequest:
    """`commit_seq` orders one client's commits across streams; 0 means unordered."""

    consumer_group: str
    topic: str
    queue_id: int
    offset: int
    client_id: str = ""
    commit_seq: int = 0


class OffsetKind(enum.Enum):
    MIN = "MIN"
    MAX = "MAX"
    BY_TIMESTAMP = "BY_TIMESTAMP"


@dataclass(frozen=True, slots=True)
class GetQueueOffsetRequest:
    """GET_MIN_OFFSET / GET_MAX_OFFSET / SEARCH_OFFSET_BY_TIMESTAMP; `kind` None: not given."""

    topic: str
    queue_id: int
    kind: OffsetKind | None
    timestamp_ms: int = 0


@dataclass(frozen=True, slots=True)
class OffsetResponse:
    code: ResponseCode
    remark: str = ""
    offset: int = 0


class OffsetRequestHandler:
    """`drop_every` > 0 is the test-only fault switch offset-commit-drop (constants.FAULT_OFFSET_COMMIT_DROP):
    one update in that many that would change the stored offset is answered SUCCESS and dropped."""

    def __init__(self, store: MessageStore, topics: TopicConfigManager, offsets: ConsumerOffsetTable, *,
                 drop_every: int = 0) -> None:
        self._store = store
        self._topics = topics
        self._offsets = offsets
        self._drop_every = drop_every
        self._changing_updates = 0

    def query_consumer_offset(self, req: QueryConsumerOffsetRequest) -> OffsetResponse:
        if refusal := validation.names_refusal(topic=req.topic, group=req.consumer_group):
            return OffsetResponse(*refusal)
        offset = self._offsets.query(req.consumer_group, req.topic, req.queue_id)
        if offset >= 0:
            return OffsetResponse(ResponseCode.SUCCESS, offset=offset)
        # A new group on a young queue starts at 0 (ConsumerManageProcessor#queryConsumerOffset):
        # the queue's first message is still "in memory", or the queue does not exist yet.
        min_offset = self._store.min_queue_offset(req.topic, req.queue_id)
        first_phys = self._store.queue_first_phys_offset(req.topic, req.queue_id)
        if min_offset <= 0 and (first_phys is None or self._store.is_in_memory(first_phys)):
            return OffsetResponse(ResponseCode.SUCCESS, offset=0)
        return OffsetResponse(ResponseCode.QUERY_NOT_FOUND, f"no committed offset for {req.consumer_group}")

    def update_consumer_offset(self, req: UpdateConsumerOffsetRequest) -> OffsetResponse:
        if refusal := validation.offset_refusal(self._topics, self._store, group=req.consumer_group, topic=req.topic,
                                                queue_id=req.queue_id, queue_offset=req.offset):
            return OffsetResponse(*refusal)
        if self._drop_every and self._offsets.query(req.consumer_group, req.topic, req.queue_id) != req.offset:
            self._changing_updates += 1
            if self._changing_updates % self._drop_every == 0:
                return OffsetResponse(ResponseCode.SUCCESS)
        self._offsets.commit(req.consumer_group, req.topic, req.queue_id, req.offset,
                             client_id=req.client_id or None, commit_seq=req.commit_seq)
        return OffsetResponse(ResponseCode.SUCCESS)

    def get_queue_offset(self, req: GetQueueOffsetRequest) -> OffsetResponse:
        topic = self._topics.get(req.topic)
        if topic is None:
            return OffsetResponse(ResponseCode.TOPIC_NOT_EXIST, f"topic {req.topic!r} does not exist here")
        if not 0 <= req.queue_id < max(topic.read_queue_nums, topic.write_queue_nums):
            return OffsetResponse(ResponseCode.INVALID_ARGUMENT,
                                  f"queue id {req.queue_id} is outside [0, {topic.read_queue_nums}) of {req.topic}")
        if req.kind is OffsetKind.MIN:
            offset = self._store.min_queue_offset(req.topic, req.queue_id)
        elif req.kind is OffsetKind.MAX:
            offset = self._store.max_queue_offset(req.topic, req.queue_id)
        elif req.kind is OffsetKind.BY_TIMESTAMP:
            offset = self._store.search_queue_offset(req.topic, req.queue_id, req.timestamp_ms)
        else:
            return OffsetResponse(ResponseCode.INVALID_ARGUMENT, "kind must be MIN, MAX or BY_TIMESTAMP")
        return OffsetResponse(ResponseCode.SUCCESS, offset=offset)
