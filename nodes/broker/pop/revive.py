"""PopReviveService: every `pop_revive_interval_ms` (RocketMQ's reviveInterval, 1 s, scaled by
the time knob) the engine moves the expired, unacknowledged pops back (engine.revive). A message
whose invisible time ends at D therefore comes back no sooner than D and, barring a backlog of
more than POP_REVIVE_BATCH_MAX expiries or a stopped broker, no later than D + the interval."""

from __future__ import annotations

from nodes.broker.pop.engine import PopEngine
from nodes.common.clock import Clock
from nodes.common.errors import StoreError
from nodes.common.service import CrashHandler, Service


class PopReviveService(Service):
    name = "pop-revive"
    expected_errors = (StoreError,)

    def __init__(self, engine: PopEngine, interval_ms: int, *, on_crash: CrashHandler | None = None,
                 clock: Clock | None = None) -> None:
        super().__init__(interval_ms, on_crash=on_crash, initial_delay_ms=0, clock=clock)
        self._engine = engine
        self.revived = 0

    async def tick(self) -> None:
        self.revived += await self._engine.revive()
