"""Apache's RocketMQ 5 Python client (5.1.2, its own venv and process) consuming from a real
cluster through POP: SimpleConsumer receive, ack, change-invisible, redelivery, long polling and
groups; PushConsumers concurrent and FIFO (a group made FIFO with `mqlab admin group update`);
the DLQ; 4.x and 5.x consumers of one topic.

The cluster runs at the interop time scale (0.05), so RocketMQ's 10 s invisible floor is 0.5 s
and a receive's long poll is clamped to 0.25 … 1 s: the client's whole-second durations (1–3 s)
are accepted and everything comes back within seconds."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from typer.testing import CliRunner

from harness import LocalCluster, cli
from harness.spec import NodeSpec
from interop.mqlab_side import TIME_SCALE, interop_spec, read_until, start_cluster
from interop.rmq5_procs import Py5Producer
from interop.test_rmq5_clients import CLIENT_ID, make_topic, rmq5_state
from nodes.client import ConsumeConcurrentlyStatus, PushConsumer
from nodes.client import ConsumeFromWhere as Where
from proto import rmq5_definition_pb2 as d
from proto import rmq5_service_pb2 as s
from proto import rmq5_service_pb2_grpc

# one worker for the module under `--dist loadgroup`: its tests share one cluster and one producer
pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("rmq5-consumers")]

# how late after its invisible time an unacked message may come back: the revive pass (50 ms at
# this scale), a held receive's wake-up, and a loaded machine's scheduling
REVIVE_SLACK_S = 3.0


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The module's cluster: a name server and one master (POP state lives on masters only; a
    slave would only cost this module's start-up time)."""
    spec = dataclasses.replace(interop_spec(), nodes=(NodeSpec("namesrv-0", "namesrv"),
                                                      NodeSpec("broker-a-0", "broker", broker_name="broker-a", broker_id=0)))
    cluster = start_cluster(spec, tmp_path_factory.mktemp("interop") / "run")
    try:
        yield cluster
        assert not cluster.unexpected_exits, f"nodes died unexpectedly: {cluster.unexpected_exits}"
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def producer(shared_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Py5Producer]:
    client = Py5Producer(tmp_path_factory.mktemp("py5"), "py5-sender")
    try:
        client.start(shared_cluster.rocketmq5_endpoints, [])
        yield client
        client.shutdown()
    finally:
        client.close()


class Consumers:
    """5.x consumer processes of one test, closed at its end."""

    def __init__(self, cluster: LocalCluster, workdir: Path) -> None:
        self._cluster = cluster
        self._workdir = workdir
        self._procs: list[Py5Producer] = []

    def simple(self, group: str, topic: str, await_s: int = 1) -> Py5Producer:
        proc = self._new(f"simple-{group}-{len(self._procs)}")
        proc.call(op="consumer_start", endpoints=self._cluster.rocketmq5_endpoints, kind="simple", group=group,
                  topic=topic, await_s=await_s)
        return proc

    def push(self, group: str, topic: str, fail_once: tuple[str, ...] = (),
             fail_always: tuple[str, ...] = (), slow: dict[str, float] | None = None) -> Py5Producer:
        proc = self._new(f"push-{group}-{len(self._procs)}")
        started = proc.call(op="consumer_start", endpoints=self._cluster.rocketmq5_endpoints, kind="push",
                            group=group, topic=topic, fail_once=list(fail_once), fail_always=list(fail_always),
                            slow=slow or {})
        assert started["seconds"] < 10, started  # a push consumer's start waits for its settings
        return proc

    def _new(self, name: str) -> Py5Producer:
        proc = Py5Producer(self._workdir, name)
        self._procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self._procs:
            proc.close()


@pytest.fixture
def consumers(shared_cluster: LocalCluster, tmp_path: Path) -> Iterator[Consumers]:
    procs = Consumers(shared_cluster, tmp_path)
    try:
        yield procs
    finally:
        procs.close()


def send_all(producer: Py5Producer, topic: str, bodies: list[str], **fields: Any) -> dict[str, dict[str, Any]]:
    sent = {}
    for body in bodies:
        answer = producer.send(topic, body, **fields)
        assert answer["event"] == "sent", answer
        sent[body] = answer
    return sent


def receive(consumer: Py5Producer, invisible_s: int, max_n: int = 32) -> list[dict[str, Any]]:
    answer = consumer.call(op="receive", max=max_n, invisible_s=invisible_s)
    assert answer["event"] == "received", answer
    return answer["messages"]


