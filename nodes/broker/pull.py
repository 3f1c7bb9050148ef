"""The broker pull path (RocketMQ PullMessageProcessor + PullRequestHoldService).

Owns: pre-checks, the store-status -> response-code mapping, the slave-read suggestion,
the piggy-backed offset commit, and long polling (held requests woken by arriving
messages, released by the periodic scan once their hold time has passed).
Does not own the stream plumbing (servicer) or the store's scan (message_store).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from nodes.broker.consumers import ConsumerRegistry
from nodes.broker.offsets import ConsumerOffsetTable
from nodes.broker.topics import SubscriptionGroupConfig, SubscriptionGroupManager, TopicConfigManager
from nodes.common import constants as c
from nodes.common.clock import Clock
from nodes.common.config import BrokerConfig
from nodes.common.events import EventLog
from nodes.common.service import Service
from nodes.store.message_store import GetStatus, MessageStore
from nodes.store.record import MessageToStore, tag_hash
from proto import broker_pb2, common_pb2

log = logging.getLogger(__name__)

OFFSET_MOVED_EVENT_TOPIC = "OFFSET_MOVED_EVENT"

# reference §1.2 step 4; NO_MESSAGE_IN_QUEUE depends on the request offset (see _response_code)
_CODE_BY_STATUS = {
    GetStatus.FOUND: common_pb2.SUCCESS,
    GetStatus.MESSAGE_WAS_REMOVING: common_pb2.PULL_RETRY_IMMEDIATELY,
    GetStatus.NO_MATCHED_MESSAGE: common_pb2.PULL_RETRY_IMMEDIATELY,
    GetStatus.OFFSET_FOUND_NULL: common_pb2.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_BADLY: common_pb2.PULL_OFFSET_MOVED,
    GetStatus.OFFSET_OVERFLOW_ONE: common_pb2.PULL_NOT_FOUND,
    GetStatus.OFFSET_TOO_SMALL: common_pb2.PULL_OFFSET_MOVED,
}


def parse_subscription(expression: str) -> frozenset[int] | None:
    """Tag hashes of an expression like "TagA || TagB"; None means every tag ("*" or empty)."""
    expression = (expression or "").strip()
    if expression in ("", "*"):
        return None
    tags = [t.strip() for t in expression.split("||") if t.strip()]
    return frozenset(tag_hash(t) for t in tags) if tags else None


@dataclass
class HeldPull:
    request: broker_pb2.PullRequest
    tag_hashes: frozenset[int] | None
    suspended_at_ms: int
    timeout_ms: int
    respond: Callable[[broker_pb2.PullResponse], None]
    stream_id: int


@dataclass
class PullOutcome:
    """Either a response now, or None when the request was parked for long polling.

    A FOUND response's records travel beside it in `records` (the response itself carries
    only `record_count`), so a batched stream copies them into its message exactly once;
    `complete()` puts them into the response.
    """

    response: broker_pb2.PullResponse | None
    records: bytes = b""

    def complete(self) -> broker_pb2.PullResponse | None:
        if self.records and self.response is not None:
            self.response.records = self.records
            self.records = b""
        return self.response


@dataclass
class HoldTable:
    by_queue: dict[tuple[str, int], list[HeldPull]] = field(default_factory=dict)

    def add(self, held: HeldPull) -> None:
        self.by_queue.setdefault((held.request.topic, held.request.queue_id), []).append(held)

    def take(self, topic: str, queue_id: int) -> list[HeldPull]:
        return self.by_queue.pop((topic, queue_id), [])

    def drop_stream(self, stream_id: int) -> int:
        dropped = 0
        for key, held in list(self.by_queue.items()):
            kept = [h for h in held if h.stream_id != stream_id]
            dropped += len(held) - len(kept)
            if kept:
                self.by_queue[key] = kept
            else:
                del self.by_queue[key]
        return dropped

    def count_stream(self, stream_id: int) -> int:
        return sum(1 for held in self.by_queue.values() for h in held if h.stream_id == stream_id)

    def count(self) -> int:
        return sum(len(v) for v in self.by_queue.values())


class PullProcessor:
    def __init__(self, config: BrokerConfig, store: MessageStore, topics: TopicConfigManager,
                 groups: SubscriptionGroupManager, offsets: ConsumerOffsetTable, clock: Clock,
                 events: EventLog | None = None, consumers: ConsumerRegistry | None = None) -> None:
        self._config = config
        self._consumers = consumers  # registered subscriptions, for pulls that post none
        self._store = store
        self._topics = topics
        self._groups = groups
        self._offsets = offsets
        self._clock = clock
        self.holds = HoldTable()
        self.is_slave = not config.is_master
        self.slave_read_enable = config.slave_read_enable
        self._events = events or EventLog(None, config.node_id)
        # the last suggestion answered per (group, topic, queue): routing events record changes
        self._last_suggestion: dict[tuple[str, str, int], int] = {}

    def process(self, req: broker_pb2.PullRequest, *, allow_suspend: bool,
                respond: Callable[[broker_pb2.PullResponse], None], stream_id: int) -> PullOutcome:
        rejected = self._precheck(req)
        if rejected is not None:
            return PullOutcome(rejected)
        group = self._groups.find(req.consumer_group)
        assert group is not None  # _precheck rejected a missing group
        if req.has_subscription:
            tag_hashes = parse_subscription(req.subscription_expression)
        else:
            registered = self._registered_subscription(req, group)
            if isinstance(registered, broker_pb2.PullResponse):
                return PullOutcome(registered)
            tag_hashes = registered

        result = self._store.get_messages(req.topic, req.queue_id, req.queue_offset,
                                          req.max_msg_nums, tag_hashes)
        suggest = self._suggest_broker_id(result.suggest_pulling_from_slave, group)
        code = self._response_code(result.status, req.queue_offset)
        if code == common_pb2.PULL_OFFSET_MOVED and self.is_slave and not self._config.offset_check_in_slave:
            suggest = group.broker_id  # the slave answers RETRY_IMMEDIATELY and points at the master
        self._record_routing(req, suggest, result.backlog_bytes, result.status)
        response = broker_pb2.PullResponse(
            request_id=req.request_id, code=code, remark=result.status.name,
            next_begin_offset=result.next_begin_offset, min_offset=result.min_offset,
            max_offset=result.max_offset, suggest_which_broker_id=suggest)

        records = b""
        if code == common_pb2.SUCCESS:
            records = result.record_data
            response.record_count = len(result.record_sizes)
        elif code == common_pb2.PULL_OFFSET_MOVED:
            if self.is_slave and not self._config.offset_check_in_slave:
                # A slave never moves a consumer's offset (offsetCheckInSlave=false): retry.
                response.code = common_pb2.PULL_RETRY_IMMEDIATELY
                response.suggest_which_broker_id = group.broker_id
            elif self.is_slave:
                pass  # offset_check_in_slave: the slave moves it like a master, with no event
            else:
                self._record_offset_moved(req, result.next_begin_offset)

        # The piggy-backed commit runs whatever the status, but never on a woken re-execution
        # and never on a slave (reference §1.2). Its commit_seq orders it against the client's
        # explicit updates, which travel on another stream (UpdateConsumerOffsetRequest).
        if allow_suspend and req.commit_offset and not self.is_slave:
            self._offsets.commit(req.consumer_group, req.topic, req.queue_id, req.commit_offset_value,
                                 client_id=req.client_id or None, commit_seq=req.commit_seq)

        if code == common_pb2.PULL_NOT_FOUND and allow_suspend and req.suspend:
            hold_ms = req.suspend_timeout_ms if self._config.long_polling_enable else self._config.timing.short_poll_ms
            self.holds.add(HeldPull(req, tag_hashes, self._clock.monotonic_ms(), max(0, hold_ms), respond,
                                    stream_id))
            return PullOutcome(None)
        return PullOutcome(response, records)

    def _precheck(self, req: broker_pb2.PullRequest) -> broker_pb2.PullResponse | None:
        if not self._config.broker_perm & c.PERM_READ:
            return self._reply(req, common_pb2.NO_PERMISSION, f"broker {self._config.broker_name} is not readable")
        group = self._groups.find(req.consumer_group)
        if group is None:
            return self._reply(req, common_pb2.SUBSCRIPTION_GROUP_NOT_EXIST,
                               f"subscription group {req.consumer_group!r} does not exist; create it first")
        if not group.consume_enable:
            return self._reply(req, common_pb2.NO_PERMISSION, f"group {req.consumer_group} may not consume")
        topic = self._topics.get(req.topic)
        if topic is None:
            return self._reply(req, common_pb2.TOPIC_NOT_EXIST,
                               f"topic {req.topic!r} does not exist on {self._config.broker_name}")
        if not topic.readable:
            return self._reply(req, common_pb2.NO_PERMISSION, f"topic {req.topic} is not readable")
        if not 0 <= req.queue_id < topic.read_queue_nums:
            return self._reply(req, common_pb2.SYSTEM_ERROR,
                               f"queue id {req.queue_id} is outside [0, {topic.read_queue_nums}) of {req.topic}")
        if not 0 < req.max_msg_nums <= c.PULL_BATCH_COUNT_MAX:
            return self._reply(req, common_pb2.INVALID_ARGUMENT,
                               f"max_msg_nums must be in 1..{c.PULL_BATCH_COUNT_MAX}, got {req.max_msg_nums}")
        return None

    def _registered_subscription(self, req: broker_pb2.PullRequest, group: SubscriptionGroupConfig
                                 ) -> frozenset[int] | broker_pb2.PullResponse | None:
        """The tag hashes of the group's registered subscription (from heartbeats), or the
        rejection (reference §1.2 subscription checks)."""
        info = self._consumers.find(req.consumer_group) if self._consumers is not None else None
        if info is None:
            return self._reply(req, common_pb2.SUBSCRIPTION_NOT_EXIST,
                               f"group {req.consumer_group} has no consumer registered here; heartbeat first or "
                               "post a subscription with the pull (has_subscription)")
        if info.message_model == c.MESSAGE_MODEL_BROADCASTING and not group.consume_broadcast_enable:
            return self._reply(req, common_pb2.NO_PERMISSION,
                               f"group {req.consumer_group} may not consume in broadcasting mode")
        subscription = info.subscriptions.get(req.topic)
        if subscription is None:
            return self._reply(req, common_pb2.SUBSCRIPTION_NOT_EXIST,
                               f"group {req.consumer_group} has no subscription registered for {req.topic}")
        if subscription.sub_version < req.sub_version:
            return self._reply(req, common_pb2.SUBSCRIPTION_NOT_LATEST,
                               f"the registered subscription of {req.consumer_group} to {req.topic} is version "
                               f"{subscription.sub_version}, older than the pull's {req.sub_version}")
        return parse_subscription(subscription.expression)

    def _record_routing(self, req: broker_pb2.PullRequest, suggest: int, backlog_bytes: int,
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
    def _reply(req: broker_pb2.PullRequest, code: int, remark: str) -> broker_pb2.PullResponse:
        return broker_pb2.PullResponse(request_id=req.request_id, code=code, remark=remark)

    @staticmethod
    def _response_code(status: GetStatus, request_offset: int) -> int:
        if status in (GetStatus.NO_MATCHED_LOGIC_QUEUE, GetStatus.NO_MESSAGE_IN_QUEUE):
            return common_pb2.PULL_OFFSET_MOVED if request_offset != 0 else common_pb2.PULL_NOT_FOUND
        return _CODE_BY_STATUS[status]

    def _suggest_broker_id(self, pull_from_slave: bool, group: object) -> int:
        """reference §1.2: later steps overwrite earlier ones; with defaults it is always 0."""
        slowly = group.which_broker_when_consume_slowly  # type: ignore[attr-defined]
        if self.slave_read_enable:
            return slowly if pull_from_slave else group.broker_id  # type: ignore[attr-defined]
        return c.MASTER_ID

    def _record_offset_moved(self, req: broker_pb2.PullRequest, new_offset: int) -> None:
        """RocketMQ writes an OffsetMovedEvent into OFFSET_MOVED_EVENT on the master."""
        if self._topics.get(OFFSET_MOVED_EVENT_TOPIC) is None and not self._topics.auto_create_enable:
            return
        if self._topics.get(OFFSET_MOVED_EVENT_TOPIC) is None:
            self._topics.create_in_send(OFFSET_MOVED_EVENT_TOPIC, 1, self._clock.wall_ms())
        body = json.dumps({"consumerGroup": req.consumer_group, "topic": req.topic, "queueId": req.queue_id,
                           "offsetRequest": req.queue_offset, "offsetNew": new_offset}).encode()
        self._store.put_messages([MessageToStore(
            topic=OFFSET_MOVED_EVENT_TOPIC, queue_id=0, body=body, born_timestamp_ms=self._clock.wall_ms())])

    # --- long polling -------------------------------------------------------------------

    def on_arrival(self, topic: str, queue_id: int, max_queue_offset: int, arrived_tag_hash: int | None) -> None:
        """Wake held pulls of this queue whose offset is now behind the max (and whose tags match)."""
        held_list = self.holds.take(topic, queue_id)
        if not held_list:
            return
        now_ms = self._clock.monotonic_ms()
        kept: list[HeldPull] = []
        for held in held_list:
            newest = max_queue_offset
            if newest <= held.request.queue_offset:
                newest = self._store.max_queue_offset(topic, queue_id)
            tags_match = (arrived_tag_hash is None or held.tag_hashes is None
                          or arrived_tag_hash in held.tag_hashes)
            if newest > held.request.queue_offset and tags_match:
                self._wake(held)
            elif now_ms >= held.suspended_at_ms + held.timeout_ms:
                self._wake(held)  # timed out: re-executed without suspend, answers PULL_NOT_FOUND
            else:
                kept.append(held)
        for held in kept:
            self.holds.add(held)

    def _wake(self, held: HeldPull) -> None:
        outcome = self.process(held.request, allow_suspend=False, respond=held.respond, stream_id=held.stream_id)
        response = outcome.complete()
        assert response is not None  # a re-execution is never parked again
        held.respond(response)

    def scan_holds(self) -> None:
        """PullRequestHoldService#checkHoldRequest: visit every key with its current max."""
        for topic, queue_id in list(self.holds.by_queue):
            self.on_arrival(topic, queue_id, self._store.max_queue_offset(topic, queue_id), None)


class LongPollScanService(Service):
    name = "long-poll-scan"

    def __init__(self, processor: PullProcessor, interval_ms: int, on_crash: Callable[[BaseException], None]
                 ) -> None:
        super().__init__(interval_ms, on_crash=on_crash)
        self._processor = processor

    async def tick(self) -> None:
        self._processor.scan_holds()
