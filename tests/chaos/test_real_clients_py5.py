"""`--client py5`: Apache's RocketMQ 5 Python client (a POP PushConsumer) as a chaos run's consumers."""

from __future__ import annotations

import json
import time

import pytest
from rich.console import Console

from chaos.matrix import plan_cells, with_clients
from chaos.real_clients import CLIENTS, RealClientError, client_for_suite, wire
from chaos.runner import EXIT_VALID, ChaosRun, RunOptions, plan
from chaos.suites import GROUP, SUITES, TOPIC, with_gray_faults
from harness import LocalCluster
from harness.spec import ClusterSpec
from tests.support import journals
from tests.support.real_client_runs import start_with_workload

PY5 = CLIENTS["py5"]
POP_CLIENTS = ("py5", "py5-simple", "node5")
FIRST_DELIVERY_BUDGET_S = 90.0  # startup retries until the topic routes, then a 5 s assignment scan
PARTITION_QUIET_S = 5.0
E2E_TIMEOUT_S = 1200  # a real-scale run (about 5 min) plus the checker (1.5 to 4 min here)


@pytest.mark.parametrize(("suite", "topology", "aside"), [
    ("failover", "single", {"read-routing"}),
    ("offset-resync", "single", {"order", "offset-resync"}),
    ("read-routing", "single", {"read-routing"}),
    ("durability", "single", set()),
    ("disk-full", "single", set()),
    ("broker-loss", "2x2", {"rebalance"}),
    ("lock-takeover", "single", {"order", "lock-exclusivity", "takeover", "rebalance"}),
])
@pytest.mark.parametrize("client", POP_CLIENTS)
def test_pop_clients_run_the_suites_with_the_pull_checks_set_aside_and_the_pop_checks_added(
        suite, topology, aside, client):
    assert client_for_suite(client, SUITES[suite], topology) is CLIENTS[client]
    options = RunOptions(SUITES[suite], time_scale=1.0, client=client, topology=topology)
    assert set(options.checks_set_aside) == aside
    assert all("POP" in why for why in options.checks_set_aside.values())
    pop = {"pop-ack", "pop-redelivery"} | ({"pop-fifo"} if SUITES[suite].orderly else set())
    assert set(options.check_names) == set(SUITES[suite].checks) - aside | pop
    assert {"lost", "duplicates", "deaths"} <= set(options.check_names)
    assert RunOptions(SUITES[suite], time_scale=0.05, topology=topology).checks_added == ()  # mqlab's own


@pytest.mark.parametrize("client", POP_CLIENTS)
def test_pop_clients_refuse_what_they_cannot_run_saying_why(client):
    with pytest.raises(RealClientError, match="two ways at once"):
        client_for_suite(f"{client}+mqlab", SUITES["failover"])
    with pytest.raises(RealClientError, match="Clock"):
        client_for_suite(client, with_gray_faults(SUITES["failover"]))


def test_the_matrix_leaves_out_the_suites_pop_clients_cannot_run():
    cells, left_out = with_clients(plan_cells(["lock-takeover", "gray"], [1], [0.05]), list(POP_CLIENTS))
    assert [(c.suite, c.client, c.time_scale) for c in cells] == [("lock-takeover", cl, 1.0) for cl in POP_CLIENTS]
    assert cells[1].name.endswith("-py5-simple")
    assert [line.split(":")[0] for line in left_out] == [f"gray (single) with {cl}" for cl in POP_CLIENTS]


def test_a_py5_run_is_planned_with_its_own_timers():
    _, bounds = plan(RunOptions(SUITES["failover"], seed=1, time_scale=1.0, client="py5"))
    assert (bounds.H, bounds.R_b, bounds.N_r, bounds.W_p) == (10_000, 5_000, 30_000, 1_000)


def test_wiring_gives_each_py5_consumer_its_own_broker_links_as_endpoints(tmp_path):
    spec = SUITES["failover"].spec(1.0)
    cluster = LocalCluster(spec, run_dir=tmp_path / "run", links=True, start=False)
    try:  # wiring starts nothing: it sets commands and points links at the rocketmq5 ports
        commands = wire(cluster, PY5, group=GROUP, topic=TOPIC, orderly=False, consumer_options={"sleep_ms": 4})
        assert sorted(commands) == ["consumer-0", "consumer-1"]
        for node, argv in commands.items():
            own = [f"127.0.0.1:{cluster.links.proxy.port_of(node, b)}" for b in ("broker-a-0", "broker-a-1")]
            assert argv[argv.index("--endpoints") + 1] == ";".join(own)  # the master's link first
            assert argv[1].endswith("py5/consumer.py") and ".venv-py5" in argv[0]
        recorded = json.loads((cluster.run_dir / "real-clients.json").read_text())
        assert recorded["client"] == "py5" and recorded["commands"] == commands
    finally:
        cluster.close()


# ---- real processes ----------------------------------------------------------------------------