def receive_until(consumer: Py5Producer, invisible_s: int, done: Callable[[list[dict[str, Any]]], bool],
                  budget_s: float, what: str) -> list[dict[str, Any]]:
    """Receive (acking nothing) until `done(everything received so far)`."""
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + budget_s
    while not done(got):
        assert time.monotonic() < deadline, f"{what} not within {budget_s:.0f} s; got {got}"
        got += receive(consumer, invisible_s)
    return got


def consumed(consumer: Py5Producer) -> list[dict[str, Any]]:
    return consumer.call(op="consumed")["messages"]


def wait_for(predicate: Callable[[], Any], what: str, budget_s: float = 30.0) -> Any:
    deadline = time.monotonic() + budget_s
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"{what} not within {budget_s:.0f} s"
        time.sleep(0.1)
    return value


def test_simple_consumer_receive_ack_redelivery_and_change_invisible(shared_cluster: LocalCluster,
                                                                     producer: Py5Producer,
                                                                     consumers: Consumers) -> None:
    make_topic(shared_cluster, "R5Simple")
    bodies = ["acked", "left", "changed", "changed-then-acked"]
    sent = send_all(producer, "R5Simple", bodies, tag="TagS", keys=["k1"], properties={"color": "red"})
    consumer = consumers.simple("r5-simple", "R5Simple")
    first = receive_until(consumer, 2, lambda got: len(got) >= 4, 15, "the four messages")
    by_body = {m["body"]: m for m in first}
    assert sorted(by_body) == sorted(bodies) and len(first) == 4  # none twice while invisible
    for body, m in by_body.items():
        assert m["message_id"] == sent[body]["message_id"] and m["delivery_attempt"] == 1
        assert m["tag"] == "TagS" and m["keys"] == ["k1"] and m["properties"] == {"color": "red"}
        assert m["receipt_handle"]
    assert consumer.call(op="ack", ref=by_body["acked"]["ref"])["event"] == "acked"
    # acking twice is harmless (RocketMQ's acks are idempotent)
    assert consumer.call(op="ack", ref=by_body["acked"]["ref"])["event"] == "acked"
    changed = consumer.call(op="change_invisible", ref=by_body["changed"]["ref"], invisible_s=3)
    assert changed["event"] == "changed" and changed["receipt_handle"] != by_body["changed"]["receipt_handle"]
    renewed = consumer.call(op="change_invisible", ref=by_body["changed-then-acked"]["ref"], invisible_s=3)
    assert renewed["event"] == "changed"
    # the message object holds the new handle now: an ack with it works
    assert consumer.call(op="ack", ref=by_body["changed-then-acked"]["ref"])["event"] == "acked"

    again = receive_until(consumer, 10, lambda got: {"left", "changed"} <= {m["body"] for m in got}, 20,
                          "the unacked and the changed message back")
    back = {m["body"]: m for m in again}
    assert set(back) == {"left", "changed"}, [m["body"] for m in again]  # acked ones never come back
    left_due = by_body["left"]["at"] + 2
    assert left_due - 0.3 <= back["left"]["at"] <= left_due + REVIVE_SLACK_S, (back["left"]["at"] - left_due)
    changed_due = changed["at"] + 3
    assert changed_due - 0.3 <= back["changed"]["at"] <= changed_due + REVIVE_SLACK_S, (
        back["changed"]["at"] - changed_due)
    for body in ("left", "changed"):
        assert back[body]["delivery_attempt"] == 2 and back[body]["message_id"] == sent[body]["message_id"]
        assert back[body]["receipt_handle"] != by_body[body]["receipt_handle"]
    stale = consumer.call(op="ack", ref=by_body["left"]["ref"])  # the first delivery's handle
    assert stale["event"] == "ack-failed" and stale["error_type"] == "BadRequestException", stale
    assert "INVALID_RECEIPT_HANDLE" in stale["error"] or "40013" in stale["error"], stale
    for body in ("left", "changed"):
        assert consumer.call(op="ack", ref=back[body]["ref"])["event"] == "acked"
    assert receive(consumer, 2) == []  # everything settled


