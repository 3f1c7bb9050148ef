"""Master vs slave read routing with real processes."""

import json

import pytest
from support.cluster_rpc import wait_for, wait_slave_caught_up
from support.local_cluster import master_stub
from support.rpc import code_name, pull_once

from harness import LocalCluster
from harness.spec import ClusterSpec
from nodes.client import Producer, PullConsumer
from nodes.common.types import Message, PullStatus
from nodes.store.message_batch import encode_entry
from proto import broker_pb2, common_pb2

pytestmark = pytest.mark.cluster

BUDGET_BYTES = 256 * 1024  # the backlog beyond which a message counts as "on disk"
TOPIC = "Routed"
FILL_BATCH = 128  # messages per request when filling a queue: ~130 KB, within the 256 KiB body limit


def _spec(time_scale, *, slave_read_enable, offset_check_in_slave=False):
    store = {"commitlog_segment_bytes": 1024 * 1024, "message_body_bytes_max": 256 * 1024,
             "memory_budget_bytes": BUDGET_BYTES}
    spec = ClusterSpec.default(time_scale=time_scale)
    spec = spec.with_node_options("broker-a-0", store=store, slave_read_enable=slave_read_enable)
    return spec.with_node_options("broker-a-1", store=store, slave_read_enable=slave_read_enable,
                                  offset_check_in_slave=offset_check_in_slave)


def _fill_one_queue(cluster, total_bytes):
    """About `total_bytes` of 1000-byte messages in one queue (a client send creates the topic and
    picks the queue; the rest go to that queue in batches: the routing under test reads the
    backlog in bytes, however the messages came in, and one send per message took most of a test)."""
    body = b"r" * 1000
    with Producer(cluster.namesrv_addr) as producer:
        first = producer.send_orderly(Message(TOPIC, body), "one-queue")
    queue_id = first.message_queue.queue_id
    left = total_bytes // 1100
    with master_stub(cluster) as stub:
        while left > 0:
            n = min(left, FILL_BATCH)
            answer = stub.SendMessage(broker_pb2.SendMessageRequest(
                topic=TOPIC, queue_id=queue_id, batch_body=encode_entry(body, 0, {}) * n, born_timestamp_ms=1),
                timeout=30)
            assert answer.code == common_pb2.SUCCESS, answer.remark
            left -= n
    wait_slave_caught_up(cluster)
    slave = cluster.node("broker-a-1")  # topic configs reach the slave by the periodic metadata sync
    wait_for(lambda: TOPIC in slave.describe()["details"]["topics"], 10, "the slave to learn the topic")
    return first.message_queue


def _drain(consumer, mq, offset=0):
    """Pull to the end; returns [(queue_offset, answering broker id, suggestion)] per pull."""
    route = []
    while True:
        result = consumer.pull(mq, offset, 32)
        if result.status is PullStatus.NO_MATCHED_MSG:
            continue  # a slave's "retry immediately"
        if result.status is not PullStatus.FOUND:
            return route, offset
        route.append((offset, result.broker_id, result.suggest_which_broker_id))
        offset = result.next_begin_offset


def test_backlog_over_budget_moves_pulls_to_the_slave_and_back(tmp_path, time_scale):
    with LocalCluster(_spec(time_scale, slave_read_enable=True), run_dir=tmp_path / "run") as cluster:
        mq = _fill_one_queue(cluster, 2 * 1024 * 1024)
        with PullConsumer(cluster.namesrv_addr, "cold-reader") as consumer:
            route, end = _drain(consumer, mq)
    answered_by = [broker_id for _, broker_id, _ in route]
    assert answered_by[0] == 0 and route[0][2] == 1, "a far-behind pull to the master suggests the slave"
    assert 1 in answered_by, "the next pulls follow the suggestion to the slave"
    first_slave = answered_by.index(1)
    back = answered_by.index(0, first_slave)
    assert all(b == 1 for b in answered_by[first_slave:back]), "pulls stay on the slave while far behind"
    assert all(b == 0 for b in answered_by[back:]), "once the backlog fits the budget, pulls return to the master"
    assert end > route[-1][0]
    # every routing change is an event with the backlog that caused it, for the chaos checker
    events = [json.loads(line) for node in ("broker-a-0", "broker-a-1")
              for line in (tmp_path / "run" / node / "events.jsonl").read_text().splitlines()]
    suggestions = [e for e in events if e["event"] == "pull-suggestion" and e["group"] == "cold-reader"]
    to_slave = [e for e in suggestions if e["suggest_which_broker_id"] == 1]
    assert to_slave and all(e["backlog_bytes"] > BUDGET_BYTES for e in to_slave)
    assert any(e["suggest_which_broker_id"] == 0 and e["answering_broker_id"] == 1 for e in suggestions)


