"""Clock faults on one node: wall-clock jumps (libfaketime) and rate skew (the node's SkewedClock).

Only a node whose config has `clock_control` (spec: `ClusterSpec.with_clock_control`) can take
them: "rate" for skew, "wall+rate" for both. The latter is started with libfaketime preloaded
(`faketime_env`; it costs the node CPU, hence apart), its wall clock read
from `<node run dir>/faketime.rc` (re-read every FAKETIME_CACHE_S) and its monotonic clock left real, and runs its
lease and timer code on a SkewedClock that follows `<node run dir>/clock.json`
(nodes.common.clock_control). Both files are the state: what is in force survives a restart
of the node and of the harness, and `clock_state` reads it back.

Each change is written atomically, appended to `<cluster run dir>/clock-faults.jsonl` with the
harness's real times, and awaited (unless the node is not running) until the node records the
matching `clock` event in its events.jsonl, so a caller's next step already runs under it.
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import os
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from harness.errors import HarnessError
from nodes.common import constants as c
from nodes.common.clock import ClockSetting, check_setting
from nodes.common.clock_control import parse_control, render_control


class NodeProcess(Protocol):
    """What a clock fault needs of a node (harness.process.NodeProcess, which imports this module)."""

    node_id: str
    run_dir: Path
    config: Any

    @property
    def alive(self) -> bool: ...
    @property
    def state(self) -> Any: ...


log = logging.getLogger(__name__)

LIBFAKETIME_GLOBS = ("/usr/lib/*/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1",
                     "/usr/local/lib/faketime/libfaketime.so.1")
FAULT_LOG_NAME = "clock-faults.jsonl"
# libfaketime re-reads faketime.rc at most this often, so a jump applies within it. Not
# FAKETIME_NO_CACHE: that reads the file on every wall-clock call (17 us each, measured), and an
# idle broker then burnt half a core (gRPC reads the wall clock constantly).
FAKETIME_CACHE_S = 1
APPLY_BUDGET_MS = 3_000  # the node polls every CLOCK_CONTROL_POLL_MS; this covers a loaded machine
_FAKETIME_OFFSET = re.compile(r"^\s*([+-]\d+(?:\.\d+)?)\s*$")


@dataclass(frozen=True)
class ClockState:
    """What is in force on a node: a wall-clock offset (libfaketime) and its SkewedClock setting."""

    node_id: str
    wall_offset_ms: int = 0
    rate: float = 1.0
    offset_ms: int = 0


# --- libfaketime ---------------------------------------------------------------------------------

def find_libfaketime() -> Path:
    for pattern in LIBFAKETIME_GLOBS:
        for found in sorted(glob.glob(pattern)):
            return Path(found)
    raise HarnessError("libfaketime is not installed, and nodes with clock_control need it for wall-clock "
                       "jumps: apt-get install faketime libfaketime (scripts/bootstrap.sh does it as root)")


def faketime_env(run_dir: Path, env: dict[str, str]) -> dict[str, str]:
    """`env` for a node with clock control: libfaketime preloaded, the monotonic clock left real
    (CPython 3.11's timed waits hang otherwise), the offset read from faketime.rc.
    Creates faketime.rc holding "+0" when the node has none yet (a restart keeps the jump)."""
    lib = find_libfaketime()
    rc = run_dir / c.FAKETIME_FILE
    if not rc.exists():
        _write_atomic(rc, "+0\n")
    preload = env.get("LD_PRELOAD", "")
    return {**env, "LD_PRELOAD": f"{lib} {preload}".strip(), "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "FAKETIME_CACHE_DURATION": str(FAKETIME_CACHE_S), "FAKETIME_TIMESTAMP_FILE": str(rc)}


def remove_faketime_files(pids: list[int], shm: Path = Path("/dev/shm")) -> int:
    """Delete the shared-memory files libfaketime leaves behind for each (exited) pid; returns how many."""
    removed = 0
    for pid in pids:
        for name in (f"faketime_shm_{pid}", f"sem.faketime_sem_{pid}"):
            with contextlib.suppress(FileNotFoundError):
                (shm / name).unlink()
                removed += 1
    return removed


def faketime_spec(wall_offset_ms: int) -> str:
    """libfaketime's offset string: signed seconds ("+30", "-3600", "+1.500")."""
    if wall_offset_ms % 1000 == 0:
        return f"{wall_offset_ms // 1000:+d}"
    return f"{wall_offset_ms / 1000:+.3f}"


def parse_faketime_spec(text: str) -> int:
    match = _FAKETIME_OFFSET.match(text)
    if match is None:
        raise HarnessError(f"faketime.rc holds {text!r}, not a plain offset in seconds; clock_reset writes +0")
    return round(float(match.group(1)) * 1000)


# --- the state and its changes -------------------------------------------------------------------

def _require_control(proc: NodeProcess, *, wall: bool = False) -> None:
    mode = getattr(proc.config, "clock_control", "")
    if not mode:
        raise HarnessError(f"{proc.node_id} was not started with clock control; start it with "
                           f"ClusterSpec.with_clock_control({proc.node_id!r})")
    if wall and mode != c.CLOCK_CONTROL_WALL:
        raise HarnessError(f"{proc.node_id} was started with rate control only; for wall-clock jumps start it "
                           f"with ClusterSpec.with_clock_control({proc.node_id!r}, wall=True)")


def clock_state(proc: NodeProcess) -> ClockState:
    """What the node's control files hold now."""
    _require_control(proc)
    rc = proc.run_dir / c.FAKETIME_FILE
    wall_offset_ms = parse_faketime_spec(rc.read_text()) if rc.exists() else 0
    control = proc.run_dir / c.CLOCK_CONTROL_FILE
    setting = ClockSetting()
    if control.exists():
        try:
            setting = parse_control(control.read_text())
        except ValueError as exc:
            raise HarnessError(f"{control} is unusable ({exc}); clock_reset rewrites it") from exc
    return ClockState(proc.node_id, wall_offset_ms, setting.rate, setting.offset_ms)


def clock_jump(proc: NodeProcess, delta_ms: int, *, log_dir: Path | None = None) -> ClockState:
    """Step the node's wall clock by `delta_ms` (added to any jump in force)."""
    _require_control(proc, wall=True)
    state = clock_state(proc)
    new = ClockState(proc.node_id, state.wall_offset_ms + int(delta_ms), state.rate, state.offset_ms)
    return _apply(proc, state, new, "jump", log_dir)


def clock_skew(proc: NodeProcess, rate: float, *, step_ms: int = 0, log_dir: Path | None = None) -> ClockState:
    """Run the node's lease and timer clock at `rate` from now on, and step it by `step_ms`."""
    state = clock_state(proc)
    try:
        setting = check_setting(ClockSetting(rate, state.offset_ms + int(step_ms)))
    except ValueError as exc:
        raise HarnessError(f"clock_skew({proc.node_id!r}, {rate!r}): {exc}") from exc
    new = ClockState(proc.node_id, state.wall_offset_ms, setting.rate, setting.offset_ms)
    return _apply(proc, state, new, "skew", log_dir)


def clock_reset(proc: NodeProcess, *, log_dir: Path | None = None) -> ClockState:
    """No jump, rate 1, no step."""
    return _apply(proc, clock_state(proc), ClockState(proc.node_id), "reset", log_dir)


def _apply(proc: NodeProcess, old: ClockState, new: ClockState, op: str, log_dir: Path | None) -> ClockState:
    events = proc.run_dir / "events.jsonl"
    seen = _event_count(events)
    if new.wall_offset_ms != old.wall_offset_ms:
        _write_atomic(proc.run_dir / c.FAKETIME_FILE, faketime_spec(new.wall_offset_ms) + "\n")
    if (new.rate, new.offset_ms) != (old.rate, old.offset_ms):
        _write_atomic(proc.run_dir / c.CLOCK_CONTROL_FILE, render_control(ClockSetting(new.rate, new.offset_ms)))
    record = {"op": op, **asdict(new), "harness_wall_ms": time.time_ns() // 1_000_000,
              "harness_mono_ms": time.monotonic_ns() // 1_000_000}
    log.info("clock fault on %s: %s", proc.node_id, record)
    if log_dir is not None:
        with (log_dir / FAULT_LOG_NAME).open("a", encoding="utf-8") as out:
            out.write(json.dumps(record, sort_keys=True) + "\n")
    if proc.alive and proc.state.value == "RUNNING":
        _await_applied(proc, events, seen, old, new)
    return new


def _await_applied(proc: NodeProcess, events: Path, seen: int, old: ClockState, new: ClockState) -> None:
    """Wait for the node's `clock` events that show `new` (a wall step below the node's report
    threshold is not recorded and not awaited)."""
    want_setting = (new.rate, new.offset_ms) != (old.rate, old.offset_ms)
    want_wall = abs(new.wall_offset_ms - old.wall_offset_ms) >= c.WALL_STEP_REPORT_MS
    deadline = time.monotonic() + APPLY_BUDGET_MS / 1000
    while want_setting or want_wall:
        for event in _clock_events(events, seen):
            if event.get("rate") == new.rate and event.get("offset_ms") == new.offset_ms:
                want_setting = False
            if abs(event.get("wall_offset_ms", 0) - new.wall_offset_ms) < c.WALL_STEP_REPORT_MS:
                want_wall = False
        if not (want_setting or want_wall):
            return
        if time.monotonic() > deadline:
            raise HarnessError(f"{proc.node_id} did not apply the clock change {new} within {APPLY_BUDGET_MS} ms; "
                               f"see its node.log")
        time.sleep(0.02)


def _event_count(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def _clock_events(path: Path, skip: int) -> list[dict[str, Any]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()[skip:]
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        if '"event":"clock"' not in line:
            continue
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
