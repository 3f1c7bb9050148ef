"""Rebalance: which queues this push consumer owns, and what happens when that changes.

Owns RocketMQ's `RebalanceImpl` / `RebalancePushImpl` / `RebalanceService` for concurrent
and orderly consumers (RocketMQ 4.9; orderly: lock a queue before taking it, unlock it after
its listener call when giving it up, through `OrderlyLocks`): the allocation per topic (sorted
queues, sorted client ids from one broker of the topic, the configured strategy), the changes
to the queue table (`update_process_queue_table`: drop what is no longer ours, persist and
forget its offset; re-create pull-expired queues; add new ones at their consume-from-where
offset) and the truncation of unsubscribed topics. The subscriptions, the table itself and the
lock-validity rule belong to `ConsumerState`. Does not pull
(`pull_service`), consume, or talk to brokers itself: everything with I/O comes in through
`RebalanceDeps`, so unit tests drive it with fakes.

The decisions are pure functions (`decide_start_offset`, `allocation_diff`) tested on their own.
Loop-confined; one `RebalanceService` task runs `do_rebalance`, so rebalances never overlap.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from nodes.client.allocate import AllocateStrategy
from nodes.client.consumer_state import ConsumerState
from nodes.client.offset_store import OFFSET_NOT_FOUND, OffsetStore, ReadOffsetType
from nodes.client.process_queue import ProcessQueue
from nodes.common import constants as c
from nodes.common.errors import MqError
from nodes.common.service import CrashHandler, Service
from nodes.common.types import ConsumeFromWhere, MessageModel, MessageQueue

log = logging.getLogger(__name__)

# --- pure decisions -----------------------------------------------------------------------------

class StartKind(enum.Enum):
    OFFSET = "OFFSET"  # start at `offset`
    MAX_OFFSET = "MAX_OFFSET"  # ask the master for the queue's max offset
    TIMESTAMP = "TIMESTAMP"  # ask the master for the first offset at the consume timestamp
    SKIP = "SKIP"  # do not take the queue this time (the offset could not be read)


@dataclass(frozen=True, slots=True)
class StartOffset:
    kind: StartKind
    offset: int = -1


def decide_start_offset(consume_from_where: ConsumeFromWhere, last_offset: int, *, is_retry_topic: bool) -> StartOffset:
    """computePullFromWhereWithException, without its broker reads.

    `last_offset` is the offset store's READ_FROM_STORE answer: >= 0 a committed offset,
    -1 none stored, < -1 the store could not be read.
    """
    if last_offset >= 0:
        return StartOffset(StartKind.OFFSET, last_offset)
    if last_offset != OFFSET_NOT_FOUND:
        return StartOffset(StartKind.SKIP)
    if consume_from_where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
        return StartOffset(StartKind.OFFSET, 0)  # literal 0, not the min offset
    if consume_from_where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
        # A retry topic skips its backlog; a plain topic searches by the consume timestamp.
        return StartOffset(StartKind.MAX_OFFSET if is_retry_topic else StartKind.TIMESTAMP)
    return StartOffset(StartKind.OFFSET, 0) if is_retry_topic else StartOffset(StartKind.MAX_OFFSET)


@dataclass(frozen=True, slots=True)
class AllocationDiff:
    """What `update_process_queue_table` does: drop, re-create (pull-expired) and add queues."""

    drop: tuple[MessageQueue, ...]  # owned, no longer assigned
    recreate: tuple[MessageQueue, ...]  # assigned and owned, but not pulled for too long
    add: tuple[MessageQueue, ...]  # assigned, not owned (re-created ones come back here too)

    @property
    def changed(self) -> bool:
        return bool(self.drop or self.recreate or self.add)


def allocation_diff(owned: Iterable[MessageQueue], assigned: Iterable[MessageQueue],
                    pull_expired: Iterable[MessageQueue] = ()) -> AllocationDiff:
    """The diff of one topic's owned queues against its new assignment, sorted."""
    owned_set, assigned_set, expired = set(owned), set(assigned), set(pull_expired)
    drop = sorted(owned_set - assigned_set)
    recreate = sorted((owned_set & assigned_set) & expired)
    add = sorted((assigned_set - owned_set) | set(recreate))
    return AllocationDiff(tuple(drop), tuple(recreate), tuple(add))


