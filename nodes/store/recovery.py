"""Startup recovery: find the commitlog's valid end, cut what lies beyond it, and bring every
consume queue back in line with the commitlog.

Owns the recovery policy. The mechanics live elsewhere: position checks and the walk step in
`dispatch.scan_step`, tail truncation in `mapped_file`, consume-queue tails in
`consume_queue`.

As RocketMQ:
  * clean shutdown (no abort file): walk from the third-last segment;
  * unclean: walk from the newest segment whose first record is valid and was stored at or
    before min(checkpoint timestamps) - 3 s, and re-dispatch every record from there;
  * walk with CRC checks, truncate the commitlog after its last valid byte, drop consume-queue
    units pointing past it, and dispatch from the consume queues' max commitlog end.

Beyond RocketMQ, which stops at the first bad record and throws away everything after it:
**acknowledged messages behind a damaged record are kept.** When the bytes at p fail their
checks but a valid record (magic, its own PHYSICALOFFSET == its position, CRC) or blank
marker follows later in the segment (or the next segment holds valid records), [p, next) is
recorded as a damaged range and the walk resumes there. Only damage with nothing valid after
it, a torn tail, is truncated (zeroed, and later segments deleted). Records keep their own
QUEUEOFFSET, so every surviving message stays pullable at the offset it was acknowledged
with; a damaged one becomes a hole its consumers step over.

Also beyond RocketMQ: before the walk, each consume queue's tail units are checked against the
record headers they point at; a unit no header claims (a torn or garbled unit, as a power loss
leaves) is dropped and rebuilt by dispatch. What recovery cut or stepped over is listed in the
report (`torn_tail_phys_offset`, `cq_truncations`, `damaged_ranges`) for the store's events.

Also beyond RocketMQ: while walking, recovery checks that each record below the dispatch
point is indexed and that each queue's first unindexed record continues its queue. If a
consume queue lost units (its files were deleted), dispatch restarts from the commitlog's
first byte, so the queue is rebuilt at the right offsets instead of from a hole.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from nodes.common import constants as c
from nodes.store.checkpoint import Checkpoint
from nodes.store.commitlog import CommitLog
from nodes.store.consume_queue import ConsumeQueue, is_hole
from nodes.store.dispatch import Dispatcher, Step, scan_step
from nodes.store.record import (
    HEADER,
    STORE_TIMESTAMP_FIELD,
    STORE_TIMESTAMP_POS,
    Record,
    RecordKind,
    check_at,
    peek_size_and_magic,
)

log = logging.getLogger(__name__)


@dataclass
class CqTruncation:
    """Units one consume queue lost in recovery: torn bytes at its tail, units that did not match
    their record, units pointing past the commitlog's end."""

    topic: str
    queue_id: int
    first_queue_offset: int  # the first queue offset dropped (the queue's new max offset)
    units: int
    bytes: int


@dataclass
class RecoveryReport:
    clean_shutdown: bool
    commitlog_min_phys_offset: int
    commitlog_max_phys_offset: int
    truncated_bytes: int
    damaged_ranges: list[tuple[int, int]] = field(default_factory=list)
    redispatched_records: int = 0
    consume_queues: int = 0
    cq_truncations: list[CqTruncation] = field(default_factory=list)
    # where the torn tail began (the recovered end) when recovery cut one; the fault switch
    # recovery-keep-torn-tail instead leaves it here uncut
    torn_tail_phys_offset: int | None = None
    # a consume queue lacked units the commitlog holds below the dispatch point, so every
    # record was dispatched again from the commitlog's first byte
    redispatched_whole_log: bool = False

    @property
    def cq_units_dropped(self) -> int:
        return sum(t.units for t in self.cq_truncations)


@dataclass
class _Walk:
    end_phys_offset: int
    damaged_ranges: list[tuple[int, int]]
    queue_lost_units: bool


