"""The message index: keys and client ids -> records, chains through shared slots, full files,
and what a restart after a kill keeps of it (never a phantom offset)."""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodes.common import constants as c
from nodes.common.errors import DiskFullError
from nodes.store.index_file import ENTRY, HEADER, SLOT, IndexFile
from nodes.store.index_service import KEY_KIND, UNIQ_KIND, key_hash
from nodes.store.message_store import MessageStore, PutStatus

from .conftest import SMALL, crash_copy, msg

INDEXED = dataclasses.replace(SMALL, index_hash_slots=c.INDEX_HASH_SLOTS_TEST,
                              index_entries_per_file=c.INDEX_ENTRIES_PER_FILE_TEST)
ONE_SLOT = dataclasses.replace(SMALL, index_hash_slots=1, index_entries_per_file=c.INDEX_ENTRIES_PER_FILE_TEST)
TINY_FILES = dataclasses.replace(SMALL, index_hash_slots=4, index_entries_per_file=8)


def put_keyed(store: MessageStore, keys: str, uniq: str, *, topic: str = "T", queue_id: int = 0,
              body: bytes = b"body") -> int:
    """Put one message with KEYS and UNIQ_KEY; returns its phys offset."""
    result = store.put_messages([msg(topic, queue_id, body, properties={"KEYS": keys, "UNIQ_KEY": uniq})])
    assert result.status is PutStatus.PUT_OK, result
    return result.appended[0].phys_offset


def phys_of(records) -> list[int]:
    return [r.phys_offset for r in records]


def index_files(root: Path) -> list[Path]:
    return sorted((root / c.INDEX_DIR).iterdir())


def test_lookup_by_each_key_and_by_uniq_key(open_store):
    store = open_store(config=INDEXED)
    first = put_keyed(store, "order-1 customer-7", "U1")
    second = put_keyed(store, "order-2 customer-7", "U2")
    put_keyed(store, "order-1", "U3", topic="Other")
    assert phys_of(store.lookup_by_key("T", "order-1", KEY_KIND, 10)) == [first]
    assert phys_of(store.lookup_by_key("T", "customer-7", KEY_KIND, 10)) == [second, first]  # newest first
    assert phys_of(store.lookup_by_key("T", "customer-7", KEY_KIND, 1)) == [second]
    assert phys_of(store.lookup_by_key("T", "U2", UNIQ_KIND, 10)) == [second]
    assert store.lookup_by_key("T", "U2", KEY_KIND, 10) == []  # a client id is not one of the KEYS
    assert store.lookup_by_key("T", "nope", KEY_KIND, 10) == []
    assert [r.topic for r in store.lookup_by_key("Other", "order-1", KEY_KIND, 10)] == ["Other"]


def test_time_range_filters_by_store_time(open_store, clock):
    store = open_store(config=INDEXED)
    early = put_keyed(store, "k", "U1")
    clock.advance_ms(5_000)
    late = put_keyed(store, "k", "U2")
    now = clock.wall_ms()
    assert phys_of(store.lookup_by_key("T", "k", KEY_KIND, 10, now - 1_000, now)) == [late]
    assert phys_of(store.lookup_by_key("T", "k", KEY_KIND, 10, 0, now - 4_000)) == [early]


def test_colliding_keys_share_one_chain_and_only_matches_come_back(open_store):
    store = open_store(config=ONE_SLOT)  # every key hashes to the one slot
    offsets = {f"k{i}": put_keyed(store, f"k{i}", f"U{i}") for i in range(40)}
    index_file = store.index.files[-1]
    assert index_file.header()[4] == 1  # one slot in use, 80 entries chained through it
    for key, phys_offset in offsets.items():
        assert phys_of(store.lookup_by_key("T", key, KEY_KIND, 10)) == [phys_offset]


def test_index_file_chain_keeps_every_entry_of_a_slot(tmp_path):
    index_file = IndexFile(tmp_path / "20260101000000000", 2, 16)
    for i in range(6):  # hashes 1, 3, 5 ... all land in slot 1
        assert index_file.put(2 * i + 1, 1000 + i, 1_000_000 + i)
    assert index_file.lookup(5, 0, 2**62, 10) == [1002]
    assert index_file.lookup(7, 0, 2**62, 10) == [1003]
    assert index_file.lookup(2, 0, 2**62, 10) == []  # the other slot is empty
    index_file.close()


