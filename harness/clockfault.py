"""Clock faults on one node: wall-clock jumps (a preloaded shift) and rate skew (the node's SkewedClock).

Only a node whose config has `clock_control` (spec: `ClusterSpec.with_clock_control`) can take
them: "rate" for skew, "wall+rate" for both. The latter is started with our wall-clock shift
library preloaded (`wall_shift_env`, harness/_wall_shift.c: only the process's wall-clock reads
move, by the seconds in `<node run dir>/wall_shift.rc`, re-read every WALL_SHIFT_REREAD_MS; its
monotonic clock stays real), and every clock-controlled node runs its lease and timer code on
a SkewedClock that follows `<node run dir>/clock.json` (nodes.common.clock_control). Both files
are the state: what is in force survives a restart of the node and of the harness, and
`clock_state` reads it back.

Each change is written atomically, appended to `<cluster run dir>/clock-faults.jsonl` with the
harness's real times, and awaited (unless the node is not running) until the node records the
matching `clock` event in its events.jsonl, so a caller's next step already runs under it.
"""

from __future__ import annotations

import contextlib
import importlib.util
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

FAULT_LOG_NAME = "clock-faults.jsonl"
# the library re-reads wall_shift.rc at most this often (an open, a read and a close: cheap), so a
# jump applies within it
WALL_SHIFT_REREAD_MS = 100
WALL_SHIFT_REREAD_ENV = "MQLAB_WALL_SHIFT_REREAD_MS"  # read by the library (its default is the same 100)
APPLY_BUDGET_MS = 3_000  # the node polls every CLOCK_CONTROL_POLL_MS; this covers a loaded machine
_SHIFT_SECONDS = re.compile(r"^\s*([+-]\d+(?:\.\d+)?)\s*$")


@dataclass(frozen=True)
class ClockState:
    """What is in force on a node: a wall-clock shift and its SkewedClock setting."""

    node_id: str
    wall_offset_ms: int = 0
    rate: float = 1.0
    offset_ms: int = 0


# --- the wall-clock shift library ----------------------------------------------------------------

def find_wall_shift_library() -> Path:
    """The preload library that shifts a node's wall clock (harness/_wall_shift.c, built by setup.py)."""
    spec = importlib.util.find_spec("harness._wall_shift")
    if spec is None or spec.origin is None or not spec.origin.endswith(".so"):
        raise HarnessError("the wall-clock shift library (harness/_wall_shift.c) is not built, and nodes with "
                           "clock_control 'wall+rate' need it for wall-clock jumps: install gcc and run "
                           "./scripts/bootstrap.sh again (or `.venv/bin/pip install -e .`)")
    return Path(spec.origin)


def wall_shift_env(run_dir: Path, env: dict[str, str]) -> dict[str, str]:
    """`env` for a node with wall-clock control: the shift library preloaded, the shift read from
    `<run dir>/wall_shift.rc` every WALL_SHIFT_REREAD_MS. Creates the file holding "+0" when the
    node has none yet (a restart keeps the jump)."""
    lib = find_wall_shift_library()
    rc = run_dir / c.WALL_SHIFT_FILE
    if not rc.exists():
        _write_atomic(rc, "+0\n")
    preload = env.get("LD_PRELOAD", "")
    return {**env, "LD_PRELOAD": f"{lib} {preload}".strip(), c.WALL_SHIFT_FILE_ENV: str(rc),
            WALL_SHIFT_REREAD_ENV: str(WALL_SHIFT_REREAD_MS)}


def shift_spec(wall_offset_ms: int) -> str:
    """The shift file's text: signed seconds ("+30", "-3600", "+1.500")."""
    if wall_offset_ms % 1000 == 0:
        return f"{wall_offset_ms // 1000:+d}"
    return f"{wall_offset_ms / 1000:+.3f}"


def parse_shift_spec(text: str) -> int:
    match = _SHIFT_SECONDS.match(text)
    if match is None:
        raise HarnessError(f"{c.WALL_SHIFT_FILE} holds {text!r}, not a plain offset in seconds; clock_reset writes +0")
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
    rc = proc.run_dir / c.WALL_SHIFT_FILE
    wall_offset_ms = parse_shift_spec(rc.read_text()) if rc.exists() else 0
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
    seen = _byte_size(events)
    if new.wall_offset_ms != old.wall_offset_ms:
        _write_atomic(proc.run_dir / c.WALL_SHIFT_FILE, shift_spec(new.wall_offset_ms) + "\n")
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
    """Wait for the node's `clock` events that show `new`, among those written after byte `seen`
    of its events file (a wall step below the node's report threshold is not recorded and not
    awaited)."""
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


def _byte_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _clock_events(path: Path, from_byte: int) -> list[dict[str, Any]]:
    """The `clock` events written after byte `from_byte`: only what the node appended since the
    fault began is read at each poll, never the whole history of a long run."""
    try:
        with path.open("rb") as f:
            f.seek(from_byte)
            lines = f.read().decode("utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        if '"event":"clock"' not in line:
            continue
        with contextlib.suppress(ValueError):  # a line still being written is read again next poll
            out.append(json.loads(line))
    return out


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
