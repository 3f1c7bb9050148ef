"""A chaos run's fault windows, read from its `nemesis/nemesis.jsonl` as the file grows.

The nemesis writes two flushed lines per action (phase `start` before the harness call, `end`
after it), joined to the fault they undo by `fault_id` (docs/history.md, "nemesis.jsonl"). This
module reads that contract on its own (the harness never imports the chaos layer that writes it):
a window opens at a fault's `start` and closes at the `end` of its recovery; a heal without a
fault id closes every partition; an instant fault (`corrupt`) closes at its own end.

`FaultTail.poll()` reads only the bytes appended since the last poll and keeps a torn last line
for the next one, so a live page can poll it every second for the whole of a long run.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

NEMESIS_JSONL = Path("nemesis") / "nemesis.jsonl"

# fault op -> the op that undoes it (chaos.nemesis_ops.RECOVERY_OP, the history contract)
RECOVERY_OPS = {"kill": "restart", "stop": "restart", "pause": "resume", "partition": "heal",
                "power-loss": "restart", "link-toxic": "remove-toxic", "clock": "clock-reset",
                "starve": "unstarve", "disk-fill": "free-disk"}
INSTANT_OPS = frozenset({"corrupt"})  # nothing to undo: the window is the action itself
# node faults: the page shows their targets in this state while the window is open
NODE_STATE_OF_OP = {"kill": "killed", "stop": "stopped", "pause": "paused", "power-loss": "power lost",
                    "starve": "starved", "clock": "clock skewed", "disk-fill": "disk filled"}
# a partition's detail ends `N links (a->b, c->d)`; a link toxic's names its link
_LINKS_RE = re.compile(r"\d+ links \(([^)]*)\)")
_LINK_RE = re.compile(r"([\w.-]+)->([\w.-]+)")
_MODE_RE = re.compile(r"\b(DROP|REJECT)\b")
READ_CHUNK_BYTES = 1 << 20  # a poll reads at most this much; the rest comes on the next poll


@dataclass
class FaultWindow:
    fault_id: str
    op: str
    targets: list[str]
    detail: str
    symbol: str | None
    start_wall_ms: int
    state: str = "starting"  # starting | active | recovering | over | failed
    end_wall_ms: int | None = None
    recovery_op: str | None = None
    error: str | None = None
    links: list[str] = field(default_factory=list)  # `a->b` directed links a partition or toxic touches
    link_mode: str | None = None  # DROP or REJECT for a partition

    @property
    def open(self) -> bool:
        return self.end_wall_ms is None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "open": self.open}


@dataclass
class FaultHistory:
    """Every fault window of one nemesis history, oldest first, and the actions in order."""

    windows: dict[str, FaultWindow] = field(default_factory=dict)
    actions: list[dict[str, Any]] = field(default_factory=list)
    bad_lines: int = 0

    def apply(self, row: dict[str, Any]) -> None:
        op, phase, fault_id = row.get("op"), row.get("phase"), row.get("fault_id")
        wall_ms = row.get("wall_ms") if isinstance(row.get("wall_ms"), int) else None
        if not isinstance(op, str) or phase not in ("start", "end") or wall_ms is None:
            self.bad_lines += 1
            return
        targets = [str(t) for t in row.get("targets") or ()]
        detail = str(row.get("detail") or "")
        self.actions.append({"op": op, "phase": phase, "fault_id": fault_id, "targets": targets,
                             "detail": detail, "wall_ms": wall_ms, "error": row.get("error")})
        if op in RECOVERY_OPS or op in INSTANT_OPS:
            self._fault_line(op, phase, fault_id, targets, detail, wall_ms, row)
        elif op == "heal" and not fault_id:
            if phase == "end":  # every partition is healed at once
                for w in self.windows.values():
                    if w.op == "partition" and w.open:
                        w.state, w.end_wall_ms, w.recovery_op = "over", wall_ms, op
        else:
            self._recovery_line(op, phase, fault_id, wall_ms, row)

    def _fault_line(self, op: str, phase: str, fault_id: Any, targets: list[str], detail: str,
                    wall_ms: int, row: dict[str, Any]) -> None:
        key = str(fault_id) if fault_id else f"{op}@{wall_ms}"
        window = self.windows.get(key)
        if phase == "start" or window is None:
            window = self.windows[key] = FaultWindow(key, op, targets, detail, row.get("symbol"), wall_ms,
                                                     links=_links_of(op, detail))
            mode = _MODE_RE.search(detail)
            window.link_mode = mode.group(1) if op == "partition" and mode else None
        if phase != "end":
            return
        window.targets = targets or window.targets
        if row.get("error"):
            window.error = str(row["error"])
        if op in INSTANT_OPS:
            window.state, window.end_wall_ms = ("failed" if window.error else "over"), wall_ms
        elif window.error and not _took_effect(op, window.error, targets):
            window.state, window.end_wall_ms = "failed", wall_ms
        else:
            window.state = "active"

    def _recovery_line(self, op: str, phase: str, fault_id: Any, wall_ms: int, row: dict[str, Any]) -> None:
        window = self.windows.get(str(fault_id)) if fault_id else None
        if window is None or not window.open:
            return
        window.recovery_op = op
        if phase == "start":
            window.state = "recovering"
        else:
            window.state, window.end_wall_ms = "over", wall_ms
            if row.get("error"):
                window.error = f"{op}: {row['error']}"

    def open_windows(self) -> list[FaultWindow]:
        return [w for w in self.windows.values() if w.open]

    def node_states(self) -> dict[str, str]:
        """node id -> what an open fault does to it (`killed`, `paused`, `partitioned`, ...)."""
        states: dict[str, str] = {}
        for w in self.open_windows():  # a fault being inflicted (`starting`) counts: its start line comes first
            what = NODE_STATE_OF_OP.get(w.op) or ("partitioned" if w.op == "partition" else w.op)
            for t in w.targets:
                states[t] = f"{states[t]}, {what}" if t in states and what not in states[t] else what
        return states

    def cut_links(self) -> dict[str, str]:
        """`a->b` -> the mode an open partition set on it (or `toxic` for a link toxic)."""
        links: dict[str, str] = {}
        for w in self.open_windows():
            for link in w.links:
                links[link] = w.link_mode or ("toxic" if w.op == "link-toxic" else w.op)
        return links


def _links_of(op: str, detail: str) -> list[str]:
    if op == "partition":
        found = _LINKS_RE.search(detail)
        return [f"{a}->{b}" for a, b in _LINK_RE.findall(found.group(1))] if found else []
    if op == "link-toxic":
        return [f"{a}->{b}" for a, b in _LINK_RE.findall(detail)][:2]
    return []


def _took_effect(op: str, error: str, targets: list[str]) -> bool:
    """A failed partition may still have cut some links (the nemesis tracks it to heal them); a node
    fault whose error names every target did nothing."""
    if op == "partition":
        return True
    return not all(f"{t}:" in error for t in targets) if targets else False


class FaultTail:
    """Follows one nemesis.jsonl; `poll()` returns the history with every complete line read so far.

    Thread-safe: the app's request threads share one tail per run dir.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._offset = 0
        self._partial = b""
        self._inode: int | None = None
        self.history = FaultHistory()

    @property
    def offset(self) -> int:
        """Bytes of the file read so far."""
        return self._offset

    def poll(self) -> FaultHistory:
        with self._lock:
            return self._poll_locked()

    def _poll_locked(self) -> FaultHistory:
        try:
            stat = self.path.stat()
        except OSError:
            return self.history  # no faults yet (or none in this run)
        if self._inode not in (None, stat.st_ino) or stat.st_size < self._offset:
            self._reset()  # rewritten (a new run in the same dir): start over
        self._inode = stat.st_ino
        if stat.st_size == self._offset:
            return self.history
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                data = f.read(READ_CHUNK_BYTES)
        except OSError:
            return self.history
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        for line in lines:
            self._apply(line)
        return self.history

    def view(self, windows_shown: int) -> tuple[dict[str, Any], dict[str, str]]:
        """Poll, then (the page's `faults` object, node id -> what an open fault does to it), taken under
        the lock so a request never reads a history another request is extending."""
        with self._lock:
            history = self._poll_locked()
            windows = sorted(history.windows.values(), key=lambda w: w.start_wall_ms)[-windows_shown:]
            return ({"windows": [w.to_json() for w in windows],
                     "active": [w.to_json() for w in history.open_windows()],
                     "cut_links": history.cut_links(), "actions": len(history.actions),
                     "bad_lines": history.bad_lines}, history.node_states())

    def _apply(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            row = json.loads(line)
        except ValueError:
            self.history.bad_lines += 1
            return
        if isinstance(row, dict):
            self.history.apply(row)
        else:
            self.history.bad_lines += 1

    def _reset(self) -> None:
        self._offset, self._partial, self.history = 0, b"", FaultHistory()


def read_history(path: Path) -> FaultHistory:
    """The whole history of a finished run at once."""
    tail = FaultTail(path)
    while True:
        before = tail.offset
        history = tail.poll()
        if tail.offset == before:
            return history
