"""Restart and crash recovery: nothing acknowledged is lost, torn tails are cut, damage is
stepped over, consume queues always end up matching the commitlog."""

import dataclasses
import shutil
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.examples import examples

from nodes.common.clock import FakeClock
from nodes.common.errors import DataDirError
from nodes.store.message_store import GetStatus, MessageStore, PutStatus
from nodes.store.record import iter_records

from .conftest import SEGMENT_BYTES, SMALL, crash_copy, msg, put_many

QUEUES = (("T", 0), ("T", 1), ("U", 0))


def drain(store, topic, queue_id):
    """Every record a consumer gets walking the queue from its min to its max offset."""
    found = []
    offset = store.min_queue_offset(topic, queue_id)
    while offset < store.max_queue_offset(topic, queue_id):
        result = store.get_messages(topic, queue_id, offset, 32, None)
        assert result.status in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE), result.status
        assert result.next_begin_offset > offset
        found += [(r.queue_offset, r.body) for r in iter_records(b"".join(result.records))]
        offset = result.next_begin_offset
    return found


def fill(store, clock, rounds=250, step_ms=10):
    """Interleave three queues across several segments (250 rounds: ~4); returns
    {queue: [(queue_offset, body)]}."""
    expected = {q: [] for q in QUEUES}
    for i in range(rounds):
        for topic, queue_id in QUEUES:
            body = f"{topic}{queue_id}-{i}".encode().ljust(200 + i % 50, b"~")
            result = store.put_messages([msg(topic, queue_id, body)])
            assert result.status is PutStatus.PUT_OK
            expected[(topic, queue_id)].append((result.appended[0].queue_offset, body))
        clock.advance_ms(step_ms)
    return expected


def assert_holds(store, expected, *, except_offsets=()):
    for queue, records in expected.items():
        want = [r for r in records if (queue, r[0]) not in except_offsets]
        assert drain(store, *queue) == want, queue


def _damage(root, phys_offset, position_in_record, xor=0xFF):
    segment = root / "commitlog" / f"{phys_offset - phys_offset % SEGMENT_BYTES:020d}"
    with open(segment, "r+b") as f:
        f.seek(phys_offset % SEGMENT_BYTES + position_in_record)
        byte = f.read(1)[0]
        f.seek(-1, 1)
        f.write(bytes([byte ^ xor]))


def _locate(store, queue, queue_offset):
    phys_offset, size, _ = store._files.consume_queues[queue].unit_at(queue_offset)
    return phys_offset, size


def test_clean_restart_keeps_everything(open_store, clock, tmp_path):
    root = tmp_path / "store"
    store = open_store(root)
    expected = fill(store, clock)
    max_phys_offset = store.max_phys_offset
    assert (root / "abort").exists()
    store.close()
    assert not (root / "abort").exists()
    assert (root / "checkpoint").stat().st_size == 24

    store = open_store(root)
    assert store.max_phys_offset == max_phys_offset > 3 * SEGMENT_BYTES
    assert_holds(store, expected)
    result = store.put_messages([msg("T", 0, b"after")])
    assert result.appended[0].queue_offset == len(expected[("T", 0)])
    assert result.appended[0].phys_offset == max_phys_offset


def test_clean_restart_report(tmp_path, clock):
    store = MessageStore(tmp_path / "s", SMALL, clock=clock)
    store.open()
    fill(store, clock, rounds=50)
    end = store.max_phys_offset
    store.close()
    again = MessageStore(tmp_path / "s", SMALL, clock=clock)
    report = again.open()
    assert (report.clean_shutdown, report.commitlog_max_phys_offset, report.truncated_bytes, report.damaged_ranges,
            report.redispatched_records, report.consume_queues) == (True, end, 0, [], 0, 3)
    again.close()


def test_crash_recovery_keeps_everything(open_store, clock, tmp_path):
    store = open_store()
    expected = fill(store, clock)
    crashed = open_store(crash_copy(store, tmp_path / "crashed"))
    report = crashed._recovery
    assert not report.clean_shutdown
    assert report.redispatched_records > 0 and report.truncated_bytes == 0
    assert crashed.max_phys_offset == store.max_phys_offset
    assert_holds(crashed, expected)
    # and once more, crashing right after a recovery
    assert_holds(open_store(crash_copy(crashed, tmp_path / "again")), expected)


