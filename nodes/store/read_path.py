"""The store's read path: get (RocketMQ's getMessage) and the queries around it.

Owns: the getMessage status table and scan loop, the transfer caps of one
pull, offset queries (min, max, search by time), single-record lookup, consume-queue units,
the in-memory test behind the slave suggestion, and raw commitlog reads for replication.
Records are checked every time they are handed out (read_check.py); a damaged one is skipped,
counted in `corrupt_records_skipped` and reported once as a `bad-record` store error.
"""

from __future__ import annotations

import enum
import logging
import zlib
from dataclasses import dataclass, field

from nodes.common import constants as c
from nodes.store.consume_queue import CQ_UNIT
from nodes.store.read_check import BODY_FIELDS, CheckedExtents, record_checks
from nodes.store.read_scan import scan_units
from nodes.store.record import Record, RecordKind, check_at
from nodes.store.store_files import StoreFiles

log = logging.getLogger(__name__)

_UNIT = c.CQ_UNIT_SIZE_BYTES
_HOLE_SIZE = c.CQ_HOLE_SIZE_MARK
_BODY_FIELDS_BYTES = BODY_FIELDS.size


class GetStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"  # unreachable, as in RocketMQ (see get_messages)
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass
class GetResult:
    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    # the found records, whole and back to back: one copy out of the mapped files
    record_data: bytes = b""
    record_sizes: list[int] = field(default_factory=list)
    suggest_pulling_from_slave: bool = False
    records_bytes: int = 0
    # commitlog bytes behind the last unit examined: the backlog the slave suggestion judges
    backlog_bytes: int = 0

    @property
    def records(self) -> list[bytes]:
        """The found records one by one (copies sliced from `record_data`)."""
        out, pos, data = [], 0, self.record_data
        for size in self.record_sizes:
            out.append(data[pos:pos + size])
            pos += size
        return out


@dataclass(frozen=True, slots=True)
class TransferCaps:
    """How much one pull may carry (MessageStoreConfig maxTransfer*OnMessageIn{Memory,Disk})."""

    bytes_in_memory: int = c.TRANSFER_BYTES_MAX_IN_MEMORY
    count_in_memory: int = c.TRANSFER_COUNT_MAX_IN_MEMORY
    bytes_on_disk: int = c.TRANSFER_BYTES_MAX_ON_DISK
    count_on_disk: int = c.TRANSFER_COUNT_MAX_ON_DISK


DEFAULT_TRANSFER_CAPS = TransferCaps()


def _is_batch_full(size: int, count: int, total_bytes: int, max_count: int, in_disk: bool,
                   caps: TransferCaps = DEFAULT_TRANSFER_CAPS) -> bool:
    """RocketMQ's isTheBatchFull: never before the first message; then count and byte caps,
    tighter when the message is no longer in memory."""
    if count == 0 or total_bytes == 0:
        return False
    if count >= max_count:
        return True
    if in_disk:
        return total_bytes + size > caps.bytes_on_disk or count >= caps.count_on_disk
    return total_bytes + size > caps.bytes_in_memory or count >= caps.count_in_memory


