"""Every row of RocketMQ 4.9's getMessage table, the scan loop's limits, time search, and the found
records handed out back to back under the transfer caps."""

import dataclasses

import pytest

from nodes.client.pull_decode import decode_messages
from nodes.common import constants as c
from nodes.common.config import StoreConfig
from nodes.store import read_path
from nodes.store.message_store import GetStatus, MessageStore
from nodes.store.record import MessageToStore, iter_records, tag_hash

from .conftest import SEGMENT_BYTES, SMALL, put_many

WIDE = dataclasses.replace(SMALL, cq_units_per_file=2048)  # one consume-queue file holds a whole test queue


def _bodies(result):
    return [r.body for r in iter_records(b"".join(result.records))]


def test_no_message_in_queue(open_store):
    store = open_store()
    result = store.get_messages("T", 0, 5, 32, None)
    assert (result.status, result.next_begin_offset, result.min_offset, result.max_offset) == (
        GetStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
    assert result.records == [] and not result.suggest_pulling_from_slave


def test_offset_overflow_one_and_badly(open_store):
    store = open_store()
    put_many(store, 3)
    one = store.get_messages("T", 0, 3, 32, None)
    assert (one.status, one.next_begin_offset, one.min_offset, one.max_offset) == (
        GetStatus.OFFSET_OVERFLOW_ONE, 3, 0, 3)
    badly = store.get_messages("T", 0, 10, 32, None)
    assert (badly.status, badly.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 3)


def test_offset_too_small_after_the_oldest_segment_is_gone(open_store, tmp_path):
    root = tmp_path / "store"
    store = open_store(root)
    put_many(store, 700, body_bytes=200)  # ~3 segments
    store.close()
    (root / "commitlog" / f"{0:020d}").unlink()  # what retention does
    store = open_store(root)
    assert store.min_phys_offset == SEGMENT_BYTES
    first_kept = store.min_queue_offset("T", 0)
    assert first_kept > 0
    assert store.queue_first_phys_offset("T", 0) >= SEGMENT_BYTES
    result = store.get_messages("T", 0, 0, 32, None)
    assert (result.status, result.next_begin_offset) == (GetStatus.OFFSET_TOO_SMALL, first_kept)
    assert store.get_messages("T", 0, first_kept, 32, None).status is GetStatus.FOUND


def test_offset_found_null_when_a_consume_queue_file_is_missing(open_store, tmp_path):
    root = tmp_path / "store"
    store = open_store(root)
    put_many(store, 40)  # consume-queue files hold 16 units: files at offsets 0, 16, 32
    store.close()
    (root / "consumequeue" / "T" / "0" / f"{16 * 20:020d}").unlink()
    store = open_store(root)
    result = store.get_messages("T", 0, 20, 32, None)
    assert (result.status, result.next_begin_offset) == (GetStatus.OFFSET_FOUND_NULL, 32)
    assert store.get_messages("T", 0, 32, 32, None).status is GetStatus.FOUND


def test_message_was_removing_when_the_commitlog_segment_went_away(open_store):
    store = open_store()
    put_many(store, 700, body_bytes=200)
    # retention deleting the oldest segment while the consume queue still points into it
    store._files.commitlog.segments.pop(0).destroy()
    result = store.get_messages("T", 0, 0, 32, None)
    assert (result.status, result.next_begin_offset, result.records) == (GetStatus.MESSAGE_WAS_REMOVING, 16, [])


def test_found_reads_within_one_consume_queue_file(open_store):
    store = open_store()
    put_many(store, 40)
    result = store.get_messages("T", 0, 10, 32, None)
    assert (result.status, result.next_begin_offset) == (GetStatus.FOUND, 16)  # stops at the file end
    assert _bodies(result)[0].startswith(b"T-0-10:")
    assert len(result.records) == 6


def test_tag_filtering_on_the_consume_queue_hash(open_store):
    store = open_store(config=WIDE)
    for i in range(10):
        put_many(store, 1, tags="A" if i % 2 == 0 else "B")
    only_a = store.get_messages("T", 0, 0, 32, frozenset({tag_hash("A")}))
    assert only_a.status is GetStatus.FOUND and len(only_a.records) == 5
    assert {r.tags for r in iter_records(b"".join(only_a.records))} == {"A"}
    assert only_a.next_begin_offset == 10
    none = store.get_messages("T", 0, 0, 32, frozenset({tag_hash("C")}))
    assert (none.status, none.next_begin_offset, none.records) == (GetStatus.NO_MATCHED_MESSAGE, 10, [])
    either = store.get_messages("T", 0, 0, 32, frozenset({tag_hash("A"), tag_hash("B")}))
    assert len(either.records) == 10


def test_the_scan_stops_at_max_16000_bytes_or_max_count_units(open_store):
    store = open_store(config=WIDE)
    put_many(store, 1200, body_bytes=10, tags="B")
    wanted = frozenset({tag_hash("A")})
    assert store.get_messages("T", 0, 0, 32, wanted).next_begin_offset == c.PULL_FILTER_SCAN_BYTES_MIN // 20
    assert store.get_messages("T", 0, 0, 1000, wanted).next_begin_offset == 1000
    assert store.get_messages("T", 0, 1000, 1000, wanted).next_begin_offset == 1200


def test_batch_full_in_memory_by_count_and_by_bytes(open_store):
    store = open_store(config=WIDE)
    put_many(store, 40, body_bytes=50)
    by_count = store.get_messages("T", 0, 0, 1000, None)
    assert (len(by_count.records), by_count.next_begin_offset) == (c.TRANSFER_COUNT_MAX_IN_MEMORY, 32)
    assert len(store.get_messages("T", 0, 0, 5, None).records) == 5

    big = put_many(store, 20, queue_id=1, body_bytes=16 * 1024 - 200)
    by_bytes = store.get_messages("T", 1, 0, 32, None)
    fit = 0
    total = 0
    while total + big[fit].size <= c.TRANSFER_BYTES_MAX_IN_MEMORY:
        total += big[fit].size
        fit += 1
    assert (len(by_bytes.records), by_bytes.records_bytes, by_bytes.next_begin_offset) == (fit, total, fit)
    assert not by_bytes.suggest_pulling_from_slave


def test_batch_full_on_disk_and_the_slave_suggestion(open_store):
    store = open_store(config=dataclasses.replace(WIDE, memory_budget_bytes=1000))
    put_many(store, 20, body_bytes=50)
    small = store.get_messages("T", 0, 0, 32, None)
    assert len(small.records) == c.TRANSFER_COUNT_MAX_ON_DISK
    assert small.suggest_pulling_from_slave  # the backlog behind it exceeds the memory budget
    assert not store.is_in_memory(0) and store.is_in_memory(store.max_phys_offset - 10)

    big = put_many(store, 6, queue_id=1, body_bytes=16 * 1024 - 200)
    result = store.get_messages("T", 1, 0, 32, None)
    assert len(result.records) == c.TRANSFER_BYTES_MAX_ON_DISK // big[0].size


def test_a_corrupt_record_is_skipped_and_counted(open_store):
    store = open_store()
    results = put_many(store, 5)
    victim = results[2]
    segment = store._files.commitlog.segment_for(victim.phys_offset)
    segment.buffer[victim.phys_offset + victim.size - 30] ^= 0xFF  # inside the body
    result = store.get_messages("T", 0, 0, 32, None)
    assert result.status is GetStatus.FOUND and result.next_begin_offset == 5
    assert [b[:6] for b in _bodies(result)] == [b"T-0-0:", b"T-0-1:", b"T-0-3:", b"T-0-4:"]
    assert store.corrupt_records_skipped == 1
    only_bad = store.get_messages("T", 0, 2, 1, None)
    assert (only_bad.status, only_bad.next_begin_offset, len(only_bad.records)) == (GetStatus.FOUND, 4, 1)
    assert store.lookup_message(victim.phys_offset) is None


def _slave_of(open_store, tmp_path, master, **kwargs):
    slave = open_store(tmp_path / "slave", is_slave=True, **kwargs)
    # A fresh slave starts at the master's newest segment, as RocketMQ's HA does.
    start = master.max_phys_offset - master.max_phys_offset % SEGMENT_BYTES
    offset = start
    while offset < master.max_phys_offset:
        chunk = master.read_commitlog(offset, 32 * 1024)
        slave.append_commitlog(offset, chunk)
        offset += len(chunk)
    return slave


@pytest.mark.parametrize("offset_check_in_slave", [False, True])
def test_a_slave_never_moves_the_consumer_offset_unless_configured(open_store, tmp_path, offset_check_in_slave):
    master = open_store()
    put_many(master, 700, body_bytes=200)
    slave = _slave_of(open_store, tmp_path, master, offset_check_in_slave=offset_check_in_slave)
    low, high = slave.min_queue_offset("T", 0), slave.max_queue_offset("T", 0)
    assert 0 < low < high == 700

    def expect(request_offset, status, corrected):
        result = slave.get_messages("T", 0, request_offset, 32, None)
        assert result.status is status
        assert result.next_begin_offset == (corrected if offset_check_in_slave else request_offset)

    expect(0, GetStatus.OFFSET_TOO_SMALL, low)
    expect(high, GetStatus.OFFSET_OVERFLOW_ONE, high)
    expect(high + 50, GetStatus.OFFSET_OVERFLOW_BADLY, high)
    result = slave.get_messages("T", 9, 7, 32, None)
    assert (result.status, result.next_begin_offset) == (GetStatus.NO_MESSAGE_IN_QUEUE,
                                                         0 if offset_check_in_slave else 7)
    found = slave.get_messages("T", 0, low, 32, None)  # the scan's next offset is never corrected
    assert found.status is GetStatus.FOUND and found.next_begin_offset > low


def test_search_queue_offset_by_store_time(open_store, clock):
    store = open_store(config=WIDE)
    assert store.search_queue_offset("T", 0, clock.wall_ms()) == 0  # empty queue
    start_ms = clock.wall_ms()
    put_many(store, 50, clock=clock)  # stored at start, start+10, ...
    assert store.search_queue_offset("T", 0, start_ms + 120) == 12  # exact
    assert store.search_queue_offset("T", 0, start_ms + 123) == 12  # nearer the left
    assert store.search_queue_offset("T", 0, start_ms + 127) == 13  # nearer the right
    assert store.search_queue_offset("T", 0, start_ms + 125) == 12  # a tie goes left
    assert store.search_queue_offset("T", 0, start_ms - 1000) == 0  # before the first: the min offset
    assert store.search_queue_offset("T", 0, start_ms + 10**6) == 49  # after the last: the last message


def test_search_first_stored_at_or_after(open_store, clock):
    """What a reset by time needs: the first message at or after the time, never the nearer one."""
    store = open_store(config=WIDE)
    assert store.search_queue_offset("T", 0, clock.wall_ms(), at_or_after=True) == 0  # empty queue
    start_ms = clock.wall_ms()
    put_many(store, 50, clock=clock)  # stored at start, start+10, ...
    assert store.search_queue_offset("T", 0, start_ms + 120, at_or_after=True) == 12  # exact
    assert store.search_queue_offset("T", 0, start_ms + 121, at_or_after=True) == 13  # the left is nearer
    assert store.search_queue_offset("T", 0, start_ms + 129, at_or_after=True) == 13
    assert store.search_queue_offset("T", 0, start_ms - 1000, at_or_after=True) == 0
    assert store.search_queue_offset("T", 0, start_ms + 10**6, at_or_after=True) == 50  # after the last: max


def test_search_steps_over_unreadable_records(open_store, clock):
    store = open_store(config=WIDE)
    start_ms = clock.wall_ms()
    results = put_many(store, 20, clock=clock)
    for victim in results[5:9]:
        store._files.commitlog.segment_for(victim.phys_offset).buffer[victim.phys_offset + victim.size - 30] ^= 0xFF
    assert store.search_queue_offset("T", 0, start_ms + 60) == 4  # 5..8 unreadable; 4 is nearer than 9
    assert store.search_queue_offset("T", 0, start_ms + 80) == 9
    assert store.search_queue_offset("T", 0, start_ms + 150) == 15


@pytest.fixture
def store(tmp_path):
    config = StoreConfig(commitlog_segment_bytes=1024 * 1024, cq_units_per_file=1_000,
                         transfer_count_max_in_memory=1024, transfer_bytes_max_in_memory=4 * 1024 * 1024)
    store = MessageStore(tmp_path / "store", config)
    store.open()
    yield store
    store.close()


def _put(store, count, queue_id=0, body=b"payload"):
    for i in range(count):
        store.put_messages([MessageToStore("T", queue_id, body + str(i).encode())])


def test_a_pull_is_the_records_back_to_back_and_reads_repeat_exactly(store):
    _put(store, 5, queue_id=0)
    _put(store, 5, queue_id=1)  # interleaved: queue 0's records are not all adjacent
    _put(store, 5, queue_id=0)
    first = store.get_messages("T", 0, 0, 32, None)
    assert first.records_bytes == len(first.record_data) == sum(first.record_sizes)
    assert b"".join(first.records) == first.record_data and len(first.records) == 10
    again = store.get_messages("T", 0, 0, 32, None)  # checked again, served the same
    assert (again.record_data, again.next_begin_offset) == (first.record_data, 10)
    assert [m.body for m in decode_messages(again.record_data, broker_name="b", min_offset=0, max_offset=10,
                                            tags=None)][:2] == [b"payload0", b"payload1"]


def test_transfer_caps_come_from_the_config(tmp_path):
    store = MessageStore(tmp_path / "s", StoreConfig(commitlog_segment_bytes=1024 * 1024, cq_units_per_file=1_000))
    store.open()
    try:
        _put(store, 40)
        assert len(store.get_messages("T", 0, 0, 1024, None).record_sizes) == 32  # RocketMQ's in-memory cap
    finally:
        store.close()
    assert read_path.DEFAULT_TRANSFER_CAPS.count_in_memory == 32


def test_a_raised_transfer_cap_gives_whole_batches(store):
    _put(store, 300)
    assert len(store.get_messages("T", 0, 0, 1024, None).record_sizes) == 300
