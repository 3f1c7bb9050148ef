"""A record damaged on disk under a running store: `faults.corrupt_sealed_record` names it, every
pull steps over it as a hole and reports one `bad-record`, and the read-skip-crc switch serves
it instead."""

from __future__ import annotations

import dataclasses
import json
import random

from nodes.common.clock import FakeClock
from nodes.store import faults, record
from nodes.store.message_store import MessageStore
from nodes.store.record import decode_record, encode_record

from .conftest import SMALL, crash_copy, msg, put_many


def _open(root, events, config=SMALL):
    store = MessageStore(root, config, clock=FakeClock(), reporter=events.append)
    store.open()
    return store


def _bad_records(events):
    return [e for e in events if e["event"] == "store-error" and e["kind"] == "bad-record"]


def _fill(store):
    """Enough 1 KiB messages over two queues to seal the first segments."""
    sent = {}
    for queue_id in (0, 1):
        for appended in put_many(store, 80, queue_id=queue_id, body_bytes=1000):
            sent[(queue_id, appended.queue_offset)] = appended
    return sent


def test_no_sealed_segment_no_corruption(open_store):
    store = open_store()
    put_many(store, 3)
    assert faults.corrupt_sealed_record(store.root, random.Random(1)) is None


def test_a_corrupted_record_is_a_hole_every_time_and_is_reported_once(tmp_path):
    events: list = []
    store = _open(tmp_path / "store", events)
    try:
        sent = _fill(store)
        before = store.get_messages("T", 0, 0, 32, None)  # read (and checked) once before the damage
        done = faults.corrupt_sealed_record(store.root, random.Random(5))
        assert done is not None and done["file"].startswith("commitlog/") and 1 <= done["bytes"] <= 4
        victim = sent[(done["queue_id"], done["queue_offset"])]
        assert victim.phys_offset == done["phys_offset"] and done["topic"] == "T"
        segment_starts = [int(p.name) for p in (store.root / "commitlog").iterdir()]
        assert done["phys_offset"] < max(segment_starts)  # a sealed segment, not the newest

        for _ in range(2):  # a re-read checks again: the damage is never served
            offset, served = 0, {}
            while offset < store.max_queue_offset("T", done["queue_id"]):
                result = store.get_messages("T", done["queue_id"], offset, 32, None)
                for data in result.records:
                    record = decode_record(data)  # raises on a bad CRC
                    served[record.queue_offset] = record
                offset = result.next_begin_offset
            assert done["queue_offset"] not in served
            assert len(served) == 79  # every other message, at its own offset
        [event] = _bad_records(events)
        assert (event["phys_offset"], event["queue_offset"], event["queue_id"]) == (
            done["phys_offset"], done["queue_offset"], done["queue_id"])
        assert before.record_sizes  # the first read served the record while it was intact
    finally:
        store.close()


def test_corruption_is_deterministic_for_a_seed(open_store, tmp_path):
    store = open_store()
    _fill(store)
    one, two = crash_copy(store, tmp_path / "one"), crash_copy(store, tmp_path / "two")
    assert faults.corrupt_sealed_record(one, random.Random(9)) == faults.corrupt_sealed_record(two, random.Random(9))
    for path in sorted((one / "commitlog").iterdir()):
        assert path.read_bytes() == (two / "commitlog" / path.name).read_bytes()


def test_the_read_skip_crc_switch_serves_the_damaged_record(tmp_path):
    events: list = []
    store = _open(tmp_path / "store", events, dataclasses.replace(SMALL, read_skip_crc=True))
    try:
        sent = _fill(store)
        done = faults.corrupt_sealed_record(store.root, random.Random(5))
        victim = sent[(done["queue_id"], done["queue_offset"])]
        result = store.get_messages("T", done["queue_id"], done["queue_offset"], 1, None)
        assert result.record_sizes == [victim.size]  # served, although its CRC no longer matches
        record = decode_record(result.record_data, check_crc=False)
        assert record.body != f"T-{done['queue_id']}-{done['queue_offset']}:".encode().ljust(1000, b".")
        assert not _bad_records(events)
    finally:
        store.close()


