"""The broker pull path (RocketMQ PullMessageProcessor).

Owns: pre-checks, the store-status -> answer-code mapping, the slave-read suggestion, the
piggy-backed offset commit, and parking a PULL_NOT_FOUND with the hold service.
Does not own waking held pulls (pull_hold), the stream plumbing (the transport adapters)
or the store's scan (message_store).
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Callable

from nodes.broker import validation
from nodes.broker.consumers import ConsumerRegistry
from nodes.broker.last_pullers import LastPullers
from nodes.broker.offsets import ConsumerOffsetTable
from nodes.broker.pull_hold import HeldPull, PullRequestHoldService
from nodes.broker.pull_values import PullAnswer, PullRequest
from nodes.broker.topics import SubscriptionGroupConfig, SubscriptionGroupManager, TopicConfigManager
from nodes.common import constants as c
from nodes.common.clock import Clock
from nodes.common.codes import ResponseCode
from nodes.common.config import BrokerConfig
from nodes.common.errors import InvariantViolation
from nodes.common.events import EventLog
from nodes.store.message_store import GetStatus, MessageStore
from nodes.store.record import HEADER, MessageToStore, tag_hash

log = logging.getLogger(__name__)

__all__ = ["PullAnswer", "PullProcessor", "PullRequest", "PullSession", "parse_subscription"]

OFFSET_MOVED_EVENT_TOPIC = "OFFSET_MOVED_EVENT"

# RocketMQ's pull status table; NO_MESSAGE_IN_QUEUE depends on the request offset (see _response_code)
_CODE_BY_STATUS = {
    GetStatus.FOUND: ResponseCode.SUCCESS,
    GetStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}


def subscription_tags(expression: str) -> list[str]:
    """The tags of an expression like "TagA || TagB"; [] means every tag ("*" or empty)."""
    expression = (expression or "").strip()
    if expression in ("", "*"):
        return []
    return [t.strip() for t in expression.split("||") if t.strip()]


def parse_subscription(expression: str) -> frozenset[int] | None:
    """Tag hashes of an expression like "TagA || TagB"; None means every tag ("*" or empty)."""
    tags = subscription_tags(expression)
    return frozenset(tag_hash(t) for t in tags) if tags else None


def flip_body_bytes(records: bytes) -> bytes:
    """FAULT SWITCH pull-flip-body-byte: the first body byte of every record inverted, as a broken
    read path would serve it (the record's own CRC is left stale; clients do not check it)."""
    buf = bytearray(records)
    pos = 0
    while pos + HEADER.size <= len(buf):
        fields = HEADER.unpack_from(buf, pos)
        total_size, body_bytes = fields[0], fields[-1]
        if total_size <= 0:
            break
        if body_bytes > 0:
            buf[pos + HEADER.size] ^= 0xFF
        pos += total_size
    return bytes(buf)


class PullProcessor:
    def __init__(self, config: BrokerConfig, store: MessageStore, topics: TopicConfigManager,
                 groups: SubscriptionGroupManager, offsets: ConsumerOffsetTable, clock: Clock,
                 hold: PullRequestHoldService, events: EventLog | None = None,
                 consumers: ConsumerRegistry | None = None,
                 writes_open: Callable[[], bool] = lambda: True, last_pullers: LastPullers | None = None) -> None:
        self._config = config
        self.last_pullers = last_pullers if last_pullers is not None else LastPullers()
        # False while a master that lost its log tail waits for its slave to restore it: a write
        # then (the offset-moved event below) would move the log and abandon the restore
        self._writes_open = writes_open
        self._consumers = consumers  # registered subscriptions, for pulls that post none
        self._store = store
        self._topics = topics
        self._groups = groups
        self._offsets = offsets
        self._clock = clock
        self.hold = hold
        hold.bind(self._reexecute)
        self.is_slave = not config.is_master
        self.slave_read_enable = config.slave_read_enable
        # Test-only fault switch `pull-flip-body-byte` (constants.FAULT_PULL_FLIP_BODY_BYTE), slaves only.
        self._flip_body = self.is_slave and c.FAULT_PULL_FLIP_BODY_BYTE in config.fault_switches
        self._events = events or EventLog(None, config.node_id)
        # the last suggestion answered per (group, topic, queue): routing events record changes
        self._last_suggestion: dict[tuple[str, str, int], int] = {}
        self._stream_ids = itertools.count(1)

    def open_session(self, respond: Callable[[PullAnswer], None]) -> PullSession:
        return PullSession(self, next(self._stream_ids), respond)

    def process(self, req: PullRequest, *, allow_suspend: bool, respond: Callable[[PullAnswer], None],
                stream_id: int) -> PullAnswer | None:
        """The answer, or None when the request was held for long polling (it answers later
        through `respond`, from the hold service's task)."""
        rejected = self._precheck(req)
        if rejected is not None:
            return rejected
        group = self._groups.find(req.consumer_group)
        assert group is not None  # _precheck rejected a missing group
        if allow_suspend:  # a woken re-execution is the same pull again
            self.last_pullers.record(req.consumer_group, req.topic, req.queue_id, req.client_id,
                                     self._clock.monotonic_ms())
        if req.has_subscription:
            tag_hashes = parse_subscription(req.subscription_expression)
        else:
            registered = self._registered_subscription(req, group)
            if isinstance(registered, PullAnswer):
                return registered
            tag_hashes = registered

        result = self._store.get_messages(req.topic, req.queue_id, req.queue_offset,
                                          req.max_msg_nums, tag_hashes)
        suggest = self._suggest_broker_id(result.suggest_pulling_from_slave, group)
        code = self._response_code(result.status, req.queue_offset)
        if code == ResponseCode.PULL_OFFSET_MOVED and self.is_slave and not self._config.offset_check_in_slave:
            suggest = group.broker_id  # the slave answers RETRY_IMMEDIATELY and points at the master
        self._record_routing(req, suggest, result.backlog_bytes, result.status)

        answer_code = code
        if code == ResponseCode.PULL_OFFSET_MOVED:
            if self.is_slave and not self._config.offset_check_in_slave:
                # A slave never moves a consumer's offset (offsetCheckInSlave=false): retry.
                answer_code = ResponseCode.PULL_RETRY_IMMEDIATELY
            elif self.is_slave:
                pass  # offset_check_in_slave: the slave moves it like a master, with no event
            else:
                self._record_offset_moved(req, result.next_begin_offset)

        # The piggy-backed commit runs whatever the status, but never on a woken re-execution
        # and never on a slave. Its commit_seq orders it against the client's
        # explicit updates, which travel on another stream (UpdateConsumerOffsetRequest).
        if allow_suspend and req.commit_offset and not self.is_slave and validation.commit_allowed(
                self._topics, self._store, req.consumer_group, req.topic, req.queue_id, req.commit_offset_value):
            self._offsets.commit(req.consumer_group, req.topic, req.queue_id, req.commit_offset_value,
                                 client_id=req.client_id or None, commit_seq=req.commit_seq)

        if code == ResponseCode.PULL_NOT_FOUND and allow_suspend and req.suspend:
            hold_ms = req.suspend_timeout_ms if self._config.long_polling_enable else self._config.timing.short_poll_ms
            self.hold.hold(HeldPull(req, tag_hashes, self._clock.monotonic_ms(), max(0, hold_ms), respond,
                                    stream_id))
            return None
        found = code == ResponseCode.SUCCESS
        records = result.record_data if found else b""
        if self._flip_body and records:
            records = flip_body_bytes(records)
        return PullAnswer(request_id=req.request_id, code=answer_code, remark=result.status.name,
                          next_begin_offset=result.next_begin_offset, min_offset=result.min_offset,
                          max_offset=result.max_offset, suggest_which_broker_id=suggest,
                          record_count=len(result.record_sizes) if found else 0, records=records)

    def _reexecute(self, held: HeldPull) -> PullAnswer:
        """A woken pull, run again on the hold service's task. A failure answers that pull
        SYSTEM_ERROR, as it would have on the request's own path; a broken invariant still
        ends the node (the service's crash handler)."""
        try:
            answer = self.process(held.request, allow_suspend=False, respond=held.respond, stream_id=held.stream_id)
        except InvariantViolation:
            raise
        except Exception as exc:
            log.exception("re-running a held pull failed")
            return self._reply(held.request, ResponseCode.SYSTEM_ERROR, f"pull failed on the broker: {exc!r}")
        assert answer is not None  # a re-execution is never parked again
        return answer

    def _precheck(self, req: PullRequest) -> PullAnswer | None:
        if refusal := validation.names_refusal(topic=req.topic, group=req.consumer_group):
            return self._reply(req, *refusal)
        if not self._config.broker_perm & c.PERM_READ:
            return self._reply(req, ResponseCode.NO_PERMISSION, f"broker {self._config.broker_name} is not readable")
        group = self._groups.find(req.consumer_group)
        if group is None:
            return self._reply(req, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                               f"subscription group {req.consumer_group!r} does not exist; create it first")
        if not group.consume_enable:
            return self._reply(req, ResponseCode.NO_PERMISSION, f"group {req.consumer_group} may not consume")
        topic = self._topics.get(req.topic)
        if topic is None:
            return self._reply(req, ResponseCode.TOPIC_NOT_EXIST,
                               f"topic {req.topic!r} does not exist on {self._config.broker_name}")
        if not topic.readable:
            return self._reply(req, ResponseCode.NO_PERMISSION, f"topic {req.topic} is not readable")
        if not 0 <= req.queue_id < topic.read_queue_nums:
            return self._reply(req, ResponseCode.SYSTEM_ERROR,
                               f"queue id {req.queue_id} is outside [0, {topic.read_queue_nums}) of {req.topic}")
        if not 0 < req.max_msg_nums <= c.PULL_BATCH_COUNT_MAX:
            return self._reply(req, ResponseCode.INVALID_ARGUMENT,
                               f"max_msg_nums must be in 1..{c.PULL_BATCH_COUNT_MAX}, got {req.max_msg_nums}")
        return None

    def _registered_subscription(self, req: PullRequest, group: SubscriptionGroupConfig
                                 ) -> frozenset[int] | PullAnswer | None:
        """The tag hashes of the group's registered subscription (from heartbeats), or the
        rejection (RocketMQ 4.9 subscription checks)."""
        info = self._consumers.find(req.consumer_group) if self._consumers is not None else None
        if info is None:
            return self._reply(req, ResponseCode.SUBSCRIPTION_NOT_EXIST,
                               f"group {req.consumer_group} has no consumer registered here; heartbeat first or "
                               "post a subscription with the pull (has_subscription)")
        if info.message_model == c.MESSAGE_MODEL_BROADCASTING and not group.consume_broadcast_enable:
            return self._reply(req, ResponseCode.NO_PERMISSION,
                               f"group {req.consumer_group} may not consume in broadcasting mode")
        subscription = info.subscriptions.get(req.topic)
        if subscription is None:
            return self._reply(req, ResponseCode.SUBSCRIPTION_NOT_EXIST,
                               f"group {req.consumer_group} has no subscription registered for {req.topic}")
        if subscription.sub_version < req.sub_version:
            return self._reply(req, ResponseCode.SUBSCRIPTION_NOT_LATEST,
                               f"the registered subscription of {req.consumer_group} to {req.topic} is version "
                               f"{subscription.sub_version}, older than the pull's {req.sub_version}")
        return parse_subscription(subscription.expression)

    def _record_routing(self, req: PullRequest, suggest: int, backlog_bytes: int,
                        status: GetStatus) -> None:
        """A routing event whenever this broker's suggestion for a queue changes."""
        key = (req.consumer_group, req.topic, req.queue_id)
        if self._last_suggestion.get(key, c.MASTER_ID if not self.is_slave else -1) == suggest:
            return
        self._last_suggestion[key] = suggest
        self._events.record({
            "event": "pull-suggestion", "side": "broker", "group": req.consumer_group, "topic": req.topic,
            "broker_name": self._config.broker_name, "queue_id": req.queue_id,
            "queue_offset": req.queue_offset, "answering_broker_id": self._config.broker_id,
            "suggest_which_broker_id": suggest, "backlog_bytes": backlog_bytes,
            "memory_budget_bytes": self._config.store.memory_budget_bytes, "store_status": status.name})

    @staticmethod
    def _reply(req: PullRequest, code: ResponseCode, remark: str) -> PullAnswer:
        return PullAnswer(request_id=req.request_id, code=code, remark=remark)

    @staticmethod
    def _response_code(status: GetStatus, request_offset: int) -> ResponseCode:
        if status in (GetStatus.NO_MATCHED_LOGIC_QUEUE, GetStatus.NO_MESSAGE_IN_QUEUE):
            return ResponseCode.PULL_OFFSET_MOVED if request_offset != 0 else ResponseCode.PULL_NOT_FOUND
        return _CODE_BY_STATUS[status]

    def _suggest_broker_id(self, pull_from_slave: bool, group: object) -> int:
        """RocketMQ 4.9: later steps overwrite earlier ones; with defaults it is always 0."""
        slowly = group.which_broker_when_consume_slowly  # type: ignore[attr-defined]
        if self.slave_read_enable:
            return slowly if pull_from_slave else group.broker_id  # type: ignore[attr-defined]
        return c.MASTER_ID

    def _record_offset_moved(self, req: PullRequest, new_offset: int) -> None:
        """RocketMQ writes an OffsetMovedEvent into OFFSET_MOVED_EVENT on the master (not while
        writes are held: a consumer ahead of a master that lost its tail is what a restore fixes)."""
        if not self._writes_open():
            log.info("offset moved for %s on %s queue %d (%d -> %d) not recorded: writes are held",
                     req.consumer_group, req.topic, req.queue_id, req.queue_offset, new_offset)
            return
        if self._topics.get(OFFSET_MOVED_EVENT_TOPIC) is None and not self._topics.auto_create_enable:
            return
        if self._topics.get(OFFSET_MOVED_EVENT_TOPIC) is None:
            self._topics.create_in_send(OFFSET_MOVED_EVENT_TOPIC, 1, self._clock.wall_ms())
        body = json.dumps({"consumerGroup": req.consumer_group, "topic": req.topic, "queueId": req.queue_id,
                           "offsetRequest": req.queue_offset, "offsetNew": new_offset}).encode()
        self._store.put_messages([MessageToStore(
            topic=OFFSET_MOVED_EVENT_TOPIC, queue_id=0, body=body, born_timestamp_ms=self._clock.wall_ms())])


class PullSession:
    """The pulls of one client connection (a pull stream): each request answers now or later
    through `respond`; when the connection ends, what is still held for it is dropped."""

    def __init__(self, processor: PullProcessor, stream_id: int, respond: Callable[[PullAnswer], None]) -> None:
        self._processor = processor
        self.stream_id = stream_id
        self._respond = respond

    def handle(self, req: PullRequest) -> PullAnswer | None:
        """The answer now, or None when the pull is held (it answers through `respond`)."""
        return self._processor.process(req, allow_suspend=True, respond=self._respond, stream_id=self.stream_id)

    def held(self) -> int:
        return self._processor.hold.holds.count_stream(self.stream_id)

    def close(self) -> int:
        """Drop this connection's held pulls; returns how many."""
        return self._processor.hold.holds.drop_stream(self.stream_id)
