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
from nodes.store.consume_queue import ConsumeQueue
from nodes.store.dispatch import Dispatcher, Step, scan_step
from nodes.store.record import STORE_TIMESTAMP_FIELD, STORE_TIMESTAMP_POS, Record, RecordKind, check_at

log = logging.getLogger(__name__)


@dataclass
class RecoveryReport:
    clean_shutdown: bool
    commitlog_min_phys_offset: int
    commitlog_max_phys_offset: int
    truncated_bytes: int
    damaged_ranges: list[tuple[int, int]] = field(default_factory=list)
    redispatched_records: int = 0
    consume_queues: int = 0


@dataclass
class _Walk:
    end_phys_offset: int
    damaged_ranges: list[tuple[int, int]]
    queue_lost_units: bool


def recover(commitlog: CommitLog, consume_queues: Mapping[tuple[str, int], ConsumeQueue],
            dispatcher: Dispatcher, *, clean_shutdown: bool, checkpoint: Checkpoint,
            trust_checkpoint: bool = False) -> RecoveryReport:
    """Recover a loaded commitlog and loaded consume queues; leaves `dispatcher` caught up.

    `trust_checkpoint` is the test-only fault switch recovery-trust-checkpoint
    (constants.FAULT_RECOVERY_TRUST_CHECKPOINT).
    """
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
    truncated_bytes = commitlog.truncate_after(end)
    if truncated_bytes:
        log.warning("commitlog: discarded %d bytes of torn tail after phys offset %d", truncated_bytes, end)
    for queue in consume_queues.values():
        queue.truncate_after_phys(end)
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
        consume_queues=len(consume_queues))
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
