"""The `checkpoint` file: store timestamps of the last flushed commitlog record, consume-queue
unit and index entry (RocketMQ's StoreCheckpoint), which bound how far back an abnormal
recovery has to re-check the commitlog.

    ┌─────────────────────────────┬─────────────────────────────┬────────────────────────────┐
    │ physic_msg_timestamp_ms (8) │ logics_msg_timestamp_ms (8) │ index_msg_timestamp_ms (8) │ = 24 bytes
    └─────────────────────────────┴─────────────────────────────┴────────────────────────────┘

Owns the file's format and its atomic replacement; not when it is written (the store's flush).
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from nodes.common import constants as c

log = logging.getLogger(__name__)

CHECKPOINT = struct.Struct(">qqq")
assert CHECKPOINT.size == 24


@dataclass(frozen=True, slots=True)
class Checkpoint:
    physic_msg_timestamp_ms: int = 0
    logics_msg_timestamp_ms: int = 0
    # We keep no message index; the field stays for RocketMQ's layout and is written as 0.
    index_msg_timestamp_ms: int = 0

    def recovery_timestamp_ms(self) -> int:
        """Records stored at or before this are known flushed and indexed (minus a safety margin)."""
        return min(self.physic_msg_timestamp_ms, self.logics_msg_timestamp_ms) - c.CHECKPOINT_SAFETY_MS


def read_checkpoint(path: Path) -> Checkpoint:
    """The checkpoint at `path`; all zeros (recover from the first segment) if missing or short."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return Checkpoint()
    if len(data) < CHECKPOINT.size:
        log.warning("checkpoint %s is %d bytes, expected %d; ignoring it", path, len(data), CHECKPOINT.size)
        return Checkpoint()
    return Checkpoint(*CHECKPOINT.unpack_from(data))


def write_checkpoint(path: Path, checkpoint: Checkpoint) -> None:
    """Replace the checkpoint atomically (write a temp file, fsync, rename).

    Raises:
        OSError: the temp file could not be written (a full disk); it is removed and the old
            checkpoint is left as it was.
    """
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(CHECKPOINT.pack(checkpoint.physic_msg_timestamp_ms, checkpoint.logics_msg_timestamp_ms,
                                    checkpoint.index_msg_timestamp_ms))
            f.flush()
            os.fsync(f.fileno())
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