def recover(commitlog: CommitLog, consume_queues: Mapping[tuple[str, int], ConsumeQueue],
            dispatcher: Dispatcher, *, clean_shutdown: bool, checkpoint: Checkpoint,
            trust_checkpoint: bool = False, keep_torn_tail: bool = False) -> RecoveryReport:
    """Recover a loaded commitlog and loaded consume queues; leaves `dispatcher` caught up.

    `trust_checkpoint` and `keep_torn_tail` are the test-only fault switches
    recovery-trust-checkpoint and recovery-keep-torn-tail (constants.FAULT_*).
    """
    truncations = {key: CqTruncation(key[0], key[1], queue.max_queue_offset, 0, queue.load_dropped_bytes)
                   for key, queue in consume_queues.items() if queue.load_dropped_bytes}
    for key, queue in consume_queues.items():
        _note_truncation(truncations, key, queue, drop_unmatched_tail(commitlog, queue))
    segments = commitlog.segments
    dispatch_point = max((queue.max_phys_end for queue in consume_queues.values()), default=0)
    if segments:
        if clean_shutdown:
            walk_start = segments[max(0, len(segments) - c.RECOVER_FILES_FROM_END)].start_offset
        else:
            walk_start = _abnormal_start(commitlog, checkpoint.recovery_timestamp_ms())
        walk = _walk(commitlog, walk_start, consume_queues, dispatch_point)
    else:
        walk_start = 0
        walk = _Walk(0, [], False)
    end = walk.end_phys_offset
    if trust_checkpoint and not clean_shutdown and segments:
        # FAULT SWITCH recovery-trust-checkpoint: breaks "a kill loses no acknowledged message":
        # the log is cut after the last record the checkpoint says was flushed, and every valid
        # record written (and acknowledged) after it is thrown away instead of being kept.
        end = min(end, _checkpointed_end(commitlog, walk_start, end, checkpoint.physic_msg_timestamp_ms))
        walk.damaged_ranges = [(start, stop) for start, stop in walk.damaged_ranges if stop <= end]
        log.warning("fault switch recovery-trust-checkpoint: commitlog cut at the checkpoint, phys offset %d", end)
    torn_tail_phys_offset = end if segments and _has_data_after(commitlog, end) else None
    if keep_torn_tail and torn_tail_phys_offset is not None:
        # FAULT SWITCH recovery-keep-torn-tail: breaks "recovery never serves a torn tail": the
        # garbled bytes after the last valid record stay, the write position moves past them, and
        # dispatch meets them later as if they were a record.
        end = _torn_end(commitlog, end)
        log.warning("fault switch recovery-keep-torn-tail: commitlog keeps its torn tail up to phys offset %d", end)
    truncated_bytes = commitlog.truncate_after(end)
    if truncated_bytes:
        log.warning("commitlog: discarded %d bytes of torn tail after phys offset %d", truncated_bytes, end)
    for key, queue in consume_queues.items():
        _note_truncation(truncations, key, queue, queue.truncate_after_phys(end))
        queue.correct_min_offset(commitlog.min_phys_offset)

    reput_from = min(max((queue.max_phys_end for queue in consume_queues.values()), default=0), end)
    if not clean_shutdown:
        reput_from = min(reput_from, walk_start)
    if walk.queue_lost_units:
        log.warning("a consume queue is missing units the commitlog holds; re-dispatching the whole commitlog")
        reput_from = commitlog.min_phys_offset
    dispatcher.reput_from_phys_offset = max(reput_from, commitlog.min_phys_offset)
    for start, stop in walk.damaged_ranges:
        dispatcher.note_damaged(start, stop)
    redispatched = dispatcher.dispatch_until(end)
    report = RecoveryReport(
        clean_shutdown=clean_shutdown, commitlog_min_phys_offset=commitlog.min_phys_offset,
        commitlog_max_phys_offset=commitlog.max_phys_offset, truncated_bytes=truncated_bytes,
        damaged_ranges=list(dispatcher.damaged_ranges), redispatched_records=redispatched,
        consume_queues=len(consume_queues), cq_truncations=list(truncations.values()),
        torn_tail_phys_offset=torn_tail_phys_offset if truncated_bytes else None,
        redispatched_whole_log=walk.queue_lost_units)
    log.info("recovery: %s", report)
    return report


def _abnormal_start(commitlog: CommitLog, recovery_timestamp_ms: int) -> int:
    """The newest segment whose first record is valid and stored by the checkpoint time."""
    segments = commitlog.segments
    for mapped in reversed(segments):
        kind, _ = check_at(mapped.buffer, 0, base_phys_offset=mapped.start_offset)
        if kind is RecordKind.RECORD:
            (store_timestamp_ms,) = STORE_TIMESTAMP_FIELD.unpack_from(mapped.buffer, STORE_TIMESTAMP_POS)
            if store_timestamp_ms <= recovery_timestamp_ms:
                return mapped.start_offset
    return segments[0].start_offset


def _checkpointed_end(commitlog: CommitLog, start: int, end: int, flushed_timestamp_ms: int) -> int:
    """The phys offset just after the last record from `start` stored at or before the checkpoint
    time (only the fault switch recovery-trust-checkpoint uses it)."""
    position = kept_end = start
    while position < end:
        step, value = scan_step(commitlog, position, end)
        if step is Step.RECORD:
            if commitlog.decode_at(position, check_crc=False).store_timestamp_ms > flushed_timestamp_ms:
                break
            position += value
            kept_end = position
        elif step in (Step.ROLL, Step.DAMAGED):
            position = value
        else:
            break
    return kept_end


def _walk(commitlog: CommitLog, start: int, consume_queues: Mapping[tuple[str, int], ConsumeQueue],
          dispatch_point: int) -> _Walk:
    """Walk every position from `start`, checking each record, to the last valid byte."""
    limit = commitlog.segments[-1].end_offset
    position = start
    damaged: list[tuple[int, int]] = []
    lost_units = False
    next_expected: dict[tuple[str, int], int] = {}
    while True:
        step, value = scan_step(commitlog, position, limit)
        if step is Step.RECORD:
            if not lost_units:
                record = commitlog.decode_at(position, check_crc=False)
                lost_units = _queue_lost_units(record, consume_queues, dispatch_point, next_expected)
            position += value
        elif step is Step.ROLL:
            position = value
        elif step is Step.DAMAGED:
            damaged.append((position, value))
            position = value
        else:
            return _Walk(position, damaged, lost_units)


