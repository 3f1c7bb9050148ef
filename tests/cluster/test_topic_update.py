"""`mqlab admin topic create --type` and `topic update` against a real cluster (broker-a master and
slave): the type is stored, shown by `topic list` and `topic status` on master and slave (the
slave's metadata sync carries it) and survives a master restart (its LMDB copy); an update changes
only what it names; an unknown topic is refused with a pointer to create; and a slave refuses
topic creation and updates, over gRPC and over remoting, naming its master."""

from __future__ import annotations

import json
import time

import grpc
import pytest
from rich.console import Console
from support import namesrv_remoting
from typer.testing import CliRunner

from harness import cli, terminal
from nodes.remoting.command import RequestCode
from proto import broker_pb2, broker_pb2_grpc, common_pb2

pytestmark = pytest.mark.cluster

TOPIC = "TypedTopic"
BUDGET_S = 20.0
NO_PERMISSION = 16  # RocketMQ's ResponseCode over remoting


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


def _types_on_both(runner: CliRunner, cluster) -> dict[int, str] | None:
    """Each broker's type of TOPIC once both answer (the slave's copy comes with its next sync)."""
    result = runner.invoke(cli.app, ["admin", "topic", "status", "--topic", TOPIC, "--run-dir", str(cluster.run_dir),
                                     "--json"])
    if result.exit_code != 0:
        return None
    return {a["broker_id"]: a["message_type"] for a in json.loads(result.output)}


def _eventually(what: str, fn):
    deadline = time.monotonic() + BUDGET_S
    while not (got := fn()):
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not within {BUDGET_S} s")
        time.sleep(0.2)
    return got


def test_a_typed_topic_is_created_updated_and_refused_by_the_slave(local_cluster, runner):
    cluster = local_cluster
    created = _json(runner, cluster, "topic", "create", "--topic", TOPIC, "--queues", "4", "--type", "delay")
    assert [a["code"] for a in created] == ["SUCCESS"]
    assert _json(runner, cluster, "topic", "list")["types"][TOPIC] == "DELAY"
    assert _eventually("the slave's copy of the type", lambda: _types_on_both(runner, cluster) == {0: "DELAY",
                                                                                                   1: "DELAY"})
    assert "status of TypedTopic (DELAY)" in _admin(runner, cluster, "topic", "status", "--topic", TOPIC)

    out = _admin(runner, cluster, "topic", "update", "--topic", TOPIC, "--write-queues", "2", "--perm", "r")
    assert "SUCCESS" in out and "write queues 2" in out
    route = _json(runner, cluster, "topic", "route", "--topic", TOPIC)
    assert [(q["read_queue_nums"], q["write_queue_nums"], q["perm"]) for q in route["queue_datas"]] == [(4, 2, 4)]
    assert _json(runner, cluster, "topic", "list")["types"][TOPIC] == "DELAY"  # an update keeps the type

    unknown = _admin(runner, cluster, "topic", "update", "--topic", "NoSuchTopic", "--perm", "RW", code=2)
    assert "topic create" in unknown
    assert "nothing to update" in _admin(runner, cluster, "topic", "update", "--topic", TOPIC, code=2)

    master_addr, slave_addr = (route["queue_datas"][0]["broker_addrs"][k] for k in ("0", "1"))
    config = common_pb2.TopicConfig(topic=TOPIC, read_queue_nums=8, write_queue_nums=8, perm=6)
    with grpc.insecure_channel(slave_addr) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        for update in (False, True):
            answer = stub.CreateTopic(broker_pb2.CreateTopicRequest(config=config, update=update), timeout=5)
            assert answer.code == common_pb2.NO_PERMISSION and master_addr in answer.remark, answer
    sock = namesrv_remoting.connect(route["queue_datas"][0]["remoting_addrs"]["1"])
    try:
        refused = namesrv_remoting.request(sock, RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": TOPIC, "readQueueNums": 8, "writeQueueNums": 8, "perm": 6, "topicSysFlag": 0, "order": "false"})
    finally:
        sock.close()
    assert refused.code == NO_PERMISSION and "slave" in (refused.remark or "") and master_addr in refused.remark
    route = _json(runner, cluster, "topic", "route", "--topic", TOPIC)
    assert [(q["read_queue_nums"], q["write_queue_nums"]) for q in route["queue_datas"]] == [(4, 2)]

    cluster.restart("broker-a-0")  # the type is in the master's stored topic table
    assert _eventually("the restarted master's type", lambda: (_types_on_both(runner, cluster) or {}).get(0)
                       == "DELAY")
