"""Apache's RocketMQ 5 Node.js client (rocketmq-client-nodejs 1.0.8, under node, its own process)
against a real cluster's RocketMQ 5 endpoint: a producer's start (it waits for its settings),
sends read back by mqlab's PullConsumer, a SimpleConsumer's receive, ack, change-invisible and
redelivery, and a PushConsumer consuming everything. The Python 5.x client's suites
(test_rmq5_clients.py, test_rmq5_consumers.py) cover the broker's side in depth; these check
that a second, independent implementation of the protocol agrees with it.

The cluster runs at the interop time scale (0.05): RocketMQ's 10 s invisible floor is 0.5 s, so
the client's 1–2 s invisible durations come back within seconds."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.rpc import broker_stub

from harness import LocalCluster
from harness.spec import ClusterSpec, NodeSpec
from harness.topology import TWO_BY_TWO, topology_nodes
from interop.mqlab_side import REAL_CLIENT_TIMING, TIME_SCALE, interop_spec, read_until, start_cluster
from interop.node5_procs import NODE5_VERSION, Node5Client
from interop.test_rmq5_clients import make_topic, rmq5_state
from interop.test_rmq5_consumers import settings_answer, update_group
from proto import broker_pb2, common_pb2

# one worker for the module under `--dist loadgroup`: its tests share one cluster and one producer
pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("node5-clients")]

# how late after its invisible time an unacked message may come back: the revive pass (50 ms at
# this scale), a held receive's wake-up, and a loaded machine's scheduling
REVIVE_SLACK_S = 3.0


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The module's cluster: a name server and one master (POP state lives on masters only)."""
    spec = dataclasses.replace(interop_spec(), nodes=(NodeSpec("namesrv-0", "namesrv"),
                                                      NodeSpec("broker-a-0", "broker", broker_name="broker-a", broker_id=0)))
    cluster = start_cluster(spec, tmp_path_factory.mktemp("interop") / "run")
    try:
        yield cluster
        assert not cluster.unexpected_exits, f"nodes died unexpectedly: {cluster.unexpected_exits}"
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def producer(shared_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node5Client]:
    """One started Node.js producer for the send tests (each its own topic; the client looks a
    topic's route up at its first send)."""
    client = Node5Client(tmp_path_factory.mktemp("node5"), "node5-sender")
    try:
        client.start(shared_cluster.rocketmq5_endpoints, [])
        yield client
        client.shutdown()
    finally:
        client.close()


@pytest.fixture
def clients() -> Iterator[list[Node5Client]]:
    """Node.js client processes of one test, killed at its end whatever happened."""
    procs: list[Node5Client] = []
    try:
        yield procs
    finally:
        for proc in procs:
            proc.close()


def new_client(clients: list[Node5Client], tmp_path: Path, name: str) -> Node5Client:
    proc = Node5Client(tmp_path, name)
    clients.append(proc)
    return proc


def send_all(producer: Node5Client, topic: str, bodies: list[str], **fields: Any) -> dict[str, dict[str, Any]]:
    sent = {}
    for body in bodies:
        answer = producer.send(topic, body, **fields)
        assert answer["event"] == "sent", answer
        sent[body] = answer
    return sent


def receive(consumer: Node5Client, invisible_s: int, max_n: int = 32) -> list[dict[str, Any]]:
    answer = consumer.call(op="receive", max=max_n, invisible_s=invisible_s)
    assert answer["event"] == "received", answer
    return answer["messages"]


def wait_for(predicate: Callable[[], Any], what: str, budget_s: float = 20.0) -> Any:
    deadline = time.monotonic() + budget_s
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"{what} not within {budget_s:.0f} s"
        time.sleep(0.1)
    return value


