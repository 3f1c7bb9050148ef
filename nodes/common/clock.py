"""Time: monotonic for deadlines, wall clock only for stored timestamps.

Pure logic takes `now_ms` as an argument; services and clients take a `Clock` so unit
tests can drive them with `FakeClock`.

A node started with clock control runs its lease and timer code on a `SkewedClock`: our
monotonic clock at a rate (fake ms per real ms) plus an optional step, moved at run time by
`nodes.common.clock_control`. Its histories (events, journals) stay on the real clocks,
`history_clock()`, so the checker's timeline never skews.
"""

from __future__ import annotations

import asyncio
import ctypes
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from nodes.common import constants as c


class Clock(Protocol):
    def monotonic_ms(self) -> int: ...
    def wall_ms(self) -> int: ...
    async def sleep_ms(self, ms: float) -> None: ...


class SystemClock:
    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    async def sleep_ms(self, ms: float) -> None:
        await asyncio.sleep(max(0.0, ms) / 1000.0)


SYSTEM_CLOCK = SystemClock()


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_SYS_CLOCK_GETTIME = 228  # x86-64; the wall-clock shift wraps libc's clock_gettime, not the raw syscall
_CLOCK_REALTIME = 0


class RealWallClock(SystemClock):
    """The kernel's wall clock read past the harness's wall-clock shift (a raw syscall), for
    histories of a node whose libc wall clock is shifted. The shift never moves the monotonic
    clock, so `monotonic_ms` stays `SystemClock`'s."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self._syscall = libc.syscall
        self._ts = _Timespec()
        self._ts_lock = threading.Lock()
        self.wall_ms()  # fail here, at start, if the syscall is unusable

    def wall_ms(self) -> int:
        with self._ts_lock:
            if self._syscall(_SYS_CLOCK_GETTIME, _CLOCK_REALTIME, ctypes.byref(self._ts)) != 0:
                raise OSError(ctypes.get_errno(), "clock_gettime(CLOCK_REALTIME) failed")
            return self._ts.tv_sec * 1000 + self._ts.tv_nsec // 1_000_000


def wall_clock_shifted() -> bool:
    """Whether the harness preloaded its wall-clock shift into this process (harness/clockfault.py)."""
    return bool(os.environ.get(c.WALL_SHIFT_FILE_ENV)) and "_wall_shift" in os.environ.get("LD_PRELOAD", "")


def history_clock() -> Clock:
    """The clock of a node's histories: the real wall and monotonic clocks, whatever is faked."""
    return RealWallClock() if wall_clock_shifted() else SYSTEM_CLOCK


class ClockSetting(NamedTuple):
    """What a `SkewedClock` runs at: `rate` fake ms per real ms, plus a step of `offset_ms`."""

    rate: float = 1.0
    offset_ms: int = 0


CLOCK_RATE_MIN = 0.01  # a slower clock would stall every timer of the node for good
CLOCK_RATE_MAX = 100.0


def check_setting(setting: ClockSetting) -> ClockSetting:
    """`setting` if usable; ValueError saying what is wrong otherwise."""
    rate, offset_ms = setting
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate) \
            or not CLOCK_RATE_MIN <= rate <= CLOCK_RATE_MAX:
        raise ValueError(f"rate must be a number in [{CLOCK_RATE_MIN}, {CLOCK_RATE_MAX}], got {rate!r}")
    if isinstance(offset_ms, bool) or not isinstance(offset_ms, int):
        raise ValueError(f"offset_ms must be an integer, got {offset_ms!r}")
    return ClockSetting(float(rate), offset_ms)


class _Anchor(NamedTuple):
    real_mono_ns: int  # the real monotonic time the rate was set
    base_ms: float  # our monotonic clock (without the step) at that moment
    setting: ClockSetting


