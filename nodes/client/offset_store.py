"""Consumer offset stores: where a push consumer keeps the next queue offset of each queue.

Owns the in-memory `committed_offset` table of one consumer group (RocketMQ
`RemoteBrokerOffsetStore` for CLUSTERING, `LocalFileOffsetStore` for
BROADCASTING), reading offsets back from where they are stored, and persisting them. Does not decide
*which* offset is safe to commit (`ProcessQueue.remove_messages` does) or when queues change
hands (rebalance).

Also here: the two broker-side queue-offset queries rebalance needs for consume-from-where
(`MQAdminImpl#maxOffset` / `searchOffset`, masters only).

    RemoteBrokerOffsetStore          memory table; persist = UpdateConsumerOffset to the
                                     queue's master, else (route refreshed) any broker of it
    LocalFileOffsetStore             memory table; persist = read-modify-write of
                                     <dir>/<client_id>/<group>/offsets.json, atomically replaced

Both are confined to the client's event loop (the consume service updates them there).
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import os
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from nodes.client.routes import FoundBroker
from nodes.client.rpc.api import OffsetKind
from nodes.common import constants as c
from nodes.common.clock import SYSTEM_CLOCK, Clock, real_mono_converter
from nodes.common.errors import BrokerNotFoundError, MqError
from nodes.common.service import CrashHandler, Service
from nodes.common.types import MessageQueue

if TYPE_CHECKING:
    from nodes.client.instance import ClientInstance

log = logging.getLogger(__name__)

OFFSETS_FILE_NAME = "offsets.json"
OFFSET_NOT_FOUND = -1  # the store has no offset for the queue (QUERY_NOT_FOUND, empty file entry)
OFFSET_READ_FAILED = -2  # the store could not be asked (transport failure): rebalance skips the queue

EventSink = Callable[[dict[str, Any]], None]


class ReadOffsetType(enum.Enum):
    READ_FROM_MEMORY = "READ_FROM_MEMORY"
    READ_FROM_STORE = "READ_FROM_STORE"
    MEMORY_FIRST_THEN_STORE = "MEMORY_FIRST_THEN_STORE"


class OffsetStore(Protocol):
    """What the push consumer calls; RocketMQ's OffsetStore interface."""

    def load(self) -> None: ...

    def update_offset(self, mq: MessageQueue, offset: int, *, increase_only: bool) -> None: ...

    def read_memory(self, mq: MessageQueue) -> int: ...

    async def read_offset(self, mq: MessageQueue, read_type: ReadOffsetType) -> int: ...

    async def persist_all(self, mqs: Collection[MessageQueue]) -> None: ...

    async def persist(self, mq: MessageQueue) -> None: ...

    def remove_offset(self, mq: MessageQueue) -> None: ...

    def offsets(self) -> dict[MessageQueue, int]: ...


class _MemoryTable:
    """The part both stores share: `MessageQueue -> committed_offset` in memory.

    `commit_pulled_offset` is the test-only fault switch of that name
    (constants.FAULT_COMMIT_PULLED_OFFSET); the pull path then reports what it cached through
    `note_pulled`.
    """

    def __init__(self, *, commit_pulled_offset: bool = False) -> None:
        self._table: dict[MessageQueue, int] = {}
        # fault switch only: per queue, the offset after the last messages pulled into its cache
        self._pulled_next: dict[MessageQueue, int] | None = {} if commit_pulled_offset else None

    def update_offset(self, mq: MessageQueue, offset: int, *, increase_only: bool) -> None:
        """Insert, or overwrite; with `increase_only` never move an existing value backwards."""
        if self._pulled_next is not None and mq in self._pulled_next:
            # FAULT SWITCH commit-pulled-offset: breaks "commit only what was consumed" (the
            # ProcessQueue's lowest unconsumed offset, concurrent and orderly alike): the value
            # stored, and so persisted and piggy-backed on pulls, jumps to what was pulled, so a
            # consumer killed with a full cache loses the messages it never processed.
            offset = max(offset, self._pulled_next[mq])
        current = self._table.get(mq)
        if current is None or not increase_only or offset > current:
            self._table[mq] = offset

    def note_pulled(self, mq: MessageQueue, next_offset: int) -> None:
        """The pull path cached messages of `mq` up to `next_offset` (kept only for the fault switch)."""
        if self._pulled_next is not None:
            self._pulled_next[mq] = max(next_offset, self._pulled_next.get(mq, next_offset))

    def read_memory(self, mq: MessageQueue) -> int:
        return self._table.get(mq, OFFSET_NOT_FOUND)

    def remove_offset(self, mq: MessageQueue) -> None:
        self._table.pop(mq, None)
        if self._pulled_next is not None:
            self._pulled_next.pop(mq, None)

    def offsets(self) -> dict[MessageQueue, int]:
        return dict(self._table)


