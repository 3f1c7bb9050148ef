"""Apache's RocketMQ 5 Python client (5.1.2, its own venv and process) against a real cluster's
RocketMQ 5 endpoint: start, sends of each type read back by mqlab's PullConsumer, and the
refusals a client must see (consuming: test_rmq5_consumers.py). The wire-level answers a client library never shows (a missing
client id, the calls mqlab does not implement) are asked with raw stubs, in this process."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2
from support.rpc import broker_stub

from harness import LocalCluster
from harness.spec import ClusterSpec
from harness.topology import TWO_BY_TWO, topology_nodes
from interop.mqlab_side import REAL_CLIENT_TIMING, TIME_SCALE, read_topic, read_until, start_cluster
from interop.rmq5_procs import Py5Producer
from proto import broker_pb2, common_pb2, namesrv_pb2, namesrv_pb2_grpc, rmq5_service_pb2_grpc
from proto import rmq5_definition_pb2 as d
from proto import rmq5_service_pb2 as s

# one worker for the module under `--dist loadgroup`: its tests share one cluster and one producer
pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("rmq5-clients")]

CLIENT_ID = [("x-mq-client-id", "interop@1@0@test")]


def make_topic(cluster: LocalCluster, topic: str, queue_nums: int = 4, *, message_type: str = "",
               order: bool = False) -> None:
    """Create a topic of a RocketMQ 5 type on the master and wait until the name server routes it."""
    channel, stub = broker_stub(cluster.node("broker-a-0").addr)
    with channel:
        answer = stub.CreateTopic(broker_pb2.CreateTopicRequest(config=common_pb2.TopicConfig(
            topic=topic, read_queue_nums=queue_nums, write_queue_nums=queue_nums, perm=6, order=order,
            message_type=message_type)), timeout=10)
    assert answer.code == common_pb2.SUCCESS, answer.remark
    with grpc.insecure_channel(cluster.namesrv_addr) as channel:
        namesrv = namesrv_pb2_grpc.NameServerStub(channel)
        deadline = time.monotonic() + 10
        while namesrv.GetRouteInfo(namesrv_pb2.GetRouteInfoRequest(topic=topic), timeout=10).code != common_pb2.SUCCESS:
            assert time.monotonic() < deadline, f"topic {topic} never reached the name server"
            time.sleep(0.02)


def rmq5_state(cluster: LocalCluster) -> dict[str, Any]:
    return cluster.node("broker-a-0").describe()["details"]["rocketmq5"]


def wait_state(cluster: LocalCluster, predicate: Any, what: str, budget_s: float = 15.0) -> dict[str, Any]:
    deadline = time.monotonic() + budget_s
    while True:
        state = rmq5_state(cluster)
        if predicate(state):
            return state
        assert time.monotonic() < deadline, f"no {what} within {budget_s:.0f} s: {state}"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def producer(shared_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Py5Producer]:
    """One started 5.x producer for the send tests (each its own topic)."""
    client = Py5Producer(tmp_path_factory.mktemp("py5"), "py5-sender")
    try:
        client.start(shared_cluster.rocketmq5_endpoints, [])
        yield client
        client.shutdown()
    finally:
        client.close()


def test_producer_starts_with_route_settings_and_heartbeat(shared_cluster: LocalCluster, tmp_path: Path) -> None:
    make_topic(shared_cluster, "R5Start")
    client = Py5Producer(tmp_path)
    try:
        started = client.start(shared_cluster.rocketmq5_endpoints, ["R5Start"])
        assert started["seconds"] < 5, started
        client_id = started["client_id"]

        def seen(state: dict[str, Any]) -> bool:
            me = [c for c in state["clients"] if c["client_id"] == client_id]
            return bool(me) and me[0]["heartbeats"] >= 1 and me[0]["settings_received"] >= 1
        state = wait_state(shared_cluster, seen, "heartbeat and settings from the 5.x producer")
        me = next(c for c in state["clients"] if c["client_id"] == client_id)
        assert (me["client_type"], me["topics"], me["language"], me["version"]) == (
            "PRODUCER", ["R5Start"], "PYTHON", "5.1.2")
        assert me["telemetry_open"] and state["calls"]["QueryRoute"] >= 1
        terminated = state["terminated"]
        client.shutdown()
        state = wait_state(shared_cluster, lambda st: st["terminated"] > terminated, "NotifyClientTermination")
        assert client_id not in [c["client_id"] for c in state["clients"]]
    finally:
        client.close()


def test_normal_send_reads_back_with_tag_keys_property_and_uniq_key(shared_cluster: LocalCluster,
                                                                     producer: Py5Producer) -> None:
    make_topic(shared_cluster, "R5Normal")
    sent = [producer.send("R5Normal", f"normal-{i}", tag="TagA", keys=[f"key-{i}", "shared"],
                          properties={"color": "blue", "seq": str(i)}) for i in range(4)]
    assert all(a["event"] == "sent" for a in sent), sent
    by_body = {m.body.decode(): m for m in read_until(shared_cluster, "R5Normal", "r5-normal-reader", 4, 10)}
    assert set(by_body) == {f"normal-{i}" for i in range(4)}
    for i, answer in enumerate(sent):
        m = by_body[f"normal-{i}"]
        assert len(answer["message_id"]) == 34  # the client's own id, version 01
        assert m.properties["UNIQ_KEY"] == answer["message_id"]
        assert m.tags == "TagA" and set(m.keys.split()) == {f"key-{i}", "shared"}
        assert (m.properties["color"], m.properties["seq"]) == ("blue", str(i))
        # the receipt's queue is the one the client picked; the request names none, so the
        # broker picks (round-robin) and only the offset in the receipt is the stored one
        assert m.queue_offset == answer["offset"]
    assert len({m.queue_id for m in by_body.values()}) == 4


def test_fifo_groups_each_stay_in_one_queue_in_send_order(shared_cluster: LocalCluster,
                                                           producer: Py5Producer) -> None:
    make_topic(shared_cluster, "R5Fifo", order=True)  # an order topic with no type is FIFO
    groups = ("order-1", "order-2", "order-3")
    for seq in range(20):
        for group in groups:
            answer = producer.send("R5Fifo", f"{group}:{seq}", group=group)
            assert answer["event"] == "sent", answer
    messages = read_until(shared_cluster, "R5Fifo", "r5-fifo-reader", 60, 10)
    assert len(messages) == 60
    for group in groups:
        mine = sorted((m for m in messages if m.properties["__SHARDINGKEY"] == group), key=lambda m: m.queue_offset)
        assert len({m.queue_id for m in mine}) == 1, f"{group} spread over queues"
        assert [int(m.body.decode().split(":")[1]) for m in mine] == list(range(20))


def test_fifo_message_to_a_normal_topic_is_refused_by_the_client(shared_cluster: LocalCluster,
                                                                 producer: Py5Producer) -> None:
    make_topic(shared_cluster, "R5NormalOnly")
    assert producer.send("R5NormalOnly", "warm-up")["event"] == "sent"  # the route is cached
    sends = rmq5_state(shared_cluster)["calls"]["SendMessage"]
    answer = producer.send("R5NormalOnly", "fifo", group="g")
    assert answer["event"] == "send-failed" and answer["error_type"] == "IllegalArgumentException", answer
    assert "NORMAL" in answer["error"]
    assert rmq5_state(shared_cluster)["calls"]["SendMessage"] == sends  # nothing reached the broker
    assert [m.body for m in read_topic(shared_cluster, "R5NormalOnly", "r5-normal-only")] == [b"warm-up"]


def test_send_to_an_unknown_topic_fails_after_topic_not_found(shared_cluster: LocalCluster,
                                                              producer: Py5Producer) -> None:
    answer = producer.send("R5Missing", "lost")
    assert answer["event"] == "send-failed" and "route" in answer["error"], answer
    with grpc.insecure_channel(shared_cluster.rocketmq5_endpoints.split(";")[0]) as channel:
        route = rmq5_service_pb2_grpc.MessagingServiceStub(channel).QueryRoute(
            s.QueryRouteRequest(topic=d.Resource(name="R5Missing")), metadata=CLIENT_ID, timeout=10)
    assert route.status.code == d.TOPIC_NOT_FOUND and not route.message_queues


def test_delayed_send_is_not_readable_before_its_delivery_time(shared_cluster: LocalCluster,
                                                               producer: Py5Producer) -> None:
    make_topic(shared_cluster, "R5Delay", message_type="DELAY")
    answer = producer.send("R5Delay", "later", delay_s=3)
    assert answer["event"] == "sent", answer
    assert read_topic(shared_cluster, "R5Delay", "r5-delay-early") == []
    deadline = time.monotonic() + 30
    while not (messages := read_topic(shared_cluster, "R5Delay", "r5-delay-reader")):
        assert time.monotonic() < deadline, "the delayed message never became readable"
        time.sleep(0.1)
    readable_at = time.time()
    assert readable_at >= answer["due"], f"readable {answer['due'] - readable_at:.2f} s before it was due"
    assert messages[0].body == b"later" and messages[0].properties["UNIQ_KEY"] == answer["message_id"]


def test_oversize_body_is_refused_client_side_and_by_the_broker(shared_cluster: LocalCluster,
                                                                producer: Py5Producer) -> None:
    make_topic(shared_cluster, "R5Big")
    limit = 4 * 1024 * 1024
    answer = producer.call(op="send", topic="R5Big", body_bytes=limit + 1)
    # the limit the settings answer gave the client (0 would refuse every send)
    assert answer["event"] == "send-failed" and str(limit) in answer["error"], answer
    assert producer.call(op="send", topic="R5Big", body_bytes=limit)["event"] == "sent"
    message = d.Message(topic=d.Resource(name="R5Big"), body=b"x" * (limit + 1), system_properties=d.SystemProperties(
        message_id="01000000000000000000000000000000AB", body_encoding=d.IDENTITY, message_type=d.NORMAL))
    with grpc.insecure_channel(shared_cluster.rocketmq5_endpoints.split(";")[0],
                               options=[("grpc.max_send_message_length", 64 << 20)]) as channel:
        stub = rmq5_service_pb2_grpc.MessagingServiceStub(channel)
        refused = stub.SendMessage(s.SendMessageRequest(messages=[message]), metadata=CLIENT_ID, timeout=10)
        message.body = b""
        empty = stub.SendMessage(s.SendMessageRequest(messages=[message]), metadata=CLIENT_ID, timeout=10)
    assert refused.status.code == d.MESSAGE_BODY_TOO_LARGE and refused.entries[0].status.code == d.MESSAGE_BODY_TOO_LARGE
    assert empty.status.code == d.MESSAGE_BODY_EMPTY
    assert len(read_topic(shared_cluster, "R5Big", "r5-big-reader")) == 1


def test_wire_answers_a_client_library_never_shows(shared_cluster: LocalCluster) -> None:
    make_topic(shared_cluster, "R5Wire")
    with grpc.insecure_channel(shared_cluster.rocketmq5_endpoints.split(";")[0]) as channel:
        stub = rmq5_service_pb2_grpc.MessagingServiceStub(channel)
        topic = d.Resource(name="R5Wire")
        no_id = stub.QueryRoute(s.QueryRouteRequest(topic=topic), timeout=10)
        assert no_id.status.code == d.CLIENT_ID_REQUIRED and "x-mq-client-id" in no_id.status.message
        route = stub.QueryRoute(s.QueryRouteRequest(topic=topic), metadata=CLIENT_ID, timeout=10)
        assert route.status.code == d.OK and [q.id for q in route.message_queues] == [0, 1, 2, 3]
        for q in route.message_queues:
            assert (q.broker.name, q.broker.id, q.permission) == ("broker-a", 0, d.READ_WRITE)
            assert list(q.accept_message_types) == [d.NORMAL]
            assert f"{q.broker.endpoints.addresses[0].host}:{q.broker.endpoints.addresses[0].port}" == \
                shared_cluster.node("broker-a-0").rocketmq5_addr
        assignment = stub.QueryAssignment(s.QueryAssignmentRequest(topic=topic, group=d.Resource(name="r5-group")),
                                          metadata=CLIENT_ID, timeout=10)
        assert [(a.message_queue.id, a.message_queue.broker.name) for a in assignment.assignments] == [(-1, "broker-a")]
        group = d.Resource(name="r5-group")
        no_invisible = list(stub.ReceiveMessage(s.ReceiveMessageRequest(
            group=group, message_queue=route.message_queues[0], batch_size=4), metadata=CLIENT_ID, timeout=10))
        assert no_invisible[0].status.code == d.ILLEGAL_INVISIBLE_TIME and len(no_invisible) == 2
        # no message: MESSAGE_NOT_FOUND after the long poll, then the server's time, then the end
        began = time.monotonic()
        receive = list(stub.ReceiveMessage(s.ReceiveMessageRequest(
            group=group, message_queue=route.message_queues[0], batch_size=4,
            invisible_duration=duration_pb2.Duration(seconds=1), long_polling_timeout=duration_pb2.Duration(seconds=5),
            filter_expression=d.FilterExpression(type=d.TAG, expression="*")), metadata=CLIENT_ID, timeout=10))
        assert [r.WhichOneof("content") for r in receive] == ["status", "delivery_timestamp"]
        assert receive[0].status.code == d.MESSAGE_NOT_FOUND
        assert time.monotonic() - began < 5, "the long poll is clamped to 20 s scaled (1 s at 0.05)"
        sql = list(stub.ReceiveMessage(s.ReceiveMessageRequest(
            group=group, message_queue=route.message_queues[0], batch_size=4, auto_renew=True,
            filter_expression=d.FilterExpression(type=d.SQL, expression="a > 1")), metadata=CLIENT_ID, timeout=10))
        assert sql[0].status.code == d.ILLEGAL_FILTER_EXPRESSION
        ack = stub.AckMessage(s.AckMessageRequest(group=group, topic=topic, entries=[
            s.AckMessageEntry(message_id="m", receipt_handle="h")]), metadata=CLIENT_ID, timeout=10)
        assert ack.status.code == d.BAD_REQUEST and "receipt handle" in ack.entries[0].status.message
        empty_ack = stub.AckMessage(s.AckMessageRequest(group=d.Resource(name="r5-group"), topic=topic),
                                    metadata=CLIENT_ID, timeout=10)
        assert empty_ack.status.code == d.BAD_REQUEST
        changed = stub.ChangeInvisibleDuration(s.ChangeInvisibleDurationRequest(
            group=d.Resource(name="r5-group"), topic=topic, receipt_handle="h", message_id="m",
            invisible_duration=duration_pb2.Duration(seconds=1)), metadata=CLIENT_ID, timeout=10)
        # a refusal hands the client's own handle back (the client stores it before checking)
        assert changed.status.code == d.BAD_REQUEST and changed.receipt_handle == "h"
        assert stub.EndTransaction(s.EndTransactionRequest(topic=topic), metadata=CLIENT_ID,
                                   timeout=10).status.code == d.BAD_REQUEST  # no resolution
        assert stub.EndTransaction(s.EndTransactionRequest(topic=topic, resolution=d.COMMIT, transaction_id="x"),
                                   metadata=CLIENT_ID, timeout=10).status.code == d.INVALID_TRANSACTION_ID
        settings = d.Settings(client_type=d.SIMPLE_CONSUMER, subscription=d.Subscription(
            group=d.Resource(name="r5-group"), subscriptions=[d.SubscriptionEntry(topic=topic)]))
        call = stub.Telemetry(iter([s.TelemetryCommand(settings=settings)]), metadata=CLIENT_ID, timeout=10)
        answers = list(call)  # our end closed after the one write: the server ends the stream too
    assert len(answers) == 1 and answers[0].status.code == d.OK
    merged = answers[0].settings.subscription
    assert merged.group.name == "r5-group" and merged.receive_batch_size == 32
    assert merged.long_polling_timeout.seconds == 20 and answers[0].settings.backoff_policy.max_attempts == 17


@pytest.mark.slow
def test_two_masters_route_each_to_its_own_endpoint_and_both_take_sends(tmp_path: Path) -> None:
    spec = ClusterSpec(nodes=topology_nodes(TWO_BY_TWO), time_scale=TIME_SCALE, timing=REAL_CLIENT_TIMING)
    with start_cluster(spec, tmp_path / "run") as cluster:
        for broker in ("broker-a-0", "broker-b-0"):
            channel, stub = broker_stub(cluster.node(broker).addr)
            with channel:
                answer = stub.CreateTopic(broker_pb2.CreateTopicRequest(config=common_pb2.TopicConfig(
                    topic="R5Two", read_queue_nums=2, write_queue_nums=2, perm=6)), timeout=10)
            assert answer.code == common_pb2.SUCCESS, answer.remark
        cluster.wait_until_routable("R5Two")
        endpoints = cluster.rocketmq5_endpoints
        assert endpoints.split(";") == [cluster.node("broker-a-0").rocketmq5_addr,
                                        cluster.node("broker-b-0").rocketmq5_addr]
        with grpc.insecure_channel(endpoints.split(";")[1]) as channel:  # broker-b answers for the cluster
            route = rmq5_service_pb2_grpc.MessagingServiceStub(channel).QueryRoute(
                s.QueryRouteRequest(topic=d.Resource(name="R5Two")), metadata=CLIENT_ID, timeout=10)
        by_broker = {q.broker.name: f"{q.broker.endpoints.addresses[0].host}:{q.broker.endpoints.addresses[0].port}"
                     for q in route.message_queues}
        assert by_broker == {"broker-a": cluster.node("broker-a-0").rocketmq5_addr,
                             "broker-b": cluster.node("broker-b-0").rocketmq5_addr}
        client = Py5Producer(tmp_path)
        try:
            client.start(endpoints, ["R5Two"])
            for i in range(12):
                assert client.send("R5Two", f"two-{i}")["event"] == "sent"
            client.shutdown()
        finally:
            client.close()
        messages = read_until(cluster, "R5Two", "r5-two-reader", 12, 10)
        assert sorted(m.body.decode() for m in messages) == sorted(f"two-{i}" for i in range(12))
        assert {m.broker_name for m in messages} == {"broker-a", "broker-b"}
