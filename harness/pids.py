"""Process-table helpers: liveness, sessions, exit codes and log tails.

Owns reading the OS's view of processes (psutil, /proc) for the harness and the CLI; does
not start or signal nodes itself (`harness.process` does, `mqlab down` does).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil

from nodes.common import constants as c

LOG_TAIL_LINES = 50
LOG_TAIL_BYTES_MAX = 256 * 1024
POLL_INTERVAL_S = 0.02
KILL_REAP_BUDGET_MS = 5_000  # after SIGKILL the kernel needs a moment, never this long


def signal_name(code: int | None) -> str | None:
    """`SIGBUS` for an exit code of -7 (killed by a signal), None for a normal exit or a live process."""
    if code is None or code >= 0:
        return None
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def describe_exit_code(code: int | None) -> str:
    if code is None:
        return "is still running"
    if code < 0:
        return f"was killed by {signal_name(code)}"
    meaning = {c.EXIT_OK: "clean stop", c.EXIT_CRASH: "crash: broken invariant",
               c.EXIT_CONFIG: "bad config"}.get(code)
    return f"exited with code {code}" + (f" ({meaning})" if meaning else "")


def tail_lines(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last `lines` lines of a text file ([] if it is missing)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - LOG_TAIL_BYTES_MAX))
            data = f.read()
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()[-lines:]


def pid_alive(pid: int) -> bool:
    """True if `pid` exists and is not a zombie (an unreaped corpse counts as gone)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def is_node_process(pid: int, node_run_dir: str | Path) -> bool:
    """True if `pid` is a live node started for `node_run_dir` (guards against reused pids).

    Nodes run with their run dir as cwd and `--config <run_dir>/config.json` on the command line.
    """
    run_dir = str(Path(node_run_dir).absolute())
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return proc.cwd() == run_dir or str(Path(run_dir) / "config.json") in proc.cmdline()
    except psutil.Error:
        return False


def session_pids(sid: int) -> list[int]:
    """Live (non-zombie) pids whose session id is `sid`."""
    pids = []
    for p in psutil.process_iter(["status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and os.getsid(p.pid) == sid:
                pids.append(p.pid)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return pids


def wait_gone(pids: list[int], budget_ms: int) -> list[int]:
    """Wait until none of `pids` is alive or the budget ends; return those still alive."""
    deadline = time.monotonic() + budget_ms / 1000
    while True:
        alive = [p for p in pids if pid_alive(p)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(POLL_INTERVAL_S)
