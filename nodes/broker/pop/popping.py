"""One pop, queue by queue (RocketMQ PopMessageProcessor#popMsgFromQueue and its `isOrder`
branch with ConsumerOrderInfoManager), run synchronously on the event loop: the state changes
it makes are collected in the state's delta and written by the engine before it answers.

Non-FIFO: read from the pop offset, advance the offset at once, put every message in flight.
FIFO: a queue whose last batch still has an invisible unacked message is blocked (a retry with
the batch's attempt id gets the same hand-outs again); once every unacked message of the batch
is visible again the queue is read again from the first of them, in place, each offset's count
going up; a message handed out `max_attempts` times is dead-lettered instead of a further time.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from nodes.broker.pop import moves
from nodes.broker.pop.journal import PopJournal
from nodes.broker.pop.state import InFlight, OrderBatch, PopState
from nodes.broker.send_back import dlq_topic
from nodes.broker.topics import TopicConfigManager
from nodes.store.message_store import GetStatus, MessageStore
from nodes.store.record import Record, decode_record

log = logging.getLogger(__name__)

_READS_PER_QUEUE_MAX = 4  # reads of one queue in one pop when they find only filtered-out or removed units


@dataclass(frozen=True, slots=True)
class PopCall:
    group: str
    topic: str
    invisible_ms: int
    fifo: bool
    attempt_id: str
    tag_hashes: frozenset[int] | None
    tags: frozenset[str] | None
    client_id: str
    now_wall_ms: int
    max_attempts: int


Popped = tuple[InFlight, Record]


class QueuePopper:
    def __init__(self, store: MessageStore, state: PopState, topics: TopicConfigManager, journal: PopJournal, *,
                 no_block: bool = False) -> None:
        self._store = store
        self._no_block = no_block  # the selftest's bug (FAULT_POP_FIFO_NO_BLOCK)
        self._state = state
        self._topics = topics
        self._journal = journal

    # --- reading -------------------------------------------------------------------------------

    def _start_offset(self, queue_topic: str, queue_id: int, retry: bool) -> int:
        """Where a group with no pop offset starts (ConsumeInitMode.MAX, as the proxy asks): a
        retry topic and a young queue (nothing removed yet) from the start, else at the last message."""
        min_offset = self._store.min_queue_offset(queue_topic, queue_id)
        if retry or min_offset == 0:
            return min_offset
        return max(min_offset, self._store.max_queue_offset(queue_topic, queue_id) - 1)

    def _read(self, call: PopCall, queue_topic: str, queue_id: int, start: int, want: int) -> tuple[list[Record], int]:
        """Up to `want` records matching the call's tags from `start`, and the offset after them.
        Units a tag filter passes over and removed ones are stepped over (RocketMQ acks them)."""
        offset = start
        for _ in range(_READS_PER_QUEUE_MAX):
            got = self._store.get_messages(queue_topic, queue_id, offset, want, call.tag_hashes)
            next_offset = max(got.next_begin_offset, got.min_offset if got.status is GetStatus.OFFSET_TOO_SMALL else 0)
            if got.status is GetStatus.FOUND:
                records = [decode_record(data) for data in got.records]
                if call.tags is not None:  # the tag hash may collide: the tag itself decides
                    records = [r for r in records if r.tags in call.tags]
                if queue_topic != call.topic:  # a retry queue another group or topic may share
                    records = [r for r in records if moves.is_own_copy(r, call.group, call.topic)]
                if records:
                    return records, next_offset
            if got.status in (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.OFFSET_OVERFLOW_ONE) or next_offset == offset:
                return [], offset
            if got.status is GetStatus.OFFSET_OVERFLOW_BADLY:
                return [], next_offset
            offset = next_offset
        return [], offset

    def _hand_out(self, call: PopCall, record: Record, queue_topic: str, attempt: int) -> InFlight:
        state = self._state
        entry = InFlight(group=call.group, topic=call.topic, queue_topic=queue_topic, queue_id=record.queue_id,
                         queue_offset=record.queue_offset, phys_offset=record.phys_offset, size=record.total_size,
                         generation=state.next_generation(), pop_wall_ms=call.now_wall_ms,
                         invisible_ms=call.invisible_ms, deadline_wall_ms=call.now_wall_ms + call.invisible_ms,
                         attempt=attempt, fifo=call.fifo, client_id=call.client_id,
                         handles_until_wall_ms=call.now_wall_ms + call.invisible_ms)
        state.put_inflight(entry)
        self._journal.popped(entry, record.msg_id, attempt_id=call.attempt_id, repeat=False)
        return entry

    # --- non-FIFO ------------------------------------------------------------------------------

    def pop_queue(self, call: PopCall, queue_topic: str, queue_id: int, want: int) -> list[Popped]:
        key = (call.group, queue_topic, queue_id)
        start = self._state.offsets.get(key)
        if start is None:
            start = self._start_offset(queue_topic, queue_id, retry=queue_topic != call.topic)
        records, next_offset = self._read(call, queue_topic, queue_id, start, want)
        self._state.set_offset(key, next_offset)
        return [(self._hand_out(call, r, queue_topic, r.reconsume_times + 1), r) for r in records]

    # --- FIFO ----------------------------------------------------------------------------------

    def pop_fifo_queue(self, call: PopCall, queue_id: int, want: int, depth: int = 0) -> list[Popped]:
        state, topic = self._state, call.topic
        key = (call.group, topic, queue_id)
        batch = state.orders.get(key)
        expired: list[InFlight] = []
        start = state.offsets.get(key)
        if batch is not None:
            unacked = state.unacked(call.group, topic, queue_id, batch)
            if any(e.deadline_wall_ms > call.now_wall_ms for e in unacked):
                if call.attempt_id and call.attempt_id == batch.attempt_id:
                    return self._repeat(call, unacked)
                if not self._no_block:
                    return []  # blocked until the batch is acked or visible again
            elif unacked:  # every unacked one is visible again: re-read from the first, in place
                expired = unacked
                start = unacked[0].queue_offset
        if start is None:
            start = self._start_offset(topic, queue_id, retry=False)
        records, next_offset = self._read(call, topic, queue_id, start, want)
        previous_counts = batch.counts if batch is not None else {}
        for entry in expired:
            state.retire(entry)
            self._journal.revived(entry, to_topic=None, to_queue_offset=None, in_place=True)
        offsets: list[int] = []
        counts: dict[int, int] = {}
        out: list[Popped] = []
        dead_lettered = 0
        for record in records:
            count = previous_counts.get(record.queue_offset, 0) + 1
            if count > call.max_attempts:
                if not self._dead_letter_in_place(call, record, count - 1):
                    next_offset = record.queue_offset  # not past it: the queue must not skip a message
                    break
                dead_lettered += 1
                continue
            entry = self._hand_out(call, record, topic, count)
            offsets.append(record.queue_offset)
            counts[record.queue_offset] = count
            out.append((entry, record))
        # counts of offsets not read again this time (a smaller batch) wait for their next pop
        counts.update({o: n for o, n in previous_counts.items() if o >= next_offset})
        state.set_offset(key, next_offset)
        if out or batch is not None:
            state.put_order(key, OrderBatch(offsets, counts, call.attempt_id, call.now_wall_ms))
        if not out and dead_lettered and depth < _READS_PER_QUEUE_MAX:
            return self.pop_fifo_queue(call, queue_id, want, depth + 1)  # the queue moved on: read on
        return out

    def _repeat(self, call: PopCall, unacked: list[InFlight]) -> list[Popped]:
        """A retry of the batch's attempt id: the same messages, the same handles, no count added."""
        out: list[Popped] = []
        for entry in unacked:
            record = self._store.lookup_message(entry.phys_offset, entry.size)
            if record is not None:
                self._journal.popped(entry, record.msg_id, attempt_id=call.attempt_id, repeat=True)
                out.append((entry, record))
        return out

    def _dead_letter_in_place(self, call: PopCall, record: Record, handed_out: int) -> bool:
        """A FIFO message handed out `max_attempts` times goes to the DLQ instead of once more."""
        entry = InFlight(group=call.group, topic=call.topic, queue_topic=call.topic, queue_id=record.queue_id,
                         queue_offset=record.queue_offset, phys_offset=record.phys_offset, size=record.total_size,
                         generation=0, pop_wall_ms=call.now_wall_ms, invisible_ms=0, deadline_wall_ms=call.now_wall_ms,
                         attempt=handed_out, fifo=True, client_id=call.client_id)
        try:
            appended = moves.to_dlq(self._store, self._topics, record, group=call.group, topic=call.topic,
                                    now_ms=call.now_wall_ms)
        except moves.MoveFailed as exc:
            log.warning("FIFO message %s of %s queue %d not dead-lettered (%s); it waits at its offset",
                        record.queue_offset, call.topic, record.queue_id, exc)
            return False
        self._journal.dead_lettered(entry, reason="max-attempts", to_topic=dlq_topic(call.group),
                                    to_queue_offset=appended.queue_offset)
        return True
