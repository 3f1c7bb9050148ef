"""The client side of queue locks with fakes: QueueLocker against a real broker lock table, rebalance
locking before it takes an orderly queue and unlocking when it gives one up, and the pull loop's
lock check (step 8)."""

from __future__ import annotations

import asyncio
from typing import Any

from nodes.broker.queue_locks import QueueLockHandler, QueueLockManager
from nodes.broker.request_table import RequestKind, RequestTable
from nodes.broker.transport.consumer_servicer import ConsumerManagerServicer
from nodes.client.allocate import AllocateAveragely
from nodes.client.consumer_state import ConsumerState
from nodes.client.flow_control import FlowThresholds
from nodes.client.lock_service import QueueLocker
from nodes.client.process_queue import ProcessQueue
from nodes.client.pull_service import PullRequest, PullService
from nodes.client.rebalance import RebalanceImpl
from nodes.client.routes import BrokerData, QueueData, RouteCache, RouteSnapshot
from nodes.client.rpc.api import ClientApi
from nodes.common import constants as c
from nodes.common.clock import FakeClock
from nodes.common.config import Timing
from nodes.common.errors import TransportError
from nodes.common.types import (
    ConsumeFromWhere,
    MessageExt,
    MessageModel,
    MessageQueue,
    PullResult,
    PullStatus,
)

G = "g"
Q = [MessageQueue("T", "broker-a", i) for i in range(4)]
LEASE_MS = 30_000