def test_long_poll_returns_empty_after_its_await_and_wakes_on_a_send(shared_cluster: LocalCluster,
                                                                     producer: Py5Producer,
                                                                     consumers: Consumers) -> None:
    make_topic(shared_cluster, "R5Poll")
    consumer = consumers.simple("r5-poll", "R5Poll", await_s=1)
    empty = consumer.call(op="receive", max=4, invisible_s=2)
    assert empty["event"] == "received" and empty["messages"] == [], empty
    assert empty["seconds"] >= 0.9, empty  # held for its await (1 s), not answered at once
    consumer.submit(op="receive", max=4, invisible_s=2)
    time.sleep(0.2)  # the receive is held at the broker
    sent = producer.send("R5Poll", "wake-up")
    got = consumer.answer({"op": "receive"})
    assert got["event"] == "received" and [m["body"] for m in got["messages"]] == ["wake-up"], got
    # woken by the arrival: a poll that only looked again at its end would answer ~0.8 s later
    assert got["messages"][0]["at"] - sent["sent_at"] < 0.5, got["messages"][0]["at"] - sent["sent_at"]


def test_push_consumers_in_two_processes_consume_everything_and_a_failure_comes_back(
        shared_cluster: LocalCluster, producer: Py5Producer, consumers: Consumers) -> None:
    make_topic(shared_cluster, "R5Push")
    bodies = [f"push-{i}" for i in range(20)]
    # push-13's listener outlasts the auto_renew invisible time (60 s scaled: 3 s): renewed, not redelivered
    slow = {"push-13": 60 * TIME_SCALE + 1.5}
    one = consumers.push("r5-push", "R5Push", fail_once=("push-7",), slow=slow)
    two = consumers.push("r5-push", "R5Push", fail_once=("push-7",), slow=slow)
    # each asks its assignment 1 s after its start, then holds a receive at the broker
    receives = rmq5_state(shared_cluster)["calls"].get("ReceiveMessage", 0)
    wait_for(lambda: rmq5_state(shared_cluster)["calls"].get("ReceiveMessage", 0) >= receives + 4,
             "both push consumers receiving")
    send_all(producer, "R5Push", bodies)

    def all_done() -> list[dict[str, Any]] | None:
        seen = consumed(one) + consumed(two)
        ok = {m["body"] for m in seen if m["result"] == "SUCCESS"}
        return seen if ok == set(bodies) else None
    seen = wait_for(all_done, "every message consumed by the two push consumers")
    # each process fails push-7 the first time it sees it: once or twice in all, then a success,
    # each delivery one attempt later than the one before
    failed = sorted((m for m in seen if m["body"] == "push-7"), key=lambda m: m["at"])
    outcomes = [(m["result"], m["delivery_attempt"]) for m in failed]
    assert outcomes in ([("FAILURE", 1), ("SUCCESS", 2)], [("FAILURE", 1), ("FAILURE", 2), ("SUCCESS", 3)]), outcomes
    successes = [m["body"] for m in seen if m["result"] == "SUCCESS"]
    assert sorted(successes) == sorted(bodies)  # each once: acked messages are never redelivered
    assert [m["delivery_attempt"] for m in seen if m["body"] == "push-13"] == [1]
    time.sleep(60 * TIME_SCALE)  # push-13's last renewal would have expired by now, had its ack not settled it
    assert [m["body"] for m in consumed(one) + consumed(two)].count("push-13") == 1
    renew = rmq5_state(shared_cluster)["auto_renew"]
    assert renew["renewed"] >= 1 and renew["held"] == 0, renew
    assert consumed(one) and consumed(two)  # the broker's messages were shared between both


