"""Master -> slave metadata copies (RocketMQ SlaveSynchronize).

The slave copies, every `slave_sync_interval_ms` while it knows its master: topic configs
(whole table when the data version differs), consumer offsets (the master's table
overwrites, so offsets committed to the slave during a master outage roll back when the
master returns — RocketMQ's behaviour, apache/rocketmq#2513), delay offsets, subscription
groups. There is no slave -> master path. How the snapshot is fetched is the transport's
(`FetchMetadata`); what the master serves is master_sync.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nodes.broker.offsets import ConsumerOffsetTable
from nodes.broker.topics import SubscriptionGroupManager, TopicConfigManager
from nodes.common.config import BrokerConfig
from nodes.common.errors import StoreError, TransportError
from nodes.common.service import Service
from nodes.common.types import TopicConfig
from nodes.store.message_store import MessageStore

log = logging.getLogger(__name__)

DELAY_OFFSETS_TABLE = "delay_offsets"


@dataclass(frozen=True, slots=True)
class MetadataSnapshot:
    """A master's metadata as a slave copies it."""

    topic_configs: tuple[TopicConfig, ...] = ()
    topics_data_version: tuple[int, int] = (0, 0)
    consumer_offsets: Mapping[str, dict[str, int]] = field(default_factory=dict)  # {'["topic","group"]': {"qid": offset}} (offsets.encode_key)
    subscription_groups: Mapping[str, Any] = field(default_factory=dict)  # {"group": {config fields}}
    delay_offsets: Mapping[str, Any] = field(default_factory=dict)  # {"level": offset}


# Fetches the master's snapshot from the given address; raises MqError when it cannot.
FetchMetadata = Callable[[str], Awaitable[MetadataSnapshot]]


class SlaveSyncService(Service):
    """SlaveSynchronize#syncAll on a timer, while the master's address is known."""

    name = "slave-sync"
    # the master unreachable, or a metadata write a full disk refused: tried again next interval
    expected_errors = (TransportError, StoreError)

    def __init__(self, *, config: BrokerConfig, store: MessageStore, topics: TopicConfigManager,
                 groups: SubscriptionGroupManager, offsets: ConsumerOffsetTable, master_addr: Callable[[], str],
                 fetch: FetchMetadata, on_crash: Callable[[BaseException], None]) -> None:
        super().__init__(config.timing.slave_sync_interval_ms, on_crash=on_crash,
                         initial_delay_ms=config.timing.slave_sync_first_ms)
        self._config = config
        self._store = store
        self._topics = topics
        self._groups = groups
        self._offsets = offsets
        self._master_addr = master_addr
        self._fetch = fetch
        self.syncs = 0
        self.last_synced_from = ""

    async def tick(self) -> None:
        addr = self._config.ha_master_addr or self._master_addr()
        if not addr:
            return
        self.apply(await self._fetch(addr))
        self.syncs += 1
        self.last_synced_from = addr

    def apply(self, snapshot: MetadataSnapshot) -> None:
        version = snapshot.topics_data_version
        if self._topics.replace_all(list(snapshot.topic_configs), version):
            log.info("slave took the master's topic table (version %s)", version)
        self._offsets.put_all(dict(snapshot.consumer_offsets))
        self._groups.replace_all(dict(snapshot.subscription_groups))
        if snapshot.delay_offsets:
            self._store.metadata.replace_all(DELAY_OFFSETS_TABLE, dict(snapshot.delay_offsets))