def test_producer_starts_after_its_settings_and_a_normal_send_reads_back(shared_cluster: LocalCluster,
                                                                          tmp_path: Path,
                                                                          clients: list[Node5Client]) -> None:
    make_topic(shared_cluster, "N5Normal")
    client = new_client(clients, tmp_path, "node5-start")
    started = client.start(shared_cluster.rocketmq5_endpoints, ["N5Normal"])
    assert started["seconds"] < 5, started
    # startup() returns only once a Telemetry settings answer came back: the broker has them already
    me = [c for c in rmq5_state(shared_cluster)["clients"] if c["client_id"] == started["client_id"]]
    assert me and me[0]["settings_received"] >= 1 and me[0]["telemetry_open"], me
    # the header names the language HTTP (sic); the version is the package's
    assert (me[0]["client_type"], me[0]["topics"], me[0]["language"], me[0]["version"]) == (
        "PRODUCER", ["N5Normal"], "HTTP", NODE5_VERSION)

    sent = send_all(client, "N5Normal", [f"normal-{i}" for i in range(4)], tag="TagN", keys=["shared"],
                    properties={"color": "green"})
    by_body = {m.body.decode(): m for m in read_until(shared_cluster, "N5Normal", "n5-normal-reader", 4, 10)}
    assert set(by_body) == set(sent)
    for body, answer in sent.items():
        m = by_body[body]
        assert len(answer["message_id"]) == 34 and m.properties["UNIQ_KEY"] == answer["message_id"]
        assert m.tags == "TagN" and m.keys.split() == ["shared"] and m.properties["color"] == "green"
        # the client names a queue in the message; the broker picks its own (as Apache's proxy
        # does), so only the offset in the receipt is the stored one
        assert m.queue_offset == answer["offset"]
    assert len({m.queue_id for m in by_body.values()}) == 4  # the broker's round-robin
    client.shutdown()
    wait_for(lambda: started["client_id"] not in [c["client_id"] for c in rmq5_state(shared_cluster)["clients"]],
             "NotifyClientTermination forgetting the producer")


def test_simple_consumer_receive_ack_change_invisible_and_redelivery(shared_cluster: LocalCluster,
                                                                      producer: Node5Client, tmp_path: Path,
                                                                      clients: list[Node5Client]) -> None:
    make_topic(shared_cluster, "N5Simple")
    sent = send_all(producer, "N5Simple", ["acked", "left", "changed"], tag="TagS", keys=["k1"])
    consumer = new_client(clients, tmp_path, "node5-simple")
    consumer.call(op="consumer_start", endpoints=shared_cluster.rocketmq5_endpoints, kind="simple",
                  group="n5-simple", topic="N5Simple", await_s=0.5)  # an empty receive holds 0.5 s
    first: list[dict[str, Any]] = []
    deadline = time.monotonic() + 10
    while len(first) < 3:
        assert time.monotonic() < deadline, f"three messages not received: {first}"
        first += receive(consumer, 1)
    by_body = {m["body"]: m for m in first}
    assert sorted(by_body) == sorted(sent) and len(first) == 3  # none twice while invisible
    for body, m in by_body.items():
        assert (m["message_id"], m["delivery_attempt"], m["tag"], m["keys"]) == (
            sent[body]["message_id"], 1, "TagS", ["k1"])
    assert consumer.call(op="ack", ref=by_body["acked"]["ref"])["event"] == "acked"
    changed = consumer.call(op="change_invisible", ref=by_body["changed"]["ref"], invisible_s=2)
    assert changed["event"] == "changed" and changed["receipt_handle"] != by_body["changed"]["receipt_handle"]

    again: list[dict[str, Any]] = []
    deadline = time.monotonic() + 15
    while {m["body"] for m in again} < {"left", "changed"}:
        assert time.monotonic() < deadline, f"the unacked and the changed message not back: {again}"
        again += receive(consumer, 10)
    back = {m["body"]: m for m in again}
    assert set(back) == {"left", "changed"}, [m["body"] for m in again]  # the acked one never comes back
    left_due = by_body["left"]["at"] + 1
    assert left_due - 0.3 <= back["left"]["at"] <= left_due + REVIVE_SLACK_S, back["left"]["at"] - left_due
    changed_due = changed["at"] + 2
    assert changed_due - 0.3 <= back["changed"]["at"] <= changed_due + REVIVE_SLACK_S, back["changed"]["at"] - changed_due
    for body in ("left", "changed"):
        assert back[body]["delivery_attempt"] == 2 and back[body]["message_id"] == sent[body]["message_id"]
    stale = consumer.call(op="ack", ref=by_body["left"]["ref"])  # the first delivery's handle
    assert stale["event"] == "ack-failed" and stale["error_type"] == "BadRequestException", stale
    assert stale["code"] == 40013, stale  # INVALID_RECEIPT_HANDLE
    for body in ("left", "changed"):
        assert consumer.call(op="ack", ref=back[body]["ref"])["event"] == "acked"
    assert receive(consumer, 1) == []  # everything settled
    assert consumer.call(op="shutdown")["event"] == "done"


