"""A broker's tables over a real store on tmp_path, driven by a fake clock."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nodes.broker.send_back import SendBackProcessor
from nodes.broker.topics import SubscriptionGroupManager, TopicConfigManager
from nodes.common.clock import FakeClock
from nodes.common.config import BrokerConfig, StoreConfig
from nodes.store.delay import parse_delay_levels
from nodes.store.message_store import MessageStore
from nodes.store.record import MessageToStore, Record

SMALL = StoreConfig(commitlog_segment_bytes=256 * 1024, cq_units_per_file=64, message_body_bytes_max=16 * 1024,
                    memory_budget_bytes=1 << 40)
UNIT_MS = 10  # one delay-level "second": level 1 = 10 ms, level 3 = 100 ms
DELAYS_MS = parse_delay_levels("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h", UNIT_MS)


@dataclass
class Broker:
    clock: FakeClock
    store: MessageStore
    topics: TopicConfigManager
    groups: SubscriptionGroupManager
    config: BrokerConfig

    def send_back(self, **kwargs) -> SendBackProcessor:
        return SendBackProcessor(kwargs.pop("config", self.config), self.store, self.topics, self.groups, self.clock,
                                 rng=random.Random(7), **kwargs)

    def put(self, topic: str = "T", queue_id: int = 0, body: bytes = b"hello", **kwargs) -> int:
        """Store one message; returns its commitlog offset."""
        result = self.store.put_messages([MessageToStore(topic=topic, queue_id=queue_id, body=body, **kwargs)])
        assert result.status.name == "PUT_OK", result
        return result.appended[0].phys_offset

    def records(self, topic: str, queue_id: int = 0) -> list[Record]:
        """Every record of a queue, in queue order."""
        out = []
        for queue_offset in range(self.store.max_queue_offset(topic, queue_id)):
            phys_offset, size, _ = self.store.queue_unit(topic, queue_id, queue_offset)
            out.append(self.store.lookup_message(phys_offset, size))
        return out

    def tag_code(self, topic: str, queue_id: int, queue_offset: int) -> int:
        return self.store.queue_unit(topic, queue_id, queue_offset)[2]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    clock = FakeClock()
    store = MessageStore(tmp_path / "store", SMALL, clock=clock, delay_levels_ms=DELAYS_MS)
    store.open()
    topics = TopicConfigManager(store.metadata, auto_create_enable=True, default_queue_nums=8,
                                now_ms=clock.wall_ms())
    groups = SubscriptionGroupManager(store.metadata, auto_create_enable=True)
    opened = Broker(clock, store, topics, groups, BrokerConfig(namesrv_addrs=("127.0.0.1:1",)))
    yield opened
    opened.store.close()  # a test may have reopened it
