"""Exits nobody asked for, and the last line of defence against orphaned nodes.

`UnexpectedExit` is the record the harness keeps of a node that died while it was supposed to be
running (supervision without auto-restart: nothing is hidden, nothing is restarted). The live
registry holds every process group the harness may still own; an atexit hook SIGKILLs them, so an
interpreter that dies on an exception leaves no node behind.
"""

from __future__ import annotations

import atexit
import threading
import time
from dataclasses import dataclass
from typing import Protocol

from harness.pids import describe_exit_code


@dataclass(frozen=True)
class UnexpectedExit:
    """A node that exited while it was supposed to be running."""

    node_id: str
    pid: int
    exit_code: int
    at_wall_ms: int
    log_tail: str

    @property
    def exit_description(self) -> str:
        return describe_exit_code(self.exit_code)

    def __str__(self) -> str:
        at = time.strftime("%H:%M:%S", time.localtime(self.at_wall_ms / 1000))
        return f"{self.node_id} (pid {self.pid}) {self.exit_description} at {at}"


class ProcessGroupOwner(Protocol):
    def sigkill_group(self) -> None:
        """SIGKILL the owned process group now, if its leader is not reaped yet."""


_live: set[ProcessGroupOwner] = set()
_live_lock = threading.Lock()


def mark_live(owner: ProcessGroupOwner) -> None:
    """`owner` may have a live process group from now on."""
    with _live_lock:
        _live.add(owner)


def mark_gone(owner: ProcessGroupOwner) -> None:
    """`owner`'s process group is gone, or no longer the harness's to kill (detached)."""
    with _live_lock:
        _live.discard(owner)


def _kill_live_at_exit() -> None:
    with _live_lock:
        owners = list(_live)
    for owner in owners:
        owner.sigkill_group()


atexit.register(_kill_live_at_exit)
