"""One consumer group, two worlds: a C++ push consumer (remoting) and mqlab's PushConsumer (gRPC).

The broker keeps one member list per group whatever the transport: the C++ client's
GET_CONSUMER_LIST_BY_GROUP and mqlab's rebalance both see both members, so the averaging
allocation gives each two of the four queues, both get messages and together every message.

Waits: mqlab's heartbeat makes the broker push NOTIFY (40) to the C++ client, which rebalances at
once; mqlab hears of the C++ member through its own notification stream. Neither waits for a
rebalance timer (C++ 10 s, mqlab 20 s).
"""

from __future__ import annotations

import threading
import time

import pytest

from interop.mqlab_side import make_topic
from nodes.client import ConsumeConcurrentlyStatus, Producer, PushConsumer
from nodes.common.types import Message, SendStatus

pytestmark = pytest.mark.cluster

TOPIC, GROUP = "InteropMixed", "CG_mixed"
COUNT = 40
SETTLE_BUDGET_S = 20.0
DELIVERY_BUDGET_S = 20.0


def test_a_group_of_a_cpp_consumer_and_an_mqlab_consumer_shares_the_queues(shared_cluster, clients):
    make_topic(shared_cluster, TOPIC)
    stop = clients.stop_file()
    cpp = clients.cpp("push", shared_cluster.namesrv_remoting_addr, group=GROUP, topic=TOPIC, stop_file=stop,
                      max_s=60)
    cpp.wait_for(lambda p: p.of("started"), 20, "start")

    mqlab_got: list[tuple[int, str]] = []
    lock = threading.Lock()

    def listener(msgs, _ctx):
        with lock:
            mqlab_got.extend((m.queue_id, m.body.decode()) for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(shared_cluster.namesrv_addr, GROUP)
    consumer.subscribe(TOPIC)
    consumer.register_listener(listener)
    consumer.start()
    try:
        deadline = time.monotonic() + SETTLE_BUDGET_S
        while True:
            members = shared_cluster.node("broker-a-0").describe()["details"]["consumer_groups"].get(GROUP, [])
            owned = [mq.queue_id for mq in consumer.owned_queues() if mq.topic == TOPIC]
            if len(members) == 2 and len(owned) == 2:
                break
            assert time.monotonic() < deadline, f"no 2 + 2 split: members {members}, mqlab owns {owned}"
            time.sleep(0.1)
        assert any(m.endswith("@DEFAULT") and "-127.0.0.1@" in m for m in members), members

        with Producer(shared_cluster.namesrv_addr) as producer:
            for i in range(COUNT):
                assert producer.send(Message(TOPIC, f"mixed-{i}".encode(), tags="TagX")).status is SendStatus.SEND_OK
        everything = {f"mixed-{i}" for i in range(COUNT)}

        def delivered() -> set[str]:
            with lock:
                return cpp.acked_bodies() | {body for _, body in mqlab_got}

        deadline = time.monotonic() + DELIVERY_BUDGET_S
        while delivered() != everything:
            assert time.monotonic() < deadline, f"missing {sorted(everything - delivered())}\n{cpp.story()}"
            time.sleep(0.1)
    finally:
        consumer.shutdown()
    stop.touch()
    cpp.finish()

    cpp_queues = {e["queue"] for e in cpp.received(acked_only=True)}
    mqlab_queues = {queue_id for queue_id, _ in mqlab_got}
    assert cpp_queues and mqlab_queues, "both members got messages"
    assert cpp_queues | mqlab_queues == {0, 1, 2, 3}
    assert not cpp_queues & mqlab_queues, f"C++ read {cpp_queues}, mqlab read {mqlab_queues}: a queue twice"
    assert set(owned) == mqlab_queues