@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.timeout(600)
def test_a_py5_consumer_reaches_the_brokers_only_through_its_links(tmp_path):
    spec = ClusterSpec.default(time_scale=1.0).with_consumers(1, group=GROUP, subscriptions={TOPIC: "*"})
    cluster = LocalCluster(spec, run_dir=tmp_path / "run", links=True, start=False)
    producer = None
    try:
        wire(cluster, PY5, group=GROUP, topic=TOPIC, orderly=False, consumer_options={})
        producer = start_with_workload(cluster, "failover", "py5")
        run_dir = cluster.run_dir
        journals.wait_until("delivery by the 5.x consumer", FIRST_DELIVERY_BUDGET_S, lambda: len(journals.deliveries(run_dir)) > 0)
        first = journals.deliveries(run_dir)[0]
        assert (first["broker_name"], first["queue_topic"]) == ("broker-a", TOPIC)
        assert first["queue_offset"] >= 0 and first["delivery_attempt"] == 1 and isinstance(first["seq"], int)
        assert cluster.link_stats()["consumer-0->broker-a-0"]["backward_bytes"] > 0  # receives crossed its link
        cluster.partition(["consumer-0"], ["broker-a-0", "broker-a-1"])
        time.sleep(PARTITION_QUIET_S)
        cut_at = len(journals.deliveries(run_dir))
        time.sleep(PARTITION_QUIET_S)
        assert len(journals.deliveries(run_dir)) == cut_at, "the partitioned 5.x client went on consuming"
        cluster.heal()
        journals.wait_until("delivery after the heal", FIRST_DELIVERY_BUDGET_S, lambda: len(journals.deliveries(run_dir)) > cut_at)
    finally:
        if producer is not None:
            producer.stop()
        cluster.close()


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.timeout(600)
def test_a_py5_consumers_acks_and_heartbeats_are_journalled_by_its_links(tmp_path):
    """HPACK-decoded gRPC of Apache's 5.x client through the endpoint-rewriting links: each AckMessage entry
    with the receipt handle's entry and its own status, each one the master settled (a pop-ack ok)."""
    from harness.request_journal import journal_path

    spec = ClusterSpec.default(time_scale=1.0).with_consumers(1, group=GROUP, subscriptions={TOPIC: "*"})
    cluster = LocalCluster(spec, run_dir=tmp_path / "run", links=True, start=False)
    producer = None
    path = journal_path(cluster.run_dir)

    def answered(kind: str) -> list[dict]:
        lines = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
        return [x for x in lines if x["event"] == "answer" and x["kind"] == kind]

    try:
        wire(cluster, PY5, group=GROUP, topic=TOPIC, orderly=False, consumer_options={})
        producer = start_with_workload(cluster, "failover", "py5")
        journals.wait_until("20 journalled acks", FIRST_DELIVERY_BUDGET_S, lambda: len(answered("ack")) >= 20)
        journals.wait_until("a journalled heartbeat", 30, lambda: answered("heartbeat"))
    finally:
        if producer is not None:
            producer.stop()
        cluster.close()
    acks = answered("ack")
    assert all(x["protocol"] == "grpc" and x["method"].endswith("/AckMessage") and x["client_id"] for x in acks)
    ok = [x for x in acks if x["ok"]]
    assert ok and all(x["status"] == "OK" and x["grpc_status"] == 0 and x["queue_topic"] for x in ok)
    events = [json.loads(x) for x in (cluster.run_dir / "broker-a-0" / "events.jsonl").read_text().splitlines()]
    settled = {(e["queue_topic"], e["queue_id"], e["queue_offset"]) for e in events
               if e["event"] == "pop-ack" and e.get("status") == "ok"}
    assert all((x["queue_topic"], x["queue_id"], x["queue_offset"]) in settled for x in ok if x["dst"] == "broker-a-0")


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.spark
@pytest.mark.timeout(E2E_TIMEOUT_S)
def test_failover_with_the_py5_client_is_judged_valid_with_read_routing_set_aside(tmp_path):
    # seed 1 isolates the master for 60 s: receives cut mid-answer, in-flight hand-outs at the end
    outcome = ChaosRun(RunOptions(SUITES["failover"], seed=1, time_scale=1.0, client="py5",
                                  out_dir=tmp_path / "run"), Console(width=160)).execute()
    assert outcome.exit_code == EXIT_VALID, outcome.error
    assert "isolate broker-a-0" in (outcome.run_dir / "nemesis" / "nemesis.jsonl").read_text()
    verdict = json.loads((outcome.run_dir / "verdict.json").read_text())
    assert set(verdict["checks_set_aside"]) == {"read-routing"} and "read-routing" not in verdict["checks"]
    run = json.loads((outcome.run_dir / "run.json").read_text())
    assert run["client"] == "py5" and run["counts"]["delivered"] > 0
    # what the drain did not see consumed is what the broker still had handed out, renewed, at the end
    lost = verdict["checks"]["lost"]["counts"]
    assert lost["lost"] == 0 and run["counts"]["acked_not_delivered"] == lost["in_flight_at_end"]
    lines = journals.deliveries(outcome.run_dir) + journals.deliveries(outcome.run_dir, "consumer-1")
    assert lines and all(d["broker_name"] == "broker-a" and d["queue_offset"] is not None for d in lines)
