"""`mqlab admin` against a real cluster (name server, broker-a master and slave): a topic created,
listed, routed and filled, a push consumer's progress, connections and group, the brokers'
runtime, the topic deleted, and the answers to names that do not exist."""

from __future__ import annotations

import json
import time

import pytest
from rich.console import Console
from typer.testing import CliRunner

from harness import cli, terminal
from nodes.client import Producer, PushConsumer
from nodes.common.types import ConsumeConcurrentlyStatus, Message, SendStatus

pytestmark = pytest.mark.cluster

TOPIC = "AdminTopic"
GROUP = "admin-cli-group"
QUEUES = 4
MESSAGES = 20
SETTLE_BUDGET_S = 20.0  # the slave's copy and the consumer's offset persist, at the test time scale


@pytest.fixture
def runner(monkeypatch):
    monkeypatch.setattr(terminal, "console", Console(width=250, highlight=False))
    monkeypatch.setattr(terminal, "err_console", Console(width=250, highlight=False, stderr=True))
    return CliRunner()


def _admin(runner: CliRunner, cluster, *args: str, code: int = 0) -> str:
    result = runner.invoke(cli.app, ["admin", *args, "--run-dir", str(cluster.run_dir)])
    assert result.exit_code == code, result.output
    return result.output


def _json(runner: CliRunner, cluster, *args: str, code: int = 0):
    return json.loads(_admin(runner, cluster, *args, "--json", code=code))


def _eventually(what: str, fn, budget_s: float = SETTLE_BUDGET_S):
    deadline = time.monotonic() + budget_s
    while True:
        got = fn()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not within {budget_s} s")
        time.sleep(0.2)