def test_a_full_file_rolls_to_the_next_and_old_keys_stay_findable(open_store, tmp_path):
    store = open_store(config=TINY_FILES)  # 7 entries per file: a message with one key and a uniq id is 2
    offsets = [put_keyed(store, f"key-{i}", f"U{i}") for i in range(20)]
    assert len(index_files(tmp_path / "store")) == 6  # 40 entries, 7 per file
    assert [f.is_full for f in store.index.files] == [True] * 5 + [False]
    for i, phys_offset in enumerate(offsets):
        assert phys_of(store.lookup_by_key("T", f"key-{i}", KEY_KIND, 5)) == [phys_offset]
        assert phys_of(store.lookup_by_key("T", f"U{i}", UNIQ_KIND, 5)) == [phys_offset]


def test_a_clean_restart_indexes_nothing_twice(open_store, tmp_path):
    root = tmp_path / "store"
    store = open_store(root, config=INDEXED)
    phys_offset = put_keyed(store, "a b c", "U1")
    entries = store.index.describe()["entries"]
    store.close()
    again = open_store(root, config=INDEXED)
    assert again.index.describe()["entries"] == entries == 4
    assert phys_of(again.lookup_by_key("T", "b", KEY_KIND, 10)) == [phys_offset]


def test_torn_header_after_a_crash_is_rebuilt_from_the_commitlog(open_store, tmp_path):
    store = open_store(config=TINY_FILES)
    offsets = [put_keyed(store, f"key-{i}", f"U{i}") for i in range(10)]  # three files
    crashed = crash_copy(store, tmp_path / "crashed")
    files = index_files(crashed)
    with open(files[1], "r+b") as f:  # a garbled header in the middle file
        f.write(HEADER.pack(-5, 7, 99, 3, 1_000_000, 2**31 - 1))
    again = open_store(crashed, config=TINY_FILES)
    assert again._files.index_load.files_dropped == 2  # it and the file after it
    for i, phys_offset in enumerate(offsets):
        assert phys_of(again.lookup_by_key("T", f"key-{i}", KEY_KIND, 5)) == [phys_offset]
        assert phys_of(again.lookup_by_key("T", f"U{i}", UNIQ_KIND, 5)) == [phys_offset]
    assert again.index.describe()["entries"] == 20  # rebuilt, nothing twice


def test_an_index_ahead_of_the_recovered_commitlog_never_returns_a_phantom(open_store, tmp_path):
    store = open_store(config=INDEXED)
    kept = put_keyed(store, "kept", "U1")
    lost = put_keyed(store, "lost", "U2")
    crashed = crash_copy(store, tmp_path / "crashed")
    # the lost record's bytes never reached the disk: recovery cuts the commitlog before it
    segment = sorted((crashed / "commitlog").iterdir())[0]
    with open(segment, "r+b") as f:
        f.seek(lost)
        f.write(bytes(200))
    again = open_store(crashed, config=INDEXED)
    assert again._files.index_load.entries_dropped == 2
    assert again.lookup_by_key("T", "lost", KEY_KIND, 10) == []
    # a new message takes the same phys offset; the old key must not find it
    reused = put_keyed(again, "fresh", "U3")
    assert reused == lost
    assert again.lookup_by_key("T", "lost", KEY_KIND, 10) == []
    assert phys_of(again.lookup_by_key("T", "fresh", KEY_KIND, 10)) == [reused]
    assert phys_of(again.lookup_by_key("T", "kept", KEY_KIND, 10)) == [kept]


def test_an_entry_pointing_at_another_message_is_filtered(open_store):
    store = open_store(config=INDEXED)
    real = put_keyed(store, "real", "U1")
    other = put_keyed(store, "other", "U2")
    # a stale entry: key "ghost"'s hash, pointing at the record of "other"
    store.index.files[-1].put(key_hash("T", "ghost"), other, 1)
    assert store.index.files[-1].lookup(key_hash("T", "ghost"), 0, 2**62, 10) == [other]
    assert store.lookup_by_key("T", "ghost", KEY_KIND, 10) == []
    assert phys_of(store.lookup_by_key("T", "real", KEY_KIND, 10)) == [real]


