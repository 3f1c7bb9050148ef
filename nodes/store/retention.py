"""Retention: deleting old commitlog segments and the consume-queue files below them
(RocketMQ's CleanCommitLogService, then CleanConsumeQueueService).

Owns: when a pass deletes (the disk's used ratio above `disk_max_used_space_ratio`: expired
segments; above `disk_space_clean_forcibly_ratio`: sealed segments of any age), which segments
(oldest first, never the newest, stopping at the first one it may not delete so the log keeps
no holes, at most DELETE_FILES_BATCH_MAX per pass), the deletion itself and its
`retention-delete` events. The pass is scheduled by the broker's clean service.

RocketMQ also deletes expired segments at the `deleteWhen` hour (04:00) whatever the disk
use; this store deletes only when the disk asks for it.

Readers: a pass runs on the thread every read runs on (the broker's event loop), so no read
is in flight in a segment it deletes; a reader still holding a view into the map (none is
kept across calls) makes mmap refuse to close, and that segment waits for the next pass. The
flusher runs on another thread: a pass runs only while no flush is in progress.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodes.common import constants as c
from nodes.common.config import StoreConfig
from nodes.store.disk_guard import is_over

if TYPE_CHECKING:
    from nodes.store.store_files import StoreFiles

log = logging.getLogger(__name__)


class CleanMode(enum.Enum):
    EXPIRED = "expired"  # only segments older than the reserved time
    FORCED = "forced"  # sealed segments of any age


def clean_mode(ratio: float, config: StoreConfig) -> CleanMode | None:
    """What a pass may delete at this used ratio; None: nothing (the disk has room)."""
    if is_over(ratio, config.disk_space_clean_forcibly_ratio):
        return CleanMode.FORCED
    if is_over(ratio, config.disk_max_used_space_ratio):
        return CleanMode.EXPIRED
    return None


def segments_to_delete(segments: Sequence[tuple[int, int]], *, now_ms: int, reserved_ms: int, mode: CleanMode,
                       batch_max: int = c.DELETE_FILES_BATCH_MAX) -> list[tuple[int, str]]:
    """The segments one pass deletes, as (start_phys_offset, why), from `segments` =
    (start_phys_offset, mtime_ms) oldest first: never the newest (it takes writes), oldest
    first, stopping at the first that may not go (no holes), at most `batch_max`. `why` is
    "expired" for a segment past the reserved time, else "forced"."""
    chosen: list[tuple[int, str]] = []
    for start_phys_offset, mtime_ms in segments[:-1]:
        if len(chosen) >= batch_max:
            break
        expired = now_ms - mtime_ms >= reserved_ms
        if not expired and mode is not CleanMode.FORCED:
            break
        chosen.append((start_phys_offset, CleanMode.EXPIRED.value if expired else CleanMode.FORCED.value))
    return chosen


def _mtime_ms(path: Path) -> int:
    try:
        return int(path.stat().st_mtime * 1000)
    except OSError:
        return 0  # gone or unreadable: as old as can be


def clean_pass(files: StoreFiles, *, now_ms: int, reserved_ms: int) -> list[dict[str, Any]]:
    """One pass over `files`; returns the `retention-delete` events of what it deleted."""
    ratio = files.disk.measure()
    mode = clean_mode(ratio, files.config)
    if mode is None:
        return []
    # A flush syncs segments on another thread: never unmap one under it (skip this pass instead).
    if not files.flush_lock.acquire(blocking=False):
        log.info("retention: a flush is in progress; cleaning on the next pass")
        return []
    events: list[dict[str, Any]] = []
    try:
        with files.lock:
            commitlog = files.commitlog
            segments = [(mapped.start_offset, _mtime_ms(mapped.path)) for mapped in commitlog.segments]
            for start_phys_offset, why in segments_to_delete(segments, now_ms=now_ms, reserved_ms=reserved_ms,
                                                              mode=mode):
                mapped = commitlog.delete_first_segment()
                if mapped is None:
                    break
                assert mapped.start_offset == start_phys_offset
                log.warning("retention deleted commitlog segment %s (%s; disk %.2f used)", mapped.path.name, why, ratio)
                events.append({"event": "retention-delete", "store": "commitlog",
                               "file": f"commitlog/{mapped.path.name}", "phys_offset": start_phys_offset,
                               "bytes": mapped.size_bytes, "why": why, "ratio": ratio})
            min_phys_offset = commitlog.min_phys_offset
            for queue in list(files.consume_queues.values()):
                for name in queue.delete_files_below(min_phys_offset):
                    events.append({"event": "retention-delete", "store": "consume-queue",
                                   "file": f"consumequeue/{queue.topic}/{queue.queue_id}/{name}",
                                   "queue_offset": int(name) // c.CQ_UNIT_SIZE_BYTES,
                                   "phys_offset": None, "why": "below-min-phys-offset",
                                   "min_phys_offset": min_phys_offset, "ratio": ratio})
    finally:
        files.flush_lock.release()
    return events