def test_an_operator_creates_fills_watches_and_deletes_a_topic(local_cluster, runner):
    cluster = local_cluster
    out = _admin(runner, cluster, "topic", "create", "--topic", TOPIC, "--queues", str(QUEUES))
    assert "broker-a/0" in out and "SUCCESS" in out
    listed = _json(runner, cluster, "topic", "list")
    assert TOPIC in listed["topics"] and listed["time_scale"] == pytest.approx(cluster.spec.time_scale)
    route = _json(runner, cluster, "topic", "route", "--topic", TOPIC)
    assert [(q["broker_name"], q["read_queue_nums"], q["write_queue_nums"]) for q in route["queue_datas"]] == \
        [("broker-a", QUEUES, QUEUES)]
    assert set(route["queue_datas"][0]["broker_addrs"]) == {"0", "1"}

    with Producer(cluster.namesrv_addr) as producer:
        for i in range(MESSAGES):
            assert producer.send(Message(TOPIC, f"m{i}".encode())).status is SendStatus.SEND_OK

    def stats_on_both():
        # until the slave's metadata sync brings it the topic, the slave answers TOPIC_NOT_EXIST (exit 1)
        result = runner.invoke(cli.app, ["admin", "topic", "status", "--topic", TOPIC, "--run-dir",
                                         str(cluster.run_dir), "--json"])
        if result.exit_code != 0:
            return None
        answers = json.loads(result.output)
        totals = {a["broker_id"]: sum(r["max_offset"] for r in a["rows"]) for a in answers}
        return answers if totals == {0: MESSAGES, 1: MESSAGES} else None

    answers = _eventually("the slave's copy of every message", stats_on_both)
    assert all(len(a["rows"]) == QUEUES and a["code"] == "SUCCESS" for a in answers)
    assert all(r["last_store_timestamp_ms"] > 0 for a in answers for r in a["rows"] if r["max_offset"] > 0)
    table = _admin(runner, cluster, "topic", "status", "--topic", TOPIC)
    assert "broker-a/1" in table and "last store time" in table

    consumed: list[str] = []
    consumer = PushConsumer(cluster.namesrv_addr, GROUP, timing=cluster.timing)
    consumer.subscribe(TOPIC, "*")
    consumer.register_listener(lambda msgs, ctx: consumed.extend(m.msg_id for m in msgs)
                               or ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    consumer.start()
    try:
        _eventually("every message consumed", lambda: len(set(consumed)) >= MESSAGES)

        def caught_up():
            rows = [r for a in _json(runner, cluster, "consumer", "progress", "--group", GROUP, "--topic", TOPIC)
                    if a["broker_id"] == 0 for r in a["rows"]]
            return rows if len(rows) == QUEUES and all(r["lag"] == 0 for r in rows) else None

        rows = _eventually("the group's offsets at the end of every queue", caught_up)
        assert sum(r["broker_offset"] for r in rows) == MESSAGES
        assert {r["last_puller_client_id"] for r in rows} == {consumer.client_id}
        progress = _admin(runner, cluster, "consumer", "progress", "--group", GROUP)
        assert f"progress of {GROUP}: lag 0" in progress and consumer.client_id in progress

        connections = _admin(runner, cluster, "consumer", "connections", "--group", GROUP)
        assert consumer.client_id in connections and "mqlab (gRPC)" in connections
        assert f"{TOPIC} (*)" in connections
        groups = [r for a in _json(runner, cluster, "group", "list") for r in a["rows"] if r["group"] == GROUP]
        assert groups and max(r["online_clients"] for r in groups) == 1 and TOPIC in groups[0]["topics"]
    finally:
        consumer.shutdown()

    brokers = {a["broker_id"]: a for a in _json(runner, cluster, "cluster")}
    assert set(brokers) == {0, 1} and all(a["code"] == "SUCCESS" for a in brokers.values())
    master, slave = brokers[0]["rows"][0], brokers[1]["rows"][0]
    assert master["role"].endswith("MASTER") and slave["role"] == "SLAVE"
    assert master["max_phys_offset"] > 0 and master["slave_lag_bytes"] >= 0
    assert slave["master_addr"] == cluster.node("broker-a-0").addr
    assert 0 < master["disk_used_ratio"] < 1 and master["time_scale"] == pytest.approx(cluster.spec.time_scale)
    assert master["broker_lock_lease_ms"] == cluster.timing.broker_lock_lease_ms < 20_000
    table = _admin(runner, cluster, "cluster")
    assert "time scale" in table
    # at this scale a RocketMQ client's 20 s lock renewal outlives the broker's lease: said, once
    assert table.count(f"lease orderly locks for {cluster.timing.broker_lock_lease_ms / 1000:g} s") == 1

    _admin(runner, cluster, "topic", "delete", "--topic", TOPIC)
    gone = runner.invoke(cli.app, ["admin", "topic", "route", "--topic", TOPIC, "--run-dir", str(cluster.run_dir)])
    assert gone.exit_code == 2 and "no route for topic" in gone.output
    assert TOPIC not in _json(runner, cluster, "topic", "list")["topics"]


def test_names_that_do_not_exist_get_an_answer_that_says_so(local_cluster, runner):
    cluster = local_cluster
    missing = runner.invoke(cli.app, ["admin", "topic", "status", "--topic", "NoSuchTopic",
                                      "--run-dir", str(cluster.run_dir)])
    assert missing.exit_code == 2 and "no route for topic 'NoSuchTopic'" in missing.output
    assert "mqlab admin topic create" in missing.output
    nobody = runner.invoke(cli.app, ["admin", "consumer", "progress", "--group", "no-such-group",
                                     "--run-dir", str(cluster.run_dir)])
    assert nobody.exit_code == 1 and "SUBSCRIPTION_GROUP_NOT_EXIST" in nobody.output
    offline = runner.invoke(cli.app, ["admin", "consumer", "connections", "--group", "no-such-group",
                                      "--run-dir", str(cluster.run_dir)])
    assert offline.exit_code == 2 and "no client of group 'no-such-group'" in offline.output
    bad_type = runner.invoke(cli.app, ["admin", "topic", "create", "--topic", "T1", "--type", "BATCH",
                                       "--run-dir", str(cluster.run_dir)])
    assert bad_type.exit_code == 2 and "types are NORMAL, FIFO, DELAY, TRANSACTION" in bad_type.output
    bad_name = runner.invoke(cli.app, ["admin", "topic", "create", "--topic", "bad topic!",
                                       "--run-dir", str(cluster.run_dir)])
    assert bad_name.exit_code == 1 and "INVALID_ARGUMENT" in bad_name.output
    no_broker = runner.invoke(cli.app, ["admin", "topic", "create", "--topic", "T2", "--broker", "broker-z",
                                        "--run-dir", str(cluster.run_dir)])
    assert no_broker.exit_code == 2 and "no live master of broker 'broker-z'" in no_broker.output
    orderly = _admin(runner, cluster, "group", "update", "--group", "cli-fifo", "--orderly", "--retry-max-times", "3")
    assert "group cli-fifo" in orderly and "broker-a/0" in orderly and "yes" in orderly and " 3 " in orderly
    bad_group = runner.invoke(cli.app, ["admin", "group", "update", "--group", "bad group!", "--orderly",
                                        "--run-dir", str(cluster.run_dir)])
    assert bad_group.exit_code == 1 and "INVALID_ARGUMENT" in bad_group.output
