"""Client pull flow control: pull a queue now, or later because too much is cached.

Pure: owns steps 5-7 of `DefaultMQPushConsumerImpl#pullMessage` (cached count,
cached body size, offset span), the thresholds with `checkConfig`'s valid ranges, and the
topic-level rewrite done after each rebalance. Does not own the other steps (dropped, pull
timestamp, service state, pause, orderly lock, subscription), scheduling, or logging throttles.
"""

from __future__ import annotations

import copy
import enum
from dataclasses import dataclass, field
from typing import Protocol

from nodes.common import constants as c
from nodes.common.errors import InvalidArgumentError

MIB_BYTES = 1024 * 1024  # sizes are compared in whole MiB (integer division)


class CachedQueue(Protocol):
    """What flow control reads from a ProcessQueue."""

    @property
    def msg_count(self) -> int: ...

    @property
    def msg_size_bytes(self) -> int: ...

    @property
    def max_span(self) -> int: ...


def _check_range(name: str, rocketmq_name: str, value: int, bounds: tuple[int, int], *,
                 off_allowed: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{name} ({rocketmq_name}) must be an int, got {value!r}")
    if off_allowed and value == c.PULL_THRESHOLD_OFF:
        return
    low, high = bounds
    if not low <= value <= high:
        off = f" or {c.PULL_THRESHOLD_OFF} for off" if off_allowed else ""
        raise InvalidArgumentError(f"{name} ({rocketmq_name}) out of range [{low}, {high}]{off}: {value}")


@dataclass(frozen=True, slots=True)
class FlowThresholds:
    """The push consumer's flow-control settings, range-checked as RocketMQ's checkConfig.

    Values returned by `for_queue_count` are not range-checked again: RocketMQ's rewrite uses
    the plain setters, so e.g. a topic threshold of 6 553 500 over one queue gives 6 553 500.
    """

    count_per_queue: int = c.PULL_THRESHOLD_COUNT_PER_QUEUE
    size_per_queue_mib: int = c.PULL_THRESHOLD_SIZE_PER_QUEUE_MIB
    count_per_topic: int = c.PULL_THRESHOLD_COUNT_PER_TOPIC
    size_per_topic_mib: int = c.PULL_THRESHOLD_SIZE_PER_TOPIC_MIB
    concurrent_span_max: int = c.CONSUME_CONCURRENTLY_SPAN_MAX

    def __post_init__(self) -> None:
        _check_range("concurrent_span_max", "consumeConcurrentlyMaxSpan", self.concurrent_span_max,
                     c.CONSUME_CONCURRENTLY_SPAN_MAX_RANGE)
        _check_range("count_per_queue", "pullThresholdForQueue", self.count_per_queue,
                     c.PULL_THRESHOLD_COUNT_PER_QUEUE_RANGE)
        _check_range("count_per_topic", "pullThresholdForTopic", self.count_per_topic,
                     c.PULL_THRESHOLD_COUNT_PER_TOPIC_RANGE, off_allowed=True)
        _check_range("size_per_queue_mib", "pullThresholdSizeForQueue", self.size_per_queue_mib,
                     c.PULL_THRESHOLD_SIZE_PER_QUEUE_MIB_RANGE)
        _check_range("size_per_topic_mib", "pullThresholdSizeForTopic", self.size_per_topic_mib,
                     c.PULL_THRESHOLD_SIZE_PER_TOPIC_MIB_RANGE, off_allowed=True)

    def for_queue_count(self, queues: int) -> FlowThresholds:
        """These thresholds after a rebalance that left the consumer owning `queues` queues."""
        count, size_mib = thresholds_for_queue_count(self.count_per_topic, self.size_per_topic_mib, queues)
        rewritten = copy.copy(self)  # bypasses __post_init__: rewritten values are not range-checked
        if count is not None:
            object.__setattr__(rewritten, "count_per_queue", count)
        if size_mib is not None:
            object.__setattr__(rewritten, "size_per_queue_mib", size_mib)
        return rewritten


def thresholds_for_queue_count(topic_count: int, topic_size_mib: int, queues: int) -> tuple[int | None, int | None]:
    """RebalancePushImpl#messageQueueChanged: per-queue thresholds derived from topic ones.

    Returns `(count_per_queue, size_per_queue_mib)`; None means "keep the current value",
    because that topic threshold is off (-1) or the consumer owns no queue.
    """
    if queues <= 0:
        return None, None
    count = None if topic_count == c.PULL_THRESHOLD_OFF else max(1, topic_count // queues)
    size_mib = None if topic_size_mib == c.PULL_THRESHOLD_OFF else max(1, topic_size_mib // queues)
    return count, size_mib


class FlowControlReason(enum.Enum):
    CACHED_COUNT = "CACHED_COUNT"  # step 5: too many cached messages
    CACHED_SIZE = "CACHED_SIZE"  # step 6: too many cached body MiB
    SPAN = "SPAN"  # step 7 (concurrent only): cached offsets spread too far


@dataclass(frozen=True, slots=True)
class PullDecision:
    """Pull now (`reason is None`, delay 0) or later, after `delay_ms`, at `retry_at_ms`."""

    reason: FlowControlReason | None
    delay_ms: int
    retry_at_ms: int
    detail: str = field(default="", compare=False)  # for the log line; not part of equality

    @property
    def pull_now(self) -> bool:
        return self.reason is None


def decide_pull(pq: CachedQueue, *, now_ms: int, orderly: bool, thresholds: FlowThresholds,
                delay_ms: int) -> PullDecision:
    """Steps 5-7 of pullMessage, in order; the first that trips decides.

    Args:
        pq: the queue's cache (a ProcessQueue).
        now_ms: when the pull is being decided; a later pull is due at `now_ms + delay_ms`.
        orderly: orderly consumers skip the span check (their lock check is the caller's).
        thresholds: the current per-queue values (after `for_queue_count` if topic-level).
        delay_ms: the flow-control retry delay (scaled in tests).
    """
    count = pq.msg_count
    if count > thresholds.count_per_queue:
        return PullDecision(FlowControlReason.CACHED_COUNT, delay_ms, now_ms + delay_ms,
                            f"cached message count {count} > {thresholds.count_per_queue}")
    size_mib = pq.msg_size_bytes // MIB_BYTES
    if size_mib > thresholds.size_per_queue_mib:
        return PullDecision(FlowControlReason.CACHED_SIZE, delay_ms, now_ms + delay_ms,
                            f"cached message size {size_mib} MiB > {thresholds.size_per_queue_mib} MiB")
    if not orderly:
        span = pq.max_span
        if span > thresholds.concurrent_span_max:
            return PullDecision(FlowControlReason.SPAN, delay_ms, now_ms + delay_ms,
                                f"cached offset span {span} > {thresholds.concurrent_span_max}")
    return PullDecision(None, 0, now_ms)
