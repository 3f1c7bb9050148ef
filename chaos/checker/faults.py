"""Fault windows from the nemesis log, and process exits; small, so built on the driver.

A window opens at a fault op's `start` and closes at the `end` of its recovery op
(kill|stop|power-loss → restart, pause → resume, partition → heal, link-toxic → remove-toxic,
clock → clock-reset, starve → unstarve, disk-fill → free-disk); see `schemas`. A power loss
is a kill to every check that reasons about processes (its window's `op` is `kill`, its
`storage` is `power-loss`); what it did to the store, and every `corrupt`, are `StorageFault`s.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

FAULT_OPS = ("kill", "stop", "pause", "partition", "power-loss", "link-toxic", "clock", "starve", "disk-fill")
RECOVERY = {"kill": "restart", "stop": "restart", "pause": "resume", "partition": "heal", "power-loss": "restart",
            "link-toxic": "remove-toxic", "clock": "clock-reset", "starve": "unstarve", "disk-fill": "free-disk"}
STORAGE_OPS = ("power-loss", "corrupt")
SILENT_OPS = ("pause", "partition")  # the victim's sockets stay open: peers notice only by timeouts
# What the checks that reason about processes and links take a gray fault for. A link made slow,
# lossy or stalled can delay every message on it past any timer, which is all a partition of the
# same links does to the protocol, so its liveness bounds are a partition's; a starved node runs
# in bursts, which is what a pause does for longer. Neither excuses a safety violation: the lock,
# loss, order and content checks look at what the brokers and consumers did, not at the faults.
# Clock faults and full disks are judged by checks of their own and by their effects.
GRAY_AS = {"link-toxic": "partition", "starve": "pause"}
_BROKER_NODE = re.compile(r"^(?P<name>.+)-(?P<id>\d+)$")


@dataclass(frozen=True)
class FaultWindow:
    op: str
    targets: tuple[str, ...]
    start_ms: int
    end_ms: int  # the recovery's end, or the end of the history
    recovered: bool
    detail: str | None = None
    storage: str | None = None  # "power-loss" for a power loss (op "kill")
    gray: str | None = None  # the gray op behind a window whose `op` is what it counts as (GRAY_AS)

    @property
    def label(self) -> str:
        who = ",".join(self.targets) if self.targets else "all"
        return f"{self.storage or self.gray or self.op} {who}"

    def covers(self, t_ms: float, *, before: float = 0, after: float = 0) -> bool:
        return self.start_ms - before <= t_ms <= self.end_ms + after

    def hits(self, node: str | None) -> bool:
        return node is not None and (not self.targets or node in self.targets)

    def to_json(self) -> dict[str, Any]:
        out = {"op": self.op, "targets": list(self.targets), "start_ms": self.start_ms, "end_ms": self.end_ms,
               "recovered": self.recovered, "detail": self.detail}
        if self.storage:
            out["storage"] = self.storage
        if self.gray:
            out["gray"] = self.gray
        return out


@dataclass(frozen=True)
class StorageFault:
    """A power loss or a corruption of one broker's store, with what the nemesis did (its end detail)."""

    op: str  # power-loss | corrupt
    node: str
    start_ms: int
    end_ms: int  # the surgery's end (power loss: the restart is a later op)
    detail: dict[str, Any]

    @property
    def label(self) -> str:
        return f"{self.op} {self.node}"


def storage_faults(rows: Iterable[dict[str, Any]]) -> list[StorageFault]:
    """Every power-loss and corrupt op (one per target), with its end line's JSON detail parsed."""
    out = []
    for act in _actions(rows):
        if act["op"] not in STORAGE_OPS:
            continue
        raw = act.get("end_detail") or act.get("detail")
        try:
            detail = json.loads(raw) if isinstance(raw, str) else (raw or {})
        except ValueError:
            detail = {}
        detail = detail if isinstance(detail, dict) else {}
        for node in act["targets"] or ("*",):
            # a power loss of several nodes at once records each node's files under "nodes"
            own = (detail.get("nodes") or {}).get(node) if isinstance(detail.get("nodes"), dict) else None
            out.append(StorageFault(act["op"], node, int(act["start"]), int(act["end"] or act["start"]),
                                    own if isinstance(own, dict) else detail))
    return sorted(out, key=lambda f: f.start_ms)


