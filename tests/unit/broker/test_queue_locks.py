"""The master's queue-lock table (RebalanceLockManager): grants, renewals, expiry takeover,
unlock by the holder only, a restart frees everything, and every change is an event."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodes.broker.queue_locks import LockBatchRequest, QueueLockHandler, QueueLockManager
from nodes.common.codes import ResponseCode
from nodes.common.events import EventLog
from nodes.common.types import MessageQueue

LEASE_MS = 60_000
Q = [MessageQueue("T", "broker-a", i) for i in range(4)]
G = "g"


@pytest.fixture
def events_path(tmp_path: Path) -> Path:
    return tmp_path / "events.jsonl"


@pytest.fixture
def locks(events_path: Path) -> QueueLockManager:
    return QueueLockManager(lease_ms=LEASE_MS, events=EventLog(events_path, "broker-a-0"))


def lock_events(path: Path) -> list[tuple[str, str, int, int | None]]:
    """(action, client_id, queue_id, lease_end_mono_ms) of every lock event so far."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert all(r["event"] == "lock" and r["side"] == "broker" and r["group"] == G for r in rows)
    return [(r["action"], r["client_id"], r["queue_id"], r["lease_end_mono_ms"]) for r in rows]


def test_the_first_client_to_ask_gets_the_queue_and_others_are_denied(locks, events_path):
    assert locks.try_lock_batch(G, Q[:2], "A", 1_000) == Q[:2]
    assert locks.try_lock_batch(G, Q[1:3], "B", 2_000) == [Q[2]]  # queue 1 is A's
    assert locks.holder(G, Q[1], 2_000) == "A" and locks.holder(G, Q[2], 2_000) == "B"
    assert lock_events(events_path) == [
        ("granted", "A", 0, 61_000), ("granted", "A", 1, 61_000),
        ("denied", "B", 1, None), ("granted", "B", 2, 62_000)]


def test_locks_are_per_group(locks):
    assert locks.try_lock_batch("g1", [Q[0]], "A", 0) == [Q[0]]
    assert locks.try_lock_batch("g2", [Q[0]], "B", 0) == [Q[0]]


def test_any_lock_call_from_the_holder_renews_its_lease(locks, events_path):
    locks.try_lock_batch(G, [Q[0]], "A", 0)
    assert locks.try_lock_batch(G, [Q[0]], "A", 50_000) == [Q[0]]
    # 60 s after the first grant the renewed lease still holds
    assert locks.try_lock_batch(G, [Q[0]], "B", 100_000) == []
    assert locks.holder(G, Q[0], 110_000) == "A"
    assert lock_events(events_path)[1] == ("renewed", "A", 0, 110_000)


def test_an_expired_lease_is_taken_over_by_the_next_client_to_ask(locks, events_path):
    locks.try_lock_batch(G, [Q[0]], "A", 0)
    assert locks.try_lock_batch(G, [Q[0]], "B", LEASE_MS) == []  # exactly the lease: not expired yet
    assert locks.try_lock_batch(G, [Q[0]], "B", LEASE_MS + 1) == [Q[0]]
    assert locks.holder(G, Q[0], LEASE_MS + 1) == "B"
    assert lock_events(events_path)[-2:] == [("expired", "A", 0, LEASE_MS), ("granted", "B", 0, 2 * LEASE_MS + 1)]
    takeover = json.loads(events_path.read_text().splitlines()[-1])
    assert takeover["previous_client_id"] == "A" and takeover["previous_lease_end_mono_ms"] == LEASE_MS
    # the old holder's renewal comes too late: it is denied
    assert locks.try_lock_batch(G, [Q[0]], "A", LEASE_MS + 2) == []


def test_a_lapsed_lock_nobody_took_is_granted_again_to_its_holder(locks, events_path):
    locks.try_lock_batch(G, [Q[0]], "A", 0)
    assert locks.try_lock_batch(G, [Q[0]], "A", LEASE_MS + 5) == [Q[0]]
    assert lock_events(events_path)[-2:] == [("expired", "A", 0, LEASE_MS), ("granted", "A", 0, 2 * LEASE_MS + 5)]


def test_only_the_holder_can_unlock(locks, events_path):
    locks.try_lock_batch(G, Q[:2], "A", 0)
    assert locks.unlock_batch(G, Q[:2], "B", 10) == []
    assert locks.holder(G, Q[0], 10) == "A"
    assert locks.unlock_batch(G, [Q[0], Q[3]], "A", 20) == [Q[0]]  # an unknown queue is ignored
    assert locks.holder(G, Q[0], 20) is None and locks.holder(G, Q[1], 20) == "A"
    assert locks.try_lock_batch(G, [Q[0]], "B", 30) == [Q[0]]  # released: free at once
    assert ("released", "A", 0, 20) in lock_events(events_path)


