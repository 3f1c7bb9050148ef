"""One consume queue: the index of one (topic, queue_id), a dense array of fixed 20-byte units
in mapped files under `consumequeue/<topic>/<queue_id>/`, named by their start byte offset.

Owns: writing units at their queue offsets (idempotently, filling gaps with hole units),
reading units back, and recovering and truncating its own tail. Does not own the commitlog:
every unit is derived from a commitlog record by dispatch, so the commitlog can always
rebuild it.

    ┌──────────────────────┬──────────────┬──────────────────────┐
    │ phys_offset (8, >q)  │ size (4, >i) │ tag_hash (8, >q)     │   = 20 bytes
    └──────────────────────┴──────────────┴──────────────────────┘

Unit `queue_offset` lives at byte `queue_offset * 20` of the queue's stream of files. A hole
unit `(0, 0x7FFFFFFF, 0)` (RocketMQ's pre-blank) stands where no record exists: before the
first record of a queue created mid-stream, or where a record is missing; readers skip it.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Sequence
from pathlib import Path

from nodes.common import constants as c
from nodes.common.errors import InvariantViolation
from nodes.store.mapped_file import MappedFileQueue

log = logging.getLogger(__name__)

CQ_UNIT = struct.Struct(">qiq")
assert CQ_UNIT.size == c.CQ_UNIT_SIZE_BYTES == 20
_HOLE_SIZE = c.CQ_HOLE_SIZE_MARK
HOLE_UNIT = CQ_UNIT.pack(0, _HOLE_SIZE, 0)
_UNIT = c.CQ_UNIT_SIZE_BYTES


def is_hole(phys_offset: int, size: int) -> bool:
    return size == _HOLE_SIZE and phys_offset == 0


class ConsumeQueue:
    def __init__(self, root: Path, topic: str, queue_id: int, units_per_file: int, *, preallocate: bool = True) -> None:
        """`root` is the store's `consumequeue/` directory. Call `load()` before use."""
        self.topic = topic
        self.queue_id = queue_id
        self.units_per_file = units_per_file
        self._files = MappedFileQueue(root / topic / str(queue_id), units_per_file * _UNIT, allow_gaps=True,
                                      preallocate=preallocate)
        self._min_queue_offset = 0
        # The commitlog end of the last real unit: a unit ending at or before it is already here.
        self.max_phys_end = 0
        self.load_dropped_bytes = 0  # torn bytes `load` cut from the tail (recovery reports them)

    def load(self) -> None:
        """Map the files and recover the tail: keep units while phys_offset >= 0 and size > 0.

        Only the last file can be partly written (a file is full before the next one starts).
        """
        self._files.load()
        last = self._files.last()
        if last is None:
            return
        written_units = -(-last.data_end() // _UNIT)  # a unit may end in zeros (tag hash 0)
        count = 0
        for phys_offset, size, _tag in CQ_UNIT.iter_unpack(last.read(0, written_units * _UNIT)):
            if phys_offset < 0 or size <= 0:
                break
            count += 1
        dropped = self.load_dropped_bytes = last.truncate_to(count * _UNIT)
        if dropped:
            log.warning("%s-%d: dropped %d bytes of torn units at the tail", self.topic, self.queue_id, dropped)
        self._refresh_bounds()

    # --- bounds ------------------------------------------------------------------------------

    @property
    def min_queue_offset(self) -> int:
        return self._min_queue_offset

    @property
    def max_queue_offset(self) -> int:
        """The next queue offset to be written (exclusive end)."""
        return self._files.max_offset // _UNIT

    def next_file_start(self, queue_offset: int) -> int:
        """The first queue offset of the file after the one `queue_offset` falls in."""
        return queue_offset + self.units_per_file - queue_offset % self.units_per_file

    def correct_min_offset(self, min_phys_offset: int) -> None:
        """Move the min offset past units whose record lies before the commitlog's first byte
        (RocketMQ's correctMinOffset, run at start-up)."""
        queue_offset, end = self._min_queue_offset, self.max_queue_offset
        while queue_offset < end:
            unit = self.unit_at(queue_offset)
            if unit is not None and not is_hole(unit[0], unit[1]) and unit[0] >= min_phys_offset:
                break
            queue_offset += 1
        self._min_queue_offset = queue_offset

    def _refresh_bounds(self) -> None:
        """Recompute the min offset (first real unit) and max_phys_end (last real unit)."""
        first = self._files.files[0].start_offset // _UNIT if self._files.files else 0
        end = self.max_queue_offset
        self._min_queue_offset = end
        for queue_offset in range(first, end):
            unit = self.unit_at(queue_offset)
            if unit is not None and not is_hole(unit[0], unit[1]):
                self._min_queue_offset = queue_offset
                break
        self.max_phys_end = 0
        for queue_offset in range(end - 1, first - 1, -1):
            unit = self.unit_at(queue_offset)
            if unit is not None and not is_hole(unit[0], unit[1]):
                self.max_phys_end = unit[0] + unit[1]
                break

    # --- writing -----------------------------------------------------------------------------

    def put(self, queue_offset: int, phys_offset: int, size: int, tag_hash: int) -> bool:
        """Write the unit for a record at its own queue offset; False when it was already there.

        A unit ending at or before `max_phys_end` was written before (re-dispatch after a
        restart), so it is skipped. A queue offset beyond the next index leaves a gap, which is
        filled with hole units so every later unit stays at its own offset.
        """
        if phys_offset + size <= self.max_phys_end:
            return False
        if phys_offset < 0 or size <= 0 or size == _HOLE_SIZE:
            raise InvariantViolation(f"{self.topic}-{self.queue_id}: bad unit ({phys_offset}, {size})")
        next_queue_offset = self.max_queue_offset
        was_empty = self.max_phys_end == 0  # true iff no real unit yet (a real one ends past 0)
        if queue_offset < next_queue_offset:
            log.error("%s-%d: record at phys %d claims queue offset %d but %d units exist; not indexed",
                      self.topic, self.queue_id, phys_offset, queue_offset, next_queue_offset)
            return False
        if queue_offset > next_queue_offset:
            self._fill_holes(next_queue_offset, queue_offset)
        self._append(CQ_UNIT.pack(phys_offset, size, tag_hash))
        if was_empty:
            self._min_queue_offset = queue_offset
        self.max_phys_end = phys_offset + size
        return True

    def put_run(self, first_queue_offset: int, units: list[tuple[int, int, int]]) -> Sequence[int]:
        """`put` for units of consecutive queue offsets from `first_queue_offset`, each a
        (phys_offset, size, tag_hash) in commitlog order; returns the indexes of the units
        written (the others were already there or refused, as `put` would).

        The write path's form: when the run simply continues the queue (the usual case) it is
        packed and appended in one write; anything else goes unit by unit through `put`.
        """
        if not units:
            return ()
        phys_offset, size, _ = units[0]
        if first_queue_offset != self.max_queue_offset or phys_offset + size <= self.max_phys_end or any(
                unit_phys_offset < 0 or unit_size <= 0 or unit_size == _HOLE_SIZE
                for unit_phys_offset, unit_size, _ in units):
            return [i for i, unit in enumerate(units) if self.put(first_queue_offset + i, *unit)]
        was_empty = self.max_phys_end == 0
        pack = CQ_UNIT.pack
        self._append(b"".join([pack(*unit) for unit in units]))
        if was_empty:
            self._min_queue_offset = first_queue_offset
        last_phys_offset, last_size, _ = units[-1]
        self.max_phys_end = last_phys_offset + last_size
        return range(len(units))

    def _append(self, units: bytes) -> None:
        """Append whole units, which never straddle a file (file size is a multiple of 20).

        Raises:
            DiskFullError: a file the units need cannot be allocated; nothing was written.
        """
        files = self._files.files
        last = self._files.last()
        index = len(files) - 1 if last is not None and not last.is_full else len(files)  # where the units start
        self._files.ensure_room(len(units))
        view = memoryview(units)
        while view:
            mapped = files[index]
            chunk = view[:mapped.remaining_bytes]
            mapped.append(chunk)
            view = view[len(chunk):]
            index += 1

    def _fill_holes(self, from_queue_offset: int, to_queue_offset: int) -> None:
        if not self._files.files:
            # Like RocketMQ's fillPreBlank: the first file is the one holding the first unit.
            file_bytes = self._files.file_size_bytes
            self._files.create(to_queue_offset * _UNIT // file_bytes * file_bytes)
            from_queue_offset = self._files.files[0].start_offset // _UNIT
        if to_queue_offset > from_queue_offset:
            log.warning("%s-%d: queue offsets %d..%d have no record; filling them with hole units",
                        self.topic, self.queue_id, from_queue_offset, to_queue_offset - 1)
            self._append(HOLE_UNIT * (to_queue_offset - from_queue_offset))

    def truncate_after_phys(self, phys_end: int) -> int:
        """Drop the tail units pointing at or past `phys_end` (and holes left trailing); returns
        how many were dropped."""
        first = self._files.files[0].start_offset // _UNIT if self._files.files else 0
        keep = self.max_queue_offset
        while keep > first:
            unit = self.unit_at(keep - 1)
            if unit is None or not (is_hole(unit[0], unit[1]) or unit[0] + unit[1] > phys_end):
                break
            keep -= 1
        dropped = self.max_queue_offset - keep
        if dropped:
            self._files.truncate_after(keep * _UNIT)
            self._refresh_bounds()
            log.warning("%s-%d: dropped %d units past commitlog offset %d",
                        self.topic, self.queue_id, dropped, phys_end)
        return dropped

    def delete_files_below(self, min_phys_offset: int) -> list[str]:
        """Retention (CleanConsumeQueueService): delete the files, oldest first and never the
        last, whose every unit points below the commitlog's `min_phys_offset`, then move the
        min offset past units pointing there; returns the names of the files deleted."""
        deleted = []
        files = self._files.files
        while len(files) > 1:
            first = files[0]
            phys_offset, size, _tag = CQ_UNIT.unpack(first.read(first.size_bytes - _UNIT, _UNIT))
            if not is_hole(phys_offset, size) and phys_offset + size > min_phys_offset:
                break
            if self._files.delete_first() is None:
                break
            deleted.append(first.path.name)
        if files:
            self._min_queue_offset = max(self._min_queue_offset, files[0].start_offset // _UNIT)
        self.correct_min_offset(min_phys_offset)
        return deleted

    def truncate_to(self, queue_offset: int) -> None:
        """Drop every unit from `queue_offset` on (recovery: units that match no record)."""
        self._files.truncate_after(queue_offset * _UNIT)
        self._refresh_bounds()

    def flush(self) -> None:
        self._files.flush()

    def close(self) -> None:
        self._files.close()

    # --- reading -----------------------------------------------------------------------------

    def read_units(self, queue_offset: int, max_bytes: int | None = None) -> bytes | None:
        """Units from `queue_offset` to the written end of the ONE file holding it (at most
        `max_bytes`), or None when no file holds it (deleted or missing)."""
        byte_offset = queue_offset * _UNIT
        mapped = self._files.find(byte_offset)
        if mapped is None:
            return None
        position = byte_offset - mapped.start_offset
        end = mapped.wrote_position if max_bytes is None else min(mapped.wrote_position, position + max_bytes)
        return mapped.read(position, max(0, end - position))

    def unit_at(self, queue_offset: int) -> tuple[int, int, int] | None:
        """(phys_offset, size, tag_hash) of one unit, or None if it is not written."""
        if queue_offset < 0 or queue_offset >= self.max_queue_offset:
            return None
        units = self.read_units(queue_offset, _UNIT)
        if not units:
            return None
        return CQ_UNIT.unpack(units)

    # --- search by time ----------------------------------------------------------------------

    def search_offset(self, timestamp_ms: int, store_timestamp_at: Callable[[int, int], int | None], *,
                      at_or_after: bool = False) -> int:
        """The queue offset whose record was stored nearest `timestamp_ms`; with `at_or_after`, the
        first record stored at or after it (the max offset when none is: a reset by time skips
        exactly what was stored before the time, never one message more or less).

        Binary search over the records' store timestamps (`store_timestamp_at(phys_offset,
        size)`, None for an unreadable record; such units and holes are stepped over). An
        exact match wins (the first of equals); otherwise the nearer neighbour, ties to the
        earlier one. Before the first record: the min offset; after the last: the last
        record's offset; an empty queue: 0.
        """
        low, high = self.min_queue_offset, self.max_queue_offset
        if low >= high:
            return high if at_or_after else 0

        def timed_at_or_after(queue_offset: int, stop: int) -> tuple[int, int | None]:
            while queue_offset < stop:
                timestamp = self._timestamp_at(queue_offset, store_timestamp_at)
                if timestamp is not None:
                    return queue_offset, timestamp
                queue_offset += 1
            return stop, None

        lo, hi = low, high  # find the first record stored at or after timestamp_ms
        while lo < hi:
            mid = (lo + hi) // 2
            found, timestamp = timed_at_or_after(mid, hi)
            if timestamp is None or timestamp >= timestamp_ms:
                hi = mid
            else:
                lo = found + 1
        right, right_timestamp = timed_at_or_after(lo, high)
        if right_timestamp == timestamp_ms or at_or_after:
            return right
        left, left_timestamp = lo - 1, None
        while left >= low and left_timestamp is None:
            left_timestamp = self._timestamp_at(left, store_timestamp_at)
            if left_timestamp is None:
                left -= 1
        if left_timestamp is None:
            return low
        if right_timestamp is None:
            return left
        return left if timestamp_ms - left_timestamp <= right_timestamp - timestamp_ms else right

    def _timestamp_at(self, queue_offset: int,
                      store_timestamp_at: Callable[[int, int], int | None]) -> int | None:
        unit = self.unit_at(queue_offset)
        if unit is None or is_hole(unit[0], unit[1]):
            return None
        return store_timestamp_at(unit[0], unit[1])