def test_crash_recovery_starts_at_the_checkpoint_segment(open_store, clock, tmp_path):
    store = open_store()
    expected = fill(store, clock, rounds=300, step_ms=50)  # 15 s of store time over ~5 segments
    store.flush()
    clock.advance_ms(10_000)
    for queue, records in fill(store, clock, rounds=30).items():
        expected[queue] += records
    total = sum(len(records) for records in expected.values())
    crashed = open_store(crash_copy(store, tmp_path / "crashed"))
    # The walk starts at a segment stored 3 s before the checkpoint, not at the first one.
    assert 0 < crashed._recovery.redispatched_records < total
    assert_holds(crashed, expected)


def test_consume_queues_behind_the_commitlog_are_caught_up(open_store, clock, tmp_path):
    store = open_store()
    expected = fill(store, clock, rounds=40)
    root = crash_copy(store, tmp_path / "crashed")
    # as if the reput had not yet indexed the last 5 records of T-0
    queue_file = root / "consumequeue" / "T" / "0" / f"{32 * 20:020d}"
    data = bytearray(queue_file.read_bytes())
    data[3 * 20:8 * 20] = bytes(100)
    queue_file.write_bytes(data)
    crashed = open_store(root)
    assert_holds(crashed, expected)


def test_a_torn_tail_is_truncated(open_store, clock, tmp_path):
    store = open_store()
    expected = fill(store, clock, rounds=60)
    last_phys, last_size = _locate(store, ("U", 0), 59)
    assert last_phys + last_size == store.max_phys_offset
    root = crash_copy(store, tmp_path / "crashed")
    segment = root / "commitlog" / f"{last_phys - last_phys % SEGMENT_BYTES:020d}"
    with open(segment, "r+b") as f:  # the write was cut short: only its first 100 bytes landed
        f.seek(last_phys % SEGMENT_BYTES + 100)
        f.write(bytes(last_size - 100))
    crashed = open_store(root)
    report = crashed._recovery
    assert report.truncated_bytes == 100 and report.damaged_ranges == []
    assert crashed.max_phys_offset == last_phys
    assert crashed.max_queue_offset("U", 0) == 59
    expected[("U", 0)].pop()
    assert_holds(crashed, expected)
    again = crashed.put_messages([msg("U", 0, b"retry")])
    assert (again.appended[0].queue_offset, again.appended[0].phys_offset) == (59, last_phys)


def test_a_torn_first_record_of_a_new_segment_is_truncated(open_store, tmp_path):
    store = open_store()
    while store.max_phys_offset < SEGMENT_BYTES - 2000:
        put_many(store, 1, body_bytes=900)
    roll = store.put_messages([msg(body=b"z" * 3000)]).appended[0]  # does not fit: blank marker + roll
    assert roll.phys_offset == SEGMENT_BYTES
    root = crash_copy(store, tmp_path / "crashed")
    _damage(root, roll.phys_offset, 2000)
    crashed = open_store(root)
    assert crashed.max_phys_offset == SEGMENT_BYTES  # the end of the first segment, blank included
    assert crashed.max_queue_offset("T", 0) == roll.queue_offset
    assert crashed.put_messages([msg()]).appended[0].phys_offset == SEGMENT_BYTES