def test_the_scan_records_and_forgets_expired_leases(locks, events_path):
    locks.try_lock_batch(G, [Q[0]], "A", 0)
    locks.try_lock_batch(G, [Q[1]], "B", 30_000)
    assert locks.scan_expired(LEASE_MS) == 0
    assert locks.scan_expired(LEASE_MS + 1) == 1
    assert locks.describe(LEASE_MS + 1) == {G: [{"topic": "T", "broker_name": "broker-a", "queue_id": 1,
                                                "client_id": "B", "lease_left_ms": 30_000 - 1}]}
    assert lock_events(events_path)[-1] == ("expired", "A", 0, LEASE_MS)
    assert locks.scan_expired(10 * LEASE_MS) == 1
    assert locks.describe(10 * LEASE_MS) == {}


def test_a_restart_frees_every_lock(events_path):
    before = QueueLockManager(lease_ms=LEASE_MS, events=EventLog(events_path, "broker-a-0"))
    before.try_lock_batch(G, Q, "A", 0)
    after = QueueLockManager(lease_ms=LEASE_MS)  # a new process: the table lives in memory only
    assert after.try_lock_batch(G, Q, "B", 1) == Q


def _handler(locks: QueueLockManager | None, now_ms: int, node_id: str = "broker-a-0") -> QueueLockHandler:
    return QueueLockHandler(locks, lambda: now_ms, node_id)


def _lock_request(client_id: str, queues: list[MessageQueue], group: str = G) -> LockBatchRequest:
    return LockBatchRequest(consumer_group=group, client_id=client_id, queues=tuple(queues))


def test_the_request_answers_with_the_locked_queues(locks):
    resp = _handler(locks, 0).lock_batch(_lock_request("A", Q[:2]))
    assert resp.code == ResponseCode.SUCCESS and list(resp.locked) == Q[:2]
    resp = _handler(locks, 1).lock_batch(_lock_request("B", Q[:3]))
    assert list(resp.locked) == [Q[2]]
    assert _handler(locks, 2).unlock_batch(_lock_request("A", Q[:1])).code == ResponseCode.SUCCESS
    assert locks.holder(G, Q[0], 3) is None


def test_the_request_refuses_bad_requests_and_slaves_refuse_everything(locks):
    assert _handler(locks, 0, "m").lock_batch(_lock_request("", Q[:1])).code == ResponseCode.INVALID_ARGUMENT
    assert _handler(locks, 0, "m").lock_batch(_lock_request("A", Q[:1], group="")).code == \
        ResponseCode.INVALID_ARGUMENT
    slave = _handler(None, 0, "broker-a-1").lock_batch(_lock_request("A", Q[:1]))
    assert slave.code == ResponseCode.SERVICE_NOT_AVAILABLE and "slave" in slave.remark and not slave.locked
    assert _handler(None, 0, "broker-a-1").unlock_batch(_lock_request("A", [])).code == \
        ResponseCode.SERVICE_NOT_AVAILABLE


def test_fault_switch_lock_no_exclusion_grants_over_a_live_lease(events_path):
    """OFF (every other test here): a live lease of A denies B. ON: B gets the queue while A's
    lease runs, so both believe they hold it."""
    broken = QueueLockManager(lease_ms=LEASE_MS, events=EventLog(events_path, "broker-a-0"), no_exclusion=True)
    assert broken.try_lock_batch(G, [Q[0]], "A", 1_000) == [Q[0]]
    assert broken.try_lock_batch(G, [Q[0]], "B", 2_000) == [Q[0]]
    assert broken.holder(G, Q[0], 2_000) == "B"
    assert lock_events(events_path) == [("granted", "A", 0, 61_000), ("granted", "B", 0, 62_000)]
    honest = QueueLockManager(lease_ms=LEASE_MS)
    honest.try_lock_batch(G, [Q[0]], "A", 1_000)
    assert honest.try_lock_batch(G, [Q[0]], "B", 2_000) == []


def test_fault_switch_lock_slow_takeover_keeps_a_lapsed_lease_for_several_leases(events_path):
    """OFF: B takes A's queue just after A's lease lapsed. ON: B is denied until 3 leases passed,
    also by the expiry scan, although A's lease ended long before."""
    from nodes.common import constants as c

    honest = QueueLockManager(lease_ms=LEASE_MS)
    honest.try_lock_batch(G, [Q[0]], "A", 0)
    assert honest.try_lock_batch(G, [Q[0]], "B", LEASE_MS + 1) == [Q[0]]
    broken = QueueLockManager(lease_ms=LEASE_MS, slow_takeover=True)
    broken.try_lock_batch(G, [Q[0]], "A", 0)
    assert broken.try_lock_batch(G, [Q[0]], "B", LEASE_MS + 1) == []
    assert broken.scan_expired(2 * LEASE_MS) == 0
    assert broken.try_lock_batch(G, [Q[0]], "B", c.FAULT_SLOW_TAKEOVER_LEASES * LEASE_MS) == []
    assert broken.try_lock_batch(G, [Q[0]], "B", c.FAULT_SLOW_TAKEOVER_LEASES * LEASE_MS + 1) == [Q[0]]
