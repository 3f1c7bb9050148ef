"""Consumer offsets across a master outage.

Commits made while the master is down land on the slave; when the master returns, the
slave's metadata sync overwrites them with the master's pre-outage table (RocketMQ's
master -> slave only sync). An owner that reads its offset then replays the messages
consumed during the outage: duplicates, bounded by what was consumed in the outage, and
never a loss.
"""

import time

import pytest
from support.cluster_rpc import query_offset, wait_for, wait_slave_caught_up

from nodes.client import Producer, PullConsumer
from nodes.common.types import Message, PullStatus

pytestmark = pytest.mark.cluster

GROUP, TOPIC = "outage-group", "Outage"


def _consume(consumer, mq, start, count):
    """Pull `count` messages from `start`; returns (next offset, bodies)."""
    bodies, offset = [], start
    while len(bodies) < count:
        result = consumer.pull(mq, offset, min(32, count - len(bodies)))
        if result.status is PullStatus.NO_MATCHED_MSG:
            continue
        assert result.status is PullStatus.FOUND, result
        bodies += [m.body for m in result.messages]
        offset = result.next_begin_offset
    return offset, bodies


def test_offsets_committed_to_the_slave_roll_back_when_the_master_returns(local_cluster):
    cluster = local_cluster
    timing = cluster.timing
    with Producer(cluster.namesrv_addr) as producer:
        sent = [producer.send_orderly(Message(TOPIC, f"m{i}".encode()), "k") for i in range(300)]
    mq = sent[0].message_queue
    master, slave = cluster.node("broker-a-0"), cluster.node("broker-a-1")
    wait_slave_caught_up(cluster)
    # the slave learns the master at its next registration, then copies at its next sync
    sync_budget_s = (timing.register_interval_ms + 3 * timing.slave_sync_interval_ms) / 1000 + 15

    with PullConsumer(cluster.namesrv_addr, GROUP, timing=timing) as consumer:
        before, seen = _consume(consumer, mq, 0, 100)
        consumer.update_offset(mq, before)  # committed on the master
        wait_for(lambda: query_offset(slave.addr, GROUP, TOPIC, mq.queue_id) == before, sync_budget_s,
                 "the slave to copy the master's offset")
        # A SIGKILL loses the commits of the last flush period (flushConsumerOffsetInterval): give
        # the master a few periods to write `before`, so its pre-outage table holds it.
        time.sleep(max(4 * timing.consumer_offset_persist_ms / 1000, 1.0))

        cluster.kill("broker-a-0")
        outage_budget_s = timing.broker_failover_budget_ms() / 1000 + 10
        during, outage_bodies = wait_for(lambda: _consume(consumer, mq, before, 100), outage_budget_s,
                                         "pulls to continue from the slave", 0.2)
        seen += outage_bodies
        wait_for(lambda: consumer.update_offset(mq, during) or True, outage_budget_s,
                 "a commit to reach the slave", 0.2)
        assert query_offset(slave.addr, GROUP, TOPIC, mq.queue_id) == during  # the commit landed on the slave
        assert consumer.query_offset(mq) == during

        cluster.restart("broker-a-0")
        cluster.wait_until_routable()
        # The slave's copy is overwritten by the master's stale, pre-outage table.
        wait_for(lambda: query_offset(slave.addr, GROUP, TOPIC, mq.queue_id) == before, sync_budget_s,
                 f"the master's table to overwrite the slave's offset (master has "
                 f"{query_offset(master.addr, GROUP, TOPIC, mq.queue_id)}, slave "
                 f"{query_offset(slave.addr, GROUP, TOPIC, mq.queue_id)}, before {before}, during {during})")
        assert query_offset(master.addr, GROUP, TOPIC, mq.queue_id) == before

        # A new owner starts from the rolled-back offset: it replays the outage's messages.
        resumed = wait_for(lambda: consumer.query_offset(mq), 10, "an offset from the master")
        assert resumed == before
        # the returned master is routable, but a pull stream that saw it refuse connections may still
        # be waiting out gRPC's reconnect backoff: its first pull fails, a retry goes through
        end, replayed = wait_for(lambda: _consume(consumer, mq, resumed, len(sent) - resumed), 15,
                                 "pulls from the returned master", 0.2)
    duplicates = len(seen) + len(replayed) - len(sent)
    bound = during - before
    print(f"\noutage commits: {before} -> {during}; rolled back to {resumed}; duplicates {duplicates} "
          f"(bound: the {bound} messages consumed during the outage)")
    assert 0 < duplicates <= bound
    assert {m for m in seen + replayed} == {f"m{i}".encode() for i in range(len(sent))}  # nothing lost
    assert end == len(sent)