def allocate_queues(strategy: AllocateStrategy, group: str, client_id: str, mq_set: Iterable[MessageQueue],
                    cid_all: Iterable[str]) -> list[MessageQueue]:
    """rebalanceByTopic (CLUSTERING) steps 4-6: sort both lists, then ask the strategy."""
    return list(strategy.allocate(group, client_id, sorted(mq_set), sorted(cid_all)))


# --- the process queue table ----------------------------------------------------------------------

class RebalanceDeps(Protocol):
    """Everything rebalance needs from the rest of the consumer (I/O and other services)."""

    async def subscribe_queues(self, topic: str) -> list[MessageQueue] | None:
        """The topic's readable queues from the route; None if the topic has no route."""

    async def consumer_ids(self, topic: str) -> list[str] | None:
        """GetConsumerList of the group from one broker of the topic; None on failure."""

    async def queue_offset(self, mq: MessageQueue, kind: StartKind) -> int:
        """The master's max offset (MAX_OFFSET) or search-by-timestamp offset (TIMESTAMP)."""

    def dispatch_pull(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int, *,
                      resume_floor: int | None = None) -> None:
        """Start pulling a newly owned queue (`resume_floor`: see `PullRequest`)."""

    async def message_queue_changed(self, topic: str, mq_all: Sequence[MessageQueue],
                                    mq_divided: Sequence[MessageQueue]) -> None:
        """After an allocation change: new sub version, thresholds, a heartbeat."""


class OrderlyLocks(Protocol):
    """What rebalance needs for an orderly CLUSTERING consumer (queue locks)."""

    async def lock(self, mq: MessageQueue, *, reason: str) -> int | None:
        """Lock `mq` on its master; the request's send time (monotonic ms) if granted, else None."""

    async def wait_consume_idle(self, pq: ProcessQueue, timeout_ms: int) -> bool:
        """pq.consumeLock.tryLock(timeout): whether no listener call of `pq` is running."""

    async def unlock(self, mq: MessageQueue, *, oneway: bool, reason: str) -> None:
        """Unlock `mq` on its master now."""

    def unlock_later(self, mq: MessageQueue, delay_ms: int) -> None:
        """Unlock `mq` (oneway) after `delay_ms`."""



EventSink = Callable[[dict[str, Any]], None]


@dataclass
class RebalanceStats:
    rounds: int = 0
    changes: int = 0
    regained: int = 0  # orderly queues started afresh after their lock came back
    last_cids: dict[str, list[str]] = field(default_factory=dict)
    last_mq_all: dict[str, list[MessageQueue]] = field(default_factory=dict)


