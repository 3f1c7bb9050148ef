"""Run-time control of a node's clock: the control file, its polling, and the `clock` events.

A node started with `clock_control` ("rate" or "wall+rate") reads `<run_dir>/clock.json` (constants.CLOCK_CONTROL_FILE)
every CLOCK_CONTROL_POLL_MS on its event loop. The file holds `{"rate": 2.0, "offset_ms": 0}`;
the writer (harness.clockfault) replaces it atomically, so a half-written file is a writer's bug,
and like any unusable file it is logged once and ignored: the clock keeps its setting. A missing
file means the default setting (rate 1, no step).

Every change is recorded as a `clock` event in the node's events.jsonl, so the checker can map
the node's clock (the lease ends in its `lock` events) onto the real timeline of the event lines:
`rate`, `offset_ms`, the node clock's readings `clock_mono_ms` / `clock_wall_ms` at that
moment, and `wall_offset_ms`, the wall-clock jump in force (the process's shifted wall clock
minus the real one; 0 without the harness's shift). A jump written by the harness into wall_shift.rc is
seen by the same poll and recorded with `cause` "wall-step".
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodes.common import constants as c
from nodes.common.clock import (
    SYSTEM_CLOCK,
    Clock,
    ClockSetting,
    SkewedClock,
    check_setting,
    history_clock,
    wall_clock_shifted,
)

log = logging.getLogger(__name__)

EventSink = Callable[[dict[str, Any]], None]
WALL_READ_TRIES = 5
WALL_READ_SPREAD_MS = 5
_KEYS = frozenset(ClockSetting._fields)


def parse_control(text: str) -> ClockSetting:
    """The setting a control file holds; ValueError saying what is wrong with it."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"not a JSON object: {text[:80]!r}")
    unknown = set(data) - _KEYS
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}; known: {sorted(_KEYS)}")
    return check_setting(ClockSetting(data.get("rate", 1.0), data.get("offset_ms", 0)))


def render_control(setting: ClockSetting) -> str:
    return json.dumps({"rate": setting.rate, "offset_ms": setting.offset_ms}, sort_keys=True)


class ClockControl:
    """Applies the control file to `clock` and records what is in force.

    Args:
        clock: the node's lease and timer clock.
        run_dir: the node's run dir (holds the control file).
        real: the real clocks (`history_clock()`), to measure a wall-clock jump.
        sink: receives the `clock` events (the node's event log).
    """

    def __init__(self, clock: SkewedClock, run_dir: Path, real: Clock, *, sink: EventSink | None = None,
                 poll_ms: int = c.CLOCK_CONTROL_POLL_MS) -> None:
        self.clock = clock
        self.path = Path(run_dir) / c.CLOCK_CONTROL_FILE
        self._real = real
        self._sink = sink
        self.poll_ms = poll_ms
        self._identity: tuple[int, int, int] | None = None  # (inode, mtime_ns, size) last read
        self._wall_offset_ms = 0
        self._faked = wall_clock_shifted()  # otherwise the wall clock is the real one: nothing to watch
        self._task: asyncio.Task[None] | None = None
        self.ignored = 0  # unusable files seen

    def set_sink(self, sink: EventSink | None) -> None:
        self._sink = sink

    def wall_offset_ms(self) -> int:
        """The shifted wall clock minus the real one (a jump), 0 when nothing is shifted.

        The faked reading is bracketed by two real ones; a pair further apart than
        WALL_READ_SPREAD_MS (the thread was descheduled between them) is read again, so a busy
        machine never passes for a step."""
        best: tuple[int, int] | None = None
        for _ in range(WALL_READ_TRIES):
            before = self._real.wall_ms()
            faked = time.time_ns() // 1_000_000
            after = self._real.wall_ms()
            spread = after - before
            if best is None or spread < best[0]:
                best = (spread, faked - (before + after) // 2)
            if spread <= WALL_READ_SPREAD_MS:
                break
        assert best is not None
        return best[1]

    def poll(self) -> bool:
        """One look at the control file and the wall offset; True if something changed."""
        changed = self._poll_file()
        if not self._faked:
            return changed
        offset = self.wall_offset_ms()
        if abs(offset - self._wall_offset_ms) >= c.WALL_STEP_REPORT_MS:
            self._wall_offset_ms = offset
            log.warning("wall clock stepped: now %+d ms from the real one", offset)
            self._record("wall-step")
            changed = True
        return changed

    def _poll_file(self) -> bool:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if self._identity is None:
                return False
            self._identity = None
            return self._apply(ClockSetting(), "control file removed")
        except OSError as exc:
            log.warning("clock control file %s unreadable: %s; the clock keeps %s", self.path, exc,
                        self.clock.setting)
            return False
        identity = (st.st_ino, st.st_mtime_ns, st.st_size)
        if identity == self._identity:
            return False
        self._identity = identity
        try:
            setting = parse_control(self.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            self.ignored += 1
            log.warning("clock control file %s ignored: %s; the clock keeps %s (write it whole, by an "
                        "atomic rename)", self.path, exc, self.clock.setting)
            return False
        return self._apply(setting, "control file")

    def _apply(self, setting: ClockSetting, why: str) -> bool:
        if setting == self.clock.setting:
            return False
        old = self.clock.set(setting)
        log.warning("clock %s -> %s (%s)", old, setting, why)
        self._record("control")
        return True

    def _record(self, cause: str) -> None:
        if self._sink is None:
            return
        setting = self.clock.setting
        self._sink({"event": "clock", "cause": cause, "rate": setting.rate, "offset_ms": setting.offset_ms,
                    "clock_mono_ms": self.clock.monotonic_ms(), "clock_wall_ms": self.clock.wall_ms(),
                    "wall_offset_ms": self._wall_offset_ms})

    # --- the loop ------------------------------------------------------------------------------
    def start(self) -> None:
        """Apply the file as it is now, record the starting clock, and poll on the running loop."""
        if self._faked:
            self._wall_offset_ms = self.wall_offset_ms()
        self._poll_file()
        self._record("start")
        self._task = asyncio.get_running_loop().create_task(self._run(), name="clock-control")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.poll_ms / 1000)
            try:
                self.poll()
            except Exception:  # the clock keeps its setting; the node must not die of its control file
                log.exception("clock control poll failed; retrying in %d ms", self.poll_ms)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None


@dataclass(frozen=True)
class NodeClocks:
    """A node's clocks: `timers` for leases, timers and store timestamps; `history` for its
    events and journals; `control` moves `timers` (None: a normal node on SYSTEM_CLOCK)."""

    timers: Clock
    history: Clock
    control: ClockControl | None = None


def node_clocks(config: Any) -> NodeClocks:
    """The clocks a node config asks for: a SkewedClock only with `clock_control`."""
    history = history_clock()
    if not getattr(config, "clock_control", ""):
        return NodeClocks(SYSTEM_CLOCK, history)
    clock = SkewedClock()
    return NodeClocks(clock, history, ClockControl(clock, Path(config.run_dir), history))
