"""The master dies while a C++ push consumer reads a backlog from the slave; it reads on.

With `slave_read_enable`, a master answering a pull far behind the end of the log suggests the
slave (`suggestWhichBrokerId` 1); the C++ client sends its next pulls to the slave's remoting
address from the route. Killing the master then stops neither those pulls nor the deliveries:
every message the master acknowledged (and the slave holds) arrives.

Waits. The head of the backlog needs no client timer: the slave answers it and keeps suggesting
itself while the rest of the backlog is over the memory budget. The tail does: once the rest
fits in memory the slave suggests the master again (RocketMQ's rule, brokerId of the group), and
the C++ client pulls from the dead master until a route update drops it from its broker table
(3 s after the client starts, then every 30 s). Under the client's own reconnect storm to the
dead master an update often fails ("GetTransport ... get timed_mutex timeout" in its log; a run
whose kill came after the first update took 98 s), so the tail's budget covers five updates.
"""

from __future__ import annotations

import json
import time

import pytest
from support.cluster_rpc import wait_for, wait_slave_caught_up

from interop.mqlab_side import interop_spec, start_cluster
from nodes.client import Producer, PullConsumer
from nodes.common.types import Message, SendStatus

pytestmark = pytest.mark.cluster

TOPIC, GROUP = "InteropSlaveReads", "CG_cpp_slave"
BUDGET_BYTES = 256 * 1024  # the backlog beyond which the master suggests the slave
BODY_BYTES = 1000
COUNT = 2000  # ~2 MB on one queue: far more than the client caches (1000 messages a queue)
KILL_AFTER = 200
# the head: well before the slave's suggestion turns back to the master (the rest of the queue,
# about 1.2 KB a record with its header, under BUDGET_BYTES)
HEAD = COUNT - 2 * BUDGET_BYTES // BODY_BYTES
HEAD_BUDGET_S = 30.0
ROUTE_UPDATE_S = 30.0  # the C++ client's route update period
TAIL_BUDGET_S = 5 * ROUTE_UPDATE_S + 10.0


def _spec():
    store = {"commitlog_segment_bytes": 4 * 1024 * 1024, "message_body_bytes_max": 256 * 1024,
             "memory_budget_bytes": BUDGET_BYTES}
    return interop_spec(store=store, slave_read_enable=True)


@pytest.mark.slow
def test_cpp_consumer_keeps_reading_from_the_slave_after_the_master_is_killed(tmp_path, clients):

    with start_cluster(_spec(), tmp_path / "run") as cluster:
        bodies = [f"slave-{i:05d}-".ljust(BODY_BYTES, "x") for i in range(COUNT)]
        with Producer(cluster.namesrv_addr) as producer:
            for body in bodies:
                result = producer.send_orderly(Message(TOPIC, body.encode(), tags="TagS"), "one-queue")
                assert result.status is SendStatus.SEND_OK
        # A group new to a queue whose start is no longer in memory starts at its end (RocketMQ's
        # rule); the group has read nothing yet, so commit offset 0 for it.
        with PullConsumer(cluster.namesrv_addr, GROUP) as offsets:
            offsets.update_offset(result.message_queue, 0)
        wait_slave_caught_up(cluster)
        slave = cluster.node("broker-a-1")
        wait_for(lambda: TOPIC in slave.describe()["details"]["topics"], 10, "the slave to learn the topic")

        consumer = clients.cpp("push", cluster.namesrv_remoting_addr, group=GROUP, topic=TOPIC, threads=1,
                               consume_ms=2, max_s=HEAD_BUDGET_S + TAIL_BUDGET_S + 20)
        consumer.wait_for(lambda p: len(p.received()) >= KILL_AFTER, 30, f"{KILL_AFTER} deliveries")
        cluster.kill("broker-a-0")
        killed_ms = int(time.time() * 1000)
        delivered_before_kill = len(consumer.acked_bodies())
        assert delivered_before_kill < COUNT - 1100, "the kill came while most of the backlog was unread"
        consumer.wait_received(bodies[:HEAD], HEAD_BUDGET_S)
        consumer.wait_received(bodies, TAIL_BUDGET_S)
        consumer.kill()  # its shutdown would wait on the dead master; the deliveries are what counts

        events = [json.loads(line) for line in (tmp_path / "run" / "broker-a-1" / "events.jsonl").read_text()
                  .splitlines()]
        answered = [e for e in events if e["event"] == "pull-suggestion" and e["group"] == GROUP]
        assert any(e["answering_broker_id"] == 1 for e in answered), "the slave answered the client's pulls"
        assert any(e["answering_broker_id"] == 1 and e["wall_ms"] > killed_ms for e in answered), \
            "the slave still answered after the master was killed"