@dataclass(frozen=True)
class ProcessExit:
    node: str
    t_ms: int
    expected: bool
    exit_code: int | None
    signal: str | None


def fault_windows(rows: Iterable[dict[str, Any]], end_of_history_ms: int) -> list[FaultWindow]:
    """Pair fault ops with their recoveries. `rows`: nemesis lines (op, phase, targets, mono_ms...)."""
    actions = _actions(rows)
    open_faults: list[dict[str, Any]] = []
    windows: list[FaultWindow] = []
    for act in actions:
        op, targets = act["op"], act["targets"]
        if op in FAULT_OPS:
            open_faults.append(act)
            continue
        closes_at = act["end"] if act["end"] is not None else act["start"]
        for fault in list(open_faults):
            if RECOVERY.get(fault["op"]) != op:
                continue
            if act["fault_id"] and fault["fault_id"] and act["fault_id"] != fault["fault_id"]:
                continue
            if op == "heal" or not targets or set(fault["targets"]) <= set(targets):
                open_faults.remove(fault)
                windows.append(_window(fault, fault["targets"], closes_at, True))
            elif set(fault["targets"]) & set(targets):  # a partial recovery: the rest stays faulted
                open_faults.remove(fault)
                windows.append(_window(fault, tuple(t for t in fault["targets"] if t in targets), closes_at, True))
                open_faults.append({**fault, "targets": tuple(t for t in fault["targets"] if t not in targets)})
    for fault in open_faults:
        windows.append(_window(fault, fault["targets"], max(end_of_history_ms, fault["start"]), False))
    return sorted(windows, key=lambda w: (w.start_ms, w.op, w.targets))


def _actions(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Join each op's start and end lines into one action {op, targets, start, end, detail, fault_id}."""
    lines = sorted((r for r in rows if r.get("op") and r.get("mono_ms") is not None),
                   key=lambda r: (r["mono_ms"], 0 if r.get("phase") != "end" else 1))
    actions: list[dict[str, Any]] = []
    pending: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in lines:
        key = (r["op"], tuple(r.get("targets") or ()), r.get("fault_id"))
        if r.get("phase") == "end":
            act = pending.pop(key, None)
            if act is None:  # an end without a start: the action is instantaneous
                act = {"op": r["op"], "targets": key[1], "start": r["mono_ms"], "end": None,
                       "detail": r.get("detail"), "fault_id": r.get("fault_id")}
                actions.append(act)
            act["end"] = r["mono_ms"]
            if r.get("detail"):
                act["end_detail"] = r["detail"]
            continue
        act = {"op": r["op"], "targets": key[1], "start": r["mono_ms"], "end": None, "detail": r.get("detail"),
               "fault_id": r.get("fault_id")}
        pending[key] = act
        actions.append(act)
    return sorted(actions, key=lambda a: a["start"])


def _window(fault: dict[str, Any], targets: tuple[str, ...], end: int, recovered: bool) -> FaultWindow:
    detail = fault.get("detail")
    if detail is not None and not isinstance(detail, str):
        detail = json.dumps(detail)
    power_loss = fault["op"] == "power-loss"
    op = "kill" if power_loss else GRAY_AS.get(fault["op"], fault["op"])
    return FaultWindow(op=op, targets=targets, start_ms=int(fault["start"]),
                       end_ms=int(end), recovered=recovered, detail=detail,
                       storage="power-loss" if power_loss else None,
                       gray=fault["op"] if fault["op"] in GRAY_AS else None)


def process_exits(rows: Iterable[dict[str, Any]]) -> list[ProcessExit]:
    return sorted((ProcessExit(node=r["node"], t_ms=int(r["mono_ms"]), expected=bool(r.get("expected")),
                               exit_code=r.get("exit_code"), signal=r.get("signal"))
                   for r in rows if r.get("event") == "exit" and r.get("node") and r.get("mono_ms") is not None),
                  key=lambda e: e.t_ms)


def broker_identity(node: str) -> tuple[str, int] | None:
    """`broker-a-1` -> ("broker-a", 1)."""
    m = _BROKER_NODE.match(node)
    return (m["name"], int(m["id"])) if m else None