def test_dispatch_reports_bytes_it_steps_over_once(tmp_path):
    events: list = []
    store = MessageStore(tmp_path / "slave", SMALL, clock=FakeClock(), is_slave=True, reporter=events.append)
    store.open()
    try:
        garbage = b"\x01" + random.Random(3).randbytes(199)
        record = encode_record(msg("T", 0, b"after the damage"), queue_offset=0, phys_offset=200,
                               store_timestamp_ms=1)
        store.append_commitlog(0, garbage + record)  # a replica copying bytes that are no record
        assert store.max_queue_offset("T", 0) == 1  # the record after them is indexed
        [event] = _bad_records(events)
        assert (event["phys_offset"], event["bytes"], event["file"]) == (0, 200, "commitlog/00000000000000000000")
        assert store.store_errors == 1
    finally:
        store.close()


def test_the_command_line_prints_what_it_did(open_store, tmp_path, capsys):
    store = open_store()
    _fill(store)
    copy = crash_copy(store, tmp_path / "copy")
    assert faults.main(["corrupt", str(copy), "--seed", "4"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == faults.corrupt_sealed_record(crash_copy(store, tmp_path / "again"), random.Random(4))
    assert faults.main(["power-loss", str(copy), "--seed", "4"]) == 0
    assert set(json.loads(capsys.readouterr().out)) == {"commitlog", "consume_queues"}
    assert faults.main(["power-loss", str(tmp_path), "--seed", "4"]) == 2  # not a store directory


def test_a_record_damaged_after_its_full_check_is_stepped_over_on_the_next_read(tmp_path):
    """The re-read of checked bytes (the scan's inlined body check) still catches a flipped body
    byte, a flipped magic and a record that no longer sits at its own offset."""
    events: list = []
    store = _open(tmp_path / "store", events)
    try:
        sent = _fill(store)
        first = store.get_messages("T", 0, 0, 16, None)  # the full check, remembered as checked
        assert len(first.record_sizes) == 16
        damage = {3: record.HEADER.size + 10, 7: 5, 11: record.PHYS_OFFSET_POS + 7}  # body, magic, phys offset
        for queue_offset, at in damage.items():
            phys_offset = sent[(0, queue_offset)].phys_offset
            segment_start = phys_offset - phys_offset % SMALL.commitlog_segment_bytes
            with open(store.root / "commitlog" / f"{segment_start:020d}", "r+b") as f:
                f.seek(phys_offset - segment_start + at)
                byte = f.read(1)
                f.seek(-1, 1)
                f.write(bytes([byte[0] ^ 0xFF]))
        again = store.get_messages("T", 0, 0, 16, None)
        served = [decode_record(data).queue_offset for data in again.records]
        assert served == [q for q in range(16) if q not in damage]
        assert store.corrupt_records_skipped == len(damage)
        assert sorted(e["queue_offset"] for e in _bad_records(events)) == sorted(damage)
    finally:
        store.close()


def test_the_scans_re_check_catches_what_body_checks_catches(tmp_path):
    """The scan inlines read_check.body_checks: every byte that function guards (size, magic, body
    CRC, own offset, body), flipped after the record's full check, makes the scan step over it,
    and the record is served again once the byte is back."""
    events: list = []
    store = _open(tmp_path / "store", events)
    try:
        [appended] = put_many(store, 1, body_bytes=200)
        assert len(store.get_messages("T", 0, 0, 1, None).record_sizes) == 1  # fully checked once
        phys_offset = appended.phys_offset
        segment_start = phys_offset - phys_offset % SMALL.commitlog_segment_bytes
        guarded = [*range(0, 12), *range(28, 36), *range(84, record.HEADER.size + 200)]
        with open(store.root / "commitlog" / f"{segment_start:020d}", "r+b") as f:
            for position in guarded:
                at = phys_offset - segment_start + position
                f.seek(at)
                original = f.read(1)[0]
                for value in (original ^ 0x10, original):
                    f.seek(at)
                    f.write(bytes([value]))
                    f.flush()
                    served = len(store.get_messages("T", 0, 0, 1, None).record_sizes)
                    assert served == (1 if value == original else 0), position
        assert store.corrupt_records_skipped == len(guarded)
    finally:
        store.close()
