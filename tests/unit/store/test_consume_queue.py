import pytest

from nodes.common import constants as c
from nodes.common.errors import InvariantViolation
from nodes.store.consume_queue import CQ_UNIT, ConsumeQueue

UNITS_PER_FILE = 16


def _queue(tmp_path, topic="T", queue_id=0):
    queue = ConsumeQueue(tmp_path / "consumequeue", topic, queue_id, UNITS_PER_FILE)
    queue.load()
    return queue


def _reopen(queue, tmp_path):
    queue.close()
    return _queue(tmp_path, queue.topic, queue.queue_id)


def test_units_land_at_their_queue_offsets_across_files(tmp_path):
    queue = _queue(tmp_path)
    for i in range(40):
        assert queue.put(i, i * 100, 100, i % 3)
    assert (queue.min_queue_offset, queue.max_queue_offset, queue.max_phys_end) == (0, 40, 4000)
    assert queue.unit_at(17) == (1700, 100, 17 % 3)
    directory = tmp_path / "consumequeue" / "T" / "0"
    assert sorted(p.name for p in directory.iterdir()) == [f"{n * UNITS_PER_FILE * 20:020d}" for n in range(3)]
    # read_units stops at the end of the one file holding the offset
    units = queue.read_units(10)
    assert len(units) == (UNITS_PER_FILE - 10) * 20
    assert CQ_UNIT.unpack_from(units) == (1000, 100, 1)
    assert len(queue.read_units(10, 60)) == 60
    assert queue.next_file_start(10) == 16 and queue.next_file_start(16) == 32
    queue.close()


def test_put_is_idempotent_for_units_already_written(tmp_path):
    queue = _queue(tmp_path)
    for i in range(5):
        queue.put(i, i * 100, 100, 0)
    assert not queue.put(2, 200, 100, 0)
    assert not queue.put(4, 400, 100, 0)
    assert queue.max_queue_offset == 5
    queue.close()


def test_a_gap_is_filled_with_hole_units(tmp_path):
    queue = _queue(tmp_path)
    queue.put(0, 0, 100, 0)
    queue.put(3, 500, 100, 0)
    assert queue.max_queue_offset == 4
    assert queue.unit_at(1) == (0, c.CQ_HOLE_SIZE_MARK, 0) == queue.unit_at(2)
    assert queue.unit_at(3) == (500, 100, 0)
    queue = _reopen(queue, tmp_path)
    assert (queue.min_queue_offset, queue.max_queue_offset, queue.max_phys_end) == (0, 4, 600)
    queue.close()


def test_a_queue_created_mid_stream_starts_at_its_first_record(tmp_path):
    queue = _queue(tmp_path)
    queue.put(37, 1000, 50, 0)
    assert (queue.min_queue_offset, queue.max_queue_offset) == (37, 38)
    directory = tmp_path / "consumequeue" / "T" / "0"
    assert [p.name for p in directory.iterdir()] == [f"{32 * 20:020d}"]  # only the file holding 37
    queue = _reopen(queue, tmp_path)
    assert (queue.min_queue_offset, queue.max_queue_offset) == (37, 38)
    queue.close()


def test_a_conflicting_or_invalid_unit_is_not_written(tmp_path):
    queue = _queue(tmp_path)
    queue.put(0, 0, 100, 0)
    queue.put(1, 100, 100, 0)
    assert not queue.put(1, 900, 100, 0)  # offset taken by another record
    assert queue.unit_at(1) == (100, 100, 0)
    with pytest.raises(InvariantViolation):
        queue.put(2, 1000, 0, 0)
    queue.close()


def test_truncate_after_phys_drops_units_at_or_past_the_end(tmp_path):
    queue = _queue(tmp_path)
    for i in range(20):
        queue.put(i, i * 100, 100, 0)
    assert queue.truncate_after_phys(1750) == 3  # records 17, 18, 19 end past 1750
    assert (queue.max_queue_offset, queue.max_phys_end) == (17, 1700)
    assert queue.truncate_after_phys(1700) == 0
    assert queue.put(17, 1700, 80, 0)
    queue = _reopen(queue, tmp_path)
    assert (queue.max_queue_offset, queue.max_phys_end) == (18, 1780)
    assert queue.truncate_after_phys(0) == 18
    assert (queue.min_queue_offset, queue.max_queue_offset) == (0, 0)
    queue.close()


def test_recovery_stops_at_the_first_invalid_unit(tmp_path):
    queue = _queue(tmp_path)
    for i in range(5):
        queue.put(i, i * 100, 100, 0)
    last = queue._files.last()
    last.buffer[5 * 20:5 * 20 + 8] = (600).to_bytes(8, "big")  # a torn unit: offset written, size not
    last.buffer[7 * 20:8 * 20] = CQ_UNIT.pack(800, 100, 0)  # junk after it
    queue = _reopen(queue, tmp_path)
    assert queue.max_queue_offset == 5
    assert queue._files.last().read(100, 100) == bytes(100)  # the junk is zeroed
    queue.close()


def test_correct_min_offset_skips_units_before_the_commitlog_start(tmp_path):
    queue = _queue(tmp_path)
    for i in range(6):
        queue.put(i, i * 100, 100, 0)
    queue.correct_min_offset(250)
    assert queue.min_queue_offset == 3
    queue.close()
