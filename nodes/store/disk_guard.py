"""The disk guard: whether the store may take writes, by the use of the filesystems it lives on
(RocketMQ's DefaultMessageStore#isSpaceFull and its running flags DISK_FULL / WRITE_LOGICS_QUEUE_ERROR).

Owns: measuring the used ratio of the filesystems holding the commitlog and the consume queues
as RocketMQ does, the disk-full flag (set above `disk_space_warning_level_ratio` by a check, or
at once by a segment allocation that failed with ENOSPC; cleared by the next check at or below
the ratio), the logic-queue error flag (a consume-queue write failed: puts wait until dispatch
caught up), the refusal remark, and the `disk-guard` events of each flip. Does not schedule
its checks (the broker's disk check service does) nor delete anything (retention.py).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from nodes.common.config import StoreConfig

log = logging.getLogger(__name__)

UNMEASURED = -1.0  # RocketMQ's answer for a path it cannot measure


def used_ratio(used_bytes: int, available_bytes: int) -> float:
    """used / (used + available) as a fraction rounded UP to a whole percent (90.01 % is 0.91),
    as UtilAll#getDiskPartitionSpaceUsedPercent computes it; `available` excludes the blocks
    reserved for root. -1 for a filesystem with no space at all."""
    entire = used_bytes + available_bytes
    if entire <= 0 or used_bytes < 0:
        return UNMEASURED
    percent = used_bytes * 100 // entire + (1 if used_bytes * 100 % entire else 0)
    return percent / 100


def measure(path: Path) -> float:
    """The used ratio of the filesystem holding `path` (its nearest existing ancestor: the
    commitlog directory appears with the first write); -1 when it cannot be measured."""
    return measure_space(path)[0]


def measure_space(path: Path) -> tuple[float, int]:
    """(`measure`'s used ratio, the bytes free to unprivileged writers) from one look at the
    filesystem holding `path`; (-1, -1) when it cannot be measured."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        st = os.statvfs(probe)
    except OSError:
        return UNMEASURED, -1
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    available = st.f_bavail * st.f_frsize
    return used_ratio(used, available), available


def is_over(ratio: float, limit: float) -> bool:
    """Strictly above: at exactly the limit a check accepts writes again (RocketMQ's `>`)."""
    return ratio > limit


def disk_full_remark(commitlog_ratio: float, consume_queue_ratio: float, root: Path, warning_ratio: float) -> str:
    """RocketMQ's SERVICE_NOT_AVAILABLE remark, with where and what to do."""
    return ("service not available now. It may be caused by one of the following reasons: the broker's disk is "
            f"full [CL: {commitlog_ratio:.2f} CQ: {consume_queue_ratio:.2f} INDEX: -1], messages are put to the "
            f"slave, message store has been shut down, etc. (store {root}: writes are refused while its disk is "
            f"used above disk_space_warning_level_ratio {warning_ratio:.2f}; free space there, or send to another "
            "broker)")


class DiskGuard:
    def __init__(self, root: Path, config: StoreConfig) -> None:
        self.root = root
        self.config = config
        # FAULT SWITCH ignore-disk-full: breaks "a full disk refuses puts with SERVICE_NOT_AVAILABLE".
        self.enabled = not config.ignore_disk_full
        self.full = False
        self.logic_queue_error = False
        self.commitlog_ratio = UNMEASURED
        self.consume_queue_ratio = UNMEASURED
        self.checks = 0
        self.refusals = 0

    @property
    def commitlog_path(self) -> Path:
        return self.root / "commitlog"

    @property
    def consume_queue_path(self) -> Path:
        return self.root / "consumequeue"

    @property
    def ratio(self) -> float:
        """The higher of the two measured ratios (they are one filesystem unless mounted apart)."""
        return max(self.commitlog_ratio, self.consume_queue_ratio)

    def measure(self) -> float:
        self.commitlog_ratio = measure(self.commitlog_path)
        self.consume_queue_ratio = measure(self.consume_queue_path)
        return self.ratio

    def check(self) -> dict[str, Any] | None:
        """Measure and set the disk-full flag from the ratios; the `disk-guard` event of a flip, or None."""
        self.checks += 1
        ratio = self.measure()
        full = self.enabled and is_over(ratio, self.config.disk_space_warning_level_ratio)
        if full == self.full:
            return None
        self.full = full
        if full:
            log.error("disk full: %s is %.2f used, above %.2f; refusing puts", self.root, ratio,
                      self.config.disk_space_warning_level_ratio)
        else:
            log.warning("disk usable again: %s is %.2f used; accepting puts", self.root, ratio)
        return self.event("on" if full else "off", "check")

    def note_enospc(self, detail: str) -> dict[str, Any] | None:
        """A file could not be allocated: disk-full at once (the next check that finds room
        clears it). Returns the `disk-guard` event of the flip, or None."""
        log.error("disk full: %s", detail)
        if not self.enabled or self.full:
            return None
        self.measure()
        self.full = True
        return self.event("on", "enospc", detail)

    def event(self, state: str, cause: str, detail: str = "") -> dict[str, Any]:
        event: dict[str, Any] = {
            "event": "disk-guard", "state": state, "cause": cause, "path": str(self.root),
            "commitlog_ratio": self.commitlog_ratio, "consume_queue_ratio": self.consume_queue_ratio,
            "warning_ratio": self.config.disk_space_warning_level_ratio,
            "clean_forcibly_ratio": self.config.disk_space_clean_forcibly_ratio,
            "max_used_ratio": self.config.disk_max_used_space_ratio}
        if detail:
            event["detail"] = detail
        return event

    def remark(self) -> str:
        return disk_full_remark(self.commitlog_ratio, self.consume_queue_ratio, self.root,
                                self.config.disk_space_warning_level_ratio)

    def describe(self) -> dict[str, Any]:
        return {"full": self.full, "logic_queue_error": self.logic_queue_error, "enabled": self.enabled,
                "commitlog_ratio": self.commitlog_ratio, "consume_queue_ratio": self.consume_queue_ratio,
                "checks": self.checks, "refusals": self.refusals}
