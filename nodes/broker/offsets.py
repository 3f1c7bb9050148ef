"""Committed consumer offsets (RocketMQ ConsumerOffsetManager) and their persistence.

Owns: (topic, group) -> queue_id -> committed queue_offset, in memory; persisted to the
store's metadata every `consumer_offset_persist_ms` and on shutdown. A commit overwrites
(RocketMQ has no monotonic guard; a decrease is logged). A crash loses at most one
persistence interval of commits, as in RocketMQ. Keys are (topic, group) pairs, stored as
`["topic","group"]` (`encode_key`); a store written with the old `topic@group` keys is
migrated when the table loads. What may be committed is checked before (validation.py).

Every change of a stored value is recorded as an `offset-commit` event (side broker) with its
`source`: `client` (an update or a pull's piggy-backed commit), `slave-sync` (the master's
table copied over a slave's) or `reset` (an operator's reset by time, offset_reset.py). A value written again unchanged
records nothing: a piggy-backed commit arrives with nearly every pull.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from nodes.common.errors import StoreError
from nodes.common.events import EventLog
from nodes.common.service import Service

log = logging.getLogger(__name__)

OFFSETS_TABLE = "consumer_offsets"
# `source` of a broker's offset-commit event: who changed the stored value
SOURCE_CLIENT = "client"
SOURCE_SLAVE_SYNC = "slave-sync"
SOURCE_RESET = "reset"
SOURCE_LOAD = "load"  # the table as read from disk at start: a crash loses what was not flushed


OffsetKey = tuple[str, str]  # (topic, group): a pair, so no two names can make the same key


def encode_key(key: OffsetKey) -> str:
    """The stored (and slave-sync) form of a key: the JSON array `["topic","group"]`.

    Why not `topic@group` any more: a topic "X@Y" of group "Z" and topic "X" of group "Y@Z" made
    the same string. Names are validated now (no '@'), but the key must not depend on every
    entry point having validated them.
    """
    return json.dumps(list(key), separators=(",", ":"))


def decode_key(text: str) -> OffsetKey:
    """A stored key, new form or the old `topic@group` (read as it always was: split at the
    first '@'). A topic name never starts with '[', so the two forms cannot be confused."""
    if text.startswith("["):
        try:
            topic, group = json.loads(text)
        except ValueError:
            pass
        else:
            if isinstance(topic, str) and isinstance(group, str):
                return topic, group
    topic, _, group = text.partition("@")
    return topic, group


def is_old_key(text: str) -> bool:
    return encode_key(decode_key(text)) != text


class ConsumerOffsetTable:
    """Args:
        metadata: the store's metadata (loaded from, persisted to).
        events: receives an `offset-commit` event for every stored value that changes.
        broker_name, broker_id: name the node in those events.
    """

    def __init__(self, metadata: Any, *, events: EventLog | None = None, broker_name: str = "",
                 broker_id: int | None = None) -> None:
        self._metadata = metadata
        self._events = events
        self._broker_name = broker_name
        self._broker_id = broker_id
        stored = metadata.get_all(OFFSETS_TABLE)
        # old-form keys first, so an entry already under its new key wins over a leftover old one
        self.offsets: dict[OffsetKey, dict[int, int]] = {
            decode_key(key): {int(qid): int(v) for qid, v in value.items()}
            for key, value in sorted(stored.items(), key=lambda item: not is_old_key(item[0]))}
        _migrate_old_keys(metadata, stored)
        self._dirty: set[OffsetKey] = set()
        # (key, queue id) -> (client id, commit_seq) of the last ordered commit applied
        self._last_commit: dict[tuple[OffsetKey, int], tuple[str, int]] = {}
        # What this run starts from, so a reader of the history sees a value lost with a crash.
        for (topic, group), queues in sorted(self.offsets.items()):
            for queue_id, queue_offset in sorted(queues.items()):
                self._record(group, topic, queue_id, queue_offset, None, SOURCE_LOAD, None)

    def commit(self, group: str, topic: str, queue_id: int, queue_offset: int, *, source: str = SOURCE_CLIENT,
               client_id: str | None = None, commit_seq: int = 0) -> None:
        """Store a committed offset (`source`: SOURCE_CLIENT or SOURCE_RESET).

        A commit from the client whose commit was applied last for this queue, with a lower
        `commit_seq` than that one, overtook it on another stream and is dropped: RocketMQ's
        commits from one client arrive in order on one channel. Backward commits are stored
        otherwise (RocketMQ only logs them), and `commit_seq` 0 is never ordered.
        """
        key = (topic, group)
        if client_id and commit_seq:
            last = self._last_commit.get((key, queue_id))
            if last is not None and last[0] == client_id and commit_seq < last[1]:
                return
            self._last_commit[(key, queue_id)] = (client_id, commit_seq)
        queues = self.offsets.setdefault(key, {})
        previous = queues.get(queue_id)
        if previous is not None and queue_offset < previous:
            log.warning("offset of %s@%s queue %d moves back %d -> %d", topic, group, queue_id, previous, queue_offset)
        queues[queue_id] = queue_offset
        self._dirty.add(key)
        if previous != queue_offset:
            self._record(group, topic, queue_id, queue_offset, previous, source, client_id)

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when there is none."""
        return self.offsets.get((topic, group), {}).get(queue_id, -1)

    def snapshot(self) -> dict[str, dict[str, int]]:
        """The table in its stored form (keys `encode_key`), as SyncMetadata carries it."""
        return {encode_key(key): {str(qid): v for qid, v in queues.items()} for key, queues in self.offsets.items()}

    def put_all(self, table: dict[str, dict[str, int]]) -> None:
        """SlaveSynchronize#syncConsumerOffset: the master's keys overwrite, slave-only keys survive."""
        for text, queues in table.items():
            key = topic, group = decode_key(text)
            before = self.offsets.get(key, {})
            after = {int(qid): int(v) for qid, v in queues.items()}
            self.offsets[key] = after
            self._dirty.add(key)
            for queue_id, queue_offset in sorted(after.items()):
                previous = before.get(queue_id)
                if previous != queue_offset:
                    self._record(group, topic, queue_id, queue_offset, previous, SOURCE_SLAVE_SYNC, None)

    def _record(self, group: str, topic: str, queue_id: int, queue_offset: int, previous: int | None, source: str,
                client_id: str | None) -> None:
        if self._events is None:
            return
        event: dict[str, Any] = {
            "event": "offset-commit", "side": "broker", "group": group, "topic": topic,
            "broker_name": self._broker_name or None, "broker_id": self._broker_id, "queue_id": queue_id,
            "offset": queue_offset, "previous_offset": previous, "source": source}
        if client_id:
            event["client_id"] = client_id
        self._events.record(event)

    def take_dirty(self) -> dict[str, dict[str, int]]:
        """Snapshot of the entries changed since the last call (taken on the event loop)."""
        dirty, self._dirty = self._dirty, set()
        return {encode_key(key): {str(qid): v for qid, v in self.offsets[key].items()} for key in dirty}

    def mark_dirty(self, snapshot: dict[str, dict[str, int]]) -> None:
        """Put the entries of a snapshot that could not be written back among the dirty ones."""
        self._dirty.update(key for key in map(decode_key, snapshot) if key in self.offsets)

    def write(self, snapshot: dict[str, dict[str, int]]) -> None:
        """Persist a snapshot; safe to run on a worker thread (the LMDB thread does the I/O)."""
        if snapshot:
            self._metadata.put_many(OFFSETS_TABLE, snapshot)

    def persist(self) -> None:
        self.write(self.take_dirty())


