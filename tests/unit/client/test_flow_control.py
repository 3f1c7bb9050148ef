"""Pull flow control: each check at and just past its threshold."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from nodes.client.flow_control import (
    MIB_BYTES,
    FlowControlReason,
    FlowThresholds,
    PullDecision,
    decide_pull,
    thresholds_for_queue_count,
)
from nodes.client.process_queue import ProcessQueue
from nodes.common.config import Timing
from nodes.common.constants import PULL_DELAY_WHEN_FLOW_CONTROL_MS
from nodes.common.errors import InvalidArgumentError
from nodes.common.types import MessageExt

NOW = 5_000
DEFAULTS = FlowThresholds()


def cache(count: int = 0, size_bytes: int = 0, span: int = 0) -> SimpleNamespace:
    return SimpleNamespace(msg_count=count, msg_size_bytes=size_bytes, max_span=span)


def later(reason: FlowControlReason) -> PullDecision:
    return PullDecision(reason, PULL_DELAY_WHEN_FLOW_CONTROL_MS, NOW + PULL_DELAY_WHEN_FLOW_CONTROL_MS)


NOW_DECISION = PullDecision(None, 0, NOW)


def decide(pq, *, delay_ms: int = Timing().pull_delay_when_flow_control_ms, **kwargs) -> PullDecision:
    return decide_pull(pq, delay_ms=delay_ms, **kwargs)


def test_defaults_are_rocketmqs():
    assert (DEFAULTS.count_per_queue, DEFAULTS.size_per_queue_mib, DEFAULTS.count_per_topic,
            DEFAULTS.size_per_topic_mib, DEFAULTS.concurrent_span_max) == (1000, 100, -1, -1, 2000)
    assert PULL_DELAY_WHEN_FLOW_CONTROL_MS == Timing().pull_delay_when_flow_control_ms == 50


def test_empty_queue_pulls_now():
    decision = decide(cache(), now_ms=NOW, orderly=False, thresholds=DEFAULTS)
    assert decision == NOW_DECISION
    assert decision.pull_now and decision.delay_ms == 0 and decision.retry_at_ms == NOW


@pytest.mark.parametrize("orderly", [False, True])
def test_count_flow_control_is_strict(orderly):
    assert decide(cache(count=1000), now_ms=NOW, orderly=orderly, thresholds=DEFAULTS) == NOW_DECISION
    decision = decide(cache(count=1001), now_ms=NOW, orderly=orderly, thresholds=DEFAULTS)
    assert decision == later(FlowControlReason.CACHED_COUNT)
    assert not decision.pull_now
    assert "1001 > 1000" in decision.detail


@pytest.mark.parametrize("orderly", [False, True])
def test_size_flow_control_uses_whole_mib_and_is_strict(orderly):
    just_under_101 = 101 * MIB_BYTES - 1  # 100 MiB by integer division
    assert decide(cache(size_bytes=just_under_101), now_ms=NOW, orderly=orderly,
                       thresholds=DEFAULTS) == NOW_DECISION
    assert decide(cache(size_bytes=101 * MIB_BYTES), now_ms=NOW, orderly=orderly,
                       thresholds=DEFAULTS) == later(FlowControlReason.CACHED_SIZE)


def test_span_flow_control_is_strict_and_concurrent_only():
    assert decide(cache(span=2000), now_ms=NOW, orderly=False, thresholds=DEFAULTS) == NOW_DECISION
    assert decide(cache(span=2001), now_ms=NOW, orderly=False,
                       thresholds=DEFAULTS) == later(FlowControlReason.SPAN)
    assert decide(cache(span=10**9), now_ms=NOW, orderly=True, thresholds=DEFAULTS) == NOW_DECISION


def test_checks_run_count_then_size_then_span():
    everything = cache(count=1001, size_bytes=200 * MIB_BYTES, span=5000)
    assert decide(everything, now_ms=NOW, orderly=False,
                       thresholds=DEFAULTS).reason is FlowControlReason.CACHED_COUNT
    size_and_span = cache(count=1000, size_bytes=200 * MIB_BYTES, span=5000)
    assert decide(size_and_span, now_ms=NOW, orderly=False,
                       thresholds=DEFAULTS).reason is FlowControlReason.CACHED_SIZE


def test_custom_thresholds_and_delay():
    small = FlowThresholds(count_per_queue=1, size_per_queue_mib=1, concurrent_span_max=1)
    assert decide(cache(count=1, size_bytes=2 * MIB_BYTES - 1, span=1), now_ms=NOW, orderly=False,
                       thresholds=small).pull_now
    assert decide(cache(count=2), now_ms=NOW, orderly=False, thresholds=small,
                       delay_ms=3) == PullDecision(FlowControlReason.CACHED_COUNT, 3, NOW + 3)


def _msg(queue_offset: int, body: bytes) -> MessageExt:
    return MessageExt(topic="T", body=body, properties={}, msg_id="", offset_msg_id="", queue_id=0,
                      queue_offset=queue_offset, commitlog_offset=0, reconsume_times=0,
                      store_timestamp_ms=0, born_timestamp_ms=0, broker_name="b")


def test_real_process_queue_size_boundary():
    mib = bytes(MIB_BYTES)  # one shared body object: 101 messages cost 1 MiB of memory
    pq = ProcessQueue(now_ms=0)
    pq.put_messages([_msg(i, mib) for i in range(100)] + [_msg(100, mib[:-1])])
    assert pq.msg_size_bytes == 101 * MIB_BYTES - 1
    assert decide(pq, now_ms=NOW, orderly=False, thresholds=DEFAULTS).pull_now
    pq.put_messages([_msg(101, b"x")])
    assert decide(pq, now_ms=NOW, orderly=False, thresholds=DEFAULTS) == later(FlowControlReason.CACHED_SIZE)


def test_real_process_queue_span_boundary():
    pq = ProcessQueue(now_ms=0)
    pq.put_messages([_msg(0, b"x"), _msg(2000, b"x")])
    assert decide(pq, now_ms=NOW, orderly=False, thresholds=DEFAULTS).pull_now
    pq.put_messages([_msg(2001, b"x")])
    assert decide(pq, now_ms=NOW, orderly=False, thresholds=DEFAULTS) == later(FlowControlReason.SPAN)


# --- valid ranges -------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "low", "high"), [
    ("count_per_queue", 1, 65_535),
    ("size_per_queue_mib", 1, 1_024),
    ("concurrent_span_max", 1, 65_535),
    ("count_per_topic", 1, 6_553_500),
    ("size_per_topic_mib", 1, 102_400),
])
def test_ranges_accept_bounds_and_reject_just_outside(name, low, high):
    assert getattr(FlowThresholds(**{name: low}), name) == low
    assert getattr(FlowThresholds(**{name: high}), name) == high
    for bad in (low - 1, high + 1):
        with pytest.raises(InvalidArgumentError, match=rf"{name} .* out of range \[{low}, {high}\]") as err:
            FlowThresholds(**{name: bad})
        assert isinstance(err.value, ValueError)


@pytest.mark.parametrize("name", ["count_per_topic", "size_per_topic_mib"])
def test_topic_thresholds_may_be_off(name):
    assert getattr(FlowThresholds(**{name: -1}), name) == -1
    with pytest.raises(InvalidArgumentError, match="or -1 for off"):
        FlowThresholds(**{name: -2})


@pytest.mark.parametrize("name", ["count_per_queue", "count_per_topic"])
def test_ranges_reject_non_ints(name):
    with pytest.raises(InvalidArgumentError, match="must be an int"):
        FlowThresholds(**{name: True})
    with pytest.raises(InvalidArgumentError, match="must be an int"):
        FlowThresholds(**{name: 10.0})


def test_range_error_names_the_rocketmq_setting():
    with pytest.raises(InvalidArgumentError, match="pullThresholdForQueue"):
        FlowThresholds(count_per_queue=0)


# --- topic-level rewrite ------------------------------------------------------------------

def test_topic_thresholds_split_over_owned_queues_with_floor_one():
    assert thresholds_for_queue_count(1000, 100, 3) == (333, 33)
    assert thresholds_for_queue_count(2, 2, 5) == (1, 1)  # max(1, 0)
    assert thresholds_for_queue_count(-1, 100, 4) == (None, 25)  # count threshold off
    assert thresholds_for_queue_count(1000, -1, 4) == (250, None)
    assert thresholds_for_queue_count(1000, 100, 0) == (None, None)  # no queue: leave as is


def test_for_queue_count_rewrites_per_queue_values_without_range_checks():
    base = FlowThresholds(count_per_queue=10, size_per_queue_mib=5,
                          count_per_topic=6_553_500, size_per_topic_mib=102_400)
    one = base.for_queue_count(1)
    assert (one.count_per_queue, one.size_per_queue_mib) == (6_553_500, 102_400)  # past the queue ranges
    four = base.for_queue_count(4)
    assert (four.count_per_queue, four.size_per_queue_mib) == (1_638_375, 25_600)
    assert base.for_queue_count(0) == base
    assert (base.count_per_queue, base.size_per_queue_mib) == (10, 5)  # the original is unchanged


def test_for_queue_count_without_topic_thresholds_is_unchanged():
    assert DEFAULTS.for_queue_count(7) == DEFAULTS


def test_rewritten_thresholds_drive_decisions():
    per_topic = FlowThresholds(count_per_topic=100).for_queue_count(4)  # 25 per queue
    assert decide(cache(count=25), now_ms=NOW, orderly=False, thresholds=per_topic).pull_now
    assert decide(cache(count=26), now_ms=NOW, orderly=False,
                       thresholds=per_topic) == later(FlowControlReason.CACHED_COUNT)
