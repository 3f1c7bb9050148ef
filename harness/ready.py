"""The READY handshake: the one line a node prints on stdout when it serves, and where the
harness reads it from while the node starts.

A node prints exactly one `READY {json}` line on stdout once it serves; anything else it prints
goes to its run dir's stdout.log. An attached node's stdout is a pipe (`PipeLines`); a detached
node's is stdout.log itself (`FileLines`), so the node outlives the harness.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

READY_PREFIX = "READY "
POLL_INTERVAL_S = 0.02  # how long one look for the next line waits


@dataclass(frozen=True)
class Ready:
    """The node's READY line: `READY {"node_id", "role", "addr", "port", "pid"}`."""

    node_id: str
    port: int
    pid: int
    role: str = ""
    addr: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, line: str) -> Ready:
        if not line.startswith(READY_PREFIX):
            raise ValueError(f"not a READY line: {line[:80]!r}")
        data = json.loads(line[len(READY_PREFIX):])
        if not isinstance(data, dict) or not {"node_id", "port", "pid"} <= set(data):
            raise ValueError(f"READY line lacks node_id/port/pid: {line[:200]!r}")
        known = {"node_id", "port", "pid", "role", "addr"}
        return cls(node_id=str(data["node_id"]), port=int(data["port"]), pid=int(data["pid"]),
                   role=str(data.get("role", "")), addr=str(data.get("addr", "")),
                   extra={k: v for k, v in data.items() if k not in known})


class StdoutLines(Protocol):
    def next_line(self) -> str | None:
        """The next stdout line: '' if none came within POLL_INTERVAL_S, None at end of stdout."""


class PipeLines:
    """Reads a node's stdout pipe on a thread: lines up to READY are handed to `next_line`,
    and everything is copied to stdout.log (so a node's later prints never block on a full pipe)."""

    def __init__(self, proc: subprocess.Popen[bytes], stdout_log: Path, *, name: str) -> None:
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(proc, stdout_log), name=name, daemon=True).start()

    def next_line(self) -> str | None:
        try:
            return self._lines.get(timeout=POLL_INTERVAL_S)
        except queue.Empty:
            return ""

    def _read(self, proc: subprocess.Popen[bytes], stdout_log: Path) -> None:
        assert proc.stdout is not None
        ready_seen = False
        with proc.stdout, stdout_log.open("ab", buffering=0) as sink:
            for raw in proc.stdout:
                text = raw.decode("utf-8", "replace").rstrip("\n")
                if not ready_seen:
                    self._lines.put(text)
                    ready_seen = text.startswith(READY_PREFIX)
                sink.write(raw)
        self._lines.put(None)


class FileLines:
    """Tails stdout.log from where it ended when the node was spawned (a detached node's stdout).

    Never reports the end of stdout: the harness learns of a detached node's exit from its pid.
    """

    def __init__(self, stdout_log: Path, offset: int) -> None:
        self._path = stdout_log
        self._offset = offset

    def next_line(self) -> str:
        try:
            with self._path.open("rb") as f:
                f.seek(self._offset)
                chunk = f.readline()
        except OSError:
            chunk = b""
        if not chunk.endswith(b"\n"):
            time.sleep(POLL_INTERVAL_S)
            return ""
        self._offset += len(chunk)
        return chunk.decode("utf-8", "replace").rstrip("\n")