def _migrate_old_keys(metadata: Any, stored: dict[str, Any]) -> None:
    """Rewrite entries stored under the old `topic@group` key under the new key, then drop the
    old ones (one start-up pass; an entry already migrated is left alone)."""
    old = {text: value for text, value in stored.items() if is_old_key(text)}
    if not old:
        return
    metadata.put_many(OFFSETS_TABLE, {new: value for text, value in old.items()
                                      if (new := encode_key(decode_key(text))) not in stored})
    for text in old:
        metadata.delete(OFFSETS_TABLE, text)
    log.info("consumer offsets: migrated %d entries from topic@group keys to [topic, group] keys", len(old))


class OffsetPersistService(Service):
    name = "offset-persist"

    def __init__(self, table: ConsumerOffsetTable, interval_ms: int, on_crash: Any) -> None:
        super().__init__(interval_ms, on_crash=on_crash)
        self._table = table

    # a metadata write a full disk refused: logged, and the entries stay dirty for the next tick
    expected_errors = (StoreError,)

    async def tick(self) -> None:
        await self._write()

    async def on_stop(self) -> None:
        try:
            await self._write()
        except StoreError as exc:
            log.error("consumer offsets not persisted at stop: %s", exc)

    async def _write(self) -> None:
        snapshot = self._table.take_dirty()
        try:
            await asyncio.to_thread(self._table.write, snapshot)
        except StoreError:
            self._table.mark_dirty(snapshot)
            raise