def test_a_kill_between_entry_and_header_leaves_the_chain_whole(open_store, tmp_path):
    store = open_store(config=ONE_SLOT)
    offsets = [put_keyed(store, f"k{i}", f"U{i}") for i in range(3)]
    crashed = crash_copy(store, tmp_path / "crashed")
    path = index_files(crashed)[-1]
    slots, count = 1, store.index.files[-1].index_count
    entries_start = c.INDEX_HEADER_BYTES + slots * c.INDEX_SLOT_BYTES
    with open(path, "r+b") as f:  # the next entry and its slot written, the header not yet
        f.seek(entries_start + count * c.INDEX_ENTRY_BYTES)
        f.write(ENTRY.pack(key_hash("T", "never"), 10**9, 0, count - 1))
        f.seek(c.INDEX_HEADER_BYTES)
        f.write(SLOT.pack(count))
    again = open_store(crashed, config=ONE_SLOT)
    for i, phys_offset in enumerate(offsets):
        assert phys_of(again.lookup_by_key("T", f"k{i}", KEY_KIND, 10)) == [phys_offset]
    later = put_keyed(again, "k9", "U9")
    assert phys_of(again.lookup_by_key("T", "k9", KEY_KIND, 10)) == [later]
    assert phys_of(again.lookup_by_key("T", "k0", KEY_KIND, 10)) == [offsets[0]]


def test_a_replica_builds_its_own_index(open_store, tmp_path):
    master = open_store(tmp_path / "master", config=INDEXED)
    slave = open_store(tmp_path / "slave", config=INDEXED, is_slave=True)
    offsets = [put_keyed(master, f"k{i}", f"U{i}") for i in range(5)]
    data = master.read_commitlog(0, 1 << 20)
    slave.append_commitlog(0, data)
    for i, phys_offset in enumerate(offsets):
        assert phys_of(slave.lookup_by_key("T", f"k{i}", KEY_KIND, 10)) == [phys_offset]
    slave.truncate_to(offsets[3])  # the replica cuts its log: the index forgets what it cut
    assert slave.lookup_by_key("T", "k3", KEY_KIND, 10) == []
    assert phys_of(slave.lookup_by_key("T", "k2", KEY_KIND, 10)) == [offsets[2]]


def test_a_full_disk_stalls_the_index_not_the_put(open_store, monkeypatch):
    store = open_store(config=TINY_FILES)
    put_keyed(store, "a b c d e f", "U0")  # 7 entries: the first file is full

    def no_room(self, end_position):
        raise DiskFullError(f"no room in {self.path}")

    monkeypatch.setattr(IndexFile, "_allocate", no_room)
    stuck = store.put_messages([msg("T", 0, b"x", properties={"KEYS": "stuck", "UNIQ_KEY": "U9"})])
    assert stuck.status is PutStatus.PUT_OK
    assert store.index.stalled and store.disk_full
    assert store.lookup_by_key("T", "stuck", KEY_KIND, 10) == []
    monkeypatch.undo()
    store.check_disk()  # finds room: the walk resumes
    assert not store.index.stalled
    assert phys_of(store.lookup_by_key("T", "stuck", KEY_KIND, 10)) == [stuck.appended[0].phys_offset]
    assert len(store.lookup_by_key("T", "U9", UNIQ_KIND, 10)) == 1


def test_a_disabled_index_answers_nothing(open_store, tmp_path):
    store = open_store(config=dataclasses.replace(INDEXED, message_index_enable=False))
    put_keyed(store, "k", "U1")
    assert store.lookup_by_key("T", "k", KEY_KIND, 10) == []
    assert not (tmp_path / "store" / c.INDEX_DIR).exists()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys=st.lists(st.lists(st.sampled_from("abcdefgh"), min_size=0, max_size=3), min_size=1, max_size=40),
       slots=st.integers(1, 8), entries=st.integers(4, 12))
def test_every_lookup_returns_exactly_the_messages_with_that_key(tmp_path_factory, keys, slots, entries):
    config = dataclasses.replace(SMALL, index_hash_slots=slots, index_entries_per_file=entries)
    store = MessageStore(tmp_path_factory.mktemp("prop") / "store", config)
    store.open()
    try:
        expected: dict[str, list[int]] = {}
        for i, message_keys in enumerate(keys):
            phys_offset = put_keyed(store, " ".join(message_keys), f"U{i}")
            for key in set(message_keys):
                expected.setdefault(key, []).insert(0, phys_offset)
        for key in "abcdefgh":
            assert phys_of(store.lookup_by_key("T", key, KEY_KIND, 1000)) == expected.get(key, [])
    finally:
        store.close()


