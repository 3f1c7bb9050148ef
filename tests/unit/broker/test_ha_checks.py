"""Replication's record checks, the write gate and the restore dialog, without processes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import nodes.store.dispatch as dispatch_module
from nodes.broker.ha_check import StoreErrors, check_chunk, damaged_record_bytes, whole_records_bytes
from nodes.broker.ha_master import SlaveReport
from nodes.broker.ha_restore import WriteGate, collect_restore, read_checked
from nodes.common.clock import FakeClock
from nodes.store.message_store import MessageStore, PutStatus
from nodes.store.record import MessageToStore, blank_marker, encode_record

from .conftest import DELAYS_MS, SMALL

SEGMENT = 64 * 1024


def _records(start: int, count: int, body: bytes = b"x" * 100) -> bytes:
    out = b""
    for i in range(count):
        out += encode_record(MessageToStore("T", 0, body), queue_offset=i, phys_offset=start + len(out),
                             store_timestamp_ms=1)
    return out


def test_whole_valid_records_pass_and_a_partial_one_asks_for_more():
    data = _records(1000, 3)
    assert check_chunk(data, 1000, SEGMENT).valid_bytes == len(data)
    cut = check_chunk(data[:-10], 1000, SEGMENT)
    one = len(data) // 3
    assert cut.valid_bytes == 2 * one and cut.bad_phys_offset is None and cut.needed_bytes == one


def test_the_walk_stops_at_a_flipped_byte_a_wrong_own_offset_and_zeros():
    data = bytearray(_records(0, 3))
    one = len(data) // 3
    data[one + 60] ^= 0xFF  # inside the second record
    flipped = check_chunk(bytes(data), 0, SEGMENT)
    assert (flipped.valid_bytes, flipped.bad_phys_offset) == (one, one)
    shifted = check_chunk(_records(0, 2), 500, SEGMENT)  # records claiming another position
    assert (shifted.valid_bytes, shifted.bad_phys_offset) == (0, 500)
    zeros = check_chunk(_records(0, 1) + b"\0" * 300, 0, SEGMENT)
    assert (zeros.valid_bytes, zeros.bad_phys_offset) == (one, one) and "magic" in zeros.reason


def test_a_blank_marker_must_end_its_segment():
    records = _records(SEGMENT - 2000, 1)
    at = SEGMENT - 2000 + len(records)
    good = records + blank_marker(SEGMENT - at) + b"\0" * (SEGMENT - at - 8)
    assert check_chunk(good, SEGMENT - 2000, SEGMENT).valid_bytes == len(good)
    short = records + blank_marker(SEGMENT - at - 16) + b"\0" * (SEGMENT - at - 8)
    assert check_chunk(short, SEGMENT - 2000, SEGMENT).bad_phys_offset == at


def test_bad_records_are_reported_once_per_phys_offset():
    events: list[dict] = []
    errors = StoreErrors(events.append, SEGMENT)
    data = bytearray(_records(SEGMENT, 2))
    data[200] ^= 0x01
    check = check_chunk(bytes(data), SEGMENT, SEGMENT)
    for _ in range(3):
        errors.bad_record(check, bytes(data), SEGMENT, "test")
    assert len(events) == 1
    event = events[0]
    assert (event["event"], event["kind"], event["phys_offset"]) == ("store-error", "bad-record", SEGMENT)
    assert event["file"] == "commitlog/00000000000000065536" and event["queue_id"] == 0


def test_the_write_gate_holds_writers_until_it_opens_or_its_wait_ends():
    async def scenario() -> list[str]:
        gate, done = WriteGate(), []

        async def write(tag: str) -> str:
            done.append(tag)
            return tag

        gate.close("restoring")
        waiting = asyncio.create_task(gate.guard(write)("held"))
        await asyncio.sleep(0.01)
        assert done == [] and not gate.is_open
        gate.open("restored")
        assert await waiting == "held"
        gate.close("again")
        await gate.open_after(10)  # the bound: open whatever happened
        assert gate.is_open and await gate.guard(write)("after") == "after"
        return done

    assert asyncio.run(scenario()) == ["held", "after"]


def test_a_restore_collects_checked_pieces_up_to_the_end_marker_or_a_bad_record():
    start = 4096
    first = _records(start, 2)
    second = _records(start + len(first), 2)

    async def feed(reports: list[SlaveReport]) -> list[tuple[int, bytes]]:
        async def gen():
            for r in reports:
                yield r
        return await collect_restore(gen(), start, SEGMENT, 1.0, StoreErrors(lambda _e: None, SEGMENT))

    ok = [SlaveReport(0), SlaveReport(9, data_phys_offset=start, data=first),  # a heartbeat first
          SlaveReport(9, data_phys_offset=start + len(first), data=second),
          SlaveReport(9, data_phys_offset=start + len(first) + len(second))]
    assert asyncio.run(feed(ok)) == [(start, first), (start + len(first), second)]
    bad = bytearray(second)
    bad[-5] ^= 0x10
    damaged = [SlaveReport(9, data_phys_offset=start, data=first),
               SlaveReport(9, data_phys_offset=start + len(first), data=bytes(bad))]
    half = len(second) // 2
    assert asyncio.run(feed(damaged)) == [(start, first), (start + len(first), second[:half])]
    assert asyncio.run(feed([SlaveReport(9, restore_check_failed=True)])) == []


def test_a_damaged_record_is_a_hole_only_when_a_valid_record_follows():
    data = bytearray(_records(0, 3))
    one = len(data) // 3
    data[60] ^= 0xFF  # the first record's body
    assert damaged_record_bytes(bytes(data), 0, SEGMENT) == one
    assert damaged_record_bytes(bytes(data[:one]), 0, SEGMENT) == 0  # nothing after it: maybe a torn end
    garbage = bytes(data[:one]) + b"\x5a" * 300
    assert damaged_record_bytes(garbage, 0, SEGMENT) == 0
    assert damaged_record_bytes(b"\0" * 500, 0, SEGMENT) == 0  # no size to trust


def _replica(root: Path, arrivals: list) -> MessageStore:
    store = MessageStore(root, SMALL, clock=FakeClock(), delay_levels_ms=DELAYS_MS, is_slave=True)
    store.open()
    store.on_arrival = lambda *arrival: arrivals.append(arrival)
    return store


def test_a_slave_indexes_the_records_its_check_read_as_a_walk_of_its_log_would(tmp_path, monkeypatch):
    """One pass: the fields the chunk check read feed dispatch (no second read of the records),
    with the same consume-queue units and arrivals as walking the appended bytes."""
    master = MessageStore(tmp_path / "master", SMALL, clock=FakeClock(), delay_levels_ms=DELAYS_MS)
    master.open()
    for i in range(900):  # several segments, so chunks end in blank markers
        properties = {"TAGS": f"t{i % 3}"} | ({"DELAY": "3"} if i % 50 == 0 else {})
        result = master.put_messages([MessageToStore("T", i % 4, f"m{i}".encode().ljust(700, b"."),
                                                     properties=properties)])
        assert result.status.name == "PUT_OK"
    segment_bytes = SMALL.commitlog_segment_bytes
    assert master.max_phys_offset > 2 * segment_bytes
    walks = {"count": 0}
    real_index_fields = dispatch_module.index_fields

    def counted(*args):
        fields = real_index_fields(*args)
        walks["count"] += fields is not None  # a record read again (a blank marker is always walked)
        return fields

    monkeypatch.setattr(dispatch_module, "index_fields", counted)
    checked_arrivals: list = []
    walked_arrivals: list = []
    checked, walked = _replica(tmp_path / "checked", checked_arrivals), _replica(tmp_path / "walked", walked_arrivals)
    try:
        while checked.max_phys_offset < master.max_phys_offset:
            at = checked.max_phys_offset
            chunk = master.read_commitlog(at, 7777)  # odd sizes: records split across chunks
            check = check_chunk(chunk, at, segment_bytes)
            assert check.valid_bytes > 0 and check.bad_phys_offset is None
            checked.append_commitlog(at, chunk[:check.valid_bytes], check.records)
        assert walks["count"] == 0  # every record was indexed from the check's fields
        while walked.max_phys_offset < master.max_phys_offset:
            at = walked.max_phys_offset
            walked.append_commitlog(at, master.read_commitlog(at, 7777))
        assert walks["count"] == 900
        assert checked_arrivals == walked_arrivals and len(checked_arrivals) == 900
        assert checked.stats()["reput_from_phys_offset"] == master.max_phys_offset
        for topic in master.topics():
            for queue_id in master.queue_ids(topic):
                count = master.max_queue_offset(topic, queue_id)
                assert checked.max_queue_offset(topic, queue_id) == count > 0
                units = [checked.queue_unit(topic, queue_id, q) for q in range(count)]
                assert units == [walked.queue_unit(topic, queue_id, q) for q in range(count)]
                assert units == [master.queue_unit(topic, queue_id, q) for q in range(count)]
    finally:
        for store in (master, checked, walked):
            store.close()


@pytest.mark.parametrize("damage", ["hole", "garbage"])
def test_checked_records_after_damage_dispatch_as_the_walk_does(tmp_path, damage):
    """A replica whose dispatch stepped over a damaged record, or waits at bytes it could not
    judge, ends the same whether the next chunk comes with the check's records or not."""
    data = bytearray(_records(0, 3))
    one = len(data) // 3
    if damage == "hole":
        data[60] ^= 0xFF  # the first record's body; valid records follow
    else:
        data[one - 20:] = b"\x5a" * (len(data) - one + 20)  # the first record's tail and all after
    more = _records(len(data), 2)
    check = check_chunk(more, len(data), SEGMENT)
    assert check.valid_bytes == len(more) and len(check.records) == 2
    outcomes = []
    for name, records in (("checked", check.records), ("walked", ())):
        arrivals: list = []
        store = _replica(tmp_path / name, arrivals)
        try:
            store.append_commitlog(0, bytes(data))
            store.append_commitlog(len(data), more, records)
            stats = store.stats()
            outcomes.append((arrivals, stats["reput_from_phys_offset"], stats["damaged_ranges"],
                             [store.queue_unit("T", 0, q) for q in range(store.max_queue_offset("T", 0))]))
        finally:
            store.close()
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][1] == len(data) + len(more)  # both walked past the damage to the new records


