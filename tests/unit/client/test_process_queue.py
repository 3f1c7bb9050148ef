"""ProcessQueue bookkeeping: commit offsets, accounting, orderly take/commit/rollback."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples

from nodes.client.process_queue import (
    CLEAN_EXPIRED_SCAN_COUNT_MAX,
    PROPERTY_CONSUME_START_TIMESTAMP,
    ProcessQueue,
)
from nodes.common.config import Timing
from nodes.common.constants import CONSUME_TIMEOUT_MS, PROPERTY_MAX_OFFSET, PULL_MAX_IDLE_MS
from nodes.common.types import MessageExt

T0 = 1_000_000


def msg(queue_offset: int, body: bytes = b"x", **props: str) -> MessageExt:
    return MessageExt(topic="T", body=body, properties=dict(props), msg_id=f"id{queue_offset}",
                      offset_msg_id="", queue_id=0, queue_offset=queue_offset, commitlog_offset=0,
                      reconsume_times=0, store_timestamp_ms=0, born_timestamp_ms=0, broker_name="b")


def filled(*offsets: int, body: bytes = b"x") -> tuple[ProcessQueue, dict[int, MessageExt]]:
    pq = ProcessQueue(now_ms=T0)
    msgs = {o: msg(o, body) for o in offsets}
    pq.put_messages(list(msgs.values()))
    return pq, msgs


# --- construction, timestamps, expiry -----------------------------------------------------

def test_new_queue_starts_empty_with_timestamps_at_construction():
    pq = ProcessQueue(now_ms=T0)
    assert (pq.msg_count, pq.msg_size_bytes, pq.queue_offset_max, pq.max_span) == (0, 0, 0, 0)
    assert (pq.dropped, pq.locked, pq.consuming, pq.msg_acc_count, pq.try_unlock_times) == (
        False, False, False, 0, 0)
    assert pq.last_pull_timestamp_ms == pq.last_consume_timestamp_ms == pq.last_lock_timestamp_ms == T0
    assert not pq.has_temp_message()


def test_pull_expires_strictly_after_120_s():
    pq = ProcessQueue(now_ms=T0)
    assert PULL_MAX_IDLE_MS == Timing().pull_max_idle_ms == 120_000
    assert not pq.is_pull_expired(T0 + 120_000, pull_max_idle_ms=PULL_MAX_IDLE_MS)
    assert pq.is_pull_expired(T0 + 120_001, pull_max_idle_ms=PULL_MAX_IDLE_MS)
    pq.last_pull_timestamp_ms = T0 + 50_000
    assert not pq.is_pull_expired(T0 + 120_001, pull_max_idle_ms=PULL_MAX_IDLE_MS)
    assert pq.is_pull_expired(T0 + 50_006, pull_max_idle_ms=5)  # scaled timing


# --- put ----------------------------------------------------------------------------------

def test_put_counts_messages_and_body_bytes_and_sorts_by_offset():
    pq = ProcessQueue(now_ms=T0)
    pq.put_messages([msg(12, b"ccc"), msg(10, b"a"), msg(11, b"bb")])
    assert pq.offsets() == [10, 11, 12]
    assert (pq.msg_count, pq.msg_size_bytes) == (3, 6)
    assert pq.queue_offset_max == 11  # the last *newly inserted*, not the highest
    assert pq.max_span == 2
    assert pq.has_temp_message()


def test_put_duplicate_offset_is_not_counted_again_but_replaces_the_message():
    pq, _ = filled(5, 6)
    newer = msg(6, b"a much longer body")
    pq.put_messages([newer])
    assert (pq.msg_count, pq.msg_size_bytes, pq.queue_offset_max) == (2, 2, 6)
    assert pq.take_messages(2, now_ms=T0)[1] is newer  # TreeMap#put keeps the new value


def test_put_dispatches_only_when_the_gate_is_closed():
    pq = ProcessQueue(now_ms=T0)
    assert pq.put_messages([]) is False  # empty cache: nothing to dispatch
    assert pq.consuming is False
    assert pq.put_messages([msg(0)]) is True
    assert pq.consuming is True
    assert pq.put_messages([msg(1)]) is False  # a consume request is already on its way
    pq.take_messages(10, now_ms=T0)
    assert pq.take_messages(10, now_ms=T0) == []  # taking nothing closes the gate
    assert pq.consuming is False
    assert pq.put_messages([msg(2)]) is True


def test_put_records_broker_backlog_from_the_last_messages_max_offset():
    pq = ProcessQueue(now_ms=T0)
    pq.put_messages([msg(10, **{PROPERTY_MAX_OFFSET: "999"}), msg(11, **{PROPERTY_MAX_OFFSET: "100"})])
    assert pq.msg_acc_count == 89  # only the last message's property counts
    pq.put_messages([msg(12, **{PROPERTY_MAX_OFFSET: "12"})])  # 0: not positive, keep 89
    assert pq.msg_acc_count == 89
    pq.put_messages([msg(13)])  # no property: keep
    assert pq.msg_acc_count == 89


# --- remove: the commit offset ------------------------------------------------------------

def test_remove_returns_lowest_cached_offset_after_out_of_order_removals():
    pq, m = filled(10, 11, 12, 13, 14)
    assert pq.remove_messages([m[12]], now_ms=T0 + 1) == 10
    assert pq.remove_messages([m[10]], now_ms=T0 + 2) == 11
    assert pq.remove_messages([m[13], m[11]], now_ms=T0 + 3) == 14
    assert pq.offsets() == [14]
    assert pq.remove_messages([m[14]], now_ms=T0 + 4) == 15  # empty: queue_offset_max + 1
    assert pq.last_consume_timestamp_ms == T0 + 4


def test_remove_on_empty_queue_returns_minus_one_but_touches_consume_time():
    pq = ProcessQueue(now_ms=T0)
    assert pq.remove_messages([msg(3)], now_ms=T0 + 9) == -1
    assert pq.last_consume_timestamp_ms == T0 + 9
    pq, m = filled(3)
    assert pq.remove_messages([m[3]], now_ms=T0) == 4
    assert pq.remove_messages([m[3]], now_ms=T0) == -1  # emptied before: nothing to commit


def test_remove_of_unknown_offset_changes_nothing():
    pq, _ = filled(10, 11, body=b"abcd")
    assert pq.remove_messages([msg(99, b"abcd")], now_ms=T0) == 10
    assert (pq.msg_count, pq.msg_size_bytes) == (2, 8)


def test_remove_same_message_twice_in_one_call_counts_once():
    pq, m = filled(1, 2, body=b"abc")
    assert pq.remove_messages([m[1], m[1]], now_ms=T0) == 2
    assert (pq.msg_count, pq.msg_size_bytes) == (1, 3)


def test_remove_empty_list_returns_current_low_watermark():
    pq, _ = filled(7, 8)
    assert pq.remove_messages([], now_ms=T0) == 7


def test_commit_offset_after_emptying_uses_last_inserted_not_highest():
    pq = ProcessQueue(now_ms=T0)
    high, low = msg(20), msg(5)
    pq.put_messages([high])
    pq.put_messages([low])  # a re-pulled lower offset is the last newly inserted
    assert pq.remove_messages([high, low], now_ms=T0) == 6  # queue_offset_max + 1, as RocketMQ


def test_size_accounting_subtracts_bodies_and_resets_at_zero_count():
    pq = ProcessQueue(now_ms=T0)
    pq.put_messages([msg(0, b"12345"), msg(1, b"1234567890")])
    assert pq.msg_size_bytes == 15
    pq.remove_messages([msg(0, b"12345")], now_ms=T0)
    assert (pq.msg_count, pq.msg_size_bytes) == (1, 10)
    pq.remove_messages([msg(1, b"xx")], now_ms=T0)  # the argument's body is subtracted ...
    assert (pq.msg_count, pq.msg_size_bytes) == (0, 0)  # ... and a zero count resets the size


def test_max_span_is_highest_minus_lowest():
    pq, m = filled(100, 101, 2100)
    assert pq.max_span == 2000
    pq.remove_messages([m[100]], now_ms=T0)
    assert pq.max_span == 1999
    pq.remove_messages([m[101], m[2100]], now_ms=T0)
    assert pq.max_span == 0


def test_dropped_queue_keeps_its_bookkeeping():
    # Dropping is a flag for the pull loop and the consume services; the cache itself is untouched
    # and still reports offsets (the caller skips the offset update for a dropped queue).
    pq, m = filled(1, 2)
    pq.dropped = True
    assert pq.remove_messages([m[1]], now_ms=T0) == 2
    assert pq.msg_count == 1


def test_clear_empties_both_maps_and_zeroes_counters():
    pq, _ = filled(1, 2, 3)
    pq.take_messages(1, now_ms=T0)
    pq.clear()
    assert (pq.msg_count, pq.msg_size_bytes, pq.queue_offset_max) == (0, 0, 0)
    assert pq.offsets() == [] and pq.taken_offsets() == []
    assert pq.commit() == -1


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.integers(0, 60), min_size=1, max_size=40, unique=True), st.data())
def test_commit_offset_is_lowest_unremoved_or_one_past_last_inserted(offsets, data):
    pq = ProcessQueue(now_ms=T0)
    pq.put_messages([msg(o, b"ab") for o in offsets])
    gone = data.draw(st.lists(st.sampled_from(offsets), unique=True))
    left = sorted(set(offsets) - set(gone))
    result = pq.remove_messages([msg(o, b"ab") for o in gone], now_ms=T0)
    assert result == (left[0] if left else offsets[-1] + 1)
    assert (pq.msg_count, pq.msg_size_bytes, pq.offsets()) == (len(left), 2 * len(left), left)


# --- orderly ------------------------------------------------------------------------------

def test_take_moves_lowest_offsets_in_flight_without_uncounting_them():
    pq, m = filled(10, 11, 12, 13, 14, body=b"abc")
    taken = pq.take_messages(3, now_ms=T0 + 5)
    assert taken == [m[10], m[11], m[12]]
    assert pq.offsets() == [13, 14] and pq.taken_offsets() == [10, 11, 12]
    assert (pq.msg_count, pq.msg_size_bytes) == (5, 15)  # still cached until commit
    assert pq.last_consume_timestamp_ms == T0 + 5
    assert pq.has_temp_message()


def test_commit_returns_highest_in_flight_plus_one_and_uncounts():
    pq, _ = filled(10, 11, 12, 13, 14, body=b"abc")
    pq.take_messages(3, now_ms=T0)
    assert pq.commit() == 13
    assert (pq.msg_count, pq.msg_size_bytes) == (2, 6)
    assert pq.taken_offsets() == []
    assert pq.commit() == -1  # nothing in flight (Java would throw)


def test_commit_all_then_has_no_temp_message():
    pq, _ = filled(0, 1)
    assert pq.take_messages(32, now_ms=T0) != []
    assert not pq.has_temp_message()  # in-flight messages do not count
    assert pq.commit() == 2
    assert (pq.msg_count, pq.msg_size_bytes) == (0, 0)


def test_rollback_puts_everything_back_to_be_taken_again():
    pq, m = filled(10, 11, 12)
    pq.take_messages(2, now_ms=T0)
    pq.rollback()
    assert pq.offsets() == [10, 11, 12] and pq.taken_offsets() == []
    assert pq.msg_count == 3
    assert pq.take_messages(3, now_ms=T0) == [m[10], m[11], m[12]]


def test_make_message_to_consume_again_moves_only_the_listed():
    pq, m = filled(10, 11, 12, 13)
    pq.take_messages(3, now_ms=T0)
    pq.make_message_to_consume_again([m[11]])
    assert pq.offsets() == [11, 13] and pq.taken_offsets() == [10, 12]
    assert pq.commit() == 13  # highest remaining in flight + 1
    assert pq.msg_count == 2
    assert pq.take_messages(1, now_ms=T0) == [m[11]]


def test_make_message_to_consume_again_inserts_even_if_not_in_flight():
    pq = ProcessQueue(now_ms=T0)
    stray = msg(42)
    pq.make_message_to_consume_again([stray])  # RocketMQ puts it in the cache regardless
    assert pq.offsets() == [42] and pq.msg_count == 0


def test_suspend_and_retake_keeps_offset_order():
    pq, m = filled(1, 2, 3, 4)
    first = pq.take_messages(2, now_ms=T0)
    pq.make_message_to_consume_again(first)
    assert pq.take_messages(4, now_ms=T0) == [m[1], m[2], m[3], m[4]]
    assert pq.commit() == 5
    assert pq.msg_count == 0


# --- consume timeout (cleanExpiredMsg) ------------------------------------------------------

def started(queue_offset: int, start_ms: int | None) -> MessageExt:
    props = {} if start_ms is None else {PROPERTY_CONSUME_START_TIMESTAMP: str(start_ms)}
    return msg(queue_offset, **props)


def test_expired_messages_are_the_run_of_heads_past_the_timeout():
    assert CONSUME_TIMEOUT_MS == Timing().consume_timeout_ms == 15 * 60 * 1000
    now = T0 + CONSUME_TIMEOUT_MS + 1
    pq = ProcessQueue(now_ms=T0)
    heads = [started(0, T0), started(1, T0 - 5), started(2, T0 + 1), started(3, T0)]
    pq.put_messages(heads)
    # offset 2 started exactly consume_timeout ago: not expired (strict >), so the run stops there
    assert pq.expired_messages(now, consume_timeout_ms=CONSUME_TIMEOUT_MS) == heads[:2]
    assert pq.expired_messages(now + 1, consume_timeout_ms=CONSUME_TIMEOUT_MS) == heads


def test_expired_scan_stops_at_a_head_that_never_started():
    pq = ProcessQueue(now_ms=T0)
    pq.put_messages([started(0, None), started(1, T0)])
    assert pq.expired_messages(T0 + CONSUME_TIMEOUT_MS + 10, consume_timeout_ms=CONSUME_TIMEOUT_MS) == []


def test_expired_scan_looks_at_most_at_16_heads():
    pq = ProcessQueue(now_ms=T0)
    pq.put_messages([started(i, T0) for i in range(20)])
    expired = pq.expired_messages(T0 + CONSUME_TIMEOUT_MS + 1, consume_timeout_ms=CONSUME_TIMEOUT_MS)
    assert [m.queue_offset for m in expired] == list(range(CLEAN_EXPIRED_SCAN_COUNT_MAX))


def test_remove_if_head_only_removes_the_current_lowest():
    pq = ProcessQueue(now_ms=T0)
    m0, m1 = started(0, T0), started(1, T0)
    pq.put_messages([m0, m1])
    assert pq.remove_if_head(m1, now_ms=T0) is False
    assert pq.remove_if_head(m0, now_ms=T0) is True
    assert pq.offsets() == [1] and pq.msg_count == 1
    assert pq.remove_if_head(m0, now_ms=T0) is False


def test_fault_switch_orderly_take_newest_takes_the_highest_cached_offsets_first():
    """OFF: the lowest offsets first (queue order). ON: the newest cached messages first."""
    for newest_first, expected in ((False, [[0, 1], [2, 3], [4]]), (True, [[3, 4], [1, 2], [0]])):
        pq = ProcessQueue(now_ms=T0)
        pq.put_messages([msg(i) for i in range(5)])
        batches = [[m.queue_offset for m in pq.take_messages(2, now_ms=T0, newest_first=newest_first)]
                   for _ in range(3)]
        assert batches == expected
        assert pq.commit() == 5
