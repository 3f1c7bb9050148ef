"""`mqlab admin reset-offset` with a client we did not write: Apache's C++ push consumer gets
RESET_CONSUMER_CLIENT_OFFSET (in RocketMQ's ResetOffsetBodyForC, which its decoder reads) on its
connection and consumes again from the reset offsets without restarting."""

from __future__ import annotations

import json
import time

import pytest
from rich.console import Console
from typer.testing import CliRunner

from harness import cli, terminal
from nodes.client import Message, Producer

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

MESSAGES = 12
SPLIT = 7  # the reset time lies between message SPLIT - 1 and message SPLIT
READ_BUDGET_S = 30.0
RESET_BUDGET_S = 60.0  # the C++ client drops its queues, waits for running listener calls, then pulls again
QUIET_S = 2.0


@pytest.fixture
def runner(monkeypatch):
    monkeypatch.setattr(terminal, "console", Console(width=250, highlight=False))
    monkeypatch.setattr(terminal, "err_console", Console(width=250, highlight=False, stderr=True))
    return CliRunner()


def _admin_json(runner: CliRunner, cluster, *args: str):
    result = runner.invoke(cli.app, ["admin", *args, "--run-dir", str(cluster.run_dir), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_a_cpp_push_consumer_consumes_again_from_the_reset_offsets(shared_cluster, clients, runner):
    topic, group = "InteropReset", "CG_reset_cpp"
    _admin_json(runner, shared_cluster, "topic", "create", "--topic", topic, "--queues", "2")
    bodies = [f"reset-{i}" for i in range(MESSAGES)]
    with Producer(shared_cluster.namesrv_addr, timing=shared_cluster.timing) as producer:
        for i, body in enumerate(bodies):
            if i == SPLIT:
                time.sleep(0.2)
                reset_ms = int(time.time() * 1000)
                time.sleep(0.2)
            producer.send(Message(topic, body.encode()))
    stop = clients.stop_file("stop-reset")
    consumer = clients.cpp("push", shared_cluster.namesrv_remoting_addr, group=group, topic=topic,
                           stop_file=str(stop), max_s=150)
    consumer.wait_received(bodies, READ_BUDGET_S)
    first = len(consumer.received(acked_only=True))

    answers = _admin_json(runner, shared_cluster, "reset-offset", "--group", group, "--topic", topic,
                          "--timestamp-ms", str(reset_ms))
    assert [a["code"] for a in answers] == ["SUCCESS"] and answers[0]["clients_told"], answers
    assert sum(r["new_offset"] for r in answers[0]["rows"]) == SPLIT
    consumer.wait_for(lambda p: len(p.received(acked_only=True)) >= first + MESSAGES - SPLIT, RESET_BUDGET_S,
                      "the messages after the reset time again")
    time.sleep(QUIET_S)
    again = [e["body"] for e in consumer.received(acked_only=True)[first:]]
    assert sorted(again) == sorted(bodies[SPLIT:]), consumer.story()
    stop.touch()
    consumer.finish(60)