@pytest.mark.parametrize("damage", ["body", "size", "magic"])
def test_a_damaged_record_in_the_middle_keeps_the_records_after_it(open_store, clock, tmp_path, damage):
    store = open_store()
    expected = fill(store, clock)
    victim_phys, victim_size = _locate(store, ("T", 1), 100)
    max_phys_offset = store.max_phys_offset
    root = crash_copy(store, tmp_path / "crashed")
    if damage == "body":
        _damage(root, victim_phys, 90)
    elif damage == "size":
        _damage(root, victim_phys, 1, xor=0x5A)  # total size now points far away
    else:
        _damage(root, victim_phys, 5)
    crashed = open_store(root)
    report = crashed._recovery
    assert report.truncated_bytes == 0
    assert report.damaged_ranges == [(victim_phys, victim_phys + victim_size)]
    assert crashed.max_phys_offset == max_phys_offset
    # everything else is where it was acknowledged; the damaged one is never handed out
    assert_holds(crashed, expected, except_offsets={(("T", 1), 100)})
    assert crashed.corrupt_records_skipped == 1
    assert crashed.stats()["damaged_ranges"] == [[victim_phys, victim_phys + victim_size]]


def test_damage_plus_lost_consume_queues_leaves_a_hole_at_the_damaged_offset(open_store, clock, tmp_path):
    store = open_store()
    expected = fill(store, clock)
    victim_phys, victim_size = _locate(store, ("T", 1), 100)
    root = crash_copy(store, tmp_path / "crashed")
    _damage(root, victim_phys, 90)
    shutil.rmtree(root / "consumequeue")
    crashed = open_store(root)
    assert crashed._recovery.damaged_ranges == [(victim_phys, victim_phys + victim_size)]
    assert crashed.max_queue_offset("T", 1) == len(expected[("T", 1)])
    assert_holds(crashed, expected, except_offsets={(("T", 1), 100)})
    assert crashed.corrupt_records_skipped == 0  # a hole, not a record: nothing to check


def test_a_size_pointing_into_unwritten_space_is_damage_not_a_torn_tail(open_store, clock, tmp_path):
    store = open_store()
    expected = fill(store, clock)
    victim_phys, victim_size = _locate(store, ("T", 0), 240)  # in the last segment
    segment_end = victim_phys - victim_phys % SEGMENT_BYTES + SEGMENT_BYTES
    assert store.max_phys_offset < segment_end - 100
    root = crash_copy(store, tmp_path / "crashed")
    segment = root / "commitlog" / f"{victim_phys - victim_phys % SEGMENT_BYTES:020d}"
    with open(segment, "r+b") as f:
        f.seek(victim_phys % SEGMENT_BYTES)
        f.write(struct.pack(">i", segment_end - victim_phys - 16))
    shutil.rmtree(root / "consumequeue")  # every record must be dispatched again, past the damage
    crashed = open_store(root)
    assert crashed._recovery.damaged_ranges == [(victim_phys, victim_phys + victim_size)]
    assert_holds(crashed, expected, except_offsets={(("T", 0), 240)})


def test_a_destroyed_blank_marker_keeps_the_next_segment(open_store, tmp_path, clock):
    store = open_store()
    expected = fill(store, clock, rounds=150)
    units = [_locate(store, queue, offset) for queue in QUEUES for offset in range(150)]
    blank_at = max(phys + size for phys, size in units if phys < SEGMENT_BYTES)  # after the first segment's last
    assert any(phys == SEGMENT_BYTES for phys, _ in units)  # the second segment starts with a record
    root = crash_copy(store, tmp_path / "crashed")
    _damage(root, blank_at, 5)  # the blank magic
    crashed = open_store(root)
    assert crashed._recovery.damaged_ranges == [(blank_at, SEGMENT_BYTES)]
    assert_holds(crashed, expected)


def test_consume_queues_deleted_entirely_are_rebuilt(open_store, clock, tmp_path):
    root = tmp_path / "store"
    store = open_store(root)
    expected = fill(store, clock)
    store.close()
    shutil.rmtree(root / "consumequeue")
    rebuilt = open_store(root)
    assert rebuilt._recovery.redispatched_records == 3 * 250
    assert_holds(rebuilt, expected)


def test_one_lost_consume_queue_is_rebuilt_even_beyond_the_recovery_window(open_store, clock, tmp_path):
    root = tmp_path / "store"
    store = open_store(root)
    expected = fill(store, clock, rounds=400)  # more than three segments: older ones are not walked
    assert len(store._files.commitlog.segments) > 4
    store.close()
    shutil.rmtree(root / "consumequeue" / "T" / "1")
    rebuilt = open_store(root)
    assert rebuilt.min_queue_offset("T", 1) == 0
    assert_holds(rebuilt, expected)
    assert rebuilt._recovery.redispatched_whole_log and rebuilt.store_errors == 1  # a recovery-anomaly