def test_key_hash_is_non_negative_and_topic_scoped():
    assert key_hash("T", "k") != key_hash("U", "k")
    assert all(0 <= key_hash("T", f"k{i}") < 2**31 for i in range(1000))


@pytest.mark.parametrize("count", [0, 9999])
def test_header_problem_names_an_impossible_count(tmp_path, count):
    index_file = IndexFile(tmp_path / "20260101000000000", 4, 8)
    HEADER.pack_into(index_file._mm, 0, 0, 0, 0, 0, 0, count)
    assert "index_count" in index_file.header_problem()
    index_file.close()


def test_header_unpacks_as_written(tmp_path):
    index_file = IndexFile(tmp_path / "20260101000000000", 4, 8)
    index_file.put(3, 500, 2_000)
    index_file.put(7, 900, 5_500)
    assert index_file.header() == (2_000, 5_500, 500, 900, 1, 3)
    assert struct.unpack(">iqii", index_file._mm[96:116]) == (7, 900, 3, 1)  # entry 2: diff 3 s, prev entry 1
    index_file.close()


def test_a_cut_reaching_back_into_an_older_file_drops_its_tail_too(open_store, tmp_path):
    store = open_store(config=TINY_FILES)
    offsets = [put_keyed(store, f"key-{i}", f"U{i}") for i in range(6)]  # 12 entries: files of 7 and 5
    crashed = crash_copy(store, tmp_path / "crashed")
    segment = sorted((crashed / "commitlog").iterdir())[0]
    with open(segment, "r+b") as f:  # recovery keeps the first two records only
        f.seek(offsets[2])
        f.write(bytes(offsets[-1] + 1000 - offsets[2]))
    again = open_store(crashed, config=TINY_FILES)
    assert again._files.index_load.entries_dropped == 8 and again._files.index_load.files_dropped == 1
    assert again.index.describe()["entries"] == 4
    for i in range(2, 6):
        assert again.lookup_by_key("T", f"key-{i}", KEY_KIND, 5) == []
    fresh = [put_keyed(again, f"new-{i}", f"N{i}") for i in range(3)]
    assert fresh[0] == offsets[2]
    for i, phys_offset in enumerate(fresh):
        assert phys_of(again.lookup_by_key("T", f"new-{i}", KEY_KIND, 5)) == [phys_offset]
    assert phys_of(again.lookup_by_key("T", "key-1", KEY_KIND, 5)) == [offsets[1]]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys=st.lists(st.sampled_from("abcd"), min_size=2, max_size=30), cut=st.floats(0, 1),
       later=st.lists(st.sampled_from("abcd"), max_size=5))
def test_after_a_cut_lookups_return_exactly_the_surviving_and_later_messages(tmp_path_factory, keys, cut, later):
    """Whatever the commitlog's recovered end, no lookup shows a message recovery cut away, and
    every kept or later message is found exactly once."""
    root = tmp_path_factory.mktemp("cut")
    store = MessageStore(root / "store", TINY_FILES)
    store.open()
    sent = [(key, put_keyed(store, key, f"U{i}")) for i, key in enumerate(keys)]
    crashed = crash_copy(store, root / "crashed")
    store.close()
    keep = int(len(sent) * cut)
    if keep < len(sent):
        segment = sorted((crashed / "commitlog").iterdir())[0]
        with open(segment, "r+b") as f:
            f.seek(sent[keep][1])
            f.write(bytes(sent[-1][1] + 1000 - sent[keep][1]))
    again = MessageStore(crashed, TINY_FILES)
    again.open()
    try:
        survivors = sent[:keep] + [(key, put_keyed(again, key, f"L{i}")) for i, key in enumerate(later)]
        for key in "abcd":
            expected = [phys_offset for k, phys_offset in reversed(survivors) if k == key]
            assert phys_of(again.lookup_by_key("T", key, KEY_KIND, 1000)) == expected
    finally:
        again.close()
