import itertools
import struct

import pytest

from nodes.common import constants as c
from nodes.common.errors import StoreError
from nodes.store.commitlog import CommitLog
from nodes.store.record import RecordKind, decode_record

from .conftest import SEGMENT_BYTES, msg


def _fill(log: CommitLog, count: int, body_bytes: int = 1000) -> list:
    results = []
    for i in range(count):
        results += log.append([msg(body=bytes([i % 256]) * body_bytes)], first_queue_offset=i,
                              store_timestamp_ms=1000 + i)
    return results


def test_records_never_cross_a_segment_end(tmp_path):
    log = CommitLog(tmp_path / "commitlog", SEGMENT_BYTES)
    results = _fill(log, 200)
    assert len(log.segments) > 2
    for result in results:
        assert result.phys_offset // SEGMENT_BYTES == (result.phys_offset + result.size - 1) // SEGMENT_BYTES
        record = decode_record(log.read(result.phys_offset, result.size))
        assert (record.phys_offset, record.queue_offset) == (result.phys_offset, result.queue_offset)
    # each full segment ends with the blank marker claiming exactly the rest, at least 8 bytes
    for segment in log.segments[:-1]:
        ends = [r.phys_offset + r.size for r in results if segment.start_offset <= r.phys_offset < segment.end_offset]
        blank_at = max(ends)
        remaining, magic = struct.unpack_from(">iI", segment.buffer, blank_at - segment.start_offset)
        assert magic == c.BLANK_MAGIC
        assert remaining == segment.end_offset - blank_at >= c.END_FILE_MIN_BLANK_BYTES
        assert log.check_at(blank_at) == (RecordKind.BLANK, remaining)
    assert results[-1].offset_msg_id.endswith(f"{results[-1].phys_offset:016X}")
    log.close()


def test_a_batch_is_one_contiguous_write(tmp_path):
    log = CommitLog(tmp_path / "commitlog", SEGMENT_BYTES)
    _fill(log, 60)  # close to a segment end
    batch = log.append([msg(body=b"x" * 3000) for _ in range(5)], first_queue_offset=60, store_timestamp_ms=5)
    assert [r.queue_offset for r in batch] == [60, 61, 62, 63, 64]
    for before, after in itertools.pairwise(batch):
        assert after.phys_offset == before.phys_offset + before.size
    assert batch[0].phys_offset // SEGMENT_BYTES == batch[-1].phys_offset // SEGMENT_BYTES
    with pytest.raises(ValueError, match="do not fit"):
        log.append([msg(body=b"x" * 10_000) for _ in range(7)], first_queue_offset=65, store_timestamp_ms=5)
    log.close()


def test_raw_bytes_copy_reproduces_the_log_exactly(tmp_path):
    master = CommitLog(tmp_path / "m", SEGMENT_BYTES)
    _fill(master, 150, body_bytes=900)
    replica = CommitLog(tmp_path / "r", SEGMENT_BYTES)
    while replica.max_phys_offset < master.max_phys_offset:
        chunk = master.read_bytes(replica.max_phys_offset, 32 * 1024)
        assert chunk
        start = replica.max_phys_offset
        assert start // SEGMENT_BYTES == (start + len(chunk) - 1) // SEGMENT_BYTES  # never crosses a segment
        replica.append_bytes(start, chunk)
    assert replica.max_phys_offset == master.max_phys_offset
    for m, r in zip(master.segments, replica.segments, strict=True):
        assert m.start_offset == r.start_offset
        assert m.buffer[:] == r.buffer[:]
    assert master.read_bytes(master.max_phys_offset, 100) == b""
    master.close()
    replica.close()


def test_append_bytes_must_continue_the_log(tmp_path):
    log = CommitLog(tmp_path / "commitlog", SEGMENT_BYTES)
    with pytest.raises(StoreError, match="segment boundary"):
        log.append_bytes(10, b"abc")
    log.append_bytes(2 * SEGMENT_BYTES, b"abc")  # an empty replica starts at the master's newest segment
    assert (log.min_phys_offset, log.max_phys_offset) == (2 * SEGMENT_BYTES, 2 * SEGMENT_BYTES + 3)
    with pytest.raises(StoreError, match="ends at"):
        log.append_bytes(2 * SEGMENT_BYTES, b"abc")
    with pytest.raises(StoreError, match="crosses"):
        log.append_bytes(log.max_phys_offset, bytes(SEGMENT_BYTES))
    log.close()


def test_find_valid_resynchronises_after_garbage(tmp_path):
    log = CommitLog(tmp_path / "commitlog", SEGMENT_BYTES)
    results = _fill(log, 5)
    segment = log.segments[0]
    victim = results[1]
    segment.buffer[victim.phys_offset + 4] ^= 0xFF  # break its magic
    assert log.check_at(victim.phys_offset)[0] is RecordKind.CORRUPT
    assert log.find_valid(victim.phys_offset + 1, log.max_phys_offset) == results[2].phys_offset
    assert log.find_valid(results[4].phys_offset + 1, log.max_phys_offset) is None
    log.close()