class RebalanceImpl:
    """The owned queues of one push consumer and the rules that change them.

    Caller: `RebalanceService` (do_rebalance), the pull service (`remove_process_queue` after
    OFFSET_ILLEGAL), the facade (shutdown). Affects: the state's queue table, the
    offset store's memory table, pull loops (through `deps.dispatch_pull` and `pq.dropped`).
    """

    def __init__(self, *, state: ConsumerState, client_id: str, allocate: AllocateStrategy,
                 consume_from_where: ConsumeFromWhere, offset_store: OffsetStore, deps: RebalanceDeps,
                 pull_max_idle_ms: int, on_event: EventSink | None = None,
                 orderly: OrderlyLocks | None = None, consume_lock_try_ms: int, unlock_delay_ms: int) -> None:
        self.state = state
        self.group = state.group
        self.client_id = client_id
        self.message_model = state.message_model
        self.allocate = allocate
        self.consume_from_where = consume_from_where
        self.offset_store = offset_store
        self.deps = deps
        self.clock = state.clock
        self.pull_max_idle_ms = pull_max_idle_ms
        self._on_event = on_event
        self.stats = RebalanceStats()
        self._pending_pulls: list[tuple[MessageQueue, ProcessQueue, int]] = []
        # Orderly queues are locked only in CLUSTERING: 4.9.8 also locks broadcasting ones,
        # the 4.9.x head (#8773) and we do not.
        self.orderly = orderly if state.message_model is MessageModel.CLUSTERING else None
        self.consume_lock_try_ms = consume_lock_try_ms
        self.unlock_delay_ms = unlock_delay_ms
        self._tasks: set[asyncio.Task[None]] = set()  # regained queues being set up
        self._closed = False

    # --- rebalance -----------------------------------------------------------------------
    async def do_rebalance(self) -> None:
        """One round over every subscribed topic, then drop queues of unsubscribed topics."""
        self.stats.rounds += 1
        for topic in list(self.state.subscriptions):
            try:
                await self.rebalance_by_topic(topic)
            except MqError as err:
                if topic.startswith(c.RETRY_GROUP_TOPIC_PREFIX):
                    log.debug("rebalance of %s: %s", topic, err)
                else:
                    log.warning("rebalance of %s failed: %s", topic, err)
        self.truncate_message_queue_not_my_topic()

    async def rebalance_by_topic(self, topic: str) -> None:
        mq_set = await self.deps.subscribe_queues(topic)
        if not mq_set:
            if not topic.startswith(c.RETRY_GROUP_TOPIC_PREFIX):
                log.info("rebalance: topic %s has no route (yet) for group %s", topic, self.group)
            return
        if self.message_model is MessageModel.BROADCASTING:
            await self._apply(topic, mq_set, sorted(mq_set), cid_all=None)
            return
        cid_all = await self.deps.consumer_ids(topic)
        if not cid_all:
            log.warning("rebalance of %s: no consumer ids of group %s", topic, self.group)
            return
        divided = allocate_queues(self.allocate, self.group, self.client_id, mq_set, cid_all)
        await self._apply(topic, mq_set, divided, cid_all=sorted(cid_all))

    async def _apply(self, topic: str, mq_all: Sequence[MessageQueue], divided: Sequence[MessageQueue],
                     cid_all: list[str] | None) -> None:
        before = self.state.queues_of(topic)
        cids_changed = cid_all is not None and self.stats.last_cids.get(topic) != cid_all
        if cid_all is not None:
            self.stats.last_cids[topic] = cid_all
        queues = sorted(mq_all)
        queues_changed = self.stats.last_mq_all.get(topic) != queues
        self.stats.last_mq_all[topic] = queues
        changed = await self.update_process_queue_table(topic, set(divided))
        after = self.state.queues_of(topic)
        if changed or cids_changed:
            removed = sorted(set(before) - set(after))
            self._emit({"event": "rebalance", "group": self.group, "client_id": self.client_id, "topic": topic,
                        "model": self.message_model.value, "allocate": self.allocate.name, "cids": cid_all,
                        "before": _mq_list(before), "after": _mq_list(after), "removed": _mq_list(removed),
                        "allocated": _mq_list(sorted(divided)), "changed": changed,
                        "reason": _rebalance_reason(cids_changed, queues_changed)})
        if changed:
            self.stats.changes += 1
            log.info("rebalance %s of %s: %d -> %d queues %s", self.group, topic, len(before), len(after),
                     [f"{mq.broker_name}:{mq.queue_id}" for mq in after])
            await self.deps.message_queue_changed(topic, list(mq_all), list(divided))
        self.dispatch_pending_pulls()

    def dispatch_pending_pulls(self) -> None:
        """Start the pull loops of queues added by the last table update.

        RocketMQ dispatches them before messageQueueChanged; we wait until its heartbeat has
        carried the new sub version, so the first pulls are not refused as SUBSCRIPTION_NOT_LATEST.
        """
        pending, self._pending_pulls = self._pending_pulls, []
        for mq, pq, next_offset in pending:
            if not pq.dropped and self.state.process_queue_table.get(mq) is pq:
                self.deps.dispatch_pull(mq, pq, next_offset)

    async def update_process_queue_table(self, topic: str, mq_set: set[MessageQueue]) -> bool:
        """updateProcessQueueTableInRebalance (orderly queues are locked first); True if anything changed."""
        now_ms = self.clock.monotonic_ms()
        owned = {mq: pq for mq, pq in self.state.process_queue_table.items() if mq.topic == topic}
        expired = [mq for mq, pq in owned.items() if pq.is_pull_expired(now_ms, pull_max_idle_ms=self.pull_max_idle_ms)]
        diff = allocation_diff(owned, mq_set, expired)
        changed = False
        for mq in (*diff.drop, *diff.recreate):
            pq = owned[mq]
            pq.dropped = True
            if mq in diff.recreate:
                log.warning("[BUG] %s: %s was not pulled for %d ms; re-creating it", self.group, mq,
                            self.pull_max_idle_ms)
            if await self.remove_unnecessary_message_queue(mq, pq) and self.state.process_queue_table.get(mq) is pq:
                del self.state.process_queue_table[mq]
                changed = True
        for mq in diff.add:
            if mq in self.state.process_queue_table:  # a drop above could not be completed
                continue
            lock_sent_ms = None
            if self.orderly is not None:
                lock_sent_ms = await self.orderly.lock(mq, reason="rebalance")
                if lock_sent_ms is None:
                    log.info("rebalance: %s is locked by another consumer of %s; retrying at the next rebalance",
                             mq, self.group)
                    continue
            self.offset_store.remove_offset(mq)  # removeDirtyOffset
            pq = ProcessQueue(now_ms=self.clock.monotonic_ms())
            pq.locked = True  # as 4.9.8 does for every new queue (#5466)
            if lock_sent_ms is not None:
                pq.last_lock_timestamp_ms = lock_sent_ms  # the lease counts from the lock request
            try:
                next_offset = await self.compute_pull_from_where(mq)
            except MqError as err:
                log.warning("rebalance: no start offset for %s (%s); retrying at the next rebalance", mq, err)
                continue
            if next_offset < 0:
                log.warning("rebalance: start offset of %s unknown; skipped until the next rebalance", mq)
                continue
            if mq in self.state.process_queue_table:
                continue
            self.state.process_queue_table[mq] = pq
            changed = True
            log.info("%s: now owns %s from offset %d", self.group, mq, next_offset)
            self._pending_pulls.append((mq, pq, next_offset))  # dispatched by dispatch_pending_pulls
        return changed

    def resume_regained(self, mq: MessageQueue, stale: ProcessQueue, lock_sent_ms: int) -> None:
        """An orderly queue is ours again after its client lock was lost or ran out: start it afresh.

        Beyond RocketMQ. The stale ProcessQueue is dropped with its cache, its offset neither
        persisted nor piggy-backed (another consumer may have moved the queue on meanwhile), and
        a new one pulls from the later of the broker's committed offset (read after the grant)
        and this client's own consumed position: never behind what the group committed, never
        behind what this client consumed itself. A listener call still running on the stale
        queue (it started within the old lease) ends first and counts in that own position.
        """
        if self.state.process_queue_table.get(mq) is not stale or stale.dropped or self._closed:
            return
        stale.dropped = True  # no more pulls or batches; the running batch may still commit
        stale.keep_own_commits = True
        task = asyncio.get_running_loop().create_task(self._resume_regained(mq, stale, lock_sent_ms),
                                                      name=f"regain-{mq.topic}-{mq.queue_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _resume_regained(self, mq: MessageQueue, stale: ProcessQueue, lock_sent_ms: int) -> None:
        if self.orderly is not None and not await self.orderly.wait_consume_idle(stale, self.consume_lock_try_ms):
            log.warning("%s: a listener call on regained %s is still running; its commit will not count",
                        self.group, mq)
        stale.keep_own_commits = False
        if self.state.process_queue_table.get(mq) is not stale or self._closed:
            return  # given up meanwhile (rebalance forgot its offset) or shutting down
        own_offset = self.offset_store.read_memory(mq)
        self.offset_store.remove_offset(mq)  # nothing of the stale position reaches the broker
        pq = ProcessQueue(now_ms=self.clock.monotonic_ms())
        pq.locked = True
        pq.last_lock_timestamp_ms = lock_sent_ms
        self.state.process_queue_table[mq] = pq
        self.stats.regained += 1
        log.info("%s: %s regained; resuming from the broker's offset (own position %d)", self.group, mq, own_offset)
        queues = _mq_list([q for q in self.state.process_queue_table if q.topic == mq.topic])
        self._emit({"event": "rebalance", "group": self.group, "client_id": self.client_id, "topic": mq.topic,
                    "before": queues, "after": queues, "removed": _mq_list([mq]), "reason": "lock-regained"})
        self.deps.dispatch_pull(mq, pq, max(own_offset, 0), resume_floor=own_offset)

    async def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        """RebalancePushImpl: persist the offset, then forget it; an orderly queue is then unlocked.

        Orderly (CLUSTERING): wait up to `consume_lock_try_ms` for a running listener call; if it
        does not end, keep the (dropped) queue and try again at the next rebalance (returns
        False). Otherwise unlock it: after `unlock_delay_ms` if messages are still cached, else now.
        """
        if self.orderly is None or self.state.lock_valid(pq):
            # beyond RocketMQ: an orderly queue whose lock ran out is not persisted (its offset may be
            # stale: another consumer may own the queue by now)
            try:
                await self.offset_store.persist(mq)
            except MqError as err:
                log.warning("persisting the offset of dropped %s failed: %s", mq, err)
        self.offset_store.remove_offset(mq)
        if self.orderly is None:
            return True
        if not await self.orderly.wait_consume_idle(pq, self.consume_lock_try_ms):
            pq.try_unlock_times += 1
            log.warning("%s: %s is still consuming; giving it up is retried at the next rebalance (%d tries)",
                        self.group, mq, pq.try_unlock_times)
            return False
        if pq.has_temp_message():
            self.orderly.unlock_later(mq, self.unlock_delay_ms)
        else:
            await self.orderly.unlock(mq, oneway=True, reason="drop")
        return True

    async def remove_process_queue(self, mq: MessageQueue) -> None:
        """Drop one queue now (the OFFSET_ILLEGAL fix-up); it comes back at the next rebalance."""
        before = self.state.queues_of(mq.topic)
        pq = self.state.process_queue_table.pop(mq, None)
        if pq is not None:
            pq.dropped = True
            await self.remove_unnecessary_message_queue(mq, pq)
            after = self.state.queues_of(mq.topic)
            self._emit({"event": "rebalance", "group": self.group, "client_id": self.client_id, "topic": mq.topic,
                        "before": _mq_list(before), "after": _mq_list(after), "removed": _mq_list([mq]),
                        "reason": "offset-illegal"})

    def truncate_message_queue_not_my_topic(self) -> None:
        """Drop queues of topics no longer subscribed (no offset persist, as RocketMQ)."""
        for mq in [mq for mq in self.state.process_queue_table if mq.topic not in self.state.subscriptions]:
            pq = self.state.process_queue_table.pop(mq)
            pq.dropped = True
            log.info("%s: dropped %s of an unsubscribed topic", self.group, mq)

    async def compute_pull_from_where(self, mq: MessageQueue) -> int:
        """The first offset to pull from a newly owned queue; -1 to skip it this time.

        Raises:
            MqError: the master could not answer a max-offset or timestamp query.
        """
        last_offset = await self.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_STORE)
        decision = decide_start_offset(self.consume_from_where, last_offset,
                                       is_retry_topic=mq.topic.startswith(c.RETRY_GROUP_TOPIC_PREFIX))
        if decision.kind is StartKind.OFFSET:
            return decision.offset
        if decision.kind is StartKind.SKIP:
            return -1
        return await self.deps.queue_offset(mq, decision.kind)

    def drop_all(self) -> None:
        """Shutdown: every queue is dropped (results still in flight are discarded)."""
        self._closed = True
        for pq in self.state.process_queue_table.values():
            pq.dropped = True

    async def close(self) -> None:
        """After `drop_all`: wait for regained queues still being set up (they end without pulling)."""
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _emit(self, event: dict[str, Any]) -> None:
        if self._on_event is not None:
            self._on_event(event)


def _mq_list(mqs: Iterable[MessageQueue]) -> list[list[Any]]:
    return [[mq.broker_name, mq.queue_id] for mq in mqs]


def _rebalance_reason(cids_changed: bool, queues_changed: bool) -> str:
    """Why a rebalance changed something: the group's members, the topic's queues (a route
    change, or the first look at the topic), else `retry` (an earlier round left work undone: a
    denied lock, an unknown start offset, a queue re-created after it sat unpulled)."""
    if cids_changed:
        return "consumers-changed"
    if queues_changed:
        return "queues-changed"
    return "retry"


class RebalanceService(Service):
    """Runs `do_rebalance` every `rebalance_interval_ms`, and at once on `wakeup()` (notifications)."""

    name: ClassVar[str] = "rebalance"
    expected_errors: ClassVar[tuple[type[BaseException], ...]] = (MqError,)

    def __init__(self, impl: RebalanceImpl, interval_ms: int, *, on_crash: CrashHandler | None = None) -> None:
        super().__init__(interval_ms, on_crash=on_crash, initial_delay_ms=0)
        self.impl = impl

    async def tick(self) -> None:
        await self.impl.do_rebalance()
