"""`mqlab admin message` against a real cluster (name server, broker-a master and slave): keyed
messages found by key, by both ids and by queue offset, with a group's progress past them; on the
slave while the master is killed; and on the master again after its restart from a SIGKILL."""

from __future__ import annotations

import json
import time

import pytest
from rich.console import Console
from typer.testing import CliRunner

from harness import cli, terminal
from nodes.client import Message, Producer, PullConsumer
from nodes.common.types import MessageQueue, SendStatus

pytestmark = pytest.mark.cluster

TOPIC = "LookupTopic"
GROUP = "lookup-group"
MESSAGES = 6
SETTLE_BUDGET_S = 20.0


@pytest.fixture
def runner(monkeypatch):
    monkeypatch.setattr(terminal, "console", Console(width=250, highlight=False))
    monkeypatch.setattr(terminal, "err_console", Console(width=250, highlight=False, stderr=True))
    return CliRunner()


def _lookup(runner: CliRunner, cluster, *args: str, code: int = 0) -> dict:
    result = runner.invoke(cli.app, ["admin", "message", "--topic", TOPIC, *args, "--json", "--run-dir",
                                     str(cluster.run_dir)])
    assert result.exit_code == code, result.output
    return json.loads(result.stdout) if code == 0 else {}


def _eventually(what: str, fn, budget_s: float = SETTLE_BUDGET_S):
    deadline = time.monotonic() + budget_s
    while True:
        got = fn()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not within {budget_s} s")
        time.sleep(0.2)


def _send(cluster) -> list:
    with Producer(cluster.namesrv_addr) as producer:
        sent = [producer.send(Message(TOPIC, f"payload-{i}".encode(), tags=f"tag{i % 2}",
                                      keys=f"order-{i} customer-{i % 3}", properties={"region": f"r{i}"}))
                for i in range(MESSAGES)]
    assert all(r.status is SendStatus.SEND_OK for r in sent)
    return sent


def _assert_found_everywhere(runner, cluster, sent, broker_id: int) -> None:
    """The first and last message by key, by offset msg id, by client msg id and by queue offset,
    from `broker_id` (each query is one CLI run: two messages keep the test short)."""
    for i, result in ((0, sent[0]), (len(sent) - 1, sent[-1])):
        mq = result.message_queue
        queries = (("--key", f"order-{i}"), ("--id", result.offset_msg_id), ("--id", result.msg_id),
                   ("--queue", str(mq.queue_id), "--offset", str(result.queue_offset)))
        for query in queries:
            [found] = _lookup(runner, cluster, *query)["messages"]
            assert found["broker_id"] == broker_id, query
            assert (found["queue_id"], found["queue_offset"]) == (mq.queue_id, result.queue_offset), query
            assert (found["offset_msg_id"], found["msg_id"]) == (result.offset_msg_id, result.msg_id), query
            assert found["body_preview"] == f"payload-{i}" and found["body_size"] == len(f"payload-{i}")
            assert found["keys"] == f"order-{i} customer-{i % 3}" and found["tags"] == f"tag{i % 2}"
            assert found["user_properties"] == {"region": f"r{i}"}


def test_messages_are_found_by_key_both_ids_and_queue_offset_with_group_progress(local_cluster, runner):
    cluster = local_cluster
    sent = _send(cluster)
    _assert_found_everywhere(runner, cluster, sent, broker_id=0)

    shared = _lookup(runner, cluster, "--key", "customer-0")["messages"]
    assert [m["msg_id"] for m in shared] == [sent[3].msg_id, sent[0].msg_id]  # newest first

    # a group that consumed the first message of its queue and nothing after it
    first: MessageQueue = sent[0].message_queue
    with PullConsumer(cluster.namesrv_addr, GROUP) as consumer:
        consumer.update_offset(first, sent[0].queue_offset + 1)
    later = [r for r in sent[1:] if r.message_queue == first]
    [found] = _lookup(runner, cluster, "--id", sent[0].msg_id)["messages"]
    assert {"group": GROUP, "consumer_offset": sent[0].queue_offset + 1, "consumed": True} in found["progress"]
    if later:
        [after] = _lookup(runner, cluster, "--id", later[0].msg_id)["messages"]
        assert {"group": GROUP, "consumer_offset": sent[0].queue_offset + 1, "consumed": False} in after["progress"]

    result = runner.invoke(cli.app, ["admin", "message", "--topic", TOPIC, "--key", "no-such-key", "--run-dir",
                                     str(cluster.run_dir)])
    assert result.exit_code == 1 and "admin topic status" in result.output


@pytest.mark.slow
def test_the_slave_answers_while_the_master_is_killed_and_the_master_after_its_restart(local_cluster, runner):
    cluster = local_cluster
    sent = _send(cluster)

    # the slave answers while the master is gone: wait for its copy (and its copy of the topic)
    def slave_has_all():
        status = runner.invoke(cli.app, ["admin", "topic", "status", "--topic", TOPIC, "--json", "--run-dir",
                                         str(cluster.run_dir)])
        if status.exit_code != 0:
            return False
        totals = {a["broker_id"]: sum(r["max_offset"] for r in a["rows"]) for a in json.loads(status.stdout)}
        return totals == {0: MESSAGES, 1: MESSAGES}

    _eventually("the slave's copy of every message", slave_has_all)
    cluster.kill("broker-a-0")
    _eventually("the master's registration gone", lambda: _lookup(runner, cluster, "--key", "order-0")
                ["messages"][0]["broker_id"] == 1)
    _assert_found_everywhere(runner, cluster, sent, broker_id=1)

    cluster.restart("broker-a-0")
    cluster.wait_until_routable(TOPIC)
    _eventually("the master answering again", lambda: _lookup(runner, cluster, "--key", "order-0")
                ["messages"][0]["broker_id"] == 0)
    _assert_found_everywhere(runner, cluster, sent, broker_id=0)
    recovery = cluster.node("broker-a-0").describe()["details"]["recovery"]
    assert recovery["clean_shutdown"] is False
    with Producer(cluster.namesrv_addr) as producer:  # the index goes on after the restart
        after_restart = producer.send(Message(TOPIC, b"late", keys="order-late"))
    [late] = _lookup(runner, cluster, "--key", "order-late")["messages"]
    assert late["msg_id"] == after_restart.msg_id and late["broker_id"] == 0