def test_a_data_dir_that_is_a_file_is_refused(tmp_path):
    path = tmp_path / "store"
    path.write_text("oops")
    with pytest.raises(DataDirError, match="is a file, not a directory"):
        MessageStore(path, SMALL).open()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "commitlog").write_text("oops")
    with pytest.raises(DataDirError, match="should be a directory"):
        MessageStore(tmp_path / "other", SMALL).open()


def test_a_missing_data_dir_is_created(tmp_path, clock):
    store = MessageStore(tmp_path / "a" / "b" / "store", SMALL, clock=clock)
    report = store.open()
    assert report.clean_shutdown and (tmp_path / "a" / "b" / "store" / "abort").exists()
    store.close()


def test_a_changed_segment_size_is_refused(open_store, tmp_path):
    root = tmp_path / "store"
    store = open_store(root)
    put_many(store, 5)
    store.close()
    with pytest.raises(DataDirError, match="segment size"):
        MessageStore(root, dataclasses.replace(SMALL, commitlog_segment_bytes=2 * SEGMENT_BYTES)).open()


def test_metadata_survives_restart(open_store, tmp_path):
    root = tmp_path / "store"
    store = open_store(root)
    store.metadata.put("consumer_offsets", "g@T@0", 42)
    store.close()
    assert open_store(root).metadata.get_all("consumer_offsets") == {"g@T@0": 42}


def test_checkpoint_layout(open_store, clock, tmp_path):
    root = tmp_path / "store"
    store = open_store(root)
    last = put_many(store, 3)[-1]
    store.flush()
    physic, logics, index = struct.unpack(">qqq", (root / "checkpoint").read_bytes())
    assert (physic, logics, index) == (last.store_timestamp_ms, last.store_timestamp_ms, 0)


@pytest.fixture(scope="module")
def crashed_source(tmp_path_factory):
    """A crashed store (abort file present) spanning several segments, and what it acknowledged:
    {queue: [(queue_offset, body, phys_offset, size)]}."""
    clock = FakeClock()
    store = MessageStore(tmp_path_factory.mktemp("live") / "store", SMALL, clock=clock)
    store.open()
    acked = {q: [] for q in QUEUES}
    for i in range(150):
        for topic, queue_id in QUEUES:
            body = f"{topic}{queue_id}-{i}".encode().ljust(200 + i % 50, b"~")
            (appended,) = store.put_messages([msg(topic, queue_id, body)]).appended
            acked[(topic, queue_id)].append((appended.queue_offset, body, appended.phys_offset, appended.size))
        clock.advance_ms(10)
    root = crash_copy(store, tmp_path_factory.mktemp("crashed") / "store")
    end = store.max_phys_offset
    store.close()
    return root, acked, end


@settings(max_examples=examples(12), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_damage_loses_only_the_records_it_touches(crashed_source, tmp_path_factory, data):
    source, acked, end = crashed_source
    start = data.draw(st.integers(0, end - 1), label="start")
    length = data.draw(st.integers(1, 16), label="length")
    rebuild = data.draw(st.booleans(), label="rebuild consume queues")
    root = tmp_path_factory.mktemp("damaged") / "store"
    shutil.copytree(source, root)
    for phys_offset in range(start, min(end, start + length)):
        _damage(root, phys_offset, 0, xor=0xA5)
    if rebuild:
        shutil.rmtree(root / "consumequeue")
    store = MessageStore(root, SMALL)
    store.open()
    try:
        for queue, records in acked.items():
            touched = [r for r in records if r[2] < start + length and start < r[2] + r[3]]
            want = [(r[0], r[1]) for r in records if r not in touched]
            got = drain(store, *queue)
            assert got == want, (queue, touched)
    finally:
        store.close()