class StoreReader:
    def __init__(self, files: StoreFiles, *, offset_check_in_slave: bool) -> None:
        self._files = files
        self._commitlog = files.commitlog
        self._consume_queues = files.consume_queues
        self.config = config = files.config
        # Without it a slave never moves a consumer's offset (nextOffsetCorrection).
        self.offset_check_in_slave = offset_check_in_slave
        self.corrupt_records_skipped = 0
        self._transfer_caps = TransferCaps(config.transfer_bytes_max_in_memory, config.transfer_count_max_in_memory,
                                           config.transfer_bytes_max_on_disk, config.transfer_count_max_on_disk)
        self._checked_extents = CheckedExtents(c.CHECKED_EXTENTS_MAX)
        self._skip_checks = config.read_skip_crc  # the test-only fault switch read-skip-crc

    def get_messages(self, topic: str, queue_id: int, queue_offset: int, max_count: int,
                     tag_hashes: frozenset[int] | None) -> GetResult:
        """RocketMQ's getMessage: the status table, then the scan loop.

        `tag_hashes` None takes every message; otherwise a unit passes when its tag hash is in
        the set. NO_MATCHED_LOGIC_QUEUE never happens: RocketMQ creates the queue on demand, so a
        queue nobody wrote is an empty one (NO_MESSAGE_IN_QUEUE).
        """
        files = self._files
        files.check_open()
        queue = self._consume_queues.get((topic, queue_id))
        min_offset = queue.min_queue_offset if queue is not None else 0
        max_offset = queue.max_queue_offset if queue is not None else 0

        def result(status: GetStatus, next_offset: int) -> GetResult:
            # nextOffsetCorrection: a slave (without offset_check_in_slave) never moves a consumer.
            if files.is_slave and not self.offset_check_in_slave:
                next_offset = queue_offset
            return GetResult(status, next_offset, min_offset, max_offset)

        if queue is None or max_offset == 0:
            return result(GetStatus.NO_MESSAGE_IN_QUEUE, 0)
        if queue_offset < min_offset:
            return result(GetStatus.OFFSET_TOO_SMALL, min_offset)
        if queue_offset == max_offset:
            return result(GetStatus.OFFSET_OVERFLOW_ONE, queue_offset)
        if queue_offset > max_offset:
            return result(GetStatus.OFFSET_OVERFLOW_BADLY, max_offset)
        scan_bytes_max = max(c.PULL_FILTER_SCAN_BYTES_MIN, max_count * _UNIT)
        units = queue.read_units(queue_offset, scan_bytes_max - scan_bytes_max % _UNIT)
        if units is None:
            return result(GetStatus.OFFSET_FOUND_NULL, queue.next_file_start(queue_offset))
        return self._scan(units, queue_offset, max_count, tag_hashes, min_offset, max_offset, topic, queue_id)

    def _skip_bad_record(self, phys_offset: int, size: int, topic: str, queue_id: int, queue_offset: int) -> None:
        self.corrupt_records_skipped += 1
        log.error("skipping the damaged record at phys offset %d (queue offset %d)", phys_offset, queue_offset)
        self._files.bad_records.report(phys_offset, size, "a record read for a pull failed its checks (CRC, magic, "
                                       "size or own offset) and was stepped over", topic=topic, queue_id=queue_id,
                                       queue_offset=queue_offset)

    def _scan(self, units: bytes, queue_offset: int, max_count: int, tag_hashes: frozenset[int] | None,
              min_offset: int, max_offset: int, topic: str = "", queue_id: int = -1) -> GetResult:
        """RocketMQ's scan loop over the units of one consume-queue file.

        Hot path of every pull: records are checked in place in the mapped segment and only
        their positions are kept (adjacent records merge into one run), so the found bytes
        are copied exactly once, by the final join. A record is checked in full the first time
        this store hands it out; later reads check its framing and body CRC again (bytes can
        change under a running store), skipping the rest (`CheckedExtents`). Runs of ordinary
        units go through `read_scan.scan_units` (compiled when built); this loop takes every
        other unit, and the first of each segment, by the same rules.
        """
        status = GetStatus.NO_MATCHED_MESSAGE
        commitlog = self._commitlog
        max_phys_offset = commitlog.max_phys_offset
        memory_budget_bytes = self.config.memory_budget_bytes
        segment_bytes = self.config.commitlog_segment_bytes
        caps = self._transfer_caps
        sizes: list[int] = []
        runs: list[tuple[memoryview, int, int]] = []  # (segment view, start, end) of adjacent records
        views: dict[int, memoryview] = {}  # segment start -> a view of its mapping, released below
        records_bytes = 0
        next_segment_start = -1  # after a removed segment: skip units pointing into it
        last_phys_offset: int | None = None
        scanned_bytes = 0
        seg_start, seg_written = 0, -1  # the segment the last record came from (start, written end)
        checked_extents = self._checked_extents
        skip_checks = self._skip_checks
        known_checked, known_lo, known_hi = False, 0, 0  # [lo, hi) is all checked, or all not
        newly_checked: list[tuple[int, int]] = []
        view: memoryview | None = None
        run_view: memoryview | None = None
        run_start = run_end = 0
        found = GetStatus.FOUND
        on_disk_below = max_phys_offset - memory_budget_bytes  # "in disk": further back than the budget
        count_max_in_memory = min(max_count, caps.count_in_memory)
        bytes_max_in_memory = caps.bytes_in_memory
        unpack_body_fields, crc32, magic_ok = BODY_FIELDS.unpack_from, zlib.crc32, c.RECORD_MAGIC
        scan, unpack_unit = (None if skip_checks else scan_units), CQ_UNIT.unpack_from
        unit_count, index, retried_index = len(units) // _UNIT, 0, -1
        try:
            while index < unit_count:
                if scan is not None and view is not None and next_segment_start == -1:
                    # the common case, compiled when built (read_scan); it stops at the first
                    # unit it does not take, which this loop takes below by the same rules
                    if run_view is not None and run_view is not view:
                        runs.append((run_view, run_start, run_end))
                        run_view = None
                    taken_before, index_before = len(sizes), index
                    index, records_bytes, last_taken, run_start, run_end = scan(
                        units, index, view, seg_start, seg_written, known_checked, known_lo, known_hi, on_disk_below,
                        count_max_in_memory, bytes_max_in_memory, records_bytes, tag_hashes, sizes, runs,
                        run_start if run_view is view else -1, run_end if run_view is view else -1, newly_checked)
                    scanned_bytes += (index - index_before) * _UNIT
                    if last_taken is not None:
                        last_phys_offset = last_taken
                    if len(sizes) > taken_before:
                        status = found
                    if run_start >= 0:
                        run_view = view
                    if index >= unit_count:
                        break
                phys_offset, size, unit_tag_hash = unpack_unit(units, index * _UNIT)
                index += 1
                if size == _HOLE_SIZE and phys_offset == 0:  # = is_hole, inlined on this hot path
                    scanned_bytes += _UNIT
                    continue
                last_phys_offset = phys_offset
                if phys_offset < next_segment_start:
                    scanned_bytes += _UNIT
                    continue
                if sizes:  # = _is_batch_full, whose in-memory branch is inlined
                    if phys_offset < on_disk_below:
                        if _is_batch_full(size, len(sizes), records_bytes, max_count, True, caps):
                            break
                    elif len(sizes) >= count_max_in_memory or records_bytes + size > bytes_max_in_memory:
                        break
                scanned_bytes += _UNIT
                if tag_hashes is not None and unit_tag_hash not in tag_hashes:
                    if not sizes:
                        status = GetStatus.NO_MATCHED_MESSAGE
                    continue
                if not seg_start <= phys_offset or phys_offset + size > seg_written:
                    mapped = commitlog.segment_for(phys_offset)
                    if mapped is None or phys_offset + size > mapped.wrote_offset:
                        # = CommitLog.read answering None: the segment was deleted
                        if not sizes:
                            status = GetStatus.MESSAGE_WAS_REMOVING
                        next_segment_start = phys_offset + segment_bytes - phys_offset % segment_bytes
                        continue
                    seg_start, seg_written = mapped.start_offset, mapped.wrote_offset
                    view = views.get(seg_start)
                    if view is None:
                        view = views[seg_start] = memoryview(mapped.buffer)
                assert view is not None
                pos = phys_offset - seg_start
                end_phys_offset = phys_offset + size
                if not known_lo <= phys_offset < known_hi:
                    known_checked, known_lo, known_hi = checked_extents.around(phys_offset)
                if scan is not None and next_segment_start == -1 and retried_index != index - 1:
                    # segment and extent now known: hand this unit back to the compiled walk (the
                    # first unit of every pull comes here); if it refuses it, it is taken below
                    index -= 1
                    retried_index = index
                    scanned_bytes -= _UNIT
                    continue
                if skip_checks:  # FAULT SWITCH read-skip-crc: breaks "a pull never serves a bad record"
                    pass
                elif known_checked and end_phys_offset <= known_hi:
                    # = read_check.body_checks, inlined: this branch runs for nearly every record
                    # handed out (a call per record was a fifth of the scan); the same test
                    total_size, magic, body_crc, record_phys_offset, body_len = unpack_body_fields(view, pos)
                    body_start = pos + _BODY_FIELDS_BYTES
                    if not (total_size == size and magic == magic_ok and record_phys_offset == phys_offset
                            and 0 <= body_len <= size - _BODY_FIELDS_BYTES
                            and crc32(view[body_start:body_start + body_len]) == body_crc):
                        # changed on disk since its full check
                        self._skip_bad_record(phys_offset, size, topic, queue_id, queue_offset + scanned_bytes // _UNIT - 1)
                        continue
                else:
                    if not (record_checks(view, pos, size, phys_offset)
                            or check_at(view[pos:pos + size].tobytes(), 0, base_phys_offset=phys_offset)
                            == (RecordKind.RECORD, size)):
                        # Never hand out bytes that do not check; the consumer steps over them.
                        self._skip_bad_record(phys_offset, size, topic, queue_id, queue_offset + scanned_bytes // _UNIT - 1)
                        continue
                    if newly_checked and newly_checked[-1][1] == phys_offset:
                        newly_checked[-1] = (newly_checked[-1][0], end_phys_offset)
                    else:
                        newly_checked.append((phys_offset, end_phys_offset))
                if view is run_view and pos == run_end:
                    run_end = pos + size
                else:
                    if run_view is not None:
                        runs.append((run_view, run_start, run_end))
                    run_view, run_start, run_end = view, pos, pos + size
                sizes.append(size)
                records_bytes += size
                status = found
                next_segment_start = -1
            if run_view is not None:
                runs.append((run_view, run_start, run_end))
            record_data = b"".join([run[start:end] for run, start, end in runs])
            for start, end in newly_checked:
                checked_extents.add(start, end)
        finally:
            runs.clear()
            run_view = view = None
            for segment_view in views.values():
                segment_view.release()  # a mapping with exported views cannot be closed
        backlog_bytes = max_phys_offset - last_phys_offset if last_phys_offset is not None else 0
        return GetResult(status, queue_offset + scanned_bytes // _UNIT, min_offset, max_offset, record_data, sizes,
                         backlog_bytes > memory_budget_bytes, records_bytes, backlog_bytes)

    def min_queue_offset(self, topic: str, queue_id: int) -> int:
        queue = self._consume_queues.get((topic, queue_id))
        return queue.min_queue_offset if queue is not None else 0

    def max_queue_offset(self, topic: str, queue_id: int) -> int:
        queue = self._consume_queues.get((topic, queue_id))
        return queue.max_queue_offset if queue is not None else 0

    def search_queue_offset(self, topic: str, queue_id: int, timestamp_ms: int, *, at_or_after: bool = False) -> int:
        queue = self._consume_queues.get((topic, queue_id))
        if queue is None:
            return 0
        return queue.search_offset(timestamp_ms, self._store_timestamp_at, at_or_after=at_or_after)

    def _store_timestamp_at(self, phys_offset: int, size: int) -> int | None:
        record = self.lookup_message(phys_offset, size)
        return record.store_timestamp_ms if record is not None else None

    def lookup_message(self, phys_offset: int, size: int | None = None) -> Record | None:
        return self._commitlog.record_at(phys_offset, size)

    def queue_unit(self, topic: str, queue_id: int, queue_offset: int) -> tuple[int, int, int] | None:
        queue = self._consume_queues.get((topic, queue_id))
        return queue.unit_at(queue_offset) if queue is not None else None

    def queue_first_phys_offset(self, topic: str, queue_id: int) -> int | None:
        queue = self._consume_queues.get((topic, queue_id))
        if queue is None:
            return None
        unit = queue.unit_at(queue.min_queue_offset)
        return unit[0] if unit is not None else None

    def read_commitlog(self, phys_offset: int, max_bytes: int) -> bytes:
        self._files.check_open()
        return self._commitlog.read_bytes(phys_offset, max_bytes)

    def is_in_memory(self, phys_offset: int) -> bool:
        return self._commitlog.max_phys_offset - phys_offset <= self.config.memory_budget_bytes

    def topics(self) -> list[str]:
        return sorted({topic for topic, _ in self._consume_queues})

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(queue_id for name, queue_id in self._consume_queues if name == topic)

