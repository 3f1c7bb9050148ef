"""Sampling profiles of a benchmark row (`mqlab bench pull --profile DIR`): py-spy, no native frames.

Owns starting `py-spy record` on each process of a row (its client processes, the master, the
slave) for the row's measuring windows, and turning the raw stacks into a text summary per
process: the frames where samples were taken (self) and the functions on the stack (total), each
in % of the process's samples and in microseconds per message of the row. Only samples of a
thread holding the GIL count (`--gil`): a thread waiting in a syscall (epoll, a condition,
fsync) is not work, and without `--gil` py-spy counts many such waits as busy. Samples / rate
is time spent holding the GIL, which on a machine with more runnable threads than cores
includes time the holder waited for a core: read the shares, and take CPU per message from
the benchmark's own table (the kernel's count).
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

PROFILE_RATE_HZ = 250
PROFILE_TOP = 25
PY_SPY_STOP_BUDGET_S = 30.0
_LINENO = re.compile(r":\d+\)$")


def py_spy() -> str | None:
    """py-spy beside this interpreter (the venv's), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def py_spy_missing() -> str | None:
    if py_spy() is None:
        return "--profile needs py-spy: install the dev extra, e.g. `pip install -e '.[dev]'`"
    return None


class RowProfile:
    """py-spy on each named process of one row, for `seconds`."""

    def __init__(self, out_dir: Path, row: str, pids: dict[str, int], seconds: float) -> None:
        self.out_dir = out_dir
        self.row = row
        out_dir.mkdir(parents=True, exist_ok=True)
        self._procs: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
        duration = str(max(1, round(seconds)))  # an upper bound: `finish` stops it when the row ends
        for name, pid in pids.items():
            raw = out_dir / f"{row}.{name}.raw.txt"
            cmd = [py_spy() or "py-spy", "record", "--pid", str(pid), "--duration", duration, "--rate", str(PROFILE_RATE_HZ),
                   "--format", "raw", "--output", str(raw), "--nonblocking", "--gil"]
            self._procs[name] = (subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                  stderr=subprocess.DEVNULL), raw)

    def finish(self, messages: int) -> Path:
        """Wait for every py-spy, write `<row>.summary.txt`; returns its path."""
        sections = []
        for proc, _ in self._procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # the row is over: py-spy writes what it has and exits
        for name, (proc, raw) in self._procs.items():
            try:
                proc.wait(PY_SPY_STOP_BUDGET_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            stacks = read_raw(raw) if raw.exists() else Counter()
            sections.append(summarize(name, stacks, messages))
        path = self.out_dir / f"{self.row}.summary.txt"
        path.write_text(f"row {self.row}: {messages} messages, py-spy at {PROFILE_RATE_HZ} Hz\n\n" + "\n".join(sections))
        return path

    def cancel(self) -> None:
        for proc, _ in self._procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def read_raw(path: Path) -> Counter[tuple[str, ...]]:
    """py-spy's raw format: `frame;frame;...;leaf count` per line (root first)."""
    stacks: Counter[tuple[str, ...]] = Counter()
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks[tuple(_LINENO.sub(")", frame) for frame in stack.split(";"))] += int(count)
    return stacks


def summarize(name: str, stacks: Counter[tuple[str, ...]], messages: int, top: int = PROFILE_TOP) -> str:
    """Top frames by self and by total samples, as % and as CPU us per message."""
    total = sum(stacks.values())
    self_counts: Counter[str] = Counter()
    incl_counts: Counter[str] = Counter()
    for stack, count in stacks.items():
        if not stack:
            continue
        self_counts[stack[-1]] += count
        for frame in set(stack):
            incl_counts[frame] += count

    def us(count: int) -> float:
        return count / PROFILE_RATE_HZ * 1e6 / messages if messages else 0.0

    lines = [f"== {name}: {total} samples = {us(total):.1f} us/msg holding the GIL"]
    for title, counts in (("self", self_counts), ("total", incl_counts)):
        lines.append(f"-- top {top} by {title}: %  us/msg  frame")
        for frame, count in counts.most_common(top):
            lines.append(f"{100 * count / total if total else 0:5.1f}% {us(count):7.2f}  {frame}")
    return "\n".join(lines) + "\n"
