"""Partitions through link proxies with real processes: cutting links cuts live streams too."""

import dataclasses

import pytest
from support.cluster_rpc import wait_for, wait_slave_caught_up, wait_slave_connected

from harness import LocalCluster
from harness.spec import ClusterSpec
from nodes.client import Producer, PullConsumer
from nodes.common.types import Message, SendStatus

pytestmark = pytest.mark.cluster


def test_cutting_master_and_slave_stops_sync_acks_and_heal_restores_them(tmp_path, time_scale):
    spec = ClusterSpec.default(time_scale=time_scale).with_node_options("broker-a-0", broker_role="SYNC_MASTER")
    # slave_timeout scaled to 150 ms is shorter than an ack takes on a loaded 2-core machine
    spec = dataclasses.replace(spec, timing={"slave_timeout_ms": 1_500})
    with LocalCluster(spec, run_dir=tmp_path / "run", links=True) as cluster:
        wait_slave_connected(cluster)
        overrides = cluster.client_dial_overrides("producer-0")
        with Producer(cluster.namesrv_addr, dial_overrides=overrides) as producer:
            assert producer.send(Message("Cut", b"before")).status is SendStatus.SEND_OK
            cut = cluster.partition(["broker-a-0"], ["broker-a-1"])
            assert set(cut) == {"broker-a-0->broker-a-1", "broker-a-1->broker-a-0"}
            # the live replication stream is blackholed: no ack can arrive any more
            statuses = {producer.send(Message("Cut", f"during-{i}".encode())).status for i in range(5)}
            assert statuses <= {SendStatus.FLUSH_SLAVE_TIMEOUT, SendStatus.SLAVE_NOT_AVAILABLE}
            cluster.heal()
            wait_for(lambda: producer.send(Message("Cut", b"after")).status is SendStatus.SEND_OK, 30,
                     "SEND_OK after the heal")
        wait_slave_caught_up(cluster)
        # the slave dials the master: chunks sent during the cut were swallowed on that link
        assert cluster.link_stats()["broker-a-1->broker-a-0"]["dropped_bytes"] > 0


def test_a_client_cut_from_the_master_cannot_pull_until_the_heal(tmp_path, time_scale):
    with LocalCluster(ClusterSpec.default(time_scale=time_scale), run_dir=tmp_path / "run", links=True) as cluster:
        with Producer(cluster.namesrv_addr) as producer:
            sent = producer.send_orderly(Message("Reader", b"hello"), "k")
        wait_slave_caught_up(cluster)
        slave = cluster.node("broker-a-1")
        wait_for(lambda: "Reader" in slave.describe()["details"]["topics"], 10, "the slave to learn the topic")
        overrides = cluster.client_dial_overrides("consumer-x")
        cluster.cut("consumer-x", "broker-a-0", "REJECT")
        with PullConsumer(cluster.namesrv_addr, "g", timing=cluster.timing, dial_overrides=overrides) as consumer:
            with pytest.raises(Exception, match=r"unavailable|refused|reset|Transport|closed"):
                consumer.pull(sent.message_queue, 0, 32)  # the master is unreachable for this client
            cluster.heal()
            result = wait_for(lambda: consumer.pull(sent.message_queue, 0, 32), 20, "a pull after the heal", 0.2)
        assert [m.body for m in result.messages] == [b"hello"]