def test_two_5x_groups_and_a_4x_push_consumer_each_get_every_message(
        shared_cluster: LocalCluster, producer: Py5Producer, consumers: Consumers) -> None:
    make_topic(shared_cluster, "R5Mixed")
    got_4x: set[str] = set()
    lock = threading.Lock()

    def listener(msgs: Any, ctx: Any) -> ConsumeConcurrentlyStatus:
        with lock:
            got_4x.update(m.body.decode() for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    push = PushConsumer(shared_cluster.namesrv_addr, "r5-mixed-4x", consume_from_where=Where.CONSUME_FROM_FIRST_OFFSET,
                        timing=shared_cluster.timing, instance_name="r5-mixed")
    push.subscribe("R5Mixed")
    push.register_listener(listener)
    simple = [consumers.simple(group, "R5Mixed") for group in ("r5-mixed-a", "r5-mixed-b")]
    bodies = [f"mixed-{i}" for i in range(8)]
    with push:
        send_all(producer, "R5Mixed", bodies)
        for consumer in simple:
            got = receive_until(consumer, 5, lambda got: len(got) >= 8, 15, "every message for a 5.x group")
            assert sorted(m["body"] for m in got) == bodies
            for m in got:
                assert consumer.call(op="ack", ref=m["ref"])["event"] == "acked"
        wait_for(lambda: got_4x >= set(bodies), "every message for the 4.x group")
    assert got_4x == set(bodies)


def update_group(cluster: LocalCluster, group: str, *args: str) -> dict[str, Any]:
    """`mqlab admin group update` against the cluster, as an operator runs it; the stored group."""
    result = CliRunner().invoke(cli.app, ["admin", "group", "update", "--group", group, *args, "--json",
                                          "--run-dir", str(cluster.run_dir)])
    assert result.exit_code == 0, result.output
    answers = json.loads(result.output)
    assert [a["broker_name"] for a in answers] == ["broker-a"] and answers[0]["code"] == "SUCCESS", answers
    return answers[0]["rows"][0]


def settings_answer(cluster: LocalCluster, group: str, topic: str) -> d.Settings:
    """The settings a 5.x push consumer of `group` is told (one Telemetry write, raw)."""
    settings = d.Settings(client_type=d.PUSH_CONSUMER, subscription=d.Subscription(
        group=d.Resource(name=group), subscriptions=[d.SubscriptionEntry(topic=d.Resource(name=topic))]))
    with grpc.insecure_channel(cluster.rocketmq5_endpoints.split(";")[0]) as channel:
        call = rmq5_service_pb2_grpc.MessagingServiceStub(channel).Telemetry(
            iter([s.TelemetryCommand(settings=settings)]), metadata=CLIENT_ID, timeout=10)
        answers = list(call)
    assert len(answers) == 1 and answers[0].status.code == d.OK, answers
    return answers[0].settings


@pytest.mark.slow  # FIFO's DLQ forward is in the default run; this is the revive's DLQ (pop unit tests too)
def test_a_message_never_acked_goes_to_the_dlq_after_max_attempts(shared_cluster: LocalCluster,
                                                                   producer: Py5Producer,
                                                                   consumers: Consumers) -> None:
    make_topic(shared_cluster, "R5Dlq")
    assert update_group(shared_cluster, "r5-dlq", "--retry-max-times", "2") == {
        "group": "r5-dlq", "orderly": False, "retry_max_times": 2}
    assert settings_answer(shared_cluster, "r5-dlq", "R5Dlq").backoff_policy.max_attempts == 3
    sent = producer.send("R5Dlq", "doomed")
    consumer = consumers.simple("r5-dlq", "R5Dlq")
    attempts = [m["delivery_attempt"] for m in receive_until(
        consumer, 1, lambda got: len(got) >= 3, 30, "three deliveries")]
    assert attempts == [1, 2, 3]
    shared_cluster.wait_until_routable("%DLQ%r5-dlq")  # created by the revive that dead-lettered it
    dlq = read_until(shared_cluster, "%DLQ%r5-dlq", "r5-dlq-reader", 1, 15)  # a 4.x pull reads the DLQ
    assert [m.body for m in dlq] == [b"doomed"] and dlq[0].properties["UNIQ_KEY"] == sent["message_id"]
    assert receive(consumer, 1) == []  # not delivered again


def test_fifo_push_consumer_keeps_each_group_in_order_and_dead_letters_a_failing_message(
        shared_cluster: LocalCluster, producer: Py5Producer, consumers: Consumers) -> None:
    make_topic(shared_cluster, "R5FifoPush", queue_nums=2, order=True)
    assert update_group(shared_cluster, "r5-fifo", "--orderly", "--retry-max-times", "1")["orderly"] is True
    settings = settings_answer(shared_cluster, "r5-fifo", "R5FifoPush")
    assert settings.subscription.fifo and settings.backoff_policy.max_attempts == 2
    push = consumers.push("r5-fifo", "R5FifoPush", fail_once=("g1:2",), fail_always=("g2:3",))
    groups = ("g0", "g1", "g2")
    for seq in range(6):
        for group in groups:
            assert producer.send("R5FifoPush", f"{group}:{seq}", group=group)["event"] == "sent"

    def done() -> list[dict[str, Any]] | None:
        seen = consumed(push)
        return seen if {m["body"] for m in seen} >= {f"{g}:{i}" for g in groups for i in range(6)} and \
            sum(m["body"] == "g2:3" for m in seen) >= 2 and any(m["body"] == "g2:5" for m in seen) else None
    seen = wait_for(done, "every message of the three groups consumed")
    for group in groups:
        mine = [(m["body"], m["result"]) for m in seen if m["message_group"] == group]
        expected = [(f"{group}:{i}", "SUCCESS") for i in range(6)]
        if group == "g1":  # failed once, retried in place before anything after it
            expected[2:3] = [("g1:2", "FAILURE"), ("g1:2", "SUCCESS")]
        if group == "g2":  # failed every time: its 2 attempts, then the DLQ, then the rest of the group
            expected[3:4] = [("g2:3", "FAILURE"), ("g2:3", "FAILURE")]
        assert mine == expected, mine
    shared_cluster.wait_until_routable("%DLQ%r5-fifo")
    dlq = read_until(shared_cluster, "%DLQ%r5-fifo", "r5-fifo-dlq-reader", 1, 15)
    assert [m.body for m in dlq] == [b"g2:3"]


def test_an_orderly_group_s_simple_consumer_gets_one_batch_of_a_queue_at_a_time(
        shared_cluster: LocalCluster, producer: Py5Producer, consumers: Consumers) -> None:
    make_topic(shared_cluster, "R5FifoSimple", queue_nums=1, order=True)
    update_group(shared_cluster, "r5-fifo-simple", "--orderly")
    send_all(producer, "R5FifoSimple", [f"g:{i}" for i in range(4)], group="g")
    consumer = consumers.simple("r5-fifo-simple", "R5FifoSimple")
    first = receive(consumer, 3, max_n=2)  # everything was sent before: the batch is full at once
    assert [(m["body"], m["delivery_attempt"]) for m in first] == [("g:0", 1), ("g:1", 1)]
    assert receive(consumer, 3, max_n=2) == []  # the queue is blocked while its batch is unacked
    for m in first:
        assert consumer.call(op="ack", ref=m["ref"])["event"] == "acked"
    second = receive(consumer, 1, max_n=2)  # unblocked by the acks; this batch is left to expire
    assert [(m["body"], m["delivery_attempt"]) for m in second] == [("g:2", 1), ("g:3", 1)]
    again = wait_for(lambda: receive(consumer, 3, max_n=2), "the expired batch back in place", 15)
    assert [(m["body"], m["delivery_attempt"]) for m in again] == [("g:2", 2), ("g:3", 2)]


@pytest.mark.slow  # its own cluster (master and slave), a master SIGKILL and restart with its tail restore
def test_a_master_sigkilled_under_a_5x_producer_and_consumer(tmp_path: Path) -> None:
    with start_cluster(interop_spec(), tmp_path / "run") as cluster:
        make_topic(cluster, "R5Kill")
        procs = Consumers(cluster, tmp_path)
        sender = Py5Producer(tmp_path, "py5-kill-sender")
        try:
            sender.start(cluster.rocketmq5_endpoints, ["R5Kill"])
            consumer = procs.simple("r5-kill", "R5Kill")
            send_all(sender, "R5Kill", [f"before-{i}" for i in range(6)])
            got = {m["body"]: m for m in receive_until(consumer, 3, lambda got: len(got) >= 6, 15, "six messages")}
            for i in range(3):  # acked before the kill: never again; the other three are in flight
                assert consumer.call(op="ack", ref=got[f"before-{i}"]["ref"])["event"] == "acked"

            cluster.kill("broker-a-0")
            # while the only master is down both clients fail their calls and stay up
            assert sender.send("R5Kill", "while-down")["event"] == "send-failed"
            assert consumer.call(op="receive", max=4, invisible_s=3)["event"] == "receive-failed"
            cluster.restart("broker-a-0")
            cluster.wait_until_routable("R5Kill")

            # the restarted master takes sends once it restored its tail (writes are held until then)
            def sent_after() -> dict[str, Any] | None:
                answer = sender.send("R5Kill", "after")
                return answer if answer["event"] == "sent" else None
            wait_for(sent_after, "a send to the restarted master", 60)
            wanted = {"before-3", "before-4", "before-5", "after"}
            back = receive_until(consumer, 3, lambda got: wanted <= {m["body"] for m in got}, 60,
                                 "the in-flight messages and the new one")
            assert {m["body"] for m in back} == wanted  # nothing acked before the kill came back
            for m in back:
                assert m["delivery_attempt"] == (1 if m["body"] == "after" else 2), m
                assert consumer.call(op="ack", ref=m["ref"])["event"] == "acked"
            assert receive(consumer, 3) == []
            sender.shutdown()
        finally:
            sender.close()
            procs.close()
