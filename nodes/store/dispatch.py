"""Dispatch ("reput"): derive consume-queue units from the commitlog, in commitlog order.

Owns: the walk over commitlog positions (`scan_step`, shared with recovery), putting each
record's unit into its consume queue at the record's own QUEUEOFFSET (its tag code is the
tag hash, or for a waiting delayed message its deliver timestamp), arrival notifications,
the "dispatched" hook, and the record of damaged ranges it stepped over. Does not write the
commitlog, and does not decide where a walk starts (the message store and recovery do).

A walk never trusts a position blindly: each record is checked (magic, sizes, its own
PHYSICALOFFSET field, body CRC) before it is indexed. Bytes that fail are skipped only when a
valid record (or blank marker) follows them; otherwise the walk waits there, since on a
replica the bytes may simply not have arrived yet, and in recovery that is the torn tail.

Whoever derives more from each record subscribes to `on_dispatched` (the message index does): it
hears every record dispatch places, in commitlog order, once per dispatch call, with the fields
dispatch already read (no second walk or parse), after the records are in their consume queues.

A consume-queue file that cannot be allocated (DiskFullError) stops the walk AT the record it
could not index: the position goes back to it, and the error goes to the caller, which retries
later (a consume-queue write is all or nothing, so the retry writes each unit once).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence

from nodes.common import constants as c
from nodes.common.errors import DiskFullError
from nodes.store.commitlog import CommitLog
from nodes.store.consume_queue import ConsumeQueue
from nodes.store.record import (
    RECORD_BYTES_MIN,
    CheckedRecord,
    RecordKind,
    decode_properties,
    index_fields,
    peek_size_and_magic,
    tag_hash,
)

log = logging.getLogger(__name__)

# (topic, queue_id, max_queue_offset, tag_hash, store_timestamp_ms)
ArrivalListener = Callable[[str, int, int, int, int], None]
# (phys_offset, size, topic, queue_id, queue_offset, store_timestamp_ms, keys, uniq_key) of a
# record dispatch placed: its KEYS and UNIQ_KEY properties, each None when it has none
DispatchedRecord = tuple[int, int, str, int, int, int, str | None, str | None]
# (KEYS, UNIQ_KEY) of each record of a put, as the writer knew them
IndexKeys = Sequence[tuple[str | None, str | None]]
_KEYS, _UNIQ_KEY = c.PROPERTY_KEYS, c.PROPERTY_UNIQ_KEY
# Hears the records one dispatch call placed, in commitlog order (those before a full disk
# stopped it included). Called under the store's lock; must not raise.
DispatchListener = Callable[[list[DispatchedRecord]], None]
# (topic, properties, store_timestamp_ms) -> a record's consume-queue tag code when it is not its
# tag hash (a delayed message: its deliver timestamp), else None.
TagCodeOverride = Callable[[str, dict[str, str], int], int | None]


class Step(enum.Enum):
    RECORD = "RECORD"  # a valid record; value = its size
    ROLL = "ROLL"  # a blank marker; value = the next segment's start
    DAMAGED = "DAMAGED"  # bytes failing their checks; value = the next valid position
    WAIT = "WAIT"  # nothing written here yet (or a record's tail is missing); value = 0
    STUCK = "STUCK"  # bytes failing their checks with nothing valid after them; value = 0


def scan_step(commitlog: CommitLog, phys_offset: int, end_phys_offset: int) -> tuple[Step, int]:
    """What a walk finds at `phys_offset` when the bytes before `end_phys_offset` are readable."""
    mapped = commitlog.segment_for(phys_offset)
    if mapped is None:
        return Step.WAIT, 0
    limit = min(end_phys_offset, mapped.end_offset)
    if limit - phys_offset < c.END_FILE_MIN_BLANK_BYTES:
        return Step.WAIT, 0
    position = phys_offset - mapped.start_offset
    size, magic = peek_size_and_magic(mapped.buffer, position)
    if magic == c.RECORD_MAGIC and size >= RECORD_BYTES_MIN and limit < phys_offset + size <= mapped.end_offset:
        return Step.WAIT, 0  # a record whose tail is not readable yet
    kind, size = commitlog.check_at(phys_offset)
    if kind is RecordKind.RECORD:
        return Step.RECORD, size
    if kind is RecordKind.BLANK:
        return Step.ROLL, mapped.end_offset
    resume = commitlog.find_valid(phys_offset + 1, limit)
    if resume is not None:
        return Step.DAMAGED, resume
    # Nothing valid in the rest of this segment. If the next segment holds valid records, the
    # damage ran to this segment's end (e.g. a destroyed blank marker); skip to them.
    following = commitlog.segment_for(mapped.end_offset)
    if (following is not None and end_phys_offset > following.start_offset
            and commitlog.find_valid(following.start_offset, end_phys_offset) is not None):
        return Step.DAMAGED, mapped.end_offset
    return (Step.WAIT if kind is RecordKind.EMPTY else Step.STUCK), 0


class Dispatcher:
    """Indexes commitlog records into consume queues from `reput_from_phys_offset` on."""

    def __init__(self, commitlog: CommitLog, consume_queue_for: Callable[[str, int], ConsumeQueue | None],
                 on_arrival: ArrivalListener | None = None, tag_code: TagCodeOverride | None = None) -> None:
        """`consume_queue_for(topic, queue_id)` returns (creating if needed) the queue to index
        into, or None for a record whose queue cannot exist here (it is then skipped)."""
        self._commitlog = commitlog
        self._tag_code = tag_code
        self._consume_queue_for = consume_queue_for
        self.on_arrival = on_arrival
        self.on_dispatched: DispatchListener | None = None
        # (start, end) of bytes a walk found failing their checks, once each; set after recovery
        # (recovery reports its own findings).
        self.on_damaged: Callable[[int, int], None] | None = None
        self.reput_from_phys_offset = 0
        self.damaged_ranges: list[tuple[int, int]] = []
        self._damaged_end_by_start: dict[int, int] = {}
        self.last_store_timestamp_ms = 0  # of the last record dispatched (for the checkpoint)
        self._waiting_at: tuple[int, int] | None = None  # (position, end) of the last fruitless scan

    def dispatch_until(self, end_phys_offset: int) -> int:
        """Dispatch every record in [reput_from_phys_offset, end_phys_offset); returns how many
        records were walked (already-indexed ones included). Stops early at bytes that are
        not (yet) a valid record."""
        walked = 0
        while self.reput_from_phys_offset < end_phys_offset:
            position = self.reput_from_phys_offset
            if (position, end_phys_offset) == self._waiting_at:
                break  # scanned this exact range already and found nothing to resume at
            damaged_end = self._damaged_end_by_start.get(position)
            if damaged_end is not None:  # known already (e.g. found by recovery's walk)
                self.reput_from_phys_offset = damaged_end
                continue
            indexed = self._dispatch_run(position, end_phys_offset)
            if indexed:
                walked += indexed
                continue
            step, value = scan_step(self._commitlog, position, end_phys_offset)
            if step is Step.RECORD:
                self.reput_from_phys_offset = position + value
                try:
                    self._dispatch_record(position, value)
                except DiskFullError:
                    self.reput_from_phys_offset = position
                    raise
                walked += 1
            elif step is Step.ROLL:
                self.reput_from_phys_offset = value
            elif step is Step.DAMAGED:
                self.note_damaged(position, value)
                self.reput_from_phys_offset = value
            else:
                if step is Step.STUCK:
                    log.warning("dispatch waits at phys offset %d: the bytes there do not check and no "
                                "valid record follows before %d", position, end_phys_offset)
                    if self.on_damaged is not None:
                        self.on_damaged(position, end_phys_offset)
                self._waiting_at = (position, end_phys_offset)
                break
        return walked

    def dispatch_appended(self, start_phys_offset: int, end_phys_offset: int, topic: str, queue_id: int,
                          first_queue_offset: int, units: list[tuple[int, int, int]],
                          store_timestamp_ms: int,
                          keys_of: Callable[[], IndexKeys] | None = None) -> bool:
        """Index records the store itself just appended, from what it knew while writing them.

        The records of one put: one queue, consecutive queue offsets from `first_queue_offset`,
        `units` = (phys_offset, size, tag code) each, written in [start, end) of the commitlog
        (a blank marker closing the previous segment included). Re-reading, checking and
        decoding them would only find what was just encoded, so only the walk's position moves.
        Returns False, touching nothing, when the walk is not at `start_phys_offset` (it lags,
        e.g. waiting at bytes it could not judge), or when `on_dispatched` listens and `keys_of`
        (each record's KEYS and UNIQ_KEY, asked for only then) is not given: the caller then
        walks the bytes as usual.

        Listeners hear each newly indexed record, as from a walk.
        """
        if self.reput_from_phys_offset != start_phys_offset or not units:
            return False
        on_dispatched = self.on_dispatched
        if on_dispatched is not None and keys_of is None:
            return False
        self.reput_from_phys_offset = end_phys_offset
        self.last_store_timestamp_ms = store_timestamp_ms
        queue = self._consume_queue_for(topic, queue_id)
        written: Sequence[int] = ()
        if queue is not None:
            try:
                written = queue.put_run(first_queue_offset, units)
            except DiskFullError:
                self.reput_from_phys_offset = start_phys_offset
                raise
        if on_dispatched is not None and keys_of is not None:
            on_dispatched([(phys_offset, size, topic, queue_id, first_queue_offset + i, store_timestamp_ms, keys, uniq)
                           for i, ((phys_offset, size, _code), (keys, uniq)) in enumerate(
                               zip(units, keys_of(), strict=True))])
        on_arrival = self.on_arrival
        if on_arrival is not None:
            for i in written:
                on_arrival(topic, queue_id, first_queue_offset + i + 1, units[i][2], store_timestamp_ms)
        return True

    def dispatch_checked(self, start_phys_offset: int, records: Sequence[CheckedRecord]) -> int:
        """Index records a replica just appended at `start_phys_offset` from the fields its
        record check read (`index_fields`, the same function and bytes a walk would read);
        returns how many. Only the records that follow each other from the walk's position are
        taken; when the walk is elsewhere, or knows anything at or past `start_phys_offset`
        (damage, a wait), none is: `dispatch_until` then walks the bytes as usual, and also
        steps over what follows the records (a blank marker)."""
        if self.reput_from_phys_offset != start_phys_offset or not records:
            return 0
        if self._waiting_at is not None and self._waiting_at[0] >= start_phys_offset:
            return 0
        if any(start >= start_phys_offset for start in self._damaged_end_by_start):
            return 0
        indexed, count = 0, len(records)
        while indexed < count:
            phys_offset, size, topic, queue_id, first_queue_offset, _ts, _props = records[indexed]
            if phys_offset != self.reput_from_phys_offset:
                break
            # A run: the records that follow each other in the commitlog into one queue at
            # consecutive queue offsets (a replicated batch), indexed with one consume-queue
            # write as the write path does.
            run_end = indexed + 1
            end_phys_offset = phys_offset + size
            while run_end < count:
                (next_phys_offset, next_size, next_topic, next_queue_id, next_queue_offset, _ts,
                 _props) = records[run_end]
                if (next_phys_offset != end_phys_offset or next_queue_id != queue_id or next_topic != topic
                        or next_queue_offset != first_queue_offset + run_end - indexed):
                    break
                end_phys_offset += next_size
                run_end += 1
            self._index_run(end_phys_offset, records[indexed:run_end])
            indexed = run_end
        return indexed

    def note_damaged(self, start_phys_offset: int, end_phys_offset: int) -> None:
        """Remember [start, end) as damaged: walks step over it without judging it again."""
        if start_phys_offset not in self._damaged_end_by_start:
            self._damaged_end_by_start[start_phys_offset] = end_phys_offset
            self.damaged_ranges.append((start_phys_offset, end_phys_offset))
            log.error("commitlog bytes [%d, %d) are damaged; skipping to the next valid record",
                      start_phys_offset, end_phys_offset)
            if self.on_damaged is not None:
                self.on_damaged(start_phys_offset, end_phys_offset)

    def _dispatch_run(self, phys_offset: int, end_phys_offset: int) -> int:
        """Index the records from `phys_offset` on that pass every check, in one pass over one
        segment (`index_fields`: no Record, no body copy); returns how many. Stops at the first
        position that is anything else (a blank, damage, a missing tail), for `scan_step` to
        judge: this is only the common case made cheap, never a different verdict."""
        mapped = self._commitlog.segment_for(phys_offset)
        if mapped is None:
            return 0
        base = mapped.start_offset
        end = min(end_phys_offset, mapped.end_offset) - base
        pos = phys_offset - base
        indexed = 0
        dispatched: list[DispatchedRecord] | None = [] if self.on_dispatched is not None else None
        view = memoryview(mapped.buffer)
        try:
            while pos < end:
                fields = index_fields(view, pos, end, base + pos)
                if fields is None:
                    break
                size, topic, queue_id, queue_offset, store_timestamp_ms, properties_text = fields
                properties = decode_properties(properties_text)
                # The reput position moves first, so a listener that raises leaves the walk consistent.
                self.reput_from_phys_offset = base + pos + size
                try:
                    self._index(base + pos, size, topic, queue_id, queue_offset, store_timestamp_ms, properties)
                except DiskFullError:
                    self.reput_from_phys_offset = base + pos
                    raise
                if dispatched is not None:
                    dispatched.append((base + pos, size, topic, queue_id, queue_offset, store_timestamp_ms,
                                       properties.get(_KEYS), properties.get(_UNIQ_KEY)))
                pos += size
                indexed += 1
        finally:
            view.release()  # a mapping with exported views cannot be closed
            if dispatched:
                self._emit(dispatched)
        return indexed

    def _dispatch_record(self, phys_offset: int, size: int) -> None:
        # The reput position moved first, so a listener that raises leaves the walk consistent.
        record = self._commitlog.decode_at(phys_offset, check_crc=False)
        self._index(phys_offset, size, record.topic, record.queue_id, record.queue_offset, record.store_timestamp_ms,
                    record.properties)
        if self.on_dispatched is not None:
            self._emit([(phys_offset, size, record.topic, record.queue_id, record.queue_offset,
                         record.store_timestamp_ms, record.properties.get(_KEYS), record.properties.get(_UNIQ_KEY))])

    def _index_run(self, end_phys_offset: int, run: Sequence[CheckedRecord]) -> None:
        """Index a run of checked records (see `dispatch_checked`) ending at `end_phys_offset`."""
        # The reput position moves first, so a listener that raises leaves the walk consistent.
        self.reput_from_phys_offset = end_phys_offset
        _phys, _size, topic, queue_id, first_queue_offset, _ts, _props = run[0]
        self.last_store_timestamp_ms = run[-1][5]
        queue = self._consume_queue_for(topic, queue_id)
        properties = [decode_properties(record[6]) for record in run]
        if queue is None:
            self._emit_run(run, properties)
            return
        units = [(phys_offset, size, self._tag_hash_of(topic, record_properties, store_timestamp_ms))
                 for (phys_offset, size, _topic, _queue_id, _queue_offset, store_timestamp_ms, _text), record_properties
                 in zip(run, properties, strict=True)]
        try:
            written = queue.put_run(first_queue_offset, units)
        except DiskFullError:
            self.reput_from_phys_offset = run[0][0]
            raise
        self._emit_run(run, properties)
        on_arrival = self.on_arrival
        if on_arrival is not None:
            for i in written:
                on_arrival(topic, queue_id, first_queue_offset + i + 1, units[i][2], run[i][5])

    def _emit(self, records: list[DispatchedRecord]) -> None:
        if self.on_dispatched is not None:
            self.on_dispatched(records)

    def _emit_run(self, run: Sequence[CheckedRecord], properties: list[dict[str, str]]) -> None:
        if self.on_dispatched is not None:
            self._emit([(phys_offset, size, topic, queue_id, queue_offset, store_timestamp_ms,
                         record_properties.get(_KEYS), record_properties.get(_UNIQ_KEY))
                        for (phys_offset, size, topic, queue_id, queue_offset, store_timestamp_ms, _text),
                        record_properties in zip(run, properties, strict=True)])

    def _tag_hash_of(self, topic: str, properties: dict[str, str], store_timestamp_ms: int) -> int:
        """The consume-queue tag code of a record: the override's (a waiting delayed record's
        deliver time), else the hash of its tags."""
        override = self._tag_code(topic, properties, store_timestamp_ms) if self._tag_code is not None else None
        return tag_hash(properties.get(c.PROPERTY_TAGS)) if override is None else override

    def _index(self, phys_offset: int, size: int, topic: str, queue_id: int, queue_offset: int,
               store_timestamp_ms: int, properties: dict[str, str]) -> None:
        self.last_store_timestamp_ms = store_timestamp_ms
        queue = self._consume_queue_for(topic, queue_id)
        if queue is None:
            return
        record_tag_hash = self._tag_hash_of(topic, properties, store_timestamp_ms)
        if queue.put(queue_offset, phys_offset, size, record_tag_hash) and self.on_arrival is not None:
            self.on_arrival(topic, queue_id, queue_offset + 1, record_tag_hash, store_timestamp_ms)
