"""`mqlab admin` with clients we did not write: a topic made by `mqlab admin topic create` takes
ali-ons's sends (ali-ons cannot create one itself), and a C++ push consumer shows up in the
consumer views as what it is (a CPP client over remoting) with the queues it pulls."""

from __future__ import annotations

import json
import time

import pytest
from rich.console import Console
from typer.testing import CliRunner

from harness import cli, terminal
from interop.mqlab_side import read_until

pytestmark = pytest.mark.cluster

SEND_BUDGET_S = 60.0  # every send of a plan, each bounded by the client's 3-5 s send timeout
READ_BUDGET_S = 20.0
# the C++ client persists offsets every 5 s and heartbeats every 30 s (at start at once)
SETTLE_BUDGET_S = 30.0


@pytest.fixture
def runner(monkeypatch):
    monkeypatch.setattr(terminal, "console", Console(width=250, highlight=False))
    monkeypatch.setattr(terminal, "err_console", Console(width=250, highlight=False, stderr=True))
    return CliRunner()


def _admin_json(runner: CliRunner, cluster, *args: str, code: int = 0):
    result = runner.invoke(cli.app, ["admin", *args, "--run-dir", str(cluster.run_dir), "--json"])
    assert result.exit_code == code, result.output
    return json.loads(result.output)


def test_ali_ons_sends_to_a_topic_made_by_mqlab_admin(shared_cluster, clients, runner):
    topic = "InteropAdminMade"
    created = _admin_json(runner, shared_cluster, "topic", "create", "--topic", topic, "--queues", "4")
    assert [a["code"] for a in created] == ["SUCCESS"]
    plan = [{"topic": topic, "body": f"admin-{i}"} for i in range(5)]
    producer = clients.ons("produce", shared_cluster.namesrv_remoting_addr, group="PG_ons_admin", plan=json.dumps(plan))
    producer.finish(SEND_BUDGET_S)
    assert not producer.of("error"), producer.story()
    assert sorted(e["body"] for e in producer.of("sent")) == sorted(p["body"] for p in plan)
    got = read_until(shared_cluster, topic, "mqlab-reads-admin", len(plan), READ_BUDGET_S)
    assert sorted(m.body.decode() for m in got) == sorted(p["body"] for p in plan)


@pytest.mark.slow
def test_a_cpp_consumer_shows_in_connections_and_progress(shared_cluster, clients, runner):
    topic, group = "InteropAdminCpp", "CG_admin_cpp"
    _admin_json(runner, shared_cluster, "topic", "create", "--topic", topic, "--queues", "2")
    plan = [{"topic": topic, "body": f"cpp-admin-{i}"} for i in range(6)]
    producer = clients.ons("produce", shared_cluster.namesrv_remoting_addr, group="PG_ons_admin2", plan=json.dumps(plan))
    producer.finish(SEND_BUDGET_S)
    stop = clients.stop_file("stop-admin")
    consumer = clients.cpp("push", shared_cluster.namesrv_remoting_addr, group=group, topic=topic,
                           stop_file=str(stop), max_s=120)
    consumer.wait_received([p["body"] for p in plan], READ_BUDGET_S)

    connections = [a for a in _admin_json(runner, shared_cluster, "consumer", "connections", "--group", group)
                   if a["code"] == "SUCCESS"]
    table = runner.invoke(cli.app, ["admin", "consumer", "connections", "--group", group,
                                    "--run-dir", str(shared_cluster.run_dir)])
    assert table.exit_code == 0 and "CPP" in table.output
    assert "warning" not in table.output, "the interop cluster keeps the broker timers a real client needs"
    rows = [r for a in connections for r in a["rows"]]
    assert rows and all((r["protocol"], r["language"]) == ("remoting", "CPP") for r in rows), rows
    client_ids = {r["client_id"] for r in rows}
    assert any(s["topic"] == topic for a in connections for s in a["subscriptions"])

    deadline = time.monotonic() + SETTLE_BUDGET_S
    while True:
        progress = [r for a in _admin_json(runner, shared_cluster, "consumer", "progress", "--group", group,
                                           "--topic", topic) if a["broker_id"] == 0 for r in a["rows"]]
        if len(progress) == 2 and all(r["lag"] == 0 for r in progress):
            break
        assert time.monotonic() < deadline, f"the C++ consumer's offsets did not reach the queue ends: {progress}"
        time.sleep(0.5)
    assert {r["last_puller_client_id"] for r in progress} <= client_ids and all(
        r["last_puller_client_id"] for r in progress)
    stop.touch()
    consumer.finish(60)
