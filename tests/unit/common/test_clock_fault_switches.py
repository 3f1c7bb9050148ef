"""The selftest switches of the clock faults: lease-wall-clock (the broker's lock table measures
leases on the wall clock, as RocketMQ does) and renew-gives-up (a consumer's lock renewal stops
after one failed call), each against the correct build."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from nodes.broker.queue_locks import LockBatchRequest, QueueLockHandler, QueueLockManager, wall_lease_to_mono
from nodes.broker.request_table import RequestKind, RequestTable
from nodes.broker.transport.consumer_servicer import ConsumerManagerServicer
from nodes.client.consumer_state import ConsumerState
from nodes.client.lock_service import LockRenewalService, QueueLocker
from nodes.client.process_queue import ProcessQueue
from nodes.client.routes import BrokerData, QueueData, RouteCache, RouteSnapshot
from nodes.client.rpc.api import ClientApi
from nodes.common import constants as c
from nodes.common.clock import ClockSetting, FakeClock, SkewedClock
from nodes.common.errors import TransportError
from nodes.common.events import EventLog
from nodes.common.types import MessageModel, MessageQueue

G = "g"
Q = [MessageQueue("T", "broker-a", i) for i in range(2)]
BROKER_LEASE_MS = 60_000
CLIENT_LEASE_MS = 30_000


class SteppingClock:
    """A monotonic and a wall clock that advance together; the wall one can also step."""

    def __init__(self) -> None:
        self.mono = 5_000_000
        self.wall = 1_700_000_000_000

    def monotonic_ms(self) -> int:
        return self.mono

    def wall_ms(self) -> int:
        return self.wall

    def advance(self, ms: int) -> None:
        self.mono += ms
        self.wall += ms

    async def sleep_ms(self, ms: float) -> None:
        self.advance(int(ms))


def lock_handler(tmp_path: Path, clock: SteppingClock, wall_leases: bool) -> QueueLockHandler:
    """The broker's wiring (BrokerController) with or without the switch."""
    locks = QueueLockManager(lease_ms=BROKER_LEASE_MS, events=EventLog(tmp_path / "events.jsonl", "m"),
                             lease_to_mono=wall_lease_to_mono(clock) if wall_leases else None)
    return QueueLockHandler(locks, clock.wall_ms if wall_leases else clock.monotonic_ms, "m")


@pytest.mark.parametrize("wall_leases", [False, True])
def test_lease_wall_clock_keeps_a_dead_holders_lock_past_its_lease_after_a_backward_step(tmp_path, wall_leases):
    clock = SteppingClock()
    handler = lock_handler(tmp_path, clock, wall_leases)
    assert handler.lock_batch(LockBatchRequest(G, "A", (Q[0],))).locked == (Q[0],)
    clock.wall -= 30_000  # the broker's wall clock steps back by 30 s; A dies
    clock.advance(BROKER_LEASE_MS + 1)
    taken = handler.lock_batch(LockBatchRequest(G, "B", (Q[0],))).locked
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    granted_a = events[0]
    if not wall_leases:
        assert taken == (Q[0],)  # the lease ran out on the monotonic clock: the step changed nothing
        return
    assert taken == ()  # A's lock outlives its lease by the step
    denied = events[-1]
    assert denied["action"] == "denied"
    # the events stay in monotonic terms, so the step shows as a lease end that moved by 30 s
    assert denied["holder_lease_end_mono_ms"] - granted_a["lease_end_mono_ms"] == 30_000
    clock.advance(30_000)
    assert handler.lock_batch(LockBatchRequest(G, "B", (Q[0],))).locked == (Q[0],)


def test_lease_wall_clock_is_a_known_broker_switch():
    assert c.FAULT_LEASE_WALL_CLOCK in c.BROKER_FAULT_SWITCHES
    assert c.FAULT_RENEW_GIVES_UP in c.CONSUMER_FAULT_SWITCHES


# --- renew-gives-up ----------------------------------------------------------------------------

