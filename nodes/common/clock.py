"""Time: monotonic for deadlines, wall clock only for stored timestamps.

Pure logic takes `now_ms` as an argument; services and clients take a `Clock` so unit
tests can drive them with `FakeClock`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Protocol


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
