"""The message index fed by dispatch's own pass (`Dispatcher.on_dispatched`): every record
dispatch places reaches its listener once, in commitlog order, on every dispatch path; the index
builds from it without walking the commitlog again, one header write per put, and a full disk in
the middle of a put resumes with exactly the keys that did not get in. Also the one record lookup
(`CommitLog.record_at`) the index's checks and the store's lookup share."""

from __future__ import annotations

import dataclasses
import os

import pytest

from nodes.common import constants as c
from nodes.common.errors import DiskFullError
from nodes.store import index_service
from nodes.store.commitlog import CommitLog
from nodes.store.dispatch import Dispatcher
from nodes.store.index_file import IndexFile
from nodes.store.index_service import KEY_KIND, UNIQ_KIND
from nodes.store.message_batch import encode_entry
from nodes.store.message_store import PutStatus
from nodes.store.record import index_fields
from nodes.store.record_batch import scan_batch_body

from .conftest import SEGMENT_BYTES, SMALL, msg
from .test_dispatch import Index

INDEXED = dataclasses.replace(SMALL, index_hash_slots=c.INDEX_HASH_SLOTS_TEST,
                              index_entries_per_file=c.INDEX_ENTRIES_PER_FILE_TEST)
TINY_FILES = dataclasses.replace(SMALL, index_hash_slots=4, index_entries_per_file=8)
HOSTS = {"born_host": ("10.1.2.3", 5555), "store_host": ("127.0.0.1", 10911)}


def keyed(i: int, body_bytes: int = 3000):
    return msg(queue_id=i % 2, body=bytes(body_bytes), properties={"KEYS": f"k{i}", "UNIQ_KEY": f"U{i}"})


