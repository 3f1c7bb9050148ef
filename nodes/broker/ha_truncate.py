"""Cutting a running replica's commitlog back to a common prefix with its master.

Owns one operation: drop every commitlog byte from a phys offset on, the consume-queue units
that point there, and move dispatch back, all under the store's lock, as startup recovery does
for a torn tail. A slave does this only when its master showed (CRC of the bytes below) that
both logs agree up to that offset: what lies beyond it the master never kept.

The store has no public call for this yet; it reaches into `MessageStore`'s files the way
recovery does (the same three steps, in the same order).
"""

from __future__ import annotations

import logging

from nodes.store.message_store import MessageStore

log = logging.getLogger(__name__)


def truncate_replica(store: MessageStore, phys_offset: int) -> int:
    """Discard the commitlog from `phys_offset` on; returns the bytes discarded."""
    files = store._files  # the store has no public call for this (module docstring)
    with files.lock:
        files.check_open()
        dropped_bytes = files.commitlog.truncate_after(phys_offset)
        units = sum(queue.truncate_after_phys(phys_offset) for queue in list(files.consume_queues.values()))
        dispatcher = files.dispatcher
        dispatcher.reput_from_phys_offset = min(dispatcher.reput_from_phys_offset, phys_offset)
        dispatcher.damaged_ranges[:] = [(a, b) for a, b in dispatcher.damaged_ranges if b <= phys_offset]
        queue_ends = {f"{q.topic}/{q.queue_id}": q.max_queue_offset for q in files.consume_queues.values()}
    # What the fsyncs made durable only ever grows; the bytes cut are no longer there, so the
    # recorded positions come back to the cut (a later power loss must drop what is rewritten
    # above it until the next fsync), then a flush records them.
    flushed_lock = getattr(files, "_flushed_lock", None)
    if flushed_lock is not None:
        with flushed_lock:
            files._flushed_commitlog = min(files._flushed_commitlog, phys_offset)
            for key, queue_offset in list(files._flushed_queues.items()):
                files._flushed_queues[key] = min(queue_offset, queue_ends.get(key, 0))
    files.flush()
    log.warning("replica log cut at phys offset %d: %d bytes and %d consume-queue units dropped",
                phys_offset, dropped_bytes, units)
    return dropped_bytes
