"""POP consumption's state (RocketMQ keeps it as CK/ACK records in its revive topic and in
ConsumerOrderInfoManager; we keep it as tables) and its stored form.

Owns, per master broker:
- pop offsets: (group, queue topic, queue id) -> the next queue offset to pop (RocketMQ's
  consumer offset, advanced at pop time); a table of its own, so 4.x pull groups' committed
  offsets and pop groups' offsets never touch;
- the in-flight table: (group, queue topic, queue id, queue offset) -> `InFlight`, a message
  handed out and neither acked, revived nor dead-lettered;
- FIFO batches: (group, topic, queue id) -> `OrderBatch`, the offsets of the last FIFO pop of
  that queue and how often each was handed out;
- the generation counter every hand-out draws from.

Every change is made in memory and collected into a `Delta`; `persist.StateWriter` writes the
deltas into the store's LMDB in one transaction each, in order. Pure: no I/O here, `now` is
passed in.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from nodes.common import constants as c

OFFSETS_TABLE = "pop_offsets"
INFLIGHT_TABLE = "pop_inflight"
ORDERS_TABLE = "pop_orders"
META_TABLE = "pop_meta"
GENERATION_KEY = "generation"
REVIVED = -1  # the settled generation of a retired entry: no handle of it is current

QueueKey = tuple[str, str, int]  # (group, queue topic, queue id)
EntryKey = tuple[str, str, int, int]  # (group, queue topic, queue id, queue offset)


def encode_key(key: tuple[Any, ...]) -> str:
    """A JSON array: names cannot make two keys collide, whatever they contain."""
    return json.dumps(list(key), separators=(",", ":"))


def decode_queue_key(text: str) -> QueueKey:
    group, topic, queue_id = json.loads(text)
    return str(group), str(topic), int(queue_id)


@dataclass(slots=True)
class InFlight:
    """One handed-out message. `deadline_wall_ms` is on the wall clock because it must outlive
    the process (a restarted broker revives what expired while it was down)."""

    group: str
    topic: str  # the topic the client popped
    queue_topic: str  # where the message is: `topic`, or the group's pop retry topic for it
    queue_id: int
    queue_offset: int
    phys_offset: int
    size: int
    generation: int
    pop_wall_ms: int
    invisible_ms: int
    deadline_wall_ms: int
    attempt: int  # the delivery attempt this hand-out is (1 = first)
    fifo: bool
    client_id: str = ""
    # the latest deadline of any handle issued for this entry (a change may shorten the current
    # one): how long a settled or revived entry must be remembered to refuse its old handles
    handles_until_wall_ms: int = 0

    @property
    def key(self) -> EntryKey:
        return self.group, self.queue_topic, self.queue_id, self.queue_offset

    @property
    def queue_key(self) -> QueueKey:
        return self.group, self.queue_topic, self.queue_id


@dataclass(slots=True)
class OrderBatch:
    """The last FIFO pop of one queue for one group (RocketMQ's OrderInfo). The offsets of the
    batch still in the in-flight table are its unacked ones; the queue is blocked while any of
    them is still invisible."""

    offsets: list[int]
    counts: dict[int, int]  # queue offset -> how often it has been handed out
    attempt_id: str
    pop_wall_ms: int


@dataclass
class Delta:
    """Rows to write and keys to delete, per table, in the order the changes were made."""

    puts: dict[str, dict[str, Any]] = field(default_factory=dict)
    deletes: dict[str, set[str]] = field(default_factory=dict)

    def put(self, table: str, key: str, value: Any) -> None:
        self.deletes.get(table, set()).discard(key)
        self.puts.setdefault(table, {})[key] = value

    def delete(self, table: str, key: str) -> None:
        self.puts.get(table, {}).pop(key, None)
        self.deletes.setdefault(table, set()).add(key)

    def merge(self, later: Delta) -> None:
        for table, keys in later.deletes.items():
            for key in keys:
                self.delete(table, key)
        for table, rows in later.puts.items():
            for key, value in rows.items():
                self.put(table, key, value)

    def __bool__(self) -> bool:
        return any(self.puts.values()) or any(self.deletes.values())


class PopState:
    def __init__(self) -> None:
        self.offsets: dict[QueueKey, int] = {}
        self.inflight: dict[EntryKey, InFlight] = {}
        self.orders: dict[QueueKey, OrderBatch] = {}
        self.generation = 0
        # entry key -> (generation acked or dead-lettered, or REVIVED; forget after wall ms): a
        # repeated ack of that handle is answered OK, any other handle of the entry is refused.
        # In memory only: a restart forgets it (then only the handle's own deadline is checked).
        self.settled: dict[EntryKey, tuple[int, int]] = {}
        # no entry's deadline is earlier than this (it may be lower than the true earliest: a
        # removal leaves it), so a revive pass before it has nothing to look at
        self._earliest_deadline_ms = 0
        self._delta = Delta()

    # --- loading ---------------------------------------------------------------------------------

    @classmethod
    def from_tables(cls, tables: dict[str, dict[str, Any]]) -> PopState:
        state = cls()
        state.offsets = {decode_queue_key(k): int(v) for k, v in tables.get(OFFSETS_TABLE, {}).items()}
        for value in tables.get(INFLIGHT_TABLE, {}).values():
            entry = InFlight(**value)
            state.inflight[entry.key] = entry
        for k, value in tables.get(ORDERS_TABLE, {}).items():
            state.orders[decode_queue_key(k)] = OrderBatch(
                offsets=[int(o) for o in value["offsets"]], counts={int(o): int(n) for o, n in value["counts"].items()},
                attempt_id=str(value["attempt_id"]), pop_wall_ms=int(value["pop_wall_ms"]))
        stored_generation = int(tables.get(META_TABLE, {}).get(GENERATION_KEY, 0))
        state.generation = max([stored_generation, *(e.generation for e in state.inflight.values())])
        return state

    # --- changes (each recorded in the pending delta) ------------------------------------------

    def next_generation(self) -> int:
        self.generation += 1
        self._delta.put(META_TABLE, GENERATION_KEY, self.generation)
        return self.generation

    def set_offset(self, key: QueueKey, queue_offset: int) -> None:
        if self.offsets.get(key) != queue_offset:
            self.offsets[key] = queue_offset
            self._delta.put(OFFSETS_TABLE, encode_key(key), queue_offset)

    def put_inflight(self, entry: InFlight) -> None:
        self.inflight[entry.key] = entry
        self._earliest_deadline_ms = min(self._earliest_deadline_ms, entry.deadline_wall_ms)
        self._delta.put(INFLIGHT_TABLE, encode_key(entry.key), asdict(entry))

    def remove_inflight(self, key: EntryKey) -> InFlight | None:
        entry = self.inflight.pop(key, None)
        if entry is not None:
            self._delta.delete(INFLIGHT_TABLE, encode_key(key))
        return entry

    def settle(self, entry: InFlight) -> None:
        """Remove an acked or dead-lettered entry, remembering its generation for repeated acks."""
        self.remove_inflight(entry.key)
        self._remember(entry, entry.generation)

    def retire(self, entry: InFlight) -> None:
        """Remove an expired entry (revived, or about to be handed out again in place): every
        handle of it is stale from now on."""
        self.remove_inflight(entry.key)
        self._remember(entry, REVIVED)

    def _remember(self, entry: InFlight, generation: int) -> None:
        self.settled.pop(entry.key, None)  # re-inserted last: the dict stays oldest first
        self.settled[entry.key] = (generation, max(entry.handles_until_wall_ms, entry.deadline_wall_ms))
        if len(self.settled) > c.POP_SETTLED_REMEMBERED_MAX:
            # the oldest goes: a repeated ack of it is then judged by its handle's deadline alone
            del self.settled[next(iter(self.settled))]

    def put_order(self, key: QueueKey, batch: OrderBatch) -> None:
        self.orders[key] = batch
        self._delta.put(ORDERS_TABLE, encode_key(key), {
            "offsets": batch.offsets, "counts": {str(o): n for o, n in batch.counts.items()},
            "attempt_id": batch.attempt_id, "pop_wall_ms": batch.pop_wall_ms})

    def take_delta(self) -> Delta:
        delta, self._delta = self._delta, Delta()
        return delta

    # --- queries ---------------------------------------------------------------------------------

    def unacked(self, group: str, topic: str, queue_id: int, batch: OrderBatch) -> list[InFlight]:
        """The batch's entries still in flight, in queue order."""
        found = (self.inflight.get((group, topic, queue_id, o)) for o in batch.offsets)
        return [e for e in found if e is not None]

    def forget_settled(self, now_wall_ms: int) -> None:
        for key in [k for k, (_, until) in self.settled.items() if until <= now_wall_ms]:
            del self.settled[key]

    def due(self, now_wall_ms: int) -> list[InFlight]:
        """Entries whose invisible time is over, earliest deadline first. Scans the table only
        when something may be due."""
        if now_wall_ms < self._earliest_deadline_ms:
            return []
        due: list[InFlight] = []
        earliest_later = now_wall_ms + c.POP_INVISIBLE_MAX_MS
        for entry in self.inflight.values():
            if entry.deadline_wall_ms <= now_wall_ms:
                due.append(entry)
            else:
                earliest_later = min(earliest_later, entry.deadline_wall_ms)
        # what is due now stays in the table until moved (FIFO batches until popped again): keep
        # looking at every pass while there is any
        self._earliest_deadline_ms = now_wall_ms if due else earliest_later
        return sorted(due, key=lambda e: e.deadline_wall_ms)
