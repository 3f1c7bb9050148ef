"""`mqlab admin reset-offset` against a real cluster: a push consumer that consumed every message
of a topic is reset to a time between two of them and, in the same process, gets exactly the later
ones again; the master journals the rewind as `offset-commit` events with source `reset`; an
offline group's stored offsets are reset too; a slave and an unknown group refuse."""

from __future__ import annotations

import json
import threading
import time

import pytest
from rich.console import Console
from typer.testing import CliRunner

from harness import cli, terminal
from nodes.client import Producer, PushConsumer
from nodes.common.types import ConsumeConcurrentlyStatus, ConsumeOrderlyStatus, Message, SendStatus

pytestmark = pytest.mark.cluster

TOPIC = "ResetTopic"
GROUP = "reset-group"
QUEUES = 2
MESSAGES = 12
SPLIT = 7  # the reset time lies between message SPLIT - 1 and message SPLIT
GAP_S = 0.3  # between those two sends, so a time between them is unambiguous
BUDGET_S = 20.0
QUIET_S = 1.0  # after the redelivery: nothing else may come


@pytest.fixture
def runner(monkeypatch):
    monkeypatch.setattr(terminal, "console", Console(width=250, highlight=False))
    monkeypatch.setattr(terminal, "err_console", Console(width=250, highlight=False, stderr=True))
    return CliRunner()


def _admin(runner: CliRunner, cluster, *args: str, code: int = 0) -> str:
    result = runner.invoke(cli.app, ["admin", *args, "--run-dir", str(cluster.run_dir)])
    assert result.exit_code == code, result.output
    return result.output


def _wait(what: str, fn, budget_s: float = BUDGET_S):
    deadline = time.monotonic() + budget_s
    while not (got := fn()):
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not within {budget_s} s")
        time.sleep(0.05)
    return got


def _send_with_gap(cluster) -> int:
    """MESSAGES messages, a pause before message SPLIT; returns a time inside that pause."""
    with Producer(cluster.namesrv_addr) as producer:
        for i in range(MESSAGES):
            if i == SPLIT:
                time.sleep(GAP_S / 2)
                reset_ms = int(time.time() * 1000)
                time.sleep(GAP_S / 2)
            assert producer.send(Message(TOPIC, f"m{i}".encode())).status is SendStatus.SEND_OK
    return reset_ms