class RemoteBrokerOffsetStore(_MemoryTable):
    """CLUSTERING offsets: kept in memory, stored on the brokers (master first).

    Args:
        instance: the client's connections and routes.
        group: the consumer group.
        timeout_ms: deadline of one query or update.
        on_event: receives an `offset-commit` event for every persisted value that changed and
            every failed persist (called on the loop thread).
        client_id: names the committer in those events.
        commit_pulled_offset: the test-only fault switch (see `_MemoryTable`).
        may_commit: asked right before each update is sent (after the broker lookup, so no await
            lies between the answer and the send); False skips that queue this time and keeps
            its offset (an orderly queue whose lock is not valid now). None: always commit.
    """

    def __init__(self, instance: ClientInstance, group: str, *, timeout_ms: int,
                 on_event: EventSink | None = None, client_id: str = "",
                 commit_pulled_offset: bool = False,
                 may_commit: Callable[[MessageQueue], bool] | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
        super().__init__(commit_pulled_offset=commit_pulled_offset)
        self._instance = instance
        self._clock = clock
        self.group = group
        self.client_id = client_id
        self.timeout_ms = timeout_ms
        self._on_event = on_event
        self._may_commit = may_commit
        self._persisted: dict[MessageQueue, int] = {}
        self.skipped_commits = 0  # updates not sent because `may_commit` said no

    def load(self) -> None:
        """Nothing to load: the brokers hold the offsets."""

    async def read_offset(self, mq: MessageQueue, read_type: ReadOffsetType) -> int:
        """The offset of `mq`; -1 if none, -2 if the broker could not be asked (READ_FROM_STORE)."""
        if read_type is not ReadOffsetType.READ_FROM_STORE:
            value = self.read_memory(mq)
            if value != OFFSET_NOT_FOUND or read_type is ReadOffsetType.READ_FROM_MEMORY:
                return value
        try:
            value = await self._query(mq)
        except MqError as err:
            if err.answered:  # MQBrokerException: the broker refused, which counts as no offset
                log.debug("query offset of %s: %s", mq, err)
                return OFFSET_NOT_FOUND
            log.warning("query offset of %s failed: %s", mq, err)
            return OFFSET_READ_FAILED
        if value is None:  # QUERY_NOT_FOUND
            return OFFSET_NOT_FOUND
        self.update_offset(mq, value, increase_only=False)
        return value

    async def persist_all(self, mqs: Collection[MessageQueue]) -> None:
        """Store every offset of a queue in `mqs`; forget the others (persistAllConsumerOffset).

        Does nothing when `mqs` is empty, as RocketMQ: a consumer that owns no queue keeps its table.
        """
        if not mqs:
            return
        owned = set(mqs)
        for mq in [mq for mq in self._table if mq not in owned]:
            del self._table[mq]
            self._persisted.pop(mq, None)
        # each value is read together with its sequence number, before any await lets a pull read a newer one
        reads = [(mq, offset, self._instance.next_commit_seq()) for mq, offset in list(self._table.items())]
        await asyncio.gather(*(self._persist_one(mq, offset, seq) for mq, offset, seq in reads))

    async def persist(self, mq: MessageQueue) -> None:
        offset = self._table.get(mq)
        if offset is not None:
            await self._persist_one(mq, offset, self._instance.next_commit_seq())

    def remove_offset(self, mq: MessageQueue) -> None:
        super().remove_offset(mq)
        self._persisted.pop(mq, None)

    async def _persist_one(self, mq: MessageQueue, offset: int, commit_seq: int) -> None:
        """updateConsumeOffsetToBroker; RocketMQ sends it oneway, so failures are only reported."""
        found: FoundBroker | None = None
        try:
            found = await offset_store_address(self._instance, mq)
            if self._may_commit is not None and not self._may_commit(mq):
                self.skipped_commits += 1
                log.debug("offset %d of %s not committed: its lock is not valid now", offset, mq)
                return
            decided_ms = self._clock.monotonic_ms()
            await self._instance.api.update_consumer_offset(found.addr, self.group, mq, offset, self.timeout_ms,
                                                            client_id=self.client_id, commit_seq=commit_seq)
        except MqError as err:
            log.warning("persisting offset %d of %s failed: %s", offset, mq, err)
            self._emit(mq, offset, found, error=str(err))
            return
        if self._persisted.get(mq) != offset:
            self._persisted[mq] = offset
            self._emit(mq, offset, found, decided_ms=decided_ms)

    async def _query(self, mq: MessageQueue) -> int | None:
        found = await offset_store_address(self._instance, mq)
        return await self._instance.api.query_consumer_offset(found.addr, self.group, mq, self.timeout_ms)

    def _emit(self, mq: MessageQueue, offset: int, found: FoundBroker | None, *, error: str | None = None,
              decided_ms: int | None = None) -> None:
        if self._on_event is None:
            return
        # decided_mono_ms: when the commit was decided (the lock check) and sent; the event is
        # written when the answer came back, which a process paused in between shows much later.
        # A client under clock control read it on its skewed clock: the event carries the real time
        to_real = real_mono_converter(self._clock)
        if to_real is not None and decided_ms is not None:
            decided_ms = to_real(decided_ms)
        event: dict[str, Any] = {
            "event": "offset-commit", "side": "client", "group": self.group, "client_id": self.client_id or None,
            "topic": mq.topic, "broker_name": mq.broker_name, "queue_id": mq.queue_id, "offset": offset,
            "ok": error is None, "addr": found.addr if found else None,
            "target_broker_id": found.broker_id if found else None, "decided_mono_ms": decided_ms}
        if error is not None:
            event["error"] = error
        self._on_event(event)


class ConsumerOffsetPersistService(Service):
    """persistAllConsumerOffset: every `consumer_offset_persist_ms`, the offsets of owned queues."""

    name = "consumer-offset-persist"
    expected_errors = (MqError,)

    def __init__(self, store: OffsetStore, owned: Callable[[], Collection[MessageQueue]], interval_ms: int,
                 first_ms: int, *, on_crash: CrashHandler | None = None) -> None:
        super().__init__(interval_ms, on_crash=on_crash, initial_delay_ms=first_ms)
        self._store = store
        self._owned = owned

    async def tick(self) -> None:
        await self._store.persist_all(set(self._owned()))


async def offset_store_address(instance: ClientInstance, mq: MessageQueue) -> FoundBroker:
    """The offset-store lookup: the master only; after a route refresh, any broker.

    With the master gone this picks a slave, so offsets are committed to and read from it.
    """
    routes = instance.routes
    if routes.route(mq.topic) is None:
        await routes.ensure_route(mq.topic)
    found = routes.find_broker_address_in_subscribe(mq.broker_name, c.MASTER_ID, True)
    if found is None:
        await routes.update_topic(mq.topic)
        found = routes.find_broker_address_in_subscribe(mq.broker_name, c.MASTER_ID, False)
    if found is None:
        raise BrokerNotFoundError(f"broker {mq.broker_name} is not in the route of {mq.topic}")
    return found


async def query_queue_offset(instance: ClientInstance, mq: MessageQueue, kind: OffsetKind, *,
                             timestamp_ms: int = 0, timeout_ms: int) -> int:
    """MQAdminImpl#maxOffset / searchOffset: asks the master of `mq`'s broker only.

    Raises:
        BrokerNotFoundError: the broker has no master in the route (RocketMQ throws too).
        RemoteError / TransportError: the query failed.
    """
    routes = instance.routes
    if routes.route(mq.topic) is None:
        await routes.ensure_route(mq.topic)
    addr = await routes.publish_address(mq.topic, mq.broker_name)
    return await instance.api.queue_offset(addr, mq, kind, timeout_ms, timestamp_ms=timestamp_ms)


# --- BROADCASTING: a local file per client and group ------------------------------------------

def offsets_file(root: Path, client_id: str, group: str) -> Path:
    """`<root>/<client_id>/<group>/offsets.json` (RocketMQ's localOffsetStoreDir layout)."""
    return Path(root) / client_id / group / OFFSETS_FILE_NAME


def read_offsets_file(path: Path) -> dict[MessageQueue, int]:
    """The offsets in `path`; {} if there is no file. A damaged file is logged and read as empty."""
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        log.warning("offset file %s is unreadable (%s); starting from no offsets", path, err)
        return {}
    table: dict[MessageQueue, int] = {}
    for entry in raw.get("offsetTable", []) if isinstance(raw, dict) else []:
        try:
            table[MessageQueue(str(entry["topic"]), str(entry["brokerName"]), int(entry["queueId"]))] = \
                int(entry["offset"])
        except (KeyError, TypeError, ValueError):
            log.warning("offset file %s: skipping a bad entry %r", path, entry)
    return table


def write_offsets_file(path: Path, table: dict[MessageQueue, int]) -> None:
    """Write the whole table to a temporary file, flush it, and rename it over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = [{"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": offset}
               for mq, offset in sorted(table.items())]
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        json.dump({"offsetTable": entries}, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class LocalFileOffsetStore(_MemoryTable):
    """BROADCASTING offsets: every consumer keeps its own, in a local file.

    Persisting is a read-modify-write of the whole file (entries of queues this consumer does
    not hold are kept), replaced atomically so a kill never leaves half a file.
    """

    def __init__(self, root: Path, client_id: str, group: str, *, on_event: EventSink | None = None,
                 commit_pulled_offset: bool = False) -> None:
        super().__init__(commit_pulled_offset=commit_pulled_offset)
        self.path = offsets_file(root, client_id, group)
        self.group = group
        self.client_id = client_id
        self._on_event = on_event
        self._persisted: dict[MessageQueue, int] = {}

    def load(self) -> None:
        self._table.update(read_offsets_file(self.path))
        self._persisted = dict(self._table)

    async def read_offset(self, mq: MessageQueue, read_type: ReadOffsetType) -> int:
        if read_type is not ReadOffsetType.READ_FROM_STORE:
            value = self.read_memory(mq)
            if value != OFFSET_NOT_FOUND or read_type is ReadOffsetType.READ_FROM_MEMORY:
                return value
        stored = read_offsets_file(self.path).get(mq)
        if stored is None:
            return OFFSET_NOT_FOUND
        self.update_offset(mq, stored, increase_only=False)
        return stored

    async def persist_all(self, mqs: Collection[MessageQueue]) -> None:
        if not mqs:
            return
        owned = set(mqs)
        self._write({mq: offset for mq, offset in self._table.items() if mq in owned})

    async def persist(self, mq: MessageQueue) -> None:
        offset = self._table.get(mq)
        if offset is not None:
            self._write({mq: offset})

    def _write(self, updates: dict[MessageQueue, int]) -> None:
        if not updates:
            return
        table = read_offsets_file(self.path)
        table.update(updates)
        try:
            write_offsets_file(self.path, table)
        except OSError as err:
            log.warning("writing offset file %s failed: %s", self.path, err)
            return
        for mq, offset in updates.items():
            if self._persisted.get(mq) != offset:
                self._persisted[mq] = offset
                if self._on_event is not None:
                    # a local file has no broker: target_broker_id stays null
                    self._on_event({"event": "offset-commit", "side": "client", "group": self.group,
                                    "client_id": self.client_id, "topic": mq.topic, "broker_name": mq.broker_name,
                                    "queue_id": mq.queue_id, "offset": offset, "ok": True,
                                    "target_broker_id": None, "file": str(self.path)})
