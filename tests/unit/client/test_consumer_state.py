"""ConsumerState: subscriptions, the queue table and the one lock-validity rule."""

from __future__ import annotations

from nodes.client.consumer_state import ConsumerState, retry_topic
from nodes.client.process_queue import ProcessQueue
from nodes.common import constants as c
from nodes.common.clock import FakeClock
from nodes.common.config import Timing
from nodes.common.types import MessageModel, MessageQueue

T0 = 1_000_000
Q = [MessageQueue("T", "broker-a", i) for i in range(3)]


def state(model: MessageModel = MessageModel.CLUSTERING, *, orderly: bool = True,
          lease_ms: int = Timing().client_lock_lease_ms) -> tuple[ConsumerState, FakeClock]:
    clock = FakeClock(start_ms=T0)
    return ConsumerState(group="g", message_model=model, clock=clock, client_lock_lease_ms=lease_ms,
                         orderly=orderly), clock


def test_client_lock_is_valid_while_locked_and_strictly_within_30_s():
    s, clock = state()
    assert c.CLIENT_LOCK_LEASE_MS == Timing().client_lock_lease_ms == 30_000
    pq = ProcessQueue(now_ms=T0)
    assert not s.lock_valid(pq)  # never granted
    pq.locked = True
    clock.advance_ms(30_000)
    assert s.lock_valid(pq)
    clock.advance_ms(1)
    assert not s.lock_valid(pq)
    pq.last_lock_timestamp_ms = T0 + 20_000  # a renewal
    assert s.lock_valid(pq, T0 + 50_000) and not s.lock_valid(pq, T0 + 50_001)


def test_broadcasting_needs_no_lock():
    s, clock = state(MessageModel.BROADCASTING)
    pq = ProcessQueue(now_ms=T0)
    clock.advance_ms(10**9)
    assert s.lock_valid(pq)


def test_only_an_orderly_consumer_leaves_queues_with_invalid_locks_out_of_the_offsets_to_persist():
    s, _clock = state()
    for i, mq in enumerate(Q):
        pq = s.process_queue_table[mq] = ProcessQueue(now_ms=T0)
        pq.locked = i != 1
    s.process_queue_table[Q[2]].last_lock_timestamp_ms = T0 - 30_001
    assert s.queues_to_persist() == [Q[0]]
    concurrent, _ = state(orderly=False)
    concurrent.process_queue_table.update(s.process_queue_table)
    assert concurrent.queues_to_persist() == Q


def test_only_an_orderly_consumer_with_a_lapsed_lock_may_not_commit():
    s, clock = state()
    pq = s.process_queue_table[Q[0]] = ProcessQueue(now_ms=T0)
    assert not s.may_commit(Q[0])  # never locked
    pq.locked = True
    assert s.may_commit(Q[0])
    clock.advance_ms(Timing().client_lock_lease_ms + 1)
    assert not s.may_commit(Q[0])  # lapsed: the clock is read at the moment of asking
    pq.last_lock_timestamp_ms = clock.monotonic_ms()
    assert s.may_commit(Q[0])  # relocked
    assert s.may_commit(Q[1])  # not in the table: the store forgets it, nothing to guard
    concurrent, _ = state(orderly=False)
    concurrent.process_queue_table[Q[0]] = ProcessQueue(now_ms=T0)
    assert concurrent.may_commit(Q[0])


def test_subscriptions_carry_the_retry_topic_in_clustering_and_renew_their_version():
    s, clock = state()
    s.copy_subscription({"T": "a || b"})
    assert s.topics() == ["T", retry_topic("g")] and s.subscriptions["T"].sub_version == T0
    clock.advance_ms(5)
    s.renew_sub_version("T")
    assert s.subscriptions["T"].sub_version == T0 + 5
    broadcasting, _ = state(MessageModel.BROADCASTING)
    broadcasting.copy_subscription({"T": ""})
    assert broadcasting.topics() == ["T"] and broadcasting.subscriptions["T"].expression == "*"


def test_owned_queues_leave_out_dropped_ones():
    s, _ = state()
    for mq in reversed(Q):
        s.process_queue_table[mq] = ProcessQueue(now_ms=T0)
    s.process_queue_table[Q[1]].dropped = True
    assert s.owned_queues() == [Q[0], Q[2]] and s.queues_of("T") == Q
