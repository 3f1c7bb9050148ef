"""Auto-renew: what Apache's proxy does for a receive with `auto_renew` (a PushConsumer's), so a
message stays invisible while its consumer is alive and consuming it, however slow the listener.

- Every message an auto_renew receive hands out is held here under the handle the client got.
- A scan (Timing.rmq5_renew_scan_ms, RocketMQ's 5 s scaled) renews each held message that is
  within RMQ5_RENEW_AHEAD_MS of its invisible time's end by ChangeInvisibleDuration, by the
  auto-renew invisible time again, and keeps the newest handle; after RMQ5_RENEW_MAX_MS it stops
  (the message then comes back by itself).
- The client's ack, nack (ChangeInvisibleDuration) or DLQ forward name the handle it got; they
  are made with the newest one (`current`), so the client's handle never goes stale, and the
  message is no longer renewed after them (`settle`).
- Only a client that is alive is renewed for: its Telemetry stream is open, or it made a call
  within the auto-renew invisible time. A client that ended (NotifyClientTermination) has its
  messages made visible again after RMQ5_RENEW_RELEASE_MS (`release_client`); one that vanished
  gets them back when their invisible time ends.

All durations but the scan are RocketMQ's scaled by the broker's time_scale. Held entries are
in memory only: after a restart nothing is renewed and the messages come back at their
invisible time, as a handle of a restarted proxy does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from nodes.broker.pop.values import ChangeInvisibleRequest, ChangeInvisibleResult, PopCode, PoppedMessage
from nodes.broker.rmq5.clients import Rmq5ClientRegistry
from nodes.common import constants as c
from nodes.common.clock import Clock
from nodes.common.service import CrashHandler, Service

log = logging.getLogger(__name__)

ChangeHandler = Callable[[ChangeInvisibleRequest], Awaitable[ChangeInvisibleResult]]


@dataclass(slots=True)
class Held:
    client_id: str
    group: str
    topic: str
    latest: str  # the newest handle of the message (the client still holds the one it got)
    deadline_wall_ms: int
    received_wall_ms: int
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)


class AutoRenew:
    def __init__(self, change: ChangeHandler, registry: Rmq5ClientRegistry, clock: Clock, *,
                 time_scale: float = 1.0, invisible_ms: int) -> None:
        self._change = change
        self._registry = registry
        self._clock = clock
        self.invisible_ms = invisible_ms
        self.ahead_ms = max(1, round(c.RMQ5_RENEW_AHEAD_MS * time_scale))
        self.max_ms = max(1, round(c.RMQ5_RENEW_MAX_MS * time_scale))
        self.release_ms = max(1, round(c.RMQ5_RENEW_RELEASE_MS * time_scale))
        self._held: dict[tuple[str, str], Held] = {}  # (group, the client's handle) -> held
        self.renewed = 0
        self.released = 0
        self._full_logged = False

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, client_id: str, group: str, messages: Iterable[PoppedMessage]) -> None:
        now = self._clock.wall_ms()
        for m in messages:
            if len(self._held) >= c.RMQ5_RENEW_HELD_MAX:
                if not self._full_logged:
                    log.warning("auto-renew holds %d messages, its limit: newer ones are not renewed and come back "
                                "after their invisible time", len(self._held))
                    self._full_logged = True
                return
            self._held[(group, m.receipt_handle)] = Held(client_id, group, m.topic, m.receipt_handle,
                                                         m.invisible_deadline_wall_ms, now)

    def held(self, group: str, handle: str) -> Held | None:
        """The renewed message a client's handle names, if it is one."""
        return self._held.get((group, handle))

    def settle(self, group: str, handle: str) -> None:
        """The client acked, nacked or dead-lettered it: no more renewals."""
        self._held.pop((group, handle), None)

    async def renew_due(self) -> int:
        """Renew every held message close to the end of its invisible time; returns how many."""
        now = self._clock.wall_ms()
        renewed = 0
        for key, held in list(self._held.items()):
            if held.deadline_wall_ms - now > self.ahead_ms:
                continue
            if now - held.received_wall_ms >= self.max_ms or not self._alive(held.client_id):
                self._held.pop(key, None)
                continue
            async with held.lock:
                if self._held.get(key) is not held:
                    continue  # settled meanwhile
                result = await self._change(ChangeInvisibleRequest(held.group, held.topic, held.latest,
                                                                   self.invisible_ms))
                if result.code is PopCode.OK:
                    held.latest, held.deadline_wall_ms = result.receipt_handle, result.invisible_deadline_wall_ms
                    renewed += 1
                elif result.code is not PopCode.UNAVAILABLE:  # unavailable: tried again at the next scan
                    self._held.pop(key, None)
        self.renewed += renewed
        return renewed

    async def release_client(self, client_id: str) -> int:
        """The client ended: what it still held is visible again after RMQ5_RENEW_RELEASE_MS."""
        released = 0
        for key, held in [(k, h) for k, h in self._held.items() if h.client_id == client_id]:
            async with held.lock:
                if self._held.pop(key, None) is None:
                    continue
                result = await self._change(ChangeInvisibleRequest(held.group, held.topic, held.latest,
                                                                   self.release_ms))
                released += result.code is PopCode.OK
        self.released += released
        return released

    def _alive(self, client_id: str) -> bool:
        client = self._registry.get(client_id)
        if client is None:
            return False
        # the registry's times are monotonic; a push consumer keeps its Telemetry stream open
        idle_ms = self._registry.now_ms() - client.last_seen_ms
        return client.stream_token != 0 or idle_ms < self.invisible_ms


class AutoRenewService(Service):
    name = "rmq5-auto-renew"

    def __init__(self, renew: AutoRenew, interval_ms: int, *, on_crash: CrashHandler | None = None,
                 clock: Clock | None = None) -> None:
        super().__init__(interval_ms, on_crash=on_crash, clock=clock)
        self._renew = renew

    async def tick(self) -> None:
        await self._renew.renew_due()