def test_whole_records_bytes_walks_the_framing_only():
    data = _records(0, 3)
    one = len(data) // 3
    assert whole_records_bytes(data) == len(data)
    assert whole_records_bytes(data[:-10]) == 2 * one  # a partial record is left for the next read
    assert whole_records_bytes(_records(0, 1) + blank_marker(500)) == one  # a blank is check_chunk's
    assert whole_records_bytes(b"\0" * 300) == 0


def _master(root: Path) -> MessageStore:
    store = MessageStore(root, SMALL, clock=FakeClock(), delay_levels_ms=DELAYS_MS)
    store.open()
    return store


def _put(store: MessageStore, count: int) -> None:
    result = store.put_messages([MessageToStore("T", 0, b"y" * 200, store_host=("127.0.0.1", 10911))
                                 for _ in range(count)])
    assert result.status is PutStatus.PUT_OK


def test_a_master_checks_every_record_it_did_not_put_itself_in_its_newest_segment(tmp_path):
    """What this process put into its newest segment goes out by its framing; recovered bytes,
    and a sealed segment's, are still checked record by record (damage there is caught)."""
    root = tmp_path / "store"
    store = _master(root)
    _put(store, 4)
    recovered_end = store.max_phys_offset
    store.close()
    store = _master(root)
    assert store.put_only_from_phys_offset == recovered_end
    _put(store, 4)
    one = (store.max_phys_offset - recovered_end) // 4
    # damage a recovered record and a record this process put, in the mapping itself
    segment = store._files.commitlog.segments[-1]
    segment.buffer[one + 100] ^= 0xFF
    segment.buffer[recovered_end + one + 100] ^= 0xFF
    data, check = read_checked(store, 0, 64 * 1024, SMALL.commitlog_segment_bytes)
    assert (len(data), check.bad_phys_offset) == (one, one)  # recovered bytes: checked
    data, check = read_checked(store, recovered_end, 64 * 1024, SMALL.commitlog_segment_bytes)
    assert len(data) == 4 * one and check.bad_phys_offset is None  # put here: framing only
    # once the segment is sealed, the same bytes are checked again
    while len(store._files.commitlog.segments) == 1:
        _put(store, 50)
    assert store.put_only_from_phys_offset == store._files.commitlog.segments[-1].start_offset
    data, check = read_checked(store, recovered_end, 64 * 1024, SMALL.commitlog_segment_bytes)
    assert (len(data), check.bad_phys_offset) == (one, recovered_end + one)
    store.close()


def test_a_raw_append_or_a_truncation_moves_the_put_only_start(tmp_path):
    store = _master(tmp_path / "store")
    _put(store, 2)
    assert store.put_only_from_phys_offset == 0
    end = store.max_phys_offset
    store.append_commitlog(end, _records(end, 2))
    assert store.put_only_from_phys_offset == store.max_phys_offset  # raw bytes are not ours
    _put(store, 1)
    store.truncate_to(end)
    assert store.put_only_from_phys_offset == end
    store.close()