def test_fifo_groups_each_stay_in_one_queue_in_send_order(shared_cluster: LocalCluster,
                                                           producer: Node5Client) -> None:
    make_topic(shared_cluster, "N5Fifo", order=True)  # an order topic with no type is FIFO
    groups = ("order-1", "order-2", "order-3")
    for seq in range(10):
        for group in groups:
            assert producer.send("N5Fifo", f"{group}:{seq}", group=group)["event"] == "sent"
    messages = read_until(shared_cluster, "N5Fifo", "n5-fifo-reader", 30, 10)
    assert len(messages) == 30
    for group in groups:
        mine = sorted((m for m in messages if m.properties["__SHARDINGKEY"] == group), key=lambda m: m.queue_offset)
        assert len({m.queue_id for m in mine}) == 1, f"{group} spread over queues"
        assert [int(m.body.decode().split(":")[1]) for m in mine] == list(range(10))


@pytest.mark.slow
def test_delayed_send_is_not_readable_before_its_delivery_time(shared_cluster: LocalCluster,
                                                               producer: Node5Client) -> None:
    make_topic(shared_cluster, "N5Delay", message_type="DELAY")
    answer = producer.send("N5Delay", "later", delay_s=2)
    assert answer["event"] == "sent", answer
    messages = wait_for(lambda: read_until(shared_cluster, "N5Delay", "n5-delay-reader", 1, 0), "the delayed message",
                        30)
    readable_at = time.time()
    assert readable_at >= answer["due"], f"readable {answer['due'] - readable_at:.2f} s before it was due"
    assert messages[0].body == b"later" and messages[0].properties["UNIQ_KEY"] == answer["message_id"]


@pytest.mark.slow
def test_push_consumer_consumes_everything_and_a_failure_comes_back(shared_cluster: LocalCluster,
                                                                     producer: Node5Client, tmp_path: Path,
                                                                     clients: list[Node5Client]) -> None:
    make_topic(shared_cluster, "N5Push")
    bodies = [f"push-{i}" for i in range(12)]
    push = new_client(clients, tmp_path, "node5-push")
    started = push.call(op="consumer_start", endpoints=shared_cluster.rocketmq5_endpoints, kind="push",
                        group="n5-push", topic="N5Push", fail_once=["push-5"])
    assert started["seconds"] < 10, started
    receives = rmq5_state(shared_cluster)["calls"].get("ReceiveMessage", 0)
    # it asks its assignment 1 s after its start, then holds receives at the broker
    wait_for(lambda: rmq5_state(shared_cluster)["calls"].get("ReceiveMessage", 0) > receives,
             "the push consumer receiving")
    send_all(producer, "N5Push", bodies)

    def all_done() -> list[dict[str, Any]] | None:
        seen = push.call(op="consumed")["messages"]
        return seen if {m["body"] for m in seen if m["result"] == "SUCCESS"} == set(bodies) else None
    seen = wait_for(all_done, "every message consumed by the push consumer")
    assert sorted(m["body"] for m in seen if m["result"] == "SUCCESS") == sorted(bodies)  # each once
    failed = [(m["result"], m["delivery_attempt"]) for m in seen if m["body"] == "push-5"]
    assert failed == [("FAILURE", 1), ("SUCCESS", 2)], failed
    assert push.call(op="shutdown")["event"] == "done"


@pytest.mark.slow  # its own cluster of two masters (and their slaves)
def test_two_masters_each_get_settings_and_sends(tmp_path: Path) -> None:
    spec = ClusterSpec(nodes=topology_nodes(TWO_BY_TWO), time_scale=TIME_SCALE, timing=REAL_CLIENT_TIMING)
    with start_cluster(spec, tmp_path / "run") as cluster:
        for broker in ("broker-a-0", "broker-b-0"):
            channel, stub = broker_stub(cluster.node(broker).addr)
            with channel:
                answer = stub.CreateTopic(broker_pb2.CreateTopicRequest(config=common_pb2.TopicConfig(
                    topic="N5Two", read_queue_nums=2, write_queue_nums=2, perm=6)), timeout=10)
            assert answer.code == common_pb2.SUCCESS, answer.remark
        cluster.wait_until_routable("N5Two")
        client = Node5Client(tmp_path, "node5-two")
        try:
            # one endpoint given: the client learns the other from the route and opens a
            # Telemetry stream to each; its start returns at the first settings answer
            started = client.start(cluster.node("broker-b-0").rocketmq5_addr, ["N5Two"])

            def settings_on(broker: str) -> bool:
                state = cluster.node(broker).describe()["details"]["rocketmq5"]
                return any(c["client_id"] == started["client_id"] and c["settings_received"] >= 1
                           for c in state["clients"])
            wait_for(lambda: settings_on("broker-a-0") and settings_on("broker-b-0"), "settings on both masters")
            for i in range(12):
                assert client.send("N5Two", f"two-{i}")["event"] == "sent"
            client.shutdown()
        finally:
            client.close()
        messages = read_until(cluster, "N5Two", "n5-two-reader", 12, 10)
        assert sorted(m.body.decode() for m in messages) == sorted(f"two-{i}" for i in range(12))
        assert {m.broker_name for m in messages} == {"broker-a", "broker-b"}


