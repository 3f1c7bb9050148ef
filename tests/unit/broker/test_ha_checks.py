"""Replication's record checks, the write gate and the restore dialog, without processes."""

from __future__ import annotations

import asyncio

from nodes.broker.ha_check import StoreErrors, check_chunk, damaged_record_bytes
from nodes.broker.ha_master import SlaveReport
from nodes.broker.ha_restore import WriteGate, collect_restore
from nodes.store.record import MessageToStore, blank_marker, encode_record

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
