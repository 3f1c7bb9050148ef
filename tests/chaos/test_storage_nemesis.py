"""Storage-fault nemeses on a real cluster: power-loss a master (SIGKILL, unsynced bytes dropped,
a torn tail), restart it and it serves; corrupt a sealed record of a running broker and the
journal names the record. Both are schedule data like every other fault."""

from __future__ import annotations

import json
import os
import random

import pytest

from chaos.nemesis import NemesisRunner
from chaos.nemesis_journal import nemesis_history_path, read_nemesis
from chaos.nemesis_ops import Corrupt, PowerLoss, describe_op, op_from_dict, op_to_dict
from chaos.schedule import FaultChoice, op_for
from harness import LocalCluster, NodeState
from harness.spec import ClusterSpec
from nodes.client import Message, Producer, PullConsumer
from nodes.common.clock import SYSTEM_CLOCK

TOPIC = "StorageNemesis"
MASTER, SLAVE = "broker-a-0", "broker-a-1"
TIME_SCALE = float(os.environ.get("MQLAB_TEST_TIME_SCALE", "0.05"))
SMALL_STORE = {"commitlog_segment_bytes": 128 * 1024, "message_body_bytes_max": 16 * 1024}


@pytest.mark.parametrize("op", [PowerLoss("master", restart_after_ms=900), PowerLoss("slave"), Corrupt("master")])
def test_storage_ops_survive_their_dict_form(op):
    assert op_from_dict(op_to_dict(op)) == op


def test_schedules_draw_storage_faults():
    assert op_for(FaultChoice("power-loss", "slave", duration_of="N_r", duration_x=1.0), 700) == \
        PowerLoss("slave", restart_after_ms=700)
    corrupt = op_for(FaultChoice("corrupt", "master"), 700)
    assert corrupt == Corrupt("master") and corrupt.duration_ms is None
    assert describe_op(corrupt) == "corrupt master"


def _spec() -> ClusterSpec:
    spec = ClusterSpec.default(time_scale=TIME_SCALE)
    for node in (MASTER, SLAVE):
        spec = spec.with_node_options(node, store=SMALL_STORE)
    return spec


@pytest.mark.cluster
def test_power_loss_and_corrupt_on_a_real_cluster(tmp_path):
    run_dir = tmp_path / "run"
    with LocalCluster(_spec(), run_dir=run_dir) as cluster, \
            NemesisRunner(cluster, nemesis_history_path(run_dir), random.Random(7), SYSTEM_CLOCK) as nemesis:
        with Producer(cluster.namesrv_addr) as producer:
            sent = [producer.send(Message(TOPIC, f"m{i}".encode() * 200)) for i in range(400)]  # > 3 segments

        corrupted = nemesis.start(Corrupt("master"))
        assert corrupted.ok, corrupted.error
        detail = json.loads(corrupted.detail)
        assert detail["file"].startswith("commitlog/") and detail["bytes"] > 0 and detail["msg_ids"]
        assert detail["msg_ids"][0] in {r.msg_id for r in sent}

        lost = nemesis.start(PowerLoss("master", restart_after_ms=500))
        assert lost.ok, lost.error
        assert cluster.node(MASTER).state is not NodeState.RUNNING
        store = json.loads(lost.detail)
        commitlog = store["store"]["commitlog"]
        assert commitlog["flushed_phys_offset"] <= commitlog["written_phys_offset"]
        assert store["flush_disk_type"] == "ASYNC_FLUSH"

        restarted = nemesis.recover(lost.fault_id)
        assert restarted is not None and restarted.ok, restarted
        cluster.wait_until_routable()
        with Producer(cluster.namesrv_addr) as producer:
            after = producer.send(Message(TOPIC, b"after the power loss"))
        with PullConsumer(cluster.namesrv_addr, "nemesis-check") as consumer:
            pulled = consumer.pull(after.message_queue, after.queue_offset, 1)
            assert pulled.messages and pulled.messages[0].msg_id == after.msg_id  # it serves

    lines = read_nemesis(nemesis_history_path(run_dir))
    ops = [(line["op"], line["phase"]) for line in lines]
    assert ops == [("corrupt", "start"), ("corrupt", "end"), ("power-loss", "start"), ("power-loss", "end"),
                   ("restart", "start"), ("restart", "end")]
    corrupt_end, loss_end, restart_end = lines[1], lines[3], lines[5]
    assert json.loads(corrupt_end["detail"])["phys_offset"] == detail["phys_offset"]  # the journal names the record
    assert "commitlog" in json.loads(loss_end["detail"])["store"]
    assert loss_end["targets"] == [MASTER] and restart_end["fault_id"] == loss_end["fault_id"]


@pytest.mark.cluster
def test_a_group_power_loss_takes_master_and_slave_at_once_and_both_serve_again(tmp_path):
    """A rack's power: both brokers are dead before either store is cut (no replica keeps what
    the other lost), the journal records each node's cut, one recovery restarts both."""
    run_dir = tmp_path / "run"
    with LocalCluster(_spec(), run_dir=run_dir) as cluster, \
            NemesisRunner(cluster, nemesis_history_path(run_dir), random.Random(11), SYSTEM_CLOCK) as nemesis:
        with Producer(cluster.namesrv_addr) as producer:
            for i in range(100):
                producer.send(Message(TOPIC, f"m{i}".encode() * 50))
        lost = nemesis.start(PowerLoss("group", restart_after_ms=500))
        assert lost.ok, lost.error
        assert lost.targets == (MASTER, SLAVE)
        assert all(cluster.node(n).state is not NodeState.RUNNING for n in (MASTER, SLAVE))
        per_node = json.loads(lost.detail)["nodes"]
        assert sorted(per_node) == [MASTER, SLAVE]
        for node in (MASTER, SLAVE):
            commitlog = per_node[node]["store"]["commitlog"]
            assert commitlog["flushed_phys_offset"] <= commitlog["written_phys_offset"]
        restarted = nemesis.recover(lost.fault_id)
        assert restarted is not None and restarted.ok, restarted
        assert all(cluster.node(n).state is NodeState.RUNNING for n in (MASTER, SLAVE))
        cluster.wait_until_routable()
        with Producer(cluster.namesrv_addr) as producer:
            after = producer.send(Message(TOPIC, b"after the rack's power loss"))
        with PullConsumer(cluster.namesrv_addr, "nemesis-check") as consumer:
            pulled = consumer.pull(after.message_queue, after.queue_offset, 1)
            assert pulled.messages and pulled.messages[0].msg_id == after.msg_id
    [start, end] = [line for line in read_nemesis(nemesis_history_path(run_dir)) if line["op"] == "power-loss"]
    assert start["targets"] == end["targets"] == [MASTER, SLAVE]