class SkewedClock:
    """Our monotonic clock at a rate, continuous across rate changes, plus a step.

    `monotonic_ms()` = base + `offset_ms`, where base advances `rate` ms per real ms from the
    moment the rate was set; at rate 1 and no step it reads the real monotonic clock. A new
    rate never makes base jump; a new `offset_ms` steps the clock by the difference (backwards
    too: a monotonic step back is a fault of its own). `wall_ms()` is the process's wall clock
    (a wall-clock jump by the harness shows) plus the drift the rate has built up, without the step.
    `sleep_ms(ms)` lasts until our clock has advanced by `ms`: ms / rate real ms, re-planned
    when the setting changes meanwhile.

    Thread-safe: readers take one immutable snapshot; `set` runs on any thread and wakes the
    sleepers of every event loop.
    """

    def __init__(self, setting: ClockSetting = ClockSetting()) -> None:
        now_ns = time.monotonic_ns()
        self._anchor = _Anchor(now_ns, now_ns / 1e6, check_setting(setting))
        self._lock = threading.Lock()
        self._sleepers: set[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = set()

    @property
    def setting(self) -> ClockSetting:
        return self._anchor.setting

    def _base_ms(self, anchor: _Anchor, real_mono_ns: int) -> float:
        return anchor.base_ms + (real_mono_ns - anchor.real_mono_ns) / 1e6 * anchor.setting.rate

    def _now(self) -> tuple[float, int]:
        """(our monotonic ms as a float, the real monotonic ns it was read at)."""
        anchor = self._anchor
        real_ns = time.monotonic_ns()
        return self._base_ms(anchor, real_ns) + anchor.setting.offset_ms, real_ns

    def monotonic_ms(self) -> int:
        return int(self._now()[0])

    def wall_ms(self) -> int:
        anchor = self._anchor
        real_ns = time.monotonic_ns()
        drift_ms = self._base_ms(anchor, real_ns) - real_ns / 1e6
        return time.time_ns() // 1_000_000 + int(drift_ms)

    def set(self, setting: ClockSetting) -> ClockSetting:
        """Run at `setting` from now on; returns the setting it replaced."""
        setting = check_setting(setting)
        with self._lock:
            old = self._anchor
            now_ns = time.monotonic_ns()
            self._anchor = _Anchor(now_ns, self._base_ms(old, now_ns), setting)
            sleepers = list(self._sleepers)
        for loop, fut in sleepers:
            # a sleeper re-plans its real wait at the new rate
            try:
                loop.call_soon_threadsafe(_wake, fut)
            except RuntimeError:  # that loop is closed
                pass
        return old.setting

    async def sleep_ms(self, ms: float) -> None:
        target_ms = self._now()[0] + max(0.0, ms)
        loop = asyncio.get_running_loop()
        while True:
            wake: asyncio.Future[None] = loop.create_future()
            entry = (loop, wake)
            with self._lock:  # read and register together, so no `set` falls between them
                now_ms = self._now()[0]
                if now_ms >= target_ms:
                    return
                self._sleepers.add(entry)
                real_s = (target_ms - now_ms) / self._anchor.setting.rate / 1000.0
            try:
                await asyncio.wait((wake,), timeout=real_s)
            finally:
                with self._lock:
                    self._sleepers.discard(entry)
                wake.cancel()


def real_mono_converter(clock: Clock) -> Callable[[int], int] | None:
    """For a `SkewedClock`: a function mapping one of its readings (ms, e.g. a lease's end) to the
    real CLOCK_MONOTONIC ms at which the clock reads it, at the rate in force now; None for any other
    clock, whose monotonic readings already are real. Events carry real times (the checker's
    timeline), so a skewed node converts the deadlines it records."""
    if not isinstance(clock, SkewedClock):
        return None
    skewed = clock

    def convert(ms: int) -> int:
        # from the anchor alone, so one reading converts to one real time for as long as the rate
        # holds (two events naming the same lease end agree to the ms), rounded to the nearest
        # ms: at rate 1 the float error of the anchor must not truncate a reading down by one
        anchor = skewed._anchor
        base_ms = ms - anchor.setting.offset_ms
        return round(anchor.real_mono_ns / 1e6 + (base_ms - anchor.base_ms) / anchor.setting.rate)

    return convert


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class FakeClock:
    """A clock that moves only when told to; `sleep_ms` advances it."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = start_ms

    def monotonic_ms(self) -> int:
        return self._now_ms

    def wall_ms(self) -> int:
        return self._now_ms

    def advance_ms(self, ms: int) -> None:
        self._now_ms += ms

    async def sleep_ms(self, ms: float) -> None:
        self._now_ms += int(ms)
        await asyncio.sleep(0)


@dataclass
class Deadline:
    clock: Clock
    end_ms: int

    @classmethod
    def after(cls, clock: Clock, budget_ms: int) -> Deadline:
        return cls(clock, clock.monotonic_ms() + budget_ms)

    def remaining_ms(self) -> int:
        return max(0, self.end_ms - self.clock.monotonic_ms())

    def remaining_s(self) -> float:
        return self.remaining_ms() / 1000.0

    def expired(self) -> bool:
        return self.clock.monotonic_ms() >= self.end_ms
