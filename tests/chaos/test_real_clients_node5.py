"""`--client node5`: Apache's RocketMQ 5 Node.js client (a POP PushConsumer) as a chaos run's consumers."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from chaos.real_clients import CLIENTS, RealClientError, wire
from chaos.real_clients import wiring as real_wiring
from chaos.runner import RunOptions, plan
from chaos.suites import GROUP, QUEUES, SUITES, TOPIC
from harness import LocalCluster
from harness.spec import ClusterSpec
from nodes.common import constants as c
from nodes.consumer.journal import read_journal
from tests.support import journals
from tests.support.real_client_runs import start_with_workload

NODE5 = CLIENTS["node5"]
FIRST_DELIVERY_BUDGET_S = 90.0  # startup retries until the topic routes, then a 5 s assignment scan
PARTITION_QUIET_S = 5.0
READY_BUDGET_S = 20.0
STOP_BUDGET_S = 10.0  # the harness's stop grace (NODE_STOP_GRACE_MS)


def test_a_node5_run_is_planned_with_its_own_timers():
    _, bounds = plan(RunOptions(SUITES["failover"], seed=1, time_scale=1.0, client="node5"))
    assert (bounds.H, bounds.R_b, bounds.N_r, bounds.W_p) == (10_000, 5_000, 30_000, 1_000)


def test_node5_install_check_names_the_bootstrap(tmp_path, monkeypatch):
    assert NODE5.check_installed().endswith("node")  # installed here by the bootstrap
    monkeypatch.setattr(real_wiring, "NODE5_PACKAGE", tmp_path / "package.json")
    with pytest.raises(RealClientError, match=r"rocketmq-client-nodejs is not installed .*bootstrap\.sh"):
        NODE5.check_installed()
    (tmp_path / "package.json").write_text(json.dumps({"version": "0.0.1"}))
    with pytest.raises(RealClientError, match=r"0\.0\.1 is installed, mqlab pins 1\.0\.8: run \./scripts/bootstrap"):
        NODE5.check_installed()
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RealClientError, match="no node on PATH"):
        NODE5.check_installed()


def test_wiring_gives_each_node5_consumer_its_own_broker_links_as_endpoints(tmp_path):
    spec = SUITES["failover"].spec(1.0)
    cluster = LocalCluster(spec, run_dir=tmp_path / "run", links=True, start=False)
    try:  # wiring starts nothing: it sets commands and points links at the rocketmq5 ports
        commands = wire(cluster, NODE5, group=GROUP, topic=TOPIC, orderly=False, consumer_options={})
        assert sorted(commands) == ["consumer-0", "consumer-1"]
        for node, argv in commands.items():
            own = [f"127.0.0.1:{cluster.links.proxy.port_of(node, b)}" for b in ("broker-a-0", "broker-a-1")]
            assert argv[argv.index("--endpoints") + 1] == ";".join(own)  # the master's link first
            assert argv[1].endswith("node5/consumer.js") and Path(argv[0]).name == "node"
            assert argv[argv.index("--threads") + 1] == "4"
        recorded = json.loads((cluster.run_dir / "real-clients.json").read_text())
        assert recorded["client"] == "node5" and recorded["commands"] == commands
    finally:
        cluster.close()


# ---- real processes ----------------------------------------------------------------------------

def _argv(run_dir: Path, endpoints: str, **extra: str) -> list[str]:
    argv = [NODE5.check_installed(), str(NODE5.script), "--endpoints", endpoints, "--group", GROUP, "--topic", TOPIC,
            "--node-id", "consumer-0", "--port", "1", "--run-dir", str(run_dir),
            "--sharding-key-property", c.PROPERTY_WORKLOAD_SHARDING_KEY, "--seq-property", c.PROPERTY_WORKLOAD_SEQ]
    for name, value in extra.items():
        argv += [f"--{name.replace('_', '-')}", value]
    return argv


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_node5_wrapper_is_ready_at_once_and_stops_gracefully_on_sigterm(tmp_path):
    # no broker behind its endpoint: READY comes before the client's start, which retries each second
    proc = subprocess.Popen(_argv(tmp_path, f"127.0.0.1:{_closed_port()}"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("READY "), line
        ready = json.loads(line.removeprefix("READY "))
        assert (ready["node_id"], ready["client"], ready["pid"], ready["port"]) == ("consumer-0", "node5", proc.pid, 1)
        assert ready["client_id"].split("@")[1] == str(proc.pid)  # <host>@<pid>@<index>@<time>
        time.sleep(1.0)
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=STOP_BUDGET_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    events = read_journal(tmp_path / "events.jsonl")
    assert [e["event"] for e in events] == ["consumer-start", "consumer-stop"]
    assert {e["client_id"] for e in events} == {ready["client_id"]} and events[0]["client"] == "node5"
    assert all(e["side"] == "client" and e["node"] == "consumer-0" for e in events)
    assert (tmp_path / "logs" / "rocketmq" / "rocketmq_client_nodejs.log").stat().st_size > 0


def test_the_node5_wrapper_refuses_a_non_loopback_endpoint(tmp_path):
    done = subprocess.run(_argv(tmp_path, "10.0.0.1:8081"), capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "loopback" in done.stderr




@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.timeout(600)
def test_a_node5_consumer_journals_from_the_handle_and_reaches_the_brokers_only_through_its_links(tmp_path):
    spec = ClusterSpec.default(time_scale=1.0).with_consumers(1, group=GROUP, subscriptions={TOPIC: "*"})
    cluster = LocalCluster(spec, run_dir=tmp_path / "run", links=True, start=False)
    producer = None
    try:
        wire(cluster, NODE5, group=GROUP, topic=TOPIC, orderly=False, consumer_options={})
        producer = start_with_workload(cluster, "failover", "node5")
        run_dir = cluster.run_dir
        journals.wait_until("delivery by the Node.js 5.x consumer", FIRST_DELIVERY_BUDGET_S, lambda: len(journals.deliveries(run_dir)) > 0)
        first = journals.deliveries(run_dir)[0]
        assert (first["broker_name"], first["queue_topic"], first["pop_kind"]) == ("broker-a", TOPIC, "n")
        assert first["queue_offset"] >= 0 and first["commitlog_offset"] >= 0 and 0 <= first["queue_id"] < QUEUES
        assert first["delivery_attempt"] == 1 and first["reconsume_times"] == 0 and isinstance(first["seq"], int)
        assert first["store_timestamp_ms"] >= first["born_timestamp_ms"] > 0  # read from the receive answer
        assert len(first["body_sha256"]) == 64 and first["body_bytes"] > 0 and first["result"] == "CONSUME_SUCCESS"
        assert cluster.link_stats()["consumer-0->broker-a-0"]["backward_bytes"] > 0  # receives crossed its link
        cluster.partition(["consumer-0"], ["broker-a-0", "broker-a-1"])
        time.sleep(PARTITION_QUIET_S)
        cut_at = len(journals.deliveries(run_dir))
        time.sleep(PARTITION_QUIET_S)
        assert len(journals.deliveries(run_dir)) == cut_at, "the partitioned Node.js 5.x client went on consuming"
        cluster.heal()
        journals.wait_until("delivery after the heal", FIRST_DELIVERY_BUDGET_S, lambda: len(journals.deliveries(run_dir)) > cut_at)
    finally:
        if producer is not None:
            producer.stop()
        cluster.close()
    events = read_journal(cluster.run_dir / "consumer-0" / "events.jsonl")
    assert [e["event"] for e in events] == ["consumer-start", "consumer-stop"]  # it stopped within the grace
