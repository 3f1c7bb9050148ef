"""Cutting a running replica's commitlog back to a common prefix with its master.

Owns one decision: a slave cuts its log (MessageStore.truncate_to: the commitlog from a phys
offset on, the consume-queue units that point there, dispatch moved back) only when its master
showed (CRC of the bytes below) that both logs agree up to that offset: what lies beyond it the
master never kept.
"""

from __future__ import annotations

import logging

from nodes.store.message_store import MessageStore

log = logging.getLogger(__name__)


def truncate_replica(store: MessageStore, phys_offset: int) -> int:
    """Discard the commitlog from `phys_offset` on; returns the bytes discarded."""
    dropped_bytes, units = store.truncate_to(phys_offset)
    log.warning("replica log cut at phys offset %d: %d bytes and %d consume-queue units dropped",
                phys_offset, dropped_bytes, units)
    return dropped_bytes
