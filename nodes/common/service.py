"""Lifecycle states and the one skeleton every background loop uses.

A `Service` runs `tick()` every `interval_ms`, or sooner on `wakeup()`. Errors the subclass
declares as expected are logged and retried at the next interval; anything else ends the
loop and is handed to the node's crash handler (exit 70), never swallowed.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable
from typing import ClassVar

from nodes.common.clock import SYSTEM_CLOCK, Clock, SkewedClock
from nodes.common.errors import InvariantViolation, TransportError

log = logging.getLogger(__name__)


class Lifecycle(enum.IntEnum):
    """Forward-only: INIT -> STARTING -> RUNNING -> STOPPING -> STOPPED (or FAILED)."""

    INIT = 0
    STARTING = 10
    RUNNING = 30
    STOPPING = 40
    STOPPED = 41
    FAILED = 50


class LifecycleState:
    def __init__(self, name: str, clock: Clock = SYSTEM_CLOCK) -> None:
        self.name = name
        self.state = Lifecycle.INIT
        self._clock = clock
        self._since_ms = clock.monotonic_ms()

    def transition(self, new: Lifecycle) -> None:
        if new <= self.state:
            raise InvariantViolation(f"{self.name}: {self.state.name} -> {new.name} goes backwards")
        now_ms = self._clock.monotonic_ms()
        log.info("%s: %s -> %s after %d ms", self.name, self.state.name, new.name, now_ms - self._since_ms)
        self.state = new
        self._since_ms = now_ms


CrashHandler = Callable[[BaseException], None]


class Service:
    """Interval-or-wakeup background loop. Subclasses set `name` and implement `tick()`."""

    name: ClassVar[str] = "service"
    expected_errors: ClassVar[tuple[type[BaseException], ...]] = (TransportError,)

    def __init__(self, interval_ms: int, *, on_crash: CrashHandler | None = None,
                 initial_delay_ms: int | None = None, clock: Clock | None = None) -> None:
        """`clock`: a node's SkewedClock paces the intervals (they last interval / rate real ms);
        any other clock leaves them on the event loop's real time (FakeClock-driven tests too)."""
        self.interval_ms = interval_ms
        self._pace = clock if isinstance(clock, SkewedClock) else None
        self._initial_delay_ms = interval_ms if initial_delay_ms is None else initial_delay_ms
        self._wakeup = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._on_crash = on_crash

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self.name)

    def wakeup(self) -> None:
        self._wakeup.set()

    async def stop(self) -> None:
        self._stopping = True
        self._wakeup.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        await self.on_stop()

    async def tick(self) -> None:
        raise NotImplementedError

    async def on_stop(self) -> None:
        """A last flush after the loop ended (e.g. persist offsets)."""

    async def _wait(self, ms: int) -> None:
        if self._pace is not None:
            await self._paced_wait(self._pace, ms)
            return
        try:
            await asyncio.wait_for(self._wakeup.wait(), timeout=ms / 1000.0)
        except TimeoutError:
            pass
        self._wakeup.clear()

    async def _paced_wait(self, clock: SkewedClock, ms: int) -> None:
        pending = {asyncio.ensure_future(clock.sleep_ms(ms)), asyncio.ensure_future(self._wakeup.wait())}
        try:
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        self._wakeup.clear()

    async def _run(self) -> None:
        await self._wait(self._initial_delay_ms)
        while not self._stopping:
            try:
                await self.tick()
            except self.expected_errors as err:
                log.warning("%s: %s; retrying in %d ms", self.name, err, self.interval_ms)
            except asyncio.CancelledError:
                raise
            except BaseException as err:
                log.exception("%s: unexpected error", self.name)
                if self._on_crash is not None:
                    self._on_crash(err)
                raise
            if self._stopping:
                break
            await self._wait(self.interval_ms)
