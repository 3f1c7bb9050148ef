"""Two C++ orderly push consumers in one group share a topic through the broker's queue locks.

The second consumer's heartbeat makes the broker push NOTIFY_CONSUMER_IDS_CHANGED (40) to the
first on its heartbeat connection; the first rebalances at once, unlocks (42) the queues it gives
up, and the second locks (41) them. Each queue is then consumed by one consumer, in queue order,
and every acknowledged message is delivered. A message the callback answers RECONSUME_LATER
(through a raw ctypes callback: the binding's own one leaves the status undefined) comes back
at the same offset before the rest of its queue.

Waits: the rebalance is driven by NOTIFY, not by the clients' 10 s rebalance timer; the broker's
lock lease stays at its real 60 s (the client re-locks every 20 s), so no lease expires here.
"""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

from interop.mqlab_side import make_topic
from nodes.client import Producer
from nodes.common.types import Message, SendStatus

pytestmark = pytest.mark.cluster

TOPIC, GROUP = "InteropOrderly", "CG_cpp_orderly"
PER_QUEUE = 10
FAILING = "q1-003"  # answered RECONSUME_LATER once: redelivered in place before the rest of its queue
SETTLE_BUDGET_S = 20.0  # NOTIFY -> unlock -> lock: milliseconds; the budget covers a slow machine
DELIVERY_BUDGET_S = 30.0


def _locks_by_client(cluster) -> dict[str, set[int]]:
    locks = cluster.node("broker-a-0").describe()["details"]["queue_locks"] or {}
    owners: dict[str, set[int]] = defaultdict(set)
    for entry in locks.get(GROUP, []):
        if entry["topic"] == TOPIC and entry["lease_left_ms"] > 0:
            owners[entry["client_id"]].add(entry["queue_id"])
    return owners


def _wait_locks(cluster, shares: list[int], what: str) -> dict[str, set[int]]:
    """Wait until the broker's live locks on the topic are held in these shares, one per client."""
    deadline = time.monotonic() + SETTLE_BUDGET_S
    owners: dict[str, set[int]] = {}
    while time.monotonic() < deadline:
        owners = _locks_by_client(cluster)
        if sorted(len(q) for q in owners.values()) == shares:
            return owners
        time.sleep(0.1)
    raise AssertionError(f"{what}; the broker holds {owners}")


def test_two_cpp_orderly_consumers_split_the_queues_by_broker_locks(shared_cluster, clients):
    make_topic(shared_cluster, TOPIC)
    stop = clients.stop_file()
    ns = shared_cluster.namesrv_remoting_addr
    first = clients.cpp("orderly", ns, group=GROUP, topic=TOPIC, stop_file=stop, fail_first=[FAILING], max_s=90)
    first.wait_for(lambda p: p.of("started"), 20, "start")
    _wait_locks(shared_cluster, [4], "the first consumer never locked all 4 queues")
    second = clients.cpp("orderly", ns, group=GROUP, topic=TOPIC, stop_file=stop, fail_first=[FAILING], max_s=90)
    owners = _wait_locks(shared_cluster, [2, 2], "the two consumers never split the queues' locks 2 + 2")

    bodies: dict[int, list[str]] = defaultdict(list)
    with Producer(shared_cluster.namesrv_addr) as producer:
        for seq in range(PER_QUEUE):
            for queue_id in range(4):
                body = f"q{queue_id}-{seq:03d}"
                result = producer.send_orderly(Message(TOPIC, body.encode(), tags="TagO"), queue_id)
                assert result.status is SendStatus.SEND_OK
                bodies[result.message_queue.queue_id].append(body)
    everything = {b for queue in bodies.values() for b in queue}

    deadline = time.monotonic() + DELIVERY_BUDGET_S
    while (first.acked_bodies() | second.acked_bodies()) != everything:
        assert time.monotonic() < deadline, (
            f"missing {sorted(everything - first.acked_bodies() - second.acked_bodies())}\n"
            f"{first.story()}\n{second.story()}")
        time.sleep(0.1)
    stop.touch()
    first.finish()
    second.finish()

    consumed_queues, saw_failing = [], 0
    for proc in (first, second):
        mine = [e for e in proc.received() if e["topic"] == TOPIC]
        queues = {e["queue"] for e in mine}
        consumed_queues.append(queues)
        client_queues = [q for q in owners.values() if q == queues]
        assert client_queues, f"{proc.name} consumed queues {queues}, the broker's locks were {owners}"
        for queue_id in queues:
            acked = [e for e in mine if e["queue"] == queue_id and e["status"] == "CONSUME_SUCCESS"]
            assert [e["body"] for e in acked] == bodies[queue_id], f"{proc.name} broke queue {queue_id}'s order"
            offsets = [e["queue_offset"] for e in mine if e["queue"] == queue_id]
            assert offsets == sorted(offsets), f"{proc.name} consumed queue {queue_id} out of order: {offsets}"
        if FAILING in {e["body"] for e in mine}:
            saw_failing += 1
            again = [(e["status"], e["queue_offset"]) for e in mine if e["body"] == FAILING]
            assert [status for status, _ in again] == ["RECONSUME_LATER", "CONSUME_SUCCESS"], again
            assert again[0][1] == again[1][1], "an orderly RECONSUME_LATER redelivers the same offset locally"
    assert not consumed_queues[0] & consumed_queues[1], "a queue was consumed by both consumers"
    assert saw_failing == 1
