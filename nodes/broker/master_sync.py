"""What a master serves its slaves (RocketMQ HAService's accept side and the admin requests
SlaveSynchronize calls), plus the store checks operators and the harness ask any broker for.

Owns: the answer to a Replicate stream on a node that is not a master, the metadata snapshot
a slave copies, the commitlog digest of a range and the consume-queue verification.
Does not own the master's replication loop (ha_master) or applying a snapshot (slave_sync).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from nodes.broker.ha_master import LogChunk, Refusal, ReplicationMaster, SlaveReport
from nodes.broker.offsets import ConsumerOffsetTable
from nodes.broker.slave_sync import DELAY_OFFSETS_TABLE, MetadataSnapshot
from nodes.broker.topics import SubscriptionGroupManager, TopicConfigManager
from nodes.common.codes import ResponseCode
from nodes.common.config import BrokerConfig
from nodes.store.message_store import MessageStore
from nodes.store.verify import verify_consume_queues

_DIGEST_READ_BYTES = 1024 * 1024
VERIFY_EXAMPLES_MAX = 20


@dataclass(frozen=True, slots=True)
class DigestRequest:
    from_phys_offset: int = 0
    to_phys_offset: int = 0  # 0: up to the max physical offset


@dataclass(frozen=True, slots=True)
class DigestResponse:
    code: ResponseCode
    remark: str = ""
    from_phys_offset: int = 0
    to_phys_offset: int = 0
    sha256: str = ""


@dataclass(frozen=True, slots=True)
class VerifyStoreResponse:
    units_checked: int
    invalid_units: int
    examples: tuple[str, ...] = ()


class MasterSyncHandler:
    def __init__(self, *, config: BrokerConfig, store: MessageStore, topics: TopicConfigManager,
                 groups: SubscriptionGroupManager, offsets: ConsumerOffsetTable,
                 master: ReplicationMaster | None) -> None:
        self._config = config
        self._store = store
        self._topics = topics
        self._groups = groups
        self._offsets = offsets
        self._master = master  # None on a slave

    async def replicate(self, reports: AsyncIterator[SlaveReport]) -> AsyncIterator[LogChunk]:
        if self._master is None:
            yield LogChunk(refusal=Refusal.NOT_MASTER, remark=f"{self._config.node_id} is not a master")
            return
        async for chunk in self._master.serve(reports):
            yield chunk

    def sync_metadata(self) -> MetadataSnapshot:
        metadata: dict[str, Any] = self._store.metadata.get_all(DELAY_OFFSETS_TABLE)
        return MetadataSnapshot(topic_configs=tuple(self._topics.all()), topics_data_version=self._topics.data_version,
                                consumer_offsets=self._offsets.snapshot(), subscription_groups=self._groups.snapshot(),
                                delay_offsets=metadata)

    async def digest(self, req: DigestRequest) -> DigestResponse:
        start = max(req.from_phys_offset, self._store.min_phys_offset)
        end = req.to_phys_offset or self._store.max_phys_offset
        if end > self._store.max_phys_offset or start > end:
            return DigestResponse(
                ResponseCode.INVALID_ARGUMENT,
                f"range [{start}, {end}) is outside this commitlog [{self._store.min_phys_offset}, "
                f"{self._store.max_phys_offset})")
        digest = hashlib.sha256()
        position = start
        while position < end:
            data = self._store.read_commitlog(position, min(_DIGEST_READ_BYTES, end - position))
            if not data:
                break
            digest.update(data)
            position += len(data)
            await asyncio.sleep(0)  # a long digest must not starve the node's other work
        return DigestResponse(ResponseCode.SUCCESS, from_phys_offset=start, to_phys_offset=position,
                              sha256=digest.hexdigest())

    def verify_store(self) -> VerifyStoreResponse:
        report = verify_consume_queues(self._store)
        return VerifyStoreResponse(report.units_checked, report.invalid_units,
                                   tuple(report.examples[:VERIFY_EXAMPLES_MAX]))