def test_a_push_consumer_is_reset_to_a_time_and_consumes_from_there_again(local_cluster, runner):
    cluster = local_cluster
    _admin(runner, cluster, "topic", "create", "--topic", TOPIC, "--queues", str(QUEUES))
    reset_ms = _send_with_gap(cluster)
    got: list[str] = []
    lock = threading.Lock()

    def listener(msgs, ctx):
        with lock:
            got.extend(m.body.decode() for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    applied: list[dict] = []
    consumer = PushConsumer(cluster.namesrv_addr, GROUP, timing=cluster.timing,
                            on_event=lambda e: applied.append(e) if e["event"] == "offset-reset" else None)
    consumer.subscribe(TOPIC)
    consumer.register_listener(listener)
    consumer.start()
    try:
        _wait("every message consumed", lambda: len(got) >= MESSAGES)
        assert sorted(got) == sorted(f"m{i}" for i in range(MESSAGES))
        # the consumed offsets reach the broker, so the reset has something to rewind
        _wait("the offsets committed", lambda: _committed(runner, cluster) == MESSAGES)

        answers = json.loads(_admin(runner, cluster, "reset-offset", "--group", GROUP, "--topic", TOPIC,
                                    "--timestamp-ms", str(reset_ms), "--json"))
        assert [(a["broker_name"], a["broker_id"], a["code"]) for a in answers] == [("broker-a", 0, "SUCCESS")]
        assert answers[0]["clients_told"] == [consumer.client_id]
        rows = answers[0]["rows"]
        assert sum(r["old_offset"] for r in rows) == MESSAGES
        assert sum(r["new_offset"] for r in rows) == SPLIT  # per queue the first message after the time

        _wait("the messages after the reset time again", lambda: len(got) >= MESSAGES + MESSAGES - SPLIT)
        time.sleep(QUIET_S)
        with lock:
            again = got[MESSAGES:]
        assert sorted(again) == sorted(f"m{i}" for i in range(SPLIT, MESSAGES)), again
    finally:
        consumer.shutdown()

    resets = [e for e in _events(cluster, "broker-a-0", "offset-commit") if e["source"] == "reset"]
    assert {(e["queue_id"], e["previous_offset"], e["offset"]) for e in resets} == \
        {(r["queue_id"], r["old_offset"], r["new_offset"]) for r in rows}
    # the consumer's own journal line: both queues restarted, each from where it was to the reset offset
    assert [sorted((q[1], q[2], q[3]) for q in e["queues"]) for e in applied] == \
        [sorted((r["queue_id"], r["old_offset"], r["new_offset"]) for r in rows)]

    out = _admin(runner, cluster, "reset-offset", "--group", GROUP, "--topic", TOPIC, "--timestamp-ms", "-1")
    assert "none (offline)" in out  # the consumer is gone: the stored offsets are reset all the same
    assert _committed(runner, cluster) == MESSAGES

    out = _admin(runner, cluster, "reset-offset", "--group", "no-such-group", "--topic", TOPIC,
                 "--timestamp-ms", "0", code=1)
    assert "SUBSCRIPTION_GROUP_NOT_EXIST" in out


def _committed(runner: CliRunner, cluster) -> int:
    result = runner.invoke(cli.app, ["admin", "consumer", "progress", "--group", GROUP, "--topic", TOPIC,
                                     "--run-dir", str(cluster.run_dir), "--json"])
    answers = json.loads(result.output) if result.output.startswith("[") else []
    return sum(max(0, r["consumer_offset"]) for a in answers if a["broker_id"] == 0 for r in a["rows"])


def _events(cluster, node_id: str, kind: str) -> list[dict]:
    path = cluster.run_dir / node_id / "events.jsonl"
    return [event for line in path.read_text().splitlines() if (event := json.loads(line))["event"] == kind]



def test_an_orderly_consumer_is_reset_in_queue_order_and_keeps_its_locks(local_cluster, runner):
    cluster = local_cluster
    topic, group = "ResetOrderly", "reset-orderly-group"
    _admin(runner, cluster, "topic", "create", "--topic", topic, "--queues", str(QUEUES), "--type", "FIFO")
    with Producer(cluster.namesrv_addr) as producer:
        for i in range(MESSAGES):
            if i == SPLIT:
                time.sleep(GAP_S / 2)
                reset_ms = int(time.time() * 1000)
                time.sleep(GAP_S / 2)
            assert producer.send(Message(topic, f"o{i}".encode())).status is SendStatus.SEND_OK
    got: list[tuple[int, int]] = []
    lock = threading.Lock()
    locks: list[dict] = []

    def listener(msgs, ctx):
        with lock:
            got.extend((m.queue_id, m.queue_offset) for m in msgs)
        return ConsumeOrderlyStatus.SUCCESS

    consumer = PushConsumer(cluster.namesrv_addr, group, timing=cluster.timing,
                            on_event=lambda e: locks.append(e) if e["event"] == "lock" else None)
    consumer.subscribe(topic)
    consumer.register_orderly_listener(listener)
    consumer.start()
    try:
        _wait("every message consumed", lambda: len(got) >= MESSAGES)
        answers = json.loads(_admin(runner, cluster, "reset-offset", "--group", group, "--topic", topic,
                                    "--timestamp-ms", str(reset_ms), "--json"))
        with lock:
            seen, locks_before = len(got), len(locks)
            ends = {q: max(off for qq, off in got if qq == q) + 1 for q, _ in got}
        rows = {r["queue_id"]: r for r in answers[0]["rows"]}
        _wait("the messages after the reset time again", lambda: len(got) >= seen + MESSAGES - SPLIT)
        time.sleep(QUIET_S)
        with lock:
            again, after = got[seen:], locks[locks_before:]
    finally:
        consumer.shutdown()
    assert sum(ends.values()) == MESSAGES and sum(r["new_offset"] for r in rows.values()) == SPLIT
    for queue_id, r in rows.items():  # each queue from its reset offset, in queue order, once
        assert [off for q, off in again if q == queue_id] == list(range(r["new_offset"], ends[queue_id]))
    assert {e["action"] for e in after} <= {"renewed", "granted", "requested"}, after  # never released or lost
