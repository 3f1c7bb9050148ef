"""Rebalance: start-offset decisions, allocation diffs, and the process queue table with fakes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nodes.client.allocate import AllocateAveragely, AllocateAveragelyByCircle
from nodes.client.consumer_state import ConsumerState, retry_topic
from nodes.client.offset_store import OFFSET_NOT_FOUND, OFFSET_READ_FAILED, ReadOffsetType
from nodes.client.process_queue import ProcessQueue
from nodes.client.rebalance import (
    RebalanceImpl,
    StartKind,
    StartOffset,
    allocate_queues,
    allocation_diff,
    decide_start_offset,
)
from nodes.common import constants as c
from nodes.common.clock import FakeClock
from nodes.common.config import Timing
from nodes.common.errors import TransportError
from nodes.common.types import ConsumeFromWhere, MessageModel, MessageQueue

LAST = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
TIMESTAMP = ConsumeFromWhere.CONSUME_FROM_TIMESTAMP


def mqs(topic: str = "T", n: int = 8, broker: str = "broker-a") -> list[MessageQueue]:
    return [MessageQueue(topic, broker, i) for i in range(n)]


# --- consume from where -----------------------------------------------------------------------

@pytest.mark.parametrize("where", [LAST, FIRST, TIMESTAMP])
def test_a_stored_offset_always_wins(where):
    assert decide_start_offset(where, 17, is_retry_topic=False) == StartOffset(StartKind.OFFSET, 17)
    assert decide_start_offset(where, 0, is_retry_topic=True) == StartOffset(StartKind.OFFSET, 0)


@pytest.mark.parametrize("where", [LAST, FIRST, TIMESTAMP])
def test_an_unreadable_offset_skips_the_queue(where):
    assert decide_start_offset(where, OFFSET_READ_FAILED, is_retry_topic=False).kind is StartKind.SKIP


@pytest.mark.parametrize(("where", "retry", "expected"), [
    (LAST, False, StartOffset(StartKind.MAX_OFFSET)),
    (LAST, True, StartOffset(StartKind.OFFSET, 0)),  # retry topics always start at 0
    (FIRST, False, StartOffset(StartKind.OFFSET, 0)),  # literal 0, not the min offset
    (FIRST, True, StartOffset(StartKind.OFFSET, 0)),
    (TIMESTAMP, False, StartOffset(StartKind.TIMESTAMP)),
    (TIMESTAMP, True, StartOffset(StartKind.MAX_OFFSET)),  # a retry topic skips its backlog
])
def test_no_stored_offset_follows_consume_from_where(where, retry, expected):
    assert decide_start_offset(where, OFFSET_NOT_FOUND, is_retry_topic=retry) == expected


# --- diffs and allocation ----------------------------------------------------------------------

def test_allocation_diff_drops_adds_and_recreates_expired():
    q = mqs()
    diff = allocation_diff(owned=q[0:4], assigned=q[2:6], pull_expired=[q[3], q[0]])
    assert diff.drop == (q[0], q[1])
    assert diff.recreate == (q[3],)  # q[0] expired too, but it is dropped, not re-created
    assert diff.add == (q[3], q[4], q[5])
    assert diff.changed


def test_allocation_diff_of_the_same_sets_is_empty():
    q = mqs()
    assert not allocation_diff(q[:3], set(q[:3])).changed


def test_allocate_queues_sorts_queues_and_client_ids_first():
    q = mqs(n=8)
    shuffled = [q[5], q[1], q[7], q[0], q[3], q[2], q[6], q[4]]
    mine = allocate_queues(AllocateAveragely(), "g", "b", shuffled, ["c", "b", "a"])
    assert mine == q[3:6]  # "b" is the second of [a, b, c]: queues 3, 4, 5


def test_every_queue_has_exactly_one_owner_across_the_group():
    q = mqs(n=8)
    cids = ["10.0.0.1@1#1", "10.0.0.2@1#1", "10.0.0.3@1#1"]
    for strategy in (AllocateAveragely(), AllocateAveragelyByCircle()):
        owned = [mq for cid in cids for mq in allocate_queues(strategy, "g", cid, q, reversed(cids))]
        assert sorted(owned) == q


# --- the process queue table, with fakes ---------------------------------------------------------

class FakeOffsetStore:
    def __init__(self, stored: dict[MessageQueue, int] | None = None) -> None:
        self.stored = dict(stored or {})
        self.memory: dict[MessageQueue, int] = {}
        self.persisted: list[tuple[MessageQueue, int | None]] = []
        self.removed: list[MessageQueue] = []
        self.read_error: dict[MessageQueue, int] = {}

    def load(self) -> None: ...

    def update_offset(self, mq, offset, *, increase_only):
        current = self.memory.get(mq)
        if current is None or not increase_only or offset > current:
            self.memory[mq] = offset

    def read_memory(self, mq):
        return self.memory.get(mq, -1)

    async def read_offset(self, mq, read_type):
        assert read_type is ReadOffsetType.READ_FROM_STORE
        if mq in self.read_error:
            return self.read_error[mq]
        value = self.stored.get(mq, -1)
        if value >= 0:
            self.memory[mq] = value
        return value

    async def persist_all(self, mqs): ...

    async def persist(self, mq):
        self.persisted.append((mq, self.memory.get(mq)))
        if mq in self.memory:
            self.stored[mq] = self.memory[mq]

    def remove_offset(self, mq):
        self.removed.append(mq)
        self.memory.pop(mq, None)

    def offsets(self):
        return dict(self.memory)


class FakeDeps:
    def __init__(self, queues: dict[str, list[MessageQueue]], cids: list[str] | None) -> None:
        self.queues = queues
        self.cids = cids
        self.dispatched: list[tuple[MessageQueue, int]] = []
        self.changed: list[tuple[str, list[MessageQueue]]] = []
        self.order: list[str] = []
        self.max_offsets: dict[MessageQueue, int] = {}
        self.cid_calls = 0

    async def subscribe_queues(self, topic):
        return self.queues.get(topic)

    async def consumer_ids(self, topic):
        self.cid_calls += 1
        return self.cids

    async def queue_offset(self, mq, kind):
        if mq not in self.max_offsets:
            raise TransportError("no master")
        return self.max_offsets[mq]

    def dispatch_pull(self, mq, pq, next_offset, *, resume_floor=None):
        self.order.append("dispatch")
        self.dispatched.append((mq, next_offset))

    async def message_queue_changed(self, topic, mq_all, mq_divided):
        self.order.append("changed")
        self.changed.append((topic, list(mq_divided)))


def make_impl(deps: FakeDeps, store: FakeOffsetStore | None = None, *, cid: str = "b",
              model: MessageModel = MessageModel.CLUSTERING, where: ConsumeFromWhere = LAST,
              clock: FakeClock | None = None) -> tuple[RebalanceImpl, list[dict[str, Any]]]:
    events: list[dict[str, Any]] = []
    state = ConsumerState(group="g", message_model=model, clock=clock or FakeClock(),
                          client_lock_lease_ms=c.CLIENT_LOCK_LEASE_MS)
    impl = RebalanceImpl(state=state, client_id=cid, allocate=AllocateAveragely(),
                         consume_from_where=where, offset_store=store or FakeOffsetStore(), deps=deps,
                         pull_max_idle_ms=120_000, on_event=events.append,
                         consume_lock_try_ms=Timing().consume_lock_try_ms, unlock_delay_ms=Timing().unlock_delay_ms)
    return impl, events


def test_copy_subscription_adds_the_retry_topic_only_in_clustering():
    impl, _ = make_impl(FakeDeps({}, []))
    impl.state.copy_subscription({"T": "a || b"})
    assert set(impl.state.subscriptions) == {"T", retry_topic("g")}
    assert impl.state.subscriptions[retry_topic("g")].expression == "*"
    broadcast, _ = make_impl(FakeDeps({}, []), model=MessageModel.BROADCASTING)
    broadcast.state.copy_subscription({"T": "*"})
    assert set(broadcast.state.subscriptions) == {"T"}


def test_clustering_takes_its_share_and_dispatches_after_the_change_heartbeat():
    q = mqs()
    store = FakeOffsetStore({q[3]: 40, q[4]: 41})
    deps = FakeDeps({"T": q}, ["a", "b", "c"])
    deps.max_offsets = {q[5]: 99}
    impl, events = make_impl(deps, store)
    impl.state.subscribe("T", "*")
    asyncio.run(impl.do_rebalance())
    assert sorted(impl.state.process_queue_table) == q[3:6]
    assert sorted(deps.dispatched) == [(q[3], 40), (q[4], 41), (q[5], 99)]  # no stored offset: max offset
    assert deps.order == ["changed", "dispatch", "dispatch", "dispatch"]
    assert all(pq.locked for pq in impl.state.process_queue_table.values())
    (event,) = events
    assert event["event"] == "rebalance" and event["before"] == [] and event["cids"] == ["a", "b", "c"]
    assert event["after"] == [["broker-a", 3], ["broker-a", 4], ["broker-a", 5]]
    assert event["removed"] == [] and event["reason"] == "consumers-changed" and event["client_id"] == impl.client_id


def test_a_member_leaving_gives_this_consumer_more_queues_and_drops_none():
    q = mqs()
    deps = FakeDeps({"T": q}, ["a", "b", "c"])
    store = FakeOffsetStore({mq: 0 for mq in q})
    impl, events = make_impl(deps, store)
    impl.state.subscribe("T", "*")
    asyncio.run(impl.do_rebalance())
    kept = {mq: impl.state.process_queue_table[mq] for mq in q[3:6]}
    deps.cids = ["a", "b"]
    asyncio.run(impl.do_rebalance())
    assert sorted(impl.state.process_queue_table) == q[4:8]
    assert impl.state.process_queue_table[q[4]] is kept[q[4]]  # kept queues keep their cache
    assert kept[q[3]].dropped and not kept[q[4]].dropped
    assert (q[3], 0) in store.persisted
    assert q[3] in store.removed
    assert events[-1]["before"] == [["broker-a", i] for i in (3, 4, 5)]
    assert events[-1]["after"] == [["broker-a", i] for i in (4, 5, 6, 7)]
    assert events[-1]["removed"] == [["broker-a", 3]] and events[-1]["reason"] == "consumers-changed"


def test_a_dropped_queue_persists_its_offset_before_forgetting_it():
    q = mqs(n=2)
    deps = FakeDeps({"T": q}, ["b"])
    store = FakeOffsetStore({q[0]: 5, q[1]: 6})
    impl, _ = make_impl(deps, store)
    impl.state.subscribe("T", "*")
    asyncio.run(impl.do_rebalance())
    store.update_offset(q[0], 9, increase_only=True)
    deps.cids = ["a", "b"]  # "a" takes queue 0
    asyncio.run(impl.do_rebalance())
    assert (q[0], 9) in store.persisted and store.stored[q[0]] == 9
    assert q[0] not in store.memory


def test_unchanged_rebalance_records_no_event_and_no_heartbeat():
    q = mqs(n=4)
    deps = FakeDeps({"T": q}, ["b"])
    impl, events = make_impl(deps, FakeOffsetStore({mq: 0 for mq in q}))
    impl.state.subscribe("T", "*")
    asyncio.run(impl.do_rebalance())
    asyncio.run(impl.do_rebalance())
    assert len(events) == 1 and len(deps.changed) == 1
    assert impl.stats.rounds == 2 and impl.stats.changes == 1


def test_a_pull_expired_queue_is_recreated_in_the_same_round():
    q = mqs(n=2)
    clock = FakeClock()
    deps = FakeDeps({"T": q}, ["b"])
    impl, _ = make_impl(deps, FakeOffsetStore({mq: 3 for mq in q}), clock=clock)
    impl.state.subscribe("T", "*")
    asyncio.run(impl.do_rebalance())
    old = impl.state.process_queue_table[q[0]]
    impl.state.process_queue_table[q[1]].last_pull_timestamp_ms = clock.monotonic_ms() + 120_000
    clock.advance_ms(120_001)
    asyncio.run(impl.do_rebalance())
    assert old.dropped and impl.state.process_queue_table[q[0]] is not old
    assert not impl.state.process_queue_table[q[1]].dropped
    assert deps.dispatched[-1] == (q[0], 3)


def test_an_unreadable_offset_or_missing_master_skips_the_queue_until_next_time():
    q = mqs(n=2)
    store = FakeOffsetStore()
    store.read_error = {q[0]: OFFSET_READ_FAILED}
    deps = FakeDeps({"T": q}, ["b"])  # no max offset for q[1]: the master query fails
    impl, _ = make_impl(deps, store)
    impl.state.subscribe("T", "*")
    asyncio.run(impl.do_rebalance())
    assert impl.state.process_queue_table == {} and deps.dispatched == []
    store.read_error = {}
    deps.max_offsets = {q[0]: 7, q[1]: 8}
    asyncio.run(impl.do_rebalance())
    assert sorted(deps.dispatched) == [(q[0], 7), (q[1], 8)]


def test_without_consumer_ids_nothing_changes():
    q = mqs(n=2)
    deps = FakeDeps({"T": q}, None)
    impl, events = make_impl(deps)
    impl.state.subscribe("T", "*")
    asyncio.run(impl.do_rebalance())
    assert impl.state.process_queue_table == {} and events == []


def test_an_id_missing_from_the_list_owns_nothing():
    q = mqs(n=2)
    deps = FakeDeps({"T": q}, ["a", "c"])
    impl, _ = make_impl(deps, FakeOffsetStore({mq: 0 for mq in q}))
    impl.state.subscribe("T", "*")
    asyncio.run(impl.do_rebalance())
    assert impl.state.process_queue_table == {}


def test_broadcasting_takes_every_queue_without_asking_for_members():
    q = mqs(n=4)
    deps = FakeDeps({"T": q}, None)
    impl, events = make_impl(deps, FakeOffsetStore(), model=MessageModel.BROADCASTING, where=FIRST)
    impl.state.copy_subscription({"T": "*"})
    asyncio.run(impl.do_rebalance())
    assert sorted(impl.state.process_queue_table) == q and deps.cid_calls == 0
    assert sorted(deps.dispatched) == [(mq, 0) for mq in q]
    assert events[0]["cids"] is None


def test_retry_topic_starts_at_zero_and_unsubscribed_topics_are_truncated():
    q, r = mqs(n=2), mqs(retry_topic("g"), n=1)
    deps = FakeDeps({"T": q, retry_topic("g"): r}, ["b"])
    impl, _ = make_impl(deps, FakeOffsetStore({mq: 0 for mq in q}))
    impl.state.copy_subscription({"T": "*"})
    asyncio.run(impl.do_rebalance())
    assert (r[0], 0) in deps.dispatched
    pq = impl.state.process_queue_table[q[0]]
    del impl.state.subscriptions["T"]
    impl.truncate_message_queue_not_my_topic()
    assert pq.dropped and sorted(impl.state.process_queue_table) == r


def test_remove_process_queue_drops_it_and_forgets_its_offset():
    q = mqs(n=1)
    store = FakeOffsetStore({q[0]: 4})
    deps = FakeDeps({"T": q}, ["b"])
    impl, events = make_impl(deps, store)
    impl.state.subscribe("T", "*")
    asyncio.run(impl.do_rebalance())
    pq: ProcessQueue = impl.state.process_queue_table[q[0]]
    asyncio.run(impl.remove_process_queue(q[0]))
    assert pq.dropped and q[0] not in impl.state.process_queue_table and q[0] not in store.memory
    assert events[-1]["reason"] == "offset-illegal"
