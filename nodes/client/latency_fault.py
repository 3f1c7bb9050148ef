"""The producer's latency fault table (RocketMQ's LatencyFaultToleranceImpl and the
latency half of MQFaultStrategy).

Pure: every call takes `now_ms`. After each send attempt the producer reports the broker and the
attempt's latency (`update`); a latency at or above `SEND_LATENCY_MAX_MS[i]` keeps the broker
unavailable for `not_available_ms[i]`, and a failed attempt counts as `SEND_ISOLATION_LATENCY_MS`
(the longest duration). Queue selection skips unavailable brokers; when every broker is
unavailable, `pick_one_at_least` names the least bad one (the better half, in rotation).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from nodes.common import constants as c

_POSITIVE_MASK = 0x7FFFFFFF


def not_available_table_ms(not_available_max_ms: int) -> tuple[int, ...]:
    """SEND_NOT_AVAILABLE_MS scaled so its last entry is `not_available_max_ms` (a scaled Timing)."""
    top = c.SEND_NOT_AVAILABLE_MS[-1]
    return tuple(round(d * not_available_max_ms / top) for d in c.SEND_NOT_AVAILABLE_MS)


def not_available_duration_ms(latency_ms: int, table_ms: Sequence[int]) -> int:
    """computeNotAvailableDuration: the duration of the highest latency threshold reached, else 0."""
    for threshold, duration in zip(reversed(c.SEND_LATENCY_MAX_MS), reversed(table_ms), strict=True):
        if latency_ms >= threshold:
            return duration
    return 0


@dataclass
class FaultItem:
    broker_name: str
    latency_ms: int
    available_at_ms: int  # startTimestamp: the broker is available again from here

    def available(self, now_ms: int) -> bool:
        return now_ms >= self.available_at_ms


class LatencyFaultTable:
    """Broker name -> its last latency and when it is available again."""

    def __init__(self, not_available_max_ms: int = c.SEND_NOT_AVAILABLE_MS[-1],
                 rng: random.Random | None = None) -> None:
        if not isinstance(not_available_max_ms, int) or not_available_max_ms <= 0:
            raise ValueError(f"not_available_max_ms must be a positive integer, got {not_available_max_ms!r}")
        self.table_ms = not_available_table_ms(not_available_max_ms)
        self._items: dict[str, FaultItem] = {}
        self._worst_index = (rng or random).getrandbits(31)  # whichItemWorst: a random start

    def update(self, broker_name: str, latency_ms: int, *, isolation: bool, now_ms: int) -> int:
        """Record an attempt (updateFaultItem); returns how long the broker is now avoided."""
        duration = not_available_duration_ms(c.SEND_ISOLATION_LATENCY_MS if isolation else latency_ms,
                                             self.table_ms)
        self._items[broker_name] = FaultItem(broker_name, latency_ms, now_ms + duration)
        return duration

    def is_available(self, broker_name: str, now_ms: int) -> bool:
        item = self._items.get(broker_name)
        return item is None or item.available(now_ms)

    def remove(self, broker_name: str) -> None:
        self._items.pop(broker_name, None)

    def pick_one_at_least(self, now_ms: int) -> str | None:
        """The least bad broker: items sorted available first, then by latency, then by when they
        become available; one of the better half in rotation (the only one if fewer than two)."""
        items = sorted(self._items.values(),
                       key=lambda i: (not i.available(now_ms), i.latency_ms, i.available_at_ms))
        if not items:
            return None
        half = len(items) // 2
        if half <= 0:
            return items[0].broker_name
        self._worst_index = (self._worst_index + 1) & _POSITIVE_MASK
        return items[self._worst_index % half].broker_name

    def snapshot(self, now_ms: int) -> dict[str, dict[str, int]]:
        """broker -> {latency_ms, unavailable_for_ms} (for describe/logs)."""
        return {name: {"latency_ms": i.latency_ms, "unavailable_for_ms": max(0, i.available_at_ms - now_ms)}
                for name, i in sorted(self._items.items())}
