"""The POP engine (RocketMQ 5's PopMessageProcessor, AckMessageProcessor,
ChangeInvisibleTimeProcessor and the proxy's receipt-handle checks): the transport-free API a
RocketMQ 5 MessagingService (or any other adapter) calls.

    pop(group=, topic=, max_nums=, invisible_ms=, poll_timeout_ms=, fifo=, attempt_id=,
        tag_expression=, client_id=)                       -> PopResult
    ack(group, topic, receipt_handle)                     -> AckResult
    change_invisible(group, topic, receipt_handle, ms)    -> ChangeInvisibleResult
    forward_to_dlq(group, topic, receipt_handle)          -> AckResult
    revive()                                              -> moved count (PopReviveService)

Owns the rules of a handle's validity: a handle is current while its entry is in flight with
the same generation and its invisible time is not over; an ack of a handle already settled
answers OK (idempotent); an expired, superseded (its invisible time changed, or a FIFO
redelivery) or revived handle answers INVALID_RECEIPT_HANDLE. Runs on the broker's event loop;
answers only after the state change it made is on disk (persist.py).
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any

from nodes.broker import validation
from nodes.broker.pop import moves
from nodes.broker.pop.journal import PopJournal
from nodes.broker.pop.persist import StateWriter
from nodes.broker.pop.popping import PopCall, Popped, QueuePopper
from nodes.broker.pop.state import (
    INFLIGHT_TABLE,
    META_TABLE,
    OFFSETS_TABLE,
    ORDERS_TABLE,
    REVIVED,
    InFlight,
    PopState,
)
from nodes.broker.pop.values import (
    AckResult,
    ChangeInvisibleRequest,
    ChangeInvisibleResult,
    PopAckRequest,
    PopCode,
    PoppedMessage,
    PopRequest,
    PopResult,
)
from nodes.broker.pop.waiters import PopWaiters
from nodes.broker.pull import subscription_tags
from nodes.broker.send_back import dlq_topic
from nodes.broker.topics import SubscriptionGroupManager, TopicConfigManager
from nodes.common import constants as c
from nodes.common.clock import Clock
from nodes.common.errors import StoreError
from nodes.common.events import EventLog
from nodes.common.receipt_handle import MalformedHandle, ReceiptHandle
from nodes.store.message_store import MessageStore
from nodes.store.record import tag_hash

log = logging.getLogger(__name__)


class PopEngine:
    """Args:
        store, topics, groups: the broker's; the state lives in `store.metadata`.
        clock: wall time stamps pops and deadlines; monotonic time bounds long polls.
        broker_name: written into handles; a handle of another broker is refused.
        is_master: a slave refuses every call (it keeps no pop state and takes no writes).
        writes_open: False while a restarting master holds writes (no pops, no revives then).
        on_put: after the engine stored a copy (revive, DLQ): replication's wake-up.
        on_topics_changed: after it created a retry or dead-letter topic (registration).
        fault_switches: test-only bugs (constants.BROKER_FAULT_SWITCHES) the chaos selftest turns on.
    """

    def __init__(self, *, store: MessageStore, topics: TopicConfigManager, groups: SubscriptionGroupManager,
                 clock: Clock, broker_name: str, is_master: bool = True, events: EventLog | None = None,
                 writes_open: Callable[[], bool] = lambda: True, on_put: Callable[[], None] | None = None,
                 on_topics_changed: Callable[[], Awaitable[None]] | None = None,
                 readable: Callable[[], bool] = lambda: True, rng: random.Random | None = None,
                 fault_switches: frozenset[str] = frozenset()) -> None:
        self._store = store
        self._topics = topics
        self._groups = groups
        self._clock = clock
        self.broker_name = broker_name
        self.is_master = is_master
        self._writes_open = writes_open
        self._readable = readable
        self._on_put = on_put
        self._on_topics_changed = on_topics_changed
        self._rng = rng or random.Random()
        self._never_revive = c.FAULT_POP_NEVER_REVIVE in fault_switches
        self._accept_stale = c.FAULT_POP_ACCEPT_STALE_HANDLE in fault_switches
        self._fifo_no_block = c.FAULT_POP_FIFO_NO_BLOCK in fault_switches
        self.journal = PopJournal(events, broker_name)
        self.state = PopState()
        self.waiters = PopWaiters()
        self._writer = StateWriter(store.metadata)
        self._popper = QueuePopper(store, self.state, topics, self.journal, no_block=self._fifo_no_block)

    def load(self) -> None:
        """Read the state the last run left (after the store opened)."""
        md = self._store.metadata
        tables = {t: md.get_all(t) for t in (OFFSETS_TABLE, INFLIGHT_TABLE, ORDERS_TABLE, META_TABLE)}
        self.state = PopState.from_tables(tables)
        self._popper = QueuePopper(self._store, self.state, self._topics, self.journal, no_block=self._fifo_no_block)
        if self.state.inflight:
            log.info("pop state loaded: %d in flight, %d pop offsets, %d FIFO batches", len(self.state.inflight),
                     len(self.state.offsets), len(self.state.orders))

    def bind_loop(self) -> None:
        self.waiters.bind_loop()

    def notify_arrival(self, topic: str, *rest: object) -> None:
        """The store's arrival listener (any thread)."""
        self.waiters.notify_arrival(topic, *rest)

    # --- pop -------------------------------------------------------------------------------------

    async def pop(self, *, group: str, topic: str, max_nums: int, invisible_ms: int, poll_timeout_ms: int = 0,
                  fifo: bool | None = None, attempt_id: str = "", tag_expression: str = "*",
                  client_id: str = "") -> PopResult:
        """Up to `max_nums` messages of the topic's queues on this broker (and of the group's pop
        retry topic for it), each invisible to other pops for `invisible_ms`; waits up to
        `poll_timeout_ms` for one to arrive when none is there. `fifo` None: the group's
        consume_message_orderly flag decides."""
        refusal = self._refusal(group, topic)
        if refusal is not None:
            return PopResult(refusal[0], remark=refusal[1])
        if not 0 < max_nums <= c.POP_BATCH_MAX:
            return PopResult(PopCode.ILLEGAL_ARGUMENT, remark=f"max_nums {max_nums} is outside 1..{c.POP_BATCH_MAX}")
        if not 0 < invisible_ms <= c.POP_INVISIBLE_MAX_MS:
            return PopResult(PopCode.ILLEGAL_ARGUMENT,
                             remark=f"invisible time {invisible_ms} ms is outside 1..{c.POP_INVISIBLE_MAX_MS} ms")
        group_config = self._groups.find(group)
        if group_config is None:
            return PopResult(PopCode.GROUP_NOT_EXIST, remark=f"consumer group {group!r} does not exist; create it first")
        if fifo is None:
            fifo = group_config.consume_message_orderly
        if not fifo and (problem := moves.retry_topic_problem(group, topic)):
            return PopResult(PopCode.ILLEGAL_ARGUMENT, remark=f"the pop retry topic of this group and topic cannot "
                                                              f"exist ({problem}); use shorter names")
        tags = subscription_tags(tag_expression)
        deadline_ms = self._clock.monotonic_ms() + max(0, min(poll_timeout_ms, c.POP_POLL_MAX_MS))
        watched = (topic,) if fifo else (topic, moves.pop_retry_topic(group, topic))
        while True:
            call = PopCall(group=group, topic=topic, invisible_ms=invisible_ms, fifo=fifo, attempt_id=attempt_id,
                           tag_hashes=frozenset(tag_hash(t) for t in tags) if tags else None,
                           tags=frozenset(tags) if tags else None, client_id=client_id,
                           now_wall_ms=self._clock.wall_ms(), max_attempts=group_config.retry_max_times + 1)
            version = self._topics.data_version
            try:
                popped = self._pop_once(call, max_nums)
            finally:
                stored = await self._persist()
            if self._topics.data_version != version:
                await self._topics_changed()
            if not stored:
                return PopResult(PopCode.UNAVAILABLE, remark="the pop state could not be written (is the disk full?): "
                                                            "the messages read are not handed out and come back after "
                                                            "the invisible time; try again later")
            if popped:
                return PopResult(PopCode.OK, [self._answer(call, entry, record) for entry, record in popped])
            remaining_ms = deadline_ms - self._clock.monotonic_ms()
            if remaining_ms <= 0:
                return PopResult(PopCode.NOT_FOUND, remark="no new message")
            if self.waiters.waiting_on(topic) >= c.POP_POLLING_MAX:
                return PopResult(PopCode.POLLING_FULL, remark=f"{c.POP_POLLING_MAX} pops already wait on {topic}; "
                                                              "poll again later or with a shorter poll time")
            await self.waiters.wait(watched, remaining_ms)

    def _pop_once(self, call: PopCall, max_nums: int) -> list[Popped]:
        topic_config = self._topics.get(call.topic)
        queue_ids = list(range(topic_config.read_queue_nums)) if topic_config is not None else []
        sources: list[tuple[str, list[int]]] = [(call.topic, queue_ids)]
        if not call.fifo:
            retry = moves.pop_retry_topic(call.group, call.topic)
            retry_config = self._topics.get(retry)
            if retry_config is not None and retry_config.readable:
                retry_source = (retry, list(range(retry_config.read_queue_nums)))
                if self._rng.randrange(100) < c.POP_RETRY_FIRST_PERCENT:
                    sources.insert(0, retry_source)
                else:
                    sources.append(retry_source)
        out: list[Popped] = []
        for queue_topic, ids in sources:
            if not ids:
                continue
            first = self._rng.randrange(len(ids))
            for queue_id in ids[first:] + ids[:first]:
                want = max_nums - len(out)
                if want <= 0:
                    return out
                if call.fifo:
                    out += self._popper.pop_fifo_queue(call, queue_id, want)
                else:
                    out += self._popper.pop_queue(call, queue_topic, queue_id, want)
        return out

    def _answer(self, call: PopCall, entry: InFlight, record: Any) -> PoppedMessage:
        return PoppedMessage(
            topic=call.topic, queue_topic=entry.queue_topic, broker_name=self.broker_name, queue_id=entry.queue_id,
            queue_offset=entry.queue_offset, phys_offset=entry.phys_offset, body=record.body,
            properties=dict(record.properties), tags=record.tags, keys=record.keys, msg_id=record.msg_id,
            born_timestamp_ms=record.born_timestamp_ms, born_host=record.born_host,
            store_timestamp_ms=record.store_timestamp_ms, store_host=record.store_host,
            reconsume_times=record.reconsume_times, delivery_attempt=entry.attempt,
            receipt_handle=self.handle_of(entry).encode(), invisible_deadline_wall_ms=entry.deadline_wall_ms)

    def handle_of(self, entry: InFlight) -> ReceiptHandle:
        kind = c.POP_FIFO_KIND if entry.fifo else (
            c.POP_NORMAL_KIND if entry.queue_topic == entry.topic else c.POP_RETRY_KIND)
        return ReceiptHandle(kind, self.broker_name, entry.group, entry.queue_topic, entry.queue_id,
                             entry.queue_offset, entry.phys_offset, entry.pop_wall_ms, entry.invisible_ms,
                             entry.generation)

    # --- ack, change-invisible, forward to DLQ ----------------------------------------------------

    async def ack(self, group: str, topic: str, receipt_handle: str) -> AckResult:
        found = self._current(group, topic, receipt_handle)
        if isinstance(found, AckResult):
            return found
        entry, handle = found
        self.state.settle(entry)
        self.journal.acked(entry, "ok", handle)
        self._wake_if_unblocked(entry)
        if not await self._persist():
            return AckResult(PopCode.UNAVAILABLE, "the ack could not be written (is the disk full?); it holds until "
                                                  "a restart, ack again to be sure")
        return AckResult(PopCode.OK)

    async def change_invisible(self, group: str, topic: str, receipt_handle: str,
                               invisible_ms: int) -> ChangeInvisibleResult:
        """A new handle whose message is invisible for `invisible_ms` from now (0: visible again at
        once); the delivery attempt stays, the old handle is stale from now on."""
        if not 0 <= invisible_ms <= c.POP_INVISIBLE_MAX_MS:
            return ChangeInvisibleResult(PopCode.ILLEGAL_ARGUMENT, remark=f"invisible time {invisible_ms} ms is "
                                                                          f"outside 0..{c.POP_INVISIBLE_MAX_MS} ms")
        found = self._current(group, topic, receipt_handle)
        if isinstance(found, AckResult):
            if found.code is PopCode.OK:  # settled: there is nothing left to make invisible
                return ChangeInvisibleResult(PopCode.INVALID_RECEIPT_HANDLE,
                                             remark="receipt handle is settled: its message was acknowledged")
            return ChangeInvisibleResult(found.code, remark=found.remark)
        found, _ = found
        now_ms = self._clock.wall_ms()
        changed = dataclasses.replace(found, generation=self.state.next_generation(), pop_wall_ms=now_ms,
                                      invisible_ms=invisible_ms, deadline_wall_ms=now_ms + invisible_ms,
                                      handles_until_wall_ms=max(found.handles_until_wall_ms, found.deadline_wall_ms,
                                                                now_ms + invisible_ms))
        self.state.put_inflight(changed)
        self.journal.changed(found, changed)
        if not await self._persist():
            return ChangeInvisibleResult(PopCode.UNAVAILABLE, remark="the change could not be written (is the disk "
                                                                     "full?); try again later")
        if invisible_ms == 0 and changed.fifo:
            self.waiters.wake(changed.topic)
        return ChangeInvisibleResult(PopCode.OK, self.handle_of(changed).encode(), changed.deadline_wall_ms)

    async def forward_to_dlq(self, group: str, topic: str, receipt_handle: str) -> AckResult:
        """The message goes to `%DLQ%<group>` now, whatever its attempt, and is settled."""
        found = self._current(group, topic, receipt_handle)
        if isinstance(found, AckResult):
            return found
        if not self._writes_open():
            return AckResult(PopCode.UNAVAILABLE, "writes are held while this master restores its log; try again")
        entry, _ = found
        record = self._store.lookup_message(entry.phys_offset, entry.size)
        if record is None:
            return AckResult(PopCode.UNAVAILABLE, f"the message at commitlog offset {entry.phys_offset} is gone "
                                                  "(retention removed it); ack the handle instead")
        version = self._topics.data_version
        try:
            appended = moves.to_dlq(self._store, self._topics, record, group=group, topic=entry.topic,
                                    now_ms=self._clock.wall_ms())
        except moves.MoveFailed as exc:
            return AckResult(PopCode.UNAVAILABLE, f"{exc}; try again later")
        if self._on_put is not None:
            self._on_put()
        self.state.settle(entry)
        self.journal.dead_lettered(entry, reason="client", to_topic=dlq_topic(group),
                                   to_queue_offset=appended.queue_offset)
        self._wake_if_unblocked(entry)
        stored = await self._persist()
        if self._topics.data_version != version:
            await self._topics_changed()
        return AckResult(PopCode.OK) if stored else AckResult(
            PopCode.UNAVAILABLE, "stored in the DLQ, but settling the handle could not be written; ack it")

    def _current(self, group: str, topic: str, receipt_handle: str) -> tuple[InFlight, ReceiptHandle] | AckResult:
        """The entry a current handle names (with the handle), or the answer for a handle that is
        not current (an already settled one answers OK)."""
        refusal = self._refusal(group, topic)
        if refusal is not None:
            return AckResult(*refusal)
        try:
            handle = ReceiptHandle.parse(receipt_handle)
        except MalformedHandle as exc:
            return AckResult(PopCode.ILLEGAL_ARGUMENT, str(exc))
        if handle.broker_name != self.broker_name:
            return AckResult(PopCode.ILLEGAL_ARGUMENT, f"the handle is of broker {handle.broker_name}, not "
                                                       f"{self.broker_name}; send it to the broker that popped it")
        if handle.group != group or handle.queue_topic not in (topic, moves.pop_retry_topic(group, topic)):
            return AckResult(PopCode.ILLEGAL_ARGUMENT, f"the handle is of group {handle.group} and queue topic "
                                                       f"{handle.queue_topic}, not of {group} and {topic}")
        now_ms = self._clock.wall_ms()
        key = (group, handle.queue_topic, handle.queue_id, handle.queue_offset)
        entry = self.state.inflight.get(key)
        if entry is not None and self._accept_stale:
            return entry, handle  # the selftest's bug: neither the generation nor the deadline is checked
        if entry is not None and entry.generation == handle.generation:
            if entry.deadline_wall_ms <= now_ms:
                return self._invalid(handle, topic, "expired: its invisible time is over and the message comes back "
                                                    "with its next attempt")
            return entry, handle
        if self._accept_stale:  # the selftest's bug: a handle not in flight is taken for an acked one
            return AckResult(PopCode.OK, "already settled")
        settled = self.state.settled.get(key)
        if settled is not None and settled[0] == handle.generation:
            return AckResult(PopCode.OK, "already settled")
        if settled is not None and settled[0] == REVIVED and entry is None:
            return self._invalid(handle, topic, "expired: its message was revived and comes back with its next "
                                                "attempt")
        if entry is not None or settled is not None:
            return self._invalid(handle, topic, "superseded: a newer handle of this message is current (its "
                                                "invisible time was changed, or it was handed out again)")
        if handle.deadline_wall_ms <= now_ms:
            return self._invalid(handle, topic, "expired: its invisible time is over")
        # Not in flight and not expired: it was acked (before a restart, which forgets settled handles).
        return AckResult(PopCode.OK, "nothing in flight for this handle: already settled")

    def _invalid(self, handle: ReceiptHandle, topic: str, reason: str) -> AckResult:
        self.journal.ack_refused(handle.group, topic, handle.queue_topic, handle.queue_id, handle.queue_offset,
                                 handle.generation, reason.split(":")[0])
        return AckResult(PopCode.INVALID_RECEIPT_HANDLE, f"receipt handle is {reason}")

    def _refusal(self, group: str, topic: str) -> tuple[PopCode, str] | None:
        if not self.is_master:
            return PopCode.NOT_MASTER, (f"broker {self.broker_name}: a slave keeps no pop state; pop, ack and change "
                                        "invisible time on the master")
        if refusal := validation.names_refusal(topic=topic, group=group):
            return PopCode.ILLEGAL_ARGUMENT, refusal.remark
        config = self._topics.get(topic)
        if config is None:
            return PopCode.TOPIC_NOT_EXIST, f"topic {topic!r} does not exist on broker {self.broker_name}"
        if not config.readable or not self._readable():
            return PopCode.NO_PERMISSION, f"topic {topic!r} is not readable on broker {self.broker_name}"
        if not self._writes_open():
            return PopCode.UNAVAILABLE, "writes are held while this master restores its log; try again shortly"
        return None

    def _wake_if_unblocked(self, entry: InFlight) -> None:
        """A settled FIFO message may unblock its queue: wake the pops waiting for the topic."""
        if not entry.fifo:
            return
        batch = self.state.orders.get(entry.queue_key)
        if batch is None or not self.state.unacked(entry.group, entry.queue_topic, entry.queue_id, batch):
            self.waiters.wake(entry.topic)

    # --- revive ----------------------------------------------------------------------------------

    async def revive(self) -> int:
        """Move every expired non-FIFO hand-out to the pop retry topic (attempt + 1), or to the DLQ
        once it was handed out max-attempts times; wake the pops waiting on a FIFO queue whose
        batch expired (it is handed out again in place). Returns how many were moved."""
        if not self.is_master or not self._writes_open():
            return 0
        now_ms = self._clock.wall_ms()
        self.state.forget_settled(now_ms)
        moved = 0
        version = self._topics.data_version
        due = self.state.due(now_ms)
        if self._never_revive:  # the selftest's bug: expired non-FIFO hand-outs stay in flight for ever
            due = [entry for entry in due if entry.fifo]
        # an expired FIFO batch stays where it is until a pop hands it out again: wake its pops
        for topic in {entry.topic for entry in due if entry.fifo}:
            if self.waiters.has_waiters(topic):
                self.waiters.wake(topic)
        for entry in [entry for entry in due if not entry.fifo][:c.POP_REVIVE_BATCH_MAX]:
            try:
                self._revive_one(entry, now_ms)
            except moves.MoveFailed as exc:
                log.warning("revive of %s queue %d offset %d failed (%s); retrying at the next pass",
                            entry.queue_topic, entry.queue_id, entry.queue_offset, exc)
                break
            moved += 1
        if moved and self._on_put is not None:
            self._on_put()
        if not await self._persist():
            log.warning("the revived entries could not be removed from the stored pop state; a restart may revive "
                        "them again")
        if self._topics.data_version != version:
            await self._topics_changed()
        return moved

    def _revive_one(self, entry: InFlight, now_ms: int) -> None:
        record = self._store.lookup_message(entry.phys_offset, entry.size)
        if record is None:
            log.warning("expired pop of %s queue %d offset %d: the message is gone (retention); dropping it",
                        entry.queue_topic, entry.queue_id, entry.queue_offset)
            self.state.retire(entry)
            self.journal.revived(entry, to_topic=None, to_queue_offset=None, in_place=False, lost=True)
            return
        group_config = self._groups.groups.get(entry.group)
        max_attempts = (group_config.retry_max_times if group_config else c.GROUP_RETRY_MAX_TIMES) + 1
        if entry.attempt >= max_attempts:
            appended = moves.to_dlq(self._store, self._topics, record, group=entry.group, topic=entry.topic,
                                    now_ms=now_ms)
            self.state.retire(entry)
            self.journal.dead_lettered(entry, reason="max-attempts", to_topic=dlq_topic(entry.group),
                                       to_queue_offset=appended.queue_offset)
            return
        first_pop = record.properties.get(c.PROPERTY_POP_FIRST_POP_TIME) or str(entry.pop_wall_ms)
        appended = moves.to_retry(self._store, self._topics, record, group=entry.group, topic=entry.topic,
                                  first_pop_wall_ms=int(first_pop), now_ms=now_ms)
        self.state.retire(entry)
        self.journal.revived(entry, to_topic=moves.pop_retry_topic(entry.group, entry.topic),
                             to_queue_offset=appended.queue_offset, in_place=False)

    # --- the request table's handlers (one request value each) -----------------------------------

    async def handle_pop(self, req: PopRequest) -> PopResult:
        return await self.pop(group=req.group, topic=req.topic, max_nums=req.max_nums, invisible_ms=req.invisible_ms,
                              poll_timeout_ms=req.poll_timeout_ms, fifo=req.fifo, attempt_id=req.attempt_id,
                              tag_expression=req.tag_expression, client_id=req.client_id)

    async def handle_ack(self, req: PopAckRequest) -> AckResult:
        return await self.ack(req.group, req.topic, req.receipt_handle)

    async def handle_forward_to_dlq(self, req: PopAckRequest) -> AckResult:
        return await self.forward_to_dlq(req.group, req.topic, req.receipt_handle)

    async def handle_change_invisible(self, req: ChangeInvisibleRequest) -> ChangeInvisibleResult:
        return await self.change_invisible(req.group, req.topic, req.receipt_handle, req.invisible_ms)

    # --- persistence and status ------------------------------------------------------------------

    async def _persist(self) -> bool:
        try:
            await self._writer.commit(self.state.take_delta())
        except StoreError as exc:
            log.error("pop state not written: %s", exc)
            return False
        return True

    async def _topics_changed(self) -> None:
        if self._on_topics_changed is not None:
            await self._on_topics_changed()

    def describe(self) -> dict[str, Any]:
        return {"in_flight": len(self.state.inflight), "pop_offsets": len(self.state.offsets),
                "fifo_batches": len(self.state.orders), "waiting_pops": self.waiters.count(),
                "state_transactions": self._writer.transactions, "fifo_holders": self.fifo_holders()}

    def fifo_holders(self) -> list[dict[str, Any]]:
        """Per FIFO queue whose last batch still has an invisible unacked message: the client it was
        handed to and how long the queue stays blocked (a 5.x FIFO queue's holder, as a queue lock's)."""
        now_ms = self._clock.wall_ms()
        out: list[dict[str, Any]] = []
        for (group, topic, queue_id), batch in sorted(self.state.orders.items()):
            live = [e for e in self.state.unacked(group, topic, queue_id, batch) if e.deadline_wall_ms > now_ms]
            if live:
                out.append({"group": group, "topic": topic, "broker_name": self.broker_name, "queue_id": queue_id,
                            "client_id": live[0].client_id,
                            "lease_left_ms": max(e.deadline_wall_ms for e in live) - now_ms})
        return out
