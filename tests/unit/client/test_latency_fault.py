"""The producer's latency fault table and the selection that uses it: durations by latency
threshold (scaled by the timing), isolation on failure, availability over time, the least bad
broker when every broker is out, and the fall-back when that broker has no queue."""

from __future__ import annotations

import random

import pytest

from nodes.client.latency_fault import LatencyFaultTable, not_available_duration_ms, not_available_table_ms
from nodes.client.queue_selector import QueueSelector
from nodes.common import constants as c
from nodes.common.types import MessageQueue

FULL = c.SEND_NOT_AVAILABLE_MS


@pytest.mark.parametrize(("latency_ms", "duration_ms"), [
    (0, 0), (49, 0), (100, 0), (549, 0), (550, 30_000), (999, 30_000), (1_000, 60_000), (2_000, 120_000),
    (3_000, 180_000), (14_999, 180_000), (15_000, 600_000), (90_000, 600_000)])
def test_a_latency_maps_to_the_duration_of_the_highest_threshold_it_reaches(latency_ms, duration_ms):
    assert not_available_duration_ms(latency_ms, FULL) == duration_ms


def test_the_durations_scale_with_the_longest_one():
    assert not_available_table_ms(600_000) == FULL
    assert not_available_table_ms(30_000) == (0, 0, 1_500, 3_000, 6_000, 9_000, 30_000)


def test_a_failure_isolates_the_broker_for_the_longest_duration_and_it_comes_back():
    table = LatencyFaultTable(30_000)
    assert table.update("broker-a", 12, isolation=True, now_ms=1_000) == 30_000
    assert not table.is_available("broker-a", 1_000)
    assert not table.is_available("broker-a", 30_999)
    assert table.is_available("broker-a", 31_000)
    assert table.is_available("broker-b", 1_000)  # never reported: available


def test_a_fast_success_keeps_or_makes_the_broker_available():
    table = LatencyFaultTable()
    table.update("broker-a", 5_000, isolation=False, now_ms=0)
    assert not table.is_available("broker-a", 100)
    table.update("broker-a", 20, isolation=False, now_ms=100)  # a later fast answer clears it
    assert table.is_available("broker-a", 100)


def test_the_least_bad_broker_is_one_of_the_better_half_in_rotation():
    table = LatencyFaultTable(rng=random.Random(1))
    assert table.pick_one_at_least(0) is None
    table.update("broker-a", 700, isolation=False, now_ms=0)
    assert table.pick_one_at_least(0) == "broker-a"  # one item: that one
    table.update("broker-b", 30_000, isolation=True, now_ms=0)
    table.update("broker-c", 600, isolation=False, now_ms=0)
    table.update("broker-d", 20_000, isolation=False, now_ms=0)
    picks = {table.pick_one_at_least(0) for _ in range(10)}
    assert picks == {"broker-a", "broker-c"}  # the lower latencies
    # an item whose time is up sorts first, whatever its latency
    assert table.is_available("broker-d", 600_000)
    table.update("broker-a", 700, isolation=False, now_ms=599_000)
    table.update("broker-c", 600, isolation=False, now_ms=599_000)
    assert "broker-d" in {table.pick_one_at_least(600_000) for _ in range(10)}


def test_the_table_refuses_a_bad_duration():
    with pytest.raises(ValueError, match="positive"):
        LatencyFaultTable(0)


def _queues(*spec: tuple[str, int]) -> list[MessageQueue]:
    return [MessageQueue("T", b, q) for b, n in spec for q in range(n)]


def test_selection_skips_an_unavailable_broker():
    queues = _queues(("broker-a", 4), ("broker-b", 4))
    table = LatencyFaultTable()
    table.update("broker-a", 1, isolation=True, now_ms=0)
    selector = QueueSelector(random.Random(3))
    assert {selector.select_available(queues, table, 10).broker_name for _ in range(50)} == {"broker-b"}
    # once its time is up, both are chosen again, round robin
    later = FULL[-1] + 1
    assert {selector.select_available(queues, table, later).broker_name for _ in range(50)} == {"broker-a", "broker-b"}


def test_when_every_broker_is_out_the_least_bad_one_gets_a_queue_of_its_own():
    queues = _queues(("broker-a", 4), ("broker-b", 2))
    table = LatencyFaultTable()
    table.update("broker-a", 30_000, isolation=True, now_ms=0)
    table.update("broker-b", 600, isolation=False, now_ms=0)
    selector = QueueSelector(random.Random(5))
    picked = [selector.select_available(queues, table, 10) for _ in range(20)]
    assert {mq.broker_name for mq in picked} == {"broker-b"}
    assert {mq.queue_id for mq in picked} == {0, 1}  # within broker-b's write queues


def test_a_least_bad_broker_without_queues_is_forgotten_and_round_robin_takes_over():
    queues = _queues(("broker-a", 2))
    table = LatencyFaultTable()
    table.update("broker-a", 30_000, isolation=True, now_ms=0)
    table.update("broker-gone", 10, isolation=True, now_ms=0)
    table.update("broker-gone2", 10, isolation=True, now_ms=0)
    selector = QueueSelector(random.Random(7))
    for _ in range(6):
        assert selector.select_available(queues, table, 10).broker_name == "broker-a"
    assert set(table.snapshot(10)) == {"broker-a"}