def _queue_lost_units(record: Record, consume_queues: Mapping[tuple[str, int], ConsumeQueue],
                      dispatch_point: int, next_expected: dict[tuple[str, int], int]) -> bool:
    """Whether `record` shows its consume queue lacks units dispatch will not restore.

    Below the dispatch point every record must already be indexed. At or after it, a
    queue's first unindexed record must sit at the queue's next offset: a later one means
    the units between were lost, and dispatching from here would leave holes over them.
    """
    key = (record.topic, record.queue_id)
    queue = consume_queues.get(key)
    if queue is not None and record.phys_offset + record.total_size <= queue.max_phys_end:
        return False
    if record.phys_offset < dispatch_point:
        return True
    expected = next_expected.get(key, queue.max_queue_offset if queue is not None else 0)
    next_expected[key] = record.queue_offset + 1
    return record.queue_offset > expected


def _note_truncation(truncations: dict[tuple[str, int], CqTruncation], key: tuple[str, int], queue: ConsumeQueue,
                     units: int) -> None:
    if not units:
        return
    known = truncations.get(key)
    if known is None:
        truncations[key] = CqTruncation(key[0], key[1], queue.max_queue_offset, units, units * c.CQ_UNIT_SIZE_BYTES)
    else:
        known.first_queue_offset = queue.max_queue_offset
        known.units += units
        known.bytes += units * c.CQ_UNIT_SIZE_BYTES


def drop_unmatched_tail(commitlog: CommitLog, queue: ConsumeQueue) -> int:
    """Drop the queue's last units while no record header claims them (`_unit_matches`: a torn or
    garbled unit); returns how many were dropped.

    Walks back from the tail and stops at the first unit that matches, or that points below the
    commitlog's first byte (its record is gone; nothing to check it against). Holes are passed
    over: trailing ones are dropped with the commitlog's tail.
    """
    queue_offset = queue.max_queue_offset
    keep = queue_offset
    while queue_offset > queue.min_queue_offset:
        unit = queue.unit_at(queue_offset - 1)
        if unit is None:
            break
        phys_offset, size, _tag = unit
        if is_hole(phys_offset, size):
            queue_offset -= 1
            continue
        if phys_offset < commitlog.min_phys_offset or _unit_matches(commitlog, queue, queue_offset - 1, phys_offset,
                                                                    size):
            break
        queue_offset -= 1
        keep = queue_offset
    dropped = queue.max_queue_offset - keep
    if dropped:
        queue.truncate_to(keep)
        log.warning("%s-%d: dropped %d units at the tail that match no record", queue.topic, queue.queue_id, dropped)
    return dropped


def _unit_matches(commitlog: CommitLog, queue: ConsumeQueue, queue_offset: int, phys_offset: int, size: int) -> bool:
    """Whether a record's header at `phys_offset` claims this unit: its size, its own phys
    offset, this queue id and queue offset. The header only: a record whose body was damaged
    keeps its unit (a read then steps over it), so its queue offset is never handed out twice."""
    mapped = commitlog.segment_for(phys_offset)
    if mapped is None or size < HEADER.size or phys_offset + size > mapped.end_offset:
        return False
    fields = HEADER.unpack_from(mapped.buffer, phys_offset - mapped.start_offset)
    total_size, magic, _crc, queue_id, _flag, record_queue_offset, record_phys_offset = fields[:7]
    return (total_size == size and magic == c.RECORD_MAGIC and record_phys_offset == phys_offset
            and queue_id == queue.queue_id and record_queue_offset == queue_offset)


def _has_data_after(commitlog: CommitLog, end: int) -> bool:
    """Whether any non-zero byte lies at or after `end` (a torn tail to cut)."""
    for mapped in commitlog.segments:
        if mapped.end_offset <= end:
            continue
        start = max(0, end - mapped.start_offset)
        if mapped.data_end(start) > start:
            return True
    return False


def _torn_end(commitlog: CommitLog, end: int) -> int:
    """Where the fault switch recovery-keep-torn-tail puts the write position: after the torn
    record's claimed size when its header looks like a record's, else after the segment's data."""
    mapped = commitlog.segment_for(end)
    if mapped is None:
        return end
    position = end - mapped.start_offset
    size, magic = peek_size_and_magic(mapped.buffer, position) if mapped.size_bytes - position >= 8 else (0, 0)
    if magic == c.RECORD_MAGIC and 0 < size <= mapped.size_bytes - position:
        return max(end + size, mapped.start_offset + mapped.data_end(position))
    return mapped.start_offset + mapped.data_end(position)