@pytest.mark.slow
def test_push_consumer_nacks_with_no_backoff_and_the_revive_dead_letters(shared_cluster: LocalCluster,
                                                                         producer: Node5Client, tmp_path: Path,
                                                                         clients: list[Node5Client]) -> None:
    """The client reads no customized backoff (the broker's, and Apache's proxy's, for a
    concurrent group): its nack asks invisible time 0, so a failure comes back at once."""
    make_topic(shared_cluster, "N5Nack")
    assert update_group(shared_cluster, "n5-nack", "--retry-max-times", "2")["retry_max_times"] == 2
    assert settings_answer(shared_cluster, "n5-nack", "N5Nack").backoff_policy.WhichOneof("strategy") == \
        "customized_backoff"
    push = new_client(clients, tmp_path, "node5-nack")
    push.call(op="consumer_start", endpoints=shared_cluster.rocketmq5_endpoints, kind="push", group="n5-nack",
              topic="N5Nack", fail_always=["doomed"])
    sent = producer.send("N5Nack", "doomed")
    assert sent["event"] == "sent", sent
    seen = wait_for(lambda: (got := push.call(op="consumed")["messages"]) and len(got) >= 3 and got, "three deliveries")
    assert [(m["result"], m["delivery_attempt"]) for m in seen] == [("FAILURE", 1), ("FAILURE", 2), ("FAILURE", 3)]
    # no backoff between the attempts (the broker's first level is 1 s scaled: 50 ms, and revive adds its pass)
    assert seen[-1]["at"] - seen[0]["at"] < 2.0, [m["at"] for m in seen]
    shared_cluster.wait_until_routable("%DLQ%n5-nack")
    dlq = read_until(shared_cluster, "%DLQ%n5-nack", "n5-nack-dlq-reader", 1, 15)
    assert [m.body for m in dlq] == [b"doomed"] and dlq[0].properties["UNIQ_KEY"] == sent["message_id"]
    time.sleep(0.5)
    assert len(push.call(op="consumed")["messages"]) == 3  # never delivered again


@pytest.mark.slow
def test_fifo_push_consumer_dead_letters_a_failure_at_once_and_keeps_each_group_s_order(
        shared_cluster: LocalCluster, producer: Node5Client, tmp_path: Path, clients: list[Node5Client]) -> None:
    """With no retry policy from a customized backoff, the FIFO consume service takes 1 as the
    max attempts: a failed message is forwarded to the DLQ without a local retry, whatever the
    group's retry_max_times, and the group goes on in order."""
    make_topic(shared_cluster, "N5FifoPush", queue_nums=2, order=True)
    assert update_group(shared_cluster, "n5-fifo", "--orderly", "--retry-max-times", "2")["orderly"] is True
    settings = settings_answer(shared_cluster, "n5-fifo", "N5FifoPush")
    assert settings.subscription.fifo and settings.backoff_policy.max_attempts == 3
    push = new_client(clients, tmp_path, "node5-fifo")
    push.call(op="consumer_start", endpoints=shared_cluster.rocketmq5_endpoints, kind="push", group="n5-fifo",
              topic="N5FifoPush", fail_once=["g1:1"])
    groups = ("g0", "g1")
    for seq in range(4):
        for group in groups:
            assert producer.send("N5FifoPush", f"{group}:{seq}", group=group)["event"] == "sent"
    wanted = {f"{g}:{i}" for g in groups for i in range(4)}
    seen = wait_for(lambda: (got := push.call(op="consumed")["messages"]) and
                    {m["body"] for m in got} >= wanted and got, "every message of both groups")
    assert [(m["body"], m["result"]) for m in seen if m["message_group"] == "g0"] == [
        (f"g0:{i}", "SUCCESS") for i in range(4)]
    assert [(m["body"], m["result"]) for m in seen if m["message_group"] == "g1"] == [
        ("g1:0", "SUCCESS"), ("g1:1", "FAILURE"), ("g1:2", "SUCCESS"), ("g1:3", "SUCCESS")]
    shared_cluster.wait_until_routable("%DLQ%n5-fifo")
    dlq = read_until(shared_cluster, "%DLQ%n5-fifo", "n5-fifo-dlq-reader", 1, 15)
    assert [m.body for m in dlq] == [b"g1:1"]