@pytest.mark.slow
def test_without_slave_read_enable_the_suggestion_is_always_the_master(tmp_path, time_scale):
    with LocalCluster(_spec(time_scale, slave_read_enable=False), run_dir=tmp_path / "run") as cluster:
        mq = _fill_one_queue(cluster, 1024 * 1024)
        with PullConsumer(cluster.namesrv_addr, "cold-reader") as consumer:
            route, _ = _drain(consumer, mq)
    assert route and {(b, s) for _, b, s in route} == {(0, 0)}


def test_master_killed_pulls_fall_back_to_the_slave_and_return_after_restart(tmp_path, time_scale):
    with LocalCluster(_spec(time_scale, slave_read_enable=False), run_dir=tmp_path / "run") as cluster:
        mq = _fill_one_queue(cluster, 200 * 1024)
        with PullConsumer(cluster.namesrv_addr, "survivor", timing=cluster.timing) as consumer:
            first = consumer.pull(mq, 0, 32)
            assert first.broker_id == 0
            cluster.kill("broker-a-0")
            budget_s = cluster.timing.broker_failover_budget_ms() / 1000 + 10

            def pull_from_slave():
                result = consumer.pull(mq, first.next_begin_offset, 32)
                return result if result.broker_id == 1 and result.status is PullStatus.FOUND else None

            fallback = wait_for(pull_from_slave, budget_s, "pulls to fall back to the slave", 0.2)
            assert fallback.messages[0].queue_offset == first.next_begin_offset  # consumption continues
            rest, _ = _drain(consumer, mq, fallback.next_begin_offset)
            assert rest and {b for _, b, _ in rest} == {1}

            cluster.restart("broker-a-0")
            cluster.wait_until_routable()
            back = wait_for(lambda: (r := consumer.pull(mq, 0, 32)).broker_id == 0 and r, budget_s,
                            "pulls to return to the restarted master", 0.2)
            assert back.status is PullStatus.FOUND


@pytest.mark.parametrize("offset_check_in_slave", [False, True])
def test_out_of_range_offsets_on_a_slave(tmp_path, time_scale, offset_check_in_slave):
    spec = _spec(time_scale, slave_read_enable=False, offset_check_in_slave=offset_check_in_slave)
    with LocalCluster(spec, run_dir=tmp_path / "run") as cluster:
        mq = _fill_one_queue(cluster, 20 * 1024)
        slave = cluster.node("broker-a-1").addr
        r = pull_once(slave, topic=TOPIC, queue_id=mq.queue_id, queue_offset=1_000_000)
        if offset_check_in_slave:  # the slave corrects the offset like a master
            assert (code_name(r.code), r.remark) == ("PULL_OFFSET_MOVED", "OFFSET_OVERFLOW_BADLY")
            assert r.next_begin_offset == r.max_offset
        else:  # RocketMQ's default: a slave never moves an offset; retry, and go to the master
            assert (code_name(r.code), r.remark) == ("PULL_RETRY_IMMEDIATELY", "OFFSET_OVERFLOW_BADLY")
            assert (r.next_begin_offset, r.suggest_which_broker_id) == (1_000_000, 0)
