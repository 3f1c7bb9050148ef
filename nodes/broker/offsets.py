"""Committed consumer offsets (RocketMQ ConsumerOffsetManager) and their persistence.

Owns: (topic, group) -> queue_id -> committed queue_offset, in memory; persisted to the
store's metadata every `consumer_offset_persist_ms` and on shutdown. A commit overwrites
(RocketMQ has no monotonic guard; a decrease is logged). A crash loses at most one
persistence interval of commits, as in RocketMQ.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from nodes.common.service import Service

log = logging.getLogger(__name__)

OFFSETS_TABLE = "consumer_offsets"


def _key(topic: str, group: str) -> str:
    return f"{topic}@{group}"


class ConsumerOffsetTable:
    def __init__(self, metadata: Any) -> None:
        self._metadata = metadata
        self.offsets: dict[str, dict[int, int]] = {
            key: {int(qid): int(v) for qid, v in value.items()}
            for key, value in metadata.get_all(OFFSETS_TABLE).items()}
        self._dirty: set[str] = set()

    def commit(self, group: str, topic: str, queue_id: int, queue_offset: int) -> None:
        key = _key(topic, group)
        queues = self.offsets.setdefault(key, {})
        previous = queues.get(queue_id)
        if previous is not None and queue_offset < previous:
            log.warning("offset of %s queue %d moves back %d -> %d", key, queue_id, previous, queue_offset)
        queues[queue_id] = queue_offset
        self._dirty.add(key)

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when there is none."""
        return self.offsets.get(_key(topic, group), {}).get(queue_id, -1)

    def snapshot(self) -> dict[str, dict[str, int]]:
        return {key: {str(qid): v for qid, v in queues.items()} for key, queues in self.offsets.items()}

    def put_all(self, table: dict[str, dict[str, int]]) -> None:
        """SlaveSynchronize#syncConsumerOffset: the master's keys overwrite, slave-only keys survive."""
        for key, queues in table.items():
            self.offsets[key] = {int(qid): int(v) for qid, v in queues.items()}
            self._dirty.add(key)

    def take_dirty(self) -> dict[str, dict[str, int]]:
        """Snapshot of the entries changed since the last call (taken on the event loop)."""
        dirty, self._dirty = self._dirty, set()
        return {key: {str(qid): v for qid, v in self.offsets[key].items()} for key in dirty}

    def write(self, snapshot: dict[str, dict[str, int]]) -> None:
        """Persist a snapshot; safe to run on a worker thread (the LMDB thread does the I/O)."""
        if snapshot:
            self._metadata.put_many(OFFSETS_TABLE, snapshot)

    def persist(self) -> None:
        self.write(self.take_dirty())


class OffsetPersistService(Service):
    name = "offset-persist"

    def __init__(self, table: ConsumerOffsetTable, interval_ms: int, on_crash: Any) -> None:
        super().__init__(interval_ms, on_crash=on_crash)
        self._table = table

    async def tick(self) -> None:
        await asyncio.to_thread(self._table.write, self._table.take_dirty())

    async def on_stop(self) -> None:
        await asyncio.to_thread(self._table.write, self._table.take_dirty())