class Broker:
    """One master's lock RPCs served by the real lock table and gRPC adapter; `down` fails them."""

    def __init__(self, clock: FakeClock) -> None:
        self.locks = QueueLockManager(lease_ms=BROKER_LEASE_MS)
        handler = QueueLockHandler(self.locks, clock.monotonic_ms, "m")
        table = RequestTable()
        table.register(RequestKind.LOCK_BATCH_MQ, handler.lock_batch)
        table.register(RequestKind.UNLOCK_BATCH_MQ, handler.unlock_batch)
        self.servicer = ConsumerManagerServicer(table)
        self.calls = 0
        self.down = False

    def stub(self, addr: str) -> Any:
        broker = self

        class Stub:
            async def LockBatchMQ(self, request: Any, timeout: float | None = None) -> Any:
                broker.calls += 1
                if broker.down:
                    raise TransportError("peer unavailable")
                return await broker.servicer.LockBatchMQ(request, None)

        return Stub()


def locker_for(broker: Broker, clock: Any, *, gives_up: bool) -> QueueLocker:
    route = RouteSnapshot(queue_datas=(QueueData("broker-a", 2, 2, c.PERM_DEFAULT),),
                          broker_datas=(BrokerData("broker-a", {0: "m:1"}),))

    class Instance:
        def __init__(self) -> None:
            async def fetch(topic: str) -> RouteSnapshot:
                return route

            self.routes = RouteCache(fetch)
            self.api = ClientApi()
            self.api.consumer_stub = broker.stub  # type: ignore[method-assign]

    instance = Instance()
    asyncio.run(instance.routes.update_topic("T"))
    state = ConsumerState(group=G, message_model=MessageModel.CLUSTERING, clock=clock,
                          client_lock_lease_ms=CLIENT_LEASE_MS, orderly=True)
    return QueueLocker(instance, state, "A", renew_gives_up=gives_up)  # type: ignore[arg-type]


@pytest.mark.parametrize("gives_up", [False, True])
def test_renew_gives_up_stops_renewing_after_one_failed_call(gives_up):
    clock = FakeClock()
    broker = Broker(clock)
    locker = locker_for(broker, clock, gives_up=gives_up)
    pq = locker.state.process_queue_table[Q[0]] = ProcessQueue(now_ms=0)
    asyncio.run(locker.lock(Q[0], reason="rebalance"))
    broker.down = True
    clock.advance_ms(20_000)
    asyncio.run(locker.lock_all())  # one failed renewal
    broker.down = False
    clock.advance_ms(5_000)
    calls = broker.calls
    asyncio.run(locker.lock_all())  # the next interval
    if not gives_up:
        assert broker.calls == calls + 1 and pq.last_lock_timestamp_ms == clock.monotonic_ms()
        return
    assert broker.calls == calls  # never asked again
    clock.advance_ms(CLIENT_LEASE_MS)
    assert not locker.state.lock_valid(pq)  # the client lease ran out although the broker was back
    assert locker.renewal_abandoned == {"broker-a"}


def test_a_skewed_consumer_renews_at_its_rate():
    """LockRenewalService is paced by the consumer's clock, as its lease is."""
    clock = SkewedClock(ClockSetting(4.0))
    broker = Broker(FakeClock())
    locker = locker_for(broker, clock, gives_up=False)
    locker.state.process_queue_table[Q[0]] = ProcessQueue(now_ms=0)

    async def run() -> int:
        service = LockRenewalService(locker, 200, 0)  # every 200 ms of its clock: 50 real ms
        service.start()
        await asyncio.sleep(0.3)
        await service.stop()
        return broker.calls

    assert asyncio.run(run()) >= 4  # about 6; at rate 1 it would be 2


def test_a_skewed_consumers_client_lease_runs_out_at_its_rate():
    def stamped(rate: float) -> tuple[ConsumerState, ProcessQueue]:
        clock = SkewedClock(ClockSetting(rate))
        state = ConsumerState(group=G, message_model=MessageModel.CLUSTERING, clock=clock,
                              client_lock_lease_ms=400, orderly=True)
        pq = ProcessQueue(now_ms=0)
        pq.locked, pq.last_lock_timestamp_ms = True, clock.monotonic_ms()
        return state, pq

    (fast, fast_pq), (normal, normal_pq) = stamped(2.0), stamped(1.0)
    assert fast.lock_valid(fast_pq)
    time.sleep(0.21)
    assert not fast.lock_valid(fast_pq)  # 400 ms of its clock in 200 real ms
    assert normal.lock_valid(normal_pq)
