"""A broker's POP engine over a real store in a tmp dir: real files, real LMDB, real time (or a
FakeClock for the property test), the revive service at a short interval."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from nodes.broker.pop import PopEngine, PopReviveService
from nodes.broker.topics import SubscriptionGroupConfig, SubscriptionGroupManager, TopicConfigManager
from nodes.common.clock import SYSTEM_CLOCK, Clock
from nodes.common.config import StoreConfig
from nodes.common.events import EventLog
from nodes.common.types import TopicConfig
from nodes.store.message_store import MessageStore
from nodes.store.record import MessageToStore

SMALL = StoreConfig(commitlog_segment_bytes=256 * 1024, cq_units_per_file=64, message_body_bytes_max=16 * 1024,
                    memory_budget_bytes=1 << 40)
REVIVE_MS = 50  # the revive interval the tests run with (RocketMQ's 1 s scaled by 0.05)
BROKER = "broker-a"
T = TypeVar("T")


@dataclass
class PopRig:
    root: Path
    clock: Clock = SYSTEM_CLOCK
    revive_ms: int = REVIVE_MS
    fault_switches: frozenset[str] = frozenset()
    store: MessageStore = field(init=False)
    topics: TopicConfigManager = field(init=False)
    groups: SubscriptionGroupManager = field(init=False)
    events: EventLog = field(init=False)
    engine: PopEngine = field(init=False)

    def __post_init__(self) -> None:
        self.open()

    def open(self) -> None:
        self.store = MessageStore(self.root / "store", SMALL, clock=self.clock)
        self.store.open()
        self.topics = TopicConfigManager(self.store.metadata, auto_create_enable=True, default_queue_nums=4,
                                         now_ms=self.clock.wall_ms())
        self.groups = SubscriptionGroupManager(self.store.metadata, auto_create_enable=True)
        self.events = EventLog(self.root / "events.jsonl", "broker-a-0", self.clock)
        self.engine = PopEngine(store=self.store, topics=self.topics, groups=self.groups, clock=self.clock,
                                broker_name=BROKER, events=self.events, fault_switches=self.fault_switches)
        self.engine.load()

    def close(self) -> None:
        self.store.close()
        self.events.close()

    def topic(self, name: str, queues: int = 1) -> None:
        self.topics.put(TopicConfig(name, queues, queues), self.clock.wall_ms())

    def group(self, name: str, **kwargs: Any) -> None:
        self.groups.put(replace(SubscriptionGroupConfig(name), **kwargs))

    def put(self, topic: str, queue_id: int = 0, body: bytes = b"m", **properties: str) -> int:
        """One message; returns its queue offset."""
        result = self.store.put_messages([MessageToStore(topic=topic, queue_id=queue_id, body=body,
                                                         properties=dict(properties), born_timestamp_ms=1)])
        assert result.status.name == "PUT_OK", result
        return result.appended[0].queue_offset

    def bodies(self, topic: str, queue_id: int = 0) -> list[bytes]:
        out = []
        for queue_offset in range(self.store.max_queue_offset(topic, queue_id)):
            phys_offset, size, _ = self.store.queue_unit(topic, queue_id, queue_offset)
            out.append(self.store.lookup_message(phys_offset, size).body)
        return out

    def journal(self, event: str) -> list[dict[str, Any]]:
        lines = (self.root / "events.jsonl").read_text().splitlines()
        return [line for line in map(json.loads, lines) if line["event"] == event]

    def run(self, scenario: Callable[[], Awaitable[T]], *, revive: bool = True) -> T:
        """`scenario` on an event loop with the engine bound to it, arrivals wired and (unless
        told otherwise) the revive service running."""
        async def main() -> T:
            self.engine.bind_loop()
            self.store.on_arrival = self.engine.notify_arrival
            service = PopReviveService(self.engine, self.revive_ms) if revive else None
            if service is not None:
                service.start()
            try:
                return await scenario()
            finally:
                if service is not None:
                    await service.stop()
        return asyncio.run(main())