class FakeBroker:
    """The ConsumerManager lock RPCs of one master, served by the real lock table."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.locks = QueueLockManager(lease_ms=60_000)
        # the broker's real gRPC adapter over a request table holding only the lock handlers
        handler = QueueLockHandler(self.locks, clock.monotonic_ms, "m")
        table = RequestTable()
        table.register(RequestKind.LOCK_BATCH_MQ, handler.lock_batch)
        table.register(RequestKind.UNLOCK_BATCH_MQ, handler.unlock_batch)
        self.servicer = ConsumerManagerServicer(table)
        self.calls: list[tuple[str, str]] = []  # (addr, method)
        self.down = False

    def stub(self, addr: str) -> Any:
        broker = self

        class Stub:
            async def LockBatchMQ(self, request: Any, timeout: float | None = None) -> Any:
                broker.calls.append((addr, "LockBatchMQ"))
                if broker.down:
                    raise TransportError("peer unavailable")
                return await broker.servicer.LockBatchMQ(request, None)

            async def UnlockBatchMQ(self, request: Any, timeout: float | None = None) -> Any:
                broker.calls.append((addr, "UnlockBatchMQ"))
                if broker.down:
                    raise TransportError("peer unavailable")
                return await broker.servicer.UnlockBatchMQ(request, None)

        return Stub()


class FakeInstance:
    def __init__(self, broker: FakeBroker, addrs: dict[int, str]) -> None:
        self.broker = broker
        route = RouteSnapshot(queue_datas=(QueueData("broker-a", 4, 4, c.PERM_DEFAULT),),
                              broker_datas=(BrokerData("broker-a", dict(addrs)),))

        async def fetch(topic: str) -> RouteSnapshot:
            return route

        self.routes = RouteCache(fetch)
        self.api = ClientApi()
        self.api.consumer_stub = broker.stub  # type: ignore[method-assign]


def setup(addrs: dict[int, str] | None = None, client_id: str = "A"
          ) -> tuple[QueueLocker, dict[MessageQueue, ProcessQueue], FakeBroker, FakeClock, list[dict[str, Any]]]:
    clock = FakeClock()
    broker = FakeBroker(clock)
    instance = FakeInstance(broker, {0: "m:1", 1: "s:1"} if addrs is None else addrs)
    asyncio.run(instance.routes.update_topic("T"))
    state = ConsumerState(group=G, message_model=MessageModel.CLUSTERING, clock=clock, client_lock_lease_ms=LEASE_MS,
                          orderly=True)
    table = state.process_queue_table
    events: list[dict[str, Any]] = []
    locker = QueueLocker(instance, state, client_id, on_event=events.append)  # type: ignore[arg-type]
    return locker, table, broker, clock, events


def actions(events: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(e["action"], e["queue_id"]) for e in events]


# --- QueueLocker ----------------------------------------------------------------------------------

def test_lock_asks_the_master_only_and_stamps_the_send_time():
    locker, table, broker, clock, events = setup()
    pq = table[Q[0]] = ProcessQueue(now_ms=0)
    sent_ms = clock.monotonic_ms()
    assert asyncio.run(locker.lock(Q[0], reason="consume")) == sent_ms
    assert pq.locked and pq.last_lock_timestamp_ms == sent_ms
    assert broker.calls == [("m:1", "LockBatchMQ")]
    assert actions(events) == [("requested", 0), ("granted", 0)]
    assert events[1]["lease_end_mono_ms"] == sent_ms + LEASE_MS and events[1]["side"] == "client"


def test_a_queue_held_by_another_client_is_denied_and_nothing_changes():
    locker, _table, broker, clock, events = setup()
    broker.locks.try_lock_batch(G, [Q[0]], "B", clock.monotonic_ms())
    assert asyncio.run(locker.lock(Q[0], reason="rebalance")) is None
    assert actions(events) == [("requested", 0), ("denied", 0)]


def test_without_a_master_in_the_route_nothing_is_asked():
    locker, _, broker, _, events = setup({1: "s:1"})
    assert asyncio.run(locker.lock(Q[0], reason="rebalance")) is None
    assert broker.calls == [] and actions(events[:1]) == [("requested", 0)]
    # a call with no answer is no lock action the checker reads: a separate event
    assert [(e["event"], e["call"], e["client_id"]) for e in events[1:]] == [("lock-failed", "lock", locker.client_id)]


def test_lock_all_renews_and_marks_queues_the_broker_left_out_as_lost():
    locker, table, broker, clock, events = setup()
    for mq in Q[:3]:
        table[mq] = ProcessQueue(now_ms=0)
        asyncio.run(locker.lock(mq, reason="rebalance"))
    clock.advance_ms(70_000)  # both leases ran out; B takes queue 1 on the broker
    broker.locks.try_lock_batch(G, [Q[1]], "B", clock.monotonic_ms())
    events.clear()
    table[Q[0]].last_lock_timestamp_ms = clock.monotonic_ms() - 1_000  # as if renewed a second ago
    table[Q[1]].last_lock_timestamp_ms = clock.monotonic_ms() - 1_000
    asyncio.run(locker.lock_all())
    assert table[Q[0]].locked and table[Q[0]].last_lock_timestamp_ms == clock.monotonic_ms()
    assert not table[Q[1]].locked
    assert table[Q[2]].locked  # its client lock had expired: re-granted by the broker
    assert [a for a in actions(events) if a[0] != "requested"] == [("renewed", 0), ("granted", 2), ("lost", 1)]


def test_a_failed_renewal_changes_nothing_so_the_client_lock_ages_out():
    locker, table, broker, clock, events = setup()
    pq = table[Q[0]] = ProcessQueue(now_ms=0)
    asyncio.run(locker.lock(Q[0], reason="rebalance"))
    stamp = pq.last_lock_timestamp_ms
    broker.down = True
    clock.advance_ms(20_000)
    asyncio.run(locker.lock_all())
    assert pq.locked and pq.last_lock_timestamp_ms == stamp
    assert events[-1]["event"] == "lock-failed" and "action" not in events[-1]
    clock.advance_ms(10_001)
    assert pq.locked and not locker.state.lock_valid(pq)
    locker.note_expired(Q[0], pq)
    locker.note_expired(Q[0], pq)  # recorded once per lock
    assert [e.get("action") for e in events].count("expired") == 1
    assert events[-1]["lease_end_mono_ms"] == stamp + LEASE_MS


def test_a_queue_granted_again_after_its_lock_ran_out_is_regained_not_renewed():
    locker, table, _broker, clock, events = setup()
    for mq in Q[:2]:
        table[mq] = ProcessQueue(now_ms=0)
        asyncio.run(locker.lock(mq, reason="rebalance"))
    regained: list[tuple[MessageQueue, ProcessQueue, int]] = []
    locker._on_regained = lambda mq, pq, sent_ms: regained.append((mq, pq, sent_ms))
    clock.advance_ms(LEASE_MS + 1)  # both client locks ran out (the client was cut off)
    table[Q[0]].last_lock_timestamp_ms = clock.monotonic_ms() - 1_000  # queue 0 was renewed in time
    stale = table[Q[1]]
    stale_stamp = stale.last_lock_timestamp_ms
    asyncio.run(locker.lock_all())
    assert [(mq, pq) for mq, pq, _ in regained] == [(Q[1], stale)]
    assert regained[0][2] == clock.monotonic_ms()  # the grant's send time
    assert stale.last_lock_timestamp_ms == stale_stamp  # the stale queue itself is not made valid again
    assert table[Q[0]].last_lock_timestamp_ms == clock.monotonic_ms()  # renewed as before
    # the consume service's re-lock of a queue whose lock ran out goes the same way
    clock.advance_ms(LEASE_MS + 1)
    regained.clear()
    asyncio.run(locker.lock(Q[0], reason="consume"))
    assert [mq for mq, _, _ in regained] == [Q[0]] and locker.stats["regained"] == 2
    assert [a for a in actions(events) if a[0] != "requested"][-1] == ("granted", 0)


def test_unlock_all_releases_every_owned_queue_and_clears_the_flags():
    locker, table, broker, clock, events = setup()
    for mq in Q[:2]:
        table[mq] = ProcessQueue(now_ms=0)
        asyncio.run(locker.lock(mq, reason="rebalance"))
    asyncio.run(locker.unlock_all())
    assert not any(pq.locked for pq in table.values())
    assert broker.locks.holder(G, Q[0], clock.monotonic_ms()) is None
    assert actions(events)[-2:] == [("released", 0), ("released", 1)]


def test_a_delayed_unlock_is_skipped_when_the_queue_is_ours_again():
    locker, table, broker, clock, _events = setup()

    async def run() -> None:
        table[Q[0]] = ProcessQueue(now_ms=0)
        await locker.lock(Q[0], reason="rebalance")
        table[Q[1]] = ProcessQueue(now_ms=0)
        await locker.lock(Q[1], reason="rebalance")
        del table[Q[0]]  # given up: unlocked later
        locker.unlock_later(Q[0], 10)
        table[Q[1]].dropped = True  # given up, and then taken back by a new ProcessQueue
        locker.unlock_later(Q[1], 10)
        table[Q[1]] = ProcessQueue(now_ms=0)
        await asyncio.sleep(0.05)
        await locker.close()

    asyncio.run(run())
    assert broker.locks.holder(G, Q[0], clock.monotonic_ms()) is None
    assert broker.locks.holder(G, Q[1], clock.monotonic_ms()) == "A"


# --- rebalance ------------------------------------------------------------------------------------

class Store:
    def __init__(self, offsets: dict[MessageQueue, int]) -> None:
        self.memory = dict(offsets)
        self.persisted: list[MessageQueue] = []

    def update_offset(self, mq, offset, *, increase_only):
        self.memory[mq] = offset

    def read_memory(self, mq):
        return self.memory.get(mq, -1)

    async def read_offset(self, mq, read_type):
        return self.memory.get(mq, -1)

    async def persist(self, mq):
        self.persisted.append(mq)

    def remove_offset(self, mq):
        self.memory.pop(mq, None)


class Deps:
    def __init__(self, cids: list[str]) -> None:
        self.cids = cids
        self.dispatched: list[MessageQueue] = []

    async def subscribe_queues(self, topic):
        return list(Q)

    async def consumer_ids(self, topic):
        return self.cids

    async def queue_offset(self, mq, kind):
        return 0

    def dispatch_pull(self, mq, pq, next_offset, *, resume_floor=None):
        self.dispatched.append(mq)

    async def message_queue_changed(self, topic, mq_all, mq_divided):
        pass


class Locks:
    """OrderlyLocks with scripted answers."""

    def __init__(self, deny: set[MessageQueue] = frozenset(), busy: bool = False) -> None:
        self.deny = set(deny)
        self.busy = busy
        self.log: list[tuple[str, int]] = []

    async def lock(self, mq, *, reason):
        self.log.append(("lock", mq.queue_id))
        return None if mq in self.deny else 777

    async def wait_consume_idle(self, pq, timeout_ms):
        self.log.append(("wait", timeout_ms))
        return not self.busy

    async def unlock(self, mq, *, oneway, reason):
        self.log.append(("unlock", mq.queue_id))

    def unlock_later(self, mq, delay_ms):
        self.log.append(("unlock_later", delay_ms))


def orderly_impl(locks: Locks, deps: Deps, *, model: MessageModel = MessageModel.CLUSTERING) -> RebalanceImpl:
    # the fake locks are granted at 777 ms: the state's clock stands within their lease
    state = ConsumerState(group=G, message_model=model, clock=FakeClock(start_ms=1_000), client_lock_lease_ms=LEASE_MS,
                          orderly=True)
    impl = RebalanceImpl(state=state, client_id="b", allocate=AllocateAveragely(),
                         consume_from_where=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                         offset_store=Store({mq: 5 for mq in Q}), deps=deps,
                         pull_max_idle_ms=120_000, orderly=locks, consume_lock_try_ms=1_000, unlock_delay_ms=20_000)
    state.subscribe("T", "*")
    return impl


def test_rebalance_locks_an_orderly_queue_before_taking_it_and_skips_a_denied_one():
    locks = Locks(deny={Q[2]})
    deps = Deps(["b"])
    impl = orderly_impl(locks, deps)
    asyncio.run(impl.do_rebalance())
    assert sorted(impl.state.process_queue_table) == [Q[0], Q[1], Q[3]]
    assert all(pq.locked and pq.last_lock_timestamp_ms == 777 for pq in impl.state.process_queue_table.values())
    assert sorted(deps.dispatched) == [Q[0], Q[1], Q[3]]
    locks.deny.clear()
    asyncio.run(impl.do_rebalance())  # the next rebalance tries again
    assert Q[2] in impl.state.process_queue_table


def test_broadcasting_orderly_queues_are_not_locked():
    locks = Locks(deny=set(Q))
    impl = orderly_impl(locks, Deps(["b"]), model=MessageModel.BROADCASTING)
    asyncio.run(impl.do_rebalance())
    assert len(impl.state.process_queue_table) == 4 and locks.log == []


def test_giving_up_a_queue_waits_for_its_listener_then_unlocks_now_or_later():
    locks = Locks()
    deps = Deps(["b"])
    impl = orderly_impl(locks, deps)
    asyncio.run(impl.do_rebalance())
    impl.state.process_queue_table[Q[0]].put_messages([MessageExt("T", b"x", {}, "i", "", 0, 9, 0, 0, 0, 0, "broker-a")])
    deps.cids = ["a", "b"]  # "b" keeps queues 2 and 3: 0 (with a cached message) and 1 go
    locks.log.clear()
    asyncio.run(impl.do_rebalance())
    assert sorted(impl.state.process_queue_table) == [Q[2], Q[3]]
    assert locks.log == [("wait", 1_000), ("unlock_later", 20_000), ("wait", 1_000), ("unlock", 1)]


def test_a_queue_still_consuming_stays_dropped_and_is_given_up_at_the_next_rebalance():
    locks = Locks()
    deps = Deps(["b"])
    impl = orderly_impl(locks, deps)
    asyncio.run(impl.do_rebalance())
    locks.busy = True
    deps.cids = ["a", "b"]
    asyncio.run(impl.do_rebalance())
    kept = impl.state.process_queue_table[Q[0]]
    assert kept.dropped and kept.try_unlock_times == 1 and Q[1] in impl.state.process_queue_table
    locks.busy = False
    asyncio.run(impl.do_rebalance())
    assert sorted(impl.state.process_queue_table) == [Q[2], Q[3]]


def test_a_queue_whose_lock_ran_out_is_given_up_without_storing_its_offset():
    locks = Locks()
    deps = Deps(["b"])
    impl = orderly_impl(locks, deps)
    asyncio.run(impl.do_rebalance())
    impl.state.process_queue_table[Q[0]].last_lock_timestamp_ms -= LEASE_MS  # its client lock ran out
    deps.cids = ["a", "b"]  # queues 0 and 1 go
    asyncio.run(impl.do_rebalance())
    store = impl.offset_store
    assert store.persisted == [Q[1]]  # type: ignore[attr-defined]
    assert Q[0] not in store.memory  # type: ignore[attr-defined]  # forgotten all the same


def test_a_regained_queue_starts_afresh_without_its_stale_cache_or_offset():
    locks = Locks()
    deps = Deps(["b"])
    impl = orderly_impl(locks, deps)
    asyncio.run(impl.do_rebalance())
    stale = impl.state.process_queue_table[Q[0]]
    stale.put_messages([MessageExt("T", b"x", {}, "i", "", 0, 55, 0, 0, 0, 0, "broker-a")])
    impl.offset_store.update_offset(Q[0], 55, increase_only=False)
    floors: list[int | None] = []
    deps.dispatch_pull = lambda mq, pq, next_offset, *, resume_floor=None: floors.append(resume_floor)

    waited: list[int] = []

    async def regain(lock_sent_ms: int) -> None:
        listener_done = asyncio.Event()

        async def wait_consume_idle(pq, timeout_ms):
            waited.append(timeout_ms)
            await listener_done.wait()
            return True

        locks.wait_consume_idle = wait_consume_idle  # type: ignore[method-assign]
        impl.resume_regained(Q[0], stale, lock_sent_ms)
        await asyncio.sleep(0.01)
        if stale.keep_own_commits:  # the stale queue's running listener call ends and commits
            impl.offset_store.update_offset(Q[0], 56, increase_only=False)
        listener_done.set()
        await asyncio.gather(*impl._tasks)

    asyncio.run(regain(4_242))
    fresh = impl.state.process_queue_table[Q[0]]
    assert stale.dropped and fresh is not stale and fresh.msg_count == 0
    assert fresh.locked and fresh.last_lock_timestamp_ms == 4_242
    assert Q[0] not in impl.offset_store.memory  # type: ignore[attr-defined]  # never persisted or piggy-backed
    assert floors == [56]  # the batch that was running counts in the client's own position
    assert waited == [1_000] and not stale.keep_own_commits
    asyncio.run(regain(5_000))  # a second report of the same stale queue changes nothing
    assert impl.state.process_queue_table[Q[0]] is fresh and floors == [56]


# --- the pull loop's lock check -------------------------------------------------------------------

class Api:
    def next_commit_seq(self) -> int:
        self.seq = getattr(self, "seq", 0) + 1
        return self.seq

    def __init__(self, *answers: PullResult) -> None:
        self.answers = list(answers)
        self.offsets: list[int] = []

    async def pull_kernel(self, mq, expression, queue_offset, max_nums, **kwargs):
        self.offsets.append(queue_offset)
        return self.answers.pop(0)


def found(first: int, n: int) -> PullResult:
    msgs = [MessageExt("T", b"x", {}, f"i{first + k}", "", 0, first + k, 0, 0, 0, 0, "broker-a") for k in range(n)]
    return PullResult(PullStatus.FOUND, first + n, 0, 100, msgs)


def orderly_pull(api: Api, start: Any) -> tuple[PullService, list[tuple[ProcessQueue, bool]]]:
    submitted: list[tuple[ProcessQueue, bool]] = []

    async def remove(mq):
        pass

    state = ConsumerState(group=G, message_model=MessageModel.CLUSTERING, clock=FakeClock(),
                          client_lock_lease_ms=Timing().client_lock_lease_ms, orderly=True)
    state.subscribe("T", "*")
    svc = PullService(api=api, state=state,  # type: ignore[arg-type]
                      offset_store=Store({}), submit=lambda *a: None, remove_process_queue=remove,  # type: ignore[arg-type]
                      thresholds=lambda: FlowThresholds(), message_model=MessageModel.CLUSTERING, timing=Timing(),
                      clock=FakeClock(), pull_batch_size=32, post_subscription=False,
                      orderly_submit=lambda pq, mq, dispatch: submitted.append((pq, dispatch)),
                      compute_pull_from_where=start)
    return svc, submitted


def test_an_unlocked_queue_is_not_pulled():
    async def start(mq):
        raise AssertionError("not asked before the queue is locked")

    api = Api()
    svc, _ = orderly_pull(api, start)
    pq = ProcessQueue(now_ms=0)
    assert asyncio.run(svc.pull_message(PullRequest(Q[0], pq, 3))) == Timing().pull_delay_when_exception_ms
    assert api.offsets == [] and svc.stats.not_locked == 1


def test_the_first_pull_after_locking_starts_from_the_stored_offset_and_dispatches_once():
    asked: list[MessageQueue] = []

    async def start(mq):
        asked.append(mq)
        return 10

    api = Api(found(10, 2), found(12, 1))
    svc, submitted = orderly_pull(api, start)
    pq = ProcessQueue(now_ms=0)
    pq.locked = True
    request = PullRequest(Q[0], pq, 3)
    assert asyncio.run(svc.pull_message(request)) == 0
    assert asyncio.run(svc.pull_message(request)) == 0
    assert asked == [Q[0]] and api.offsets == [10, 12] and request.previously_locked
    assert [d for _, d in submitted] == [True, False]  # the second batch joins the running request


def test_an_unreadable_start_offset_puts_the_pull_off():
    async def start(mq):
        raise TransportError("no broker")

    svc, _ = orderly_pull(Api(), start)
    pq = ProcessQueue(now_ms=0)
    pq.locked = True
    request = PullRequest(Q[0], pq, 3)
    assert asyncio.run(svc.pull_message(request)) == Timing().pull_delay_when_exception_ms
    assert not request.previously_locked


def test_a_queue_whose_client_lock_ran_out_piggybacks_no_offset():
    async def start(mq):
        return 0

    class Recording(Api):
        async def pull_kernel(self, mq, expression, queue_offset, max_nums, **kwargs):
            self.commits.append(kwargs["commit_offset_value"])
            return await super().pull_kernel(mq, expression, queue_offset, max_nums, **kwargs)

    api = Recording(found(0, 1), found(1, 1))
    api.commits = []  # type: ignore[attr-defined]
    svc, _ = orderly_pull(api, start)
    svc._offset_store.update_offset(Q[0], 1, increase_only=False)  # type: ignore[attr-defined]
    pq = ProcessQueue(now_ms=0)
    pq.locked = True
    request = PullRequest(Q[0], pq, 0)
    asyncio.run(svc.pull_message(request))  # FakeClock starts far beyond the 30 s lease: expired
    pq.last_lock_timestamp_ms = FakeClock().monotonic_ms()
    asyncio.run(svc.pull_message(request))
    assert api.commits == [None, 1]  # type: ignore[attr-defined]


def test_a_regained_queue_resumes_from_the_broker_offset_or_its_own_position_whichever_is_later():
    for broker_offset, own_offset, expected in ((220, 55, 220), (80, 100, 100)):
        async def start(mq, broker_offset=broker_offset):
            return broker_offset

        api = Api(found(expected, 1))
        svc, _ = orderly_pull(api, start)
        pq = ProcessQueue(now_ms=0)
        pq.locked = True
        pq.last_lock_timestamp_ms = FakeClock().monotonic_ms()
        request = PullRequest(Q[0], pq, own_offset, resume_floor=own_offset)
        asyncio.run(svc.pull_message(request))
        assert api.offsets == [expected], (broker_offset, own_offset)
        if expected == own_offset:
            assert svc._offset_store.read_memory(Q[0]) == own_offset  # type: ignore[attr-defined]


def test_a_lease_that_runs_out_during_the_start_offset_query_piggybacks_no_offset():
    """The first pull after locking asks the broker where to start; a pause during that query
    (the lease runs out meanwhile) must not let the pull carry the offset read before it."""
    holder: dict[str, Any] = {}

    async def start(mq):
        holder["svc"]._state.clock.advance_ms(Timing().client_lock_lease_ms + 1)  # the pause
        return 0

    class Recording(Api):
        async def pull_kernel(self, mq, expression, queue_offset, max_nums, **kwargs):
            self.commits.append(kwargs["commit_offset_value"])
            return await super().pull_kernel(mq, expression, queue_offset, max_nums, **kwargs)

    api = Recording(found(0, 1))
    api.commits = []  # type: ignore[attr-defined]
    svc, _ = orderly_pull(api, start)
    holder["svc"] = svc
    svc._offset_store.update_offset(Q[0], 84, increase_only=False)  # type: ignore[attr-defined]
    pq = ProcessQueue(now_ms=0)
    pq.locked = True
    pq.last_lock_timestamp_ms = svc._state.clock.monotonic_ms()  # type: ignore[attr-defined]
    asyncio.run(svc.pull_message(PullRequest(Q[0], pq, 0)))
    assert api.commits == [None]  # type: ignore[attr-defined]
