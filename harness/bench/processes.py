"""The benchmark's child processes and what the brokers spend while they run.

Owns `Child` (a worker or the limits server: a line protocol on stdout, GO / EOF on stdin,
stopped and reaped whatever happens) and `BrokerCpu` (the master's and slave's CPU over a
case's measuring windows). The runner decides what runs when.
"""

from __future__ import annotations

import os
import queue
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from harness.cluster import LocalCluster
from harness.errors import HarnessError

WORKER_STOP_GRACE_S = 3.0
BROKER_NODES = {"master": "broker-a-0", "slave": "broker-a-1"}  # the default topology's broker a


class BenchError(HarnessError):
    """The benchmark could not run (a worker would not start, the slave never caught up...)."""


class Child:
    """A worker or the limits server: line protocol on stdout, GO / EOF on stdin."""

    def __init__(self, argv: Sequence[str], name: str, log_dir: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        log_dir.mkdir(parents=True, exist_ok=True)
        self._stderr_path = log_dir / f"{name}.stderr.log"
        self._stderr = self._stderr_path.open("wb")
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                     text=True, bufsize=1, cwd=Path.cwd(), env={**os.environ, **(env or {})})
        self._reader = threading.Thread(target=self._read, name=f"bench-{name}-stdout", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def expect(self, word: str, budget_s: float) -> str:
        """The rest of the first stdout line starting with `word`; BenchError on ERROR, EOF or timeout."""
        deadline = time.monotonic() + budget_s
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise BenchError(f"{self.name}: no {word} within {budget_s:.0f} s{self._tail()}") from None
            if line is None:
                raise BenchError(f"{self.name} exited (code {self.proc.poll()}) before {word}{self._tail()}")
            if line.startswith("ERROR"):
                raise BenchError(f"{self.name}: {line[6:]}{self._tail()}")
            if line == word or line.startswith(word + " "):
                return line[len(word):].strip()

    def _tail(self) -> str:
        try:
            text = self._stderr_path.read_text(errors="replace").strip().splitlines()[-5:]
        except OSError:
            return ""
        return ("; stderr: " + " | ".join(text)) if text else ""

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("GO\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        """Close stdin (the child exits on EOF), then SIGTERM, then SIGKILL; reap it."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(WORKER_STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                self.proc.wait(WORKER_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._stderr.close()



class BrokerCpu:
    """The master's and slave's CPU seconds between `start` and `seconds` later (a timer
    thread takes the second reading, so it lines up with the workers' windows), or `finish`
    if that comes first."""

    def __init__(self, cluster: LocalCluster, extra_pids: dict[str, int] | None = None) -> None:
        self._procs: dict[str, psutil.Process] = {}
        for role, pid in (extra_pids or {}).items():  # a peer's server (redis), read the same way
            try:
                self._procs[role] = psutil.Process(pid)
            except psutil.Error:
                continue
        for role, node_id in BROKER_NODES.items():
            try:
                pid = cluster.node(node_id).pid
                if pid is not None:
                    self._procs[role] = psutil.Process(pid)
            except (HarnessError, psutil.Error):
                continue
        self._first: dict[str, float] = {}
        self._used: dict[str, float] | None = None
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def _read(self) -> dict[str, float]:
        now: dict[str, float] = {}
        for role, proc in self._procs.items():
            try:
                times = proc.cpu_times()
            except psutil.Error:  # gone meanwhile: its CPU is unknown
                continue
            now[role] = times.user + times.system
        return now

    def start(self, seconds: float) -> None:
        self._first = self._read()
        self._timer = threading.Timer(seconds, self.finish)
        self._timer.daemon = True
        self._timer.start()

    def finish(self) -> None:
        """Take the second reading now unless the timer took it."""
        with self._lock:
            if self._used is None:
                last = self._read()
                self._used = {role: last[role] - first for role, first in self._first.items() if role in last}

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def used_s(self) -> dict[str, float]:
        """CPU seconds of each broker over the windows; {} before `finish`."""
        return dict(self._used or {})
