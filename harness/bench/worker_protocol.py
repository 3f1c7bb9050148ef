"""The line protocol every benchmark worker speaks, and its measuring windows.

Protocol on stdout: `READY` once set up, then the worker waits for `GO` on stdin, counts what
completes in `windows` back-to-back windows of `seconds` each, prints `RESULT {json}` and
exits. Windows start at GO, so the windows of workers started together line up and the
benchmark can sum them (and take the median). Any failure prints `ERROR <text>` and exits 1.
If stdin closes early (the benchmark died or gave up), the worker exits at once, so none
outlives a run.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from typing import Any

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Linux: SIGKILL this process when the benchmark process dies, whatever kills it."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # not Linux: the stdin watchdog below still ends us


def emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def await_go() -> None:
    """Block until the benchmark says GO; exit if it closes stdin instead. Afterwards a
    watchdog thread ends the process as soon as stdin closes."""
    line = sys.stdin.readline()
    if line.strip() != "GO":
        sys.exit(3)

    def watchdog() -> None:
        sys.stdin.read()
        os._exit(3)

    threading.Thread(target=watchdog, name="stdin-watchdog", daemon=True).start()


class Windows:
    """Completions counted into `count` back-to-back windows of `seconds`, from `start`."""

    def __init__(self, start: float, seconds: float, count: int) -> None:
        self.start = start
        self.seconds = seconds
        self.messages = [0] * count
        self.end = start + seconds * count
        self._cpu_start_s = time.process_time()
        self.cpu_s: float | None = None  # this process's CPU (every thread) over the windows

    def close(self) -> None:
        """The windows are over: take the process's CPU time spent in them."""
        if self.cpu_s is None:
            self.cpu_s = time.process_time() - self._cpu_start_s

    @classmethod
    def from_now(cls, job: dict[str, Any]) -> Windows:
        return cls(time.monotonic(), job["seconds"], job.get("windows", 1))

    def is_open(self) -> bool:
        return time.monotonic() < self.end

    def add(self, count: int) -> None:
        index = int((time.monotonic() - self.start) / self.seconds)
        if 0 <= index < len(self.messages):
            self.messages[index] += count


def result(windows: list[int], window_seconds: float, errors: int = 0, *, cpu_s: float | None = None,
           **extra: Any) -> dict[str, Any]:
    return {"windows": windows, "window_seconds": window_seconds, "errors": errors, "cpu_s": cpu_s, **extra}