def _log_across_segments(tmp_path, count=30):
    """`count` keyed records, 3000-byte bodies: from 22 on, more than one 64 KiB segment."""
    log = CommitLog(tmp_path / "log", SEGMENT_BYTES)
    results = []
    for i in range(count):
        results += log.append([keyed(i)], first_queue_offset=i // 2, store_timestamp_ms=1000 + i)
    assert len(log.segments) == (1 if count < 22 else 2)
    return log, results


def test_every_dispatch_path_hands_its_listener_each_record_once_in_order(tmp_path):
    log, results = _log_across_segments(tmp_path)
    expected = [(r.phys_offset, r.size, "T", i % 2, i // 2, 1000 + i, f"k{i}", f"U{i}") for i, r in enumerate(results)]

    heard_walk: list = []
    walker = Dispatcher(log, Index(tmp_path / "walked").queue_for)
    walker.on_dispatched = heard_walk.extend
    walker.dispatch_until(log.max_phys_offset)
    assert heard_walk == expected

    heard_checked: list = []
    replica = Dispatcher(log, Index(tmp_path / "checked").queue_for)
    replica.on_dispatched = heard_checked.extend
    for result in results:  # as a replica's record check hands them over, record by record
        data = log.read_bytes(result.phys_offset, result.size)
        checked = [(result.phys_offset, *index_fields(data, 0, result.size, result.phys_offset))]
        if not replica.dispatch_checked(result.phys_offset, checked):
            replica.dispatch_until(result.phys_offset + result.size)  # across a blank marker: the walk
    assert heard_checked == expected


def test_the_appenders_fast_path_yields_to_the_walk_when_it_cannot_name_the_properties(tmp_path):
    log, results = _log_across_segments(tmp_path, count=2)
    dispatcher = Dispatcher(log, Index(tmp_path / "cq").queue_for)
    heard: list = []
    dispatcher.on_dispatched = heard.extend
    first = results[0]
    units = [(first.phys_offset, first.size, 0)]
    end = first.phys_offset + first.size
    assert not dispatcher.dispatch_appended(first.phys_offset, end, "T", 0, 0, units, 1000)
    assert dispatcher.reput_from_phys_offset == first.phys_offset and heard == []
    assert dispatcher.dispatch_appended(first.phys_offset, end, "T", 0, 0, units, 1000,
                                        lambda: [("k0", "U0")])
    assert [r[0] for r in heard] == [first.phys_offset]


def test_a_scanned_batch_names_its_keys_as_decoding_would():
    entries = [{"KEYS": "a b", "UNIQ_KEY": "U1", "TAGS": "t"}, {}, {"UNIQ_KEY": "U3"}, {"XKEYS": "no", "KEYS": "k"},
               {"TAGS": "KEYS"}]
    blob = b"".join(encode_entry(b"x", 0, props) for props in entries)
    scanned = scan_batch_body(blob, SMALL.message_body_bytes_max)
    assert scanned.index_keys() == [(props.get("KEYS"), props.get("UNIQ_KEY")) for props in entries]
    plain = scan_batch_body(encode_entry(b"x", 0, {"TAGS": "t"}), SMALL.message_body_bytes_max)
    assert plain.index_keys() == [(None, None)]


def test_puts_are_indexed_from_dispatch_without_the_index_reading_a_record(open_store, monkeypatch):
    read_by_index = []

    def spy(*args):
        fields = index_fields(*args)
        if fields is not None:
            read_by_index.append(fields)
        return fields

    monkeypatch.setattr(index_service, "index_fields", spy)
    store = open_store(config=INDEXED)
    dispatcher = store._files.dispatcher
    assert dispatcher.on_dispatched == store.index.on_dispatched
    offsets = []
    for i in range(40):  # 3000-byte bodies: the commitlog rolls to new segments on the way
        result = store.put_messages([keyed(i)])
        assert result.status is PutStatus.PUT_OK
        offsets.append(result.appended[0].phys_offset)
    blob = b"".join(encode_entry(b"s" * 100, 0, {"KEYS": f"s{i} shared", "UNIQ_KEY": f"S{i}"}) for i in range(5))
    scanned = store.put_scanned(scan_batch_body(blob, SMALL.message_body_bytes_max), topic="T", queue_id=0,
                                born_timestamp_ms=1, **HOSTS)
    assert scanned.status is PutStatus.PUT_OK
    assert len(store._files.commitlog.segments) > 1
    assert read_by_index == []
    for i, phys_offset in enumerate(offsets):
        assert [r.phys_offset for r in store.lookup_by_key("T", f"k{i}", KEY_KIND, 5)] == [phys_offset]
        assert [r.phys_offset for r in store.lookup_by_key("T", f"U{i}", UNIQ_KIND, 5)] == [phys_offset]
    scanned_offsets = [a.phys_offset for a in scanned.appended]
    assert [r.phys_offset for r in store.lookup_by_key("T", "shared", KEY_KIND, 10)] == scanned_offsets[::-1]
    assert [r.phys_offset for r in store.lookup_by_key("T", "S3", UNIQ_KIND, 10)] == [scanned_offsets[3]]
    assert store.index.describe()["entries"] == 40 * 2 + 5 * 3  # each key once
    assert store.index.position == dispatcher.reput_from_phys_offset


def test_one_put_writes_an_index_header_once(open_store, monkeypatch):
    store = open_store(config=INDEXED)
    store.put_messages([keyed(0, 10)])  # the index file exists
    writes = []
    real = IndexFile._write_header

    def counting(self, *fields):
        writes.append(fields)
        real(self, *fields)

    monkeypatch.setattr(IndexFile, "_write_header", counting)
    result = store.put_messages([msg(body=b"b", properties={"KEYS": f"a{i} b{i}", "UNIQ_KEY": f"V{i}"})
                                 for i in range(50)])
    assert result.status is PutStatus.PUT_OK
    assert len(writes) == 1 and writes[0][5] == 1 + 2 + 150  # count: entry 0, the first put's 2, these 150
    assert [r.phys_offset for r in store.lookup_by_key("T", "b49", KEY_KIND, 5)] == [result.appended[49].phys_offset]


def test_a_full_disk_in_the_middle_of_a_put_resumes_with_only_the_missing_keys(open_store, monkeypatch):
    store = open_store(config=TINY_FILES)  # 7 entries per file
    store.put_messages([msg(body=b"x", properties={"KEYS": "a b c d e", "UNIQ_KEY": "U0"})])  # 6 entries

    def no_room(self, end_position):
        raise DiskFullError(f"no room in {self.path}")

    monkeypatch.setattr(IndexFile, "_allocate", no_room)
    result = store.put_messages([msg(body=b"1", properties={"KEYS": "x", "UNIQ_KEY": "U1"}),
                                 msg(body=b"2", properties={"KEYS": "y", "UNIQ_KEY": "U2"})])
    assert result.status is PutStatus.PUT_OK  # stored and dispatched; only the index waits
    assert store.index.stalled and store.disk_full
    first, second = (a.phys_offset for a in result.appended)
    assert [r.phys_offset for r in store.lookup_by_key("T", "x", KEY_KIND, 5)] == [first]  # the old file's last
    assert store.lookup_by_key("T", "U1", UNIQ_KIND, 5) == [] and store.lookup_by_key("T", "y", KEY_KIND, 5) == []
    assert store.index.position == first
    monkeypatch.undo()
    store.check_disk()
    assert not store.index.stalled
    for key, kind, phys_offset in [("x", KEY_KIND, first), ("U1", UNIQ_KIND, first), ("y", KEY_KIND, second),
                                   ("U2", UNIQ_KIND, second)]:
        assert [r.phys_offset for r in store.lookup_by_key("T", key, kind, 5)] == [phys_offset]
    assert store.index.describe()["entries"] == 10  # nothing twice


def test_a_replica_indexes_what_its_record_check_read(open_store, tmp_path):
    master = open_store(tmp_path / "master", config=INDEXED)
    slave = open_store(tmp_path / "slave", config=INDEXED, is_slave=True)
    results = [master.put_messages([keyed(i, 100)]).appended[0] for i in range(6)]
    data = master.read_commitlog(0, 1 << 20)
    checked = [(r.phys_offset, *index_fields(data, r.phys_offset, len(data), r.phys_offset)) for r in results]
    slave.append_commitlog(0, data, checked)
    for i, result in enumerate(results):
        assert [r.phys_offset for r in slave.lookup_by_key("T", f"k{i}", KEY_KIND, 5)] == [result.phys_offset]
    assert slave.index.describe()["entries"] == 12


def test_record_at_checks_framing_position_and_on_request_the_crc(open_store):
    store = open_store(config=INDEXED)
    appended = store.put_messages([msg(body=bytes(100), properties={"KEYS": f"k{i}"}) for i in range(2)]).appended
    phys_offset, size = appended[1].phys_offset, appended[1].size
    commitlog = store._files.commitlog
    assert commitlog.record_at(phys_offset).properties["KEYS"] == "k1"
    assert commitlog.record_at(phys_offset, size).phys_offset == phys_offset
    assert commitlog.record_at(phys_offset, size + 1) is None  # not the size its unit names
    assert commitlog.record_at(phys_offset + 4) is None  # inside a record
    assert commitlog.record_at(commitlog.max_phys_offset) is None  # nothing written there
    mapped = commitlog.segment_for(phys_offset)
    body_at = phys_offset - mapped.start_offset + 100  # a byte of the body
    mapped.buffer[body_at] ^= 0xFF
    assert commitlog.record_at(phys_offset) is None
    assert commitlog.record_at(phys_offset, check_crc=False).queue_offset == 1  # framing alone still holds
    assert store.lookup_message(phys_offset, size) is None
    assert store.index.verified_record(phys_offset) is None
    assert store.lookup_by_key("T", "k1", KEY_KIND, 5) == []
    assert store.lookup_message(appended[0].phys_offset, appended[0].size).properties["KEYS"] == "k0"


def test_entries_past_the_files_blocks_stop_at_the_last_that_fits(tmp_path, monkeypatch):
    index_file = IndexFile(tmp_path / "20260101000000000", 4, 200_000)
    assert index_file.put_entries([(1, 100, 1_000)]) == 1  # the entries get their first step of blocks
    fit = (index_file.allocated_position - index_file._entries_start) // c.INDEX_ENTRY_BYTES - 2
    assert 0 < fit < 100_000

    def enospc(fd, offset, length):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", enospc)
    with pytest.raises(DiskFullError):
        index_file.put_entries([(i % 7, 1_000 + i, 2_000) for i in range(fit + 50)])
    assert index_file.index_count == 2 + fit  # entry 0, the first, and every one the blocks hold
    assert index_file.header()[3] == 1_000 + fit - 1  # the header names the last one written
    assert index_file.lookup((fit - 1) % 7, 0, 2**62, 1) == [1_000 + fit - 1]
    index_file.close()
