"""ConsumerManager over real gRPC: heartbeats, membership notifications, removal paths, and
pulls that rely on the registered subscription."""

from __future__ import annotations

import queue
import threading
import time

import grpc
import pytest
from support.inprocess import InProcessCluster
from support.rpc import code_name, create_topic, pull_once
from support.timing import within_s

from nodes.broker.topics import SubscriptionGroupConfig
from nodes.client import Producer
from nodes.common.types import Message
from nodes.store.record import iter_records
from proto import common_pb2, consumer_pb2, consumer_pb2_grpc, namesrv_pb2, namesrv_pb2_grpc

TIMEOUT_S = 10.0
QUIET_S = 0.3  # how long "no notification" is watched for


def wait_until(predicate, timeout_s: float = 5.0, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


class Client:
    """One consumer client's connection to the broker: heartbeats and its Notifications stream."""

    def __init__(self, cluster: InProcessCluster, client_id: str) -> None:
        self.cluster = cluster
        self.client_id = client_id
        # its own connection, like a separate process (channels of one process share connections)
        self.channel = grpc.insecure_channel(cluster.broker_addr, options=[("grpc.use_local_subchannel_pool", 1)])
        self.stub = consumer_pb2_grpc.ConsumerManagerStub(self.channel)
        self.notifications: queue.Queue[str | None] = queue.Queue()
        self._stream = None
        self._reader: threading.Thread | None = None

    def heartbeat(self, group: str = "cg", subscriptions: dict[str, str] | None = None, *,
                  model: str = "CLUSTERING", sub_version: int = 1) -> None:
        subscriptions = {"T": "*"} if subscriptions is None else subscriptions
        resp = self.stub.Heartbeat(consumer_pb2.HeartbeatRequest(client_id=self.client_id, consumers=[
            consumer_pb2.ConsumerData(
                group=group, consume_type="CONSUME_PASSIVELY", message_model=model,
                consume_from_where="CONSUME_FROM_LAST_OFFSET",
                subscriptions=[consumer_pb2.SubscriptionData(topic=t, expression=e, sub_version=sub_version)
                               for t, e in subscriptions.items()])]), timeout=TIMEOUT_S)
        assert resp.code == common_pb2.SUCCESS, resp.remark

    def unregister(self, group: str = "cg") -> None:
        resp = self.stub.UnregisterClient(consumer_pb2.UnregisterClientRequest(
            client_id=self.client_id, consumer_group=group), timeout=TIMEOUT_S)
        assert resp.code == common_pb2.SUCCESS

    def open_stream(self) -> None:
        """Open the Notifications stream and wait until the broker holds it."""
        before = streams_open(self.cluster)
        self._stream = self.stub.Notifications(consumer_pb2.NotificationsRequest(client_id=self.client_id))
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        wait_until(lambda: streams_open(self.cluster) > before, what="the stream to open")

    def _read(self) -> None:
        try:
            for note in self._stream:
                self.notifications.put(note.consumer_group)
        except grpc.RpcError:
            pass
        self.notifications.put(None)  # the stream ended

    def cancel_stream(self) -> None:
        self._stream.cancel()

    def next_notification(self, timeout_s: float = 5.0) -> str | None:
        return self.notifications.get(timeout=timeout_s)

    def assert_quiet(self) -> None:
        with pytest.raises(queue.Empty):
            got = self.notifications.get(timeout=QUIET_S)
            pytest.fail(f"{self.client_id} got an unexpected notification: {got!r}")

    def drain(self) -> None:
        """Forget the notifications received so far (after letting in-flight ones arrive)."""
        time.sleep(QUIET_S)
        while not self.notifications.empty():
            self.notifications.get()

    def close(self) -> None:
        if self._stream is not None:
            self._stream.cancel()
        self.channel.close()


def streams_open(cluster: InProcessCluster) -> int:
    return cluster.call(lambda: cluster.broker.status().details["notification_streams"])


def consumer_list(cluster: InProcessCluster, group: str = "cg") -> consumer_pb2.GetConsumerListResponse:
    with grpc.insecure_channel(cluster.broker_addr) as channel:
        return consumer_pb2_grpc.ConsumerManagerStub(channel).GetConsumerList(
            consumer_pb2.GetConsumerListRequest(consumer_group=group), timeout=TIMEOUT_S)


def members(cluster: InProcessCluster, group: str = "cg") -> list[str]:
    return sorted(consumer_list(cluster, group).client_ids)


@pytest.fixture
def clients(cluster):
    made: list[Client] = []

    def make(client_id: str) -> Client:
        made.append(Client(cluster, client_id))
        return made[-1]

    yield make
    for client in made:
        client.close()


def test_heartbeat_registers_the_client_and_creates_the_retry_topic(cluster, clients):
    assert code_name(consumer_list(cluster).code) == "SYSTEM_ERROR"  # nobody yet
    clients("c1").heartbeat()
    resp = consumer_list(cluster)
    assert code_name(resp.code) == "SUCCESS" and list(resp.client_ids) == ["c1"]
    details = cluster.call(lambda: cluster.broker.status().details)
    assert details["consumer_groups"] == {"cg": ["c1"]}
    assert "%RETRY%cg" in details["topics"]
    with grpc.insecure_channel(cluster.namesrv_addr) as channel:  # routed at once
        route = namesrv_pb2_grpc.NameServerStub(channel).GetRouteInfo(
            namesrv_pb2.GetRouteInfoRequest(topic="%RETRY%cg"), timeout=TIMEOUT_S)
    assert code_name(route.code) == "SUCCESS"
    assert [(q.read_queue_nums, q.perm) for q in route.route.queue_datas] == [(1, 6)]


def test_two_connections_sharing_a_client_id_are_listed_twice(cluster, clients):
    clients("dup").heartbeat()
    clients("dup").heartbeat()  # another process with the same client id: another connection
    clients("solo").heartbeat()
    assert members(cluster) == ["dup", "dup", "solo"]


def test_members_are_notified_when_a_client_joins_and_when_one_unregisters(cluster, clients):
    a, b = clients("A"), clients("B")
    a.open_stream()
    a.heartbeat()
    assert a.next_notification() == "cg"  # its own arrival is a change too
    b.heartbeat()
    assert a.next_notification() == "cg"
    assert members(cluster) == ["A", "B"]
    a.heartbeat()  # nothing changed: no notification
    a.assert_quiet()
    b.unregister()
    assert a.next_notification() == "cg"
    assert members(cluster) == ["A"]


def test_a_dropped_stream_removes_the_client_and_tells_the_others(cluster, clients):
    a, b = clients("A"), clients("B")
    a.open_stream()
    b.open_stream()
    a.heartbeat()
    b.heartbeat()
    assert members(cluster) == ["A", "B"]
    a.drain()
    b.drain()
    a.cancel_stream()
    wait_until(lambda: members(cluster) == ["B"], what="A to be removed")
    assert b.next_notification() == "cg"
    assert cluster.call(lambda: cluster.broker.status().details["consumer_groups"]) == {"cg": ["B"]}


def test_silent_clients_expire_without_a_notification(tmp_path):
    with InProcessCluster(tmp_path, time_scale=0.01) as cluster:  # channel expiry 1.2 s, scan every 100 ms
        a, b, c = Client(cluster, "A"), Client(cluster, "B"), Client(cluster, "C")
        try:
            a.open_stream()
            c.open_stream()
            for client in (a, b, c):
                client.heartbeat()
            assert members(cluster) == ["A", "B", "C"]
            a.drain()
            c.drain()
            # expired at the first housekeeping scan after expiry_ms of silence
            deadline = time.monotonic() + within_s(cluster.timing.consumer_channel_expiry_ms
                                                   + cluster.timing.client_housekeeping_ms)
            while members(cluster) != ["A"]:
                assert time.monotonic() < deadline, f"B and C never expired: {members(cluster)}"
                a.heartbeat()  # A keeps beating; B and C went silent
                time.sleep(0.05)
            assert c.next_notification() is None  # the broker closed C's channel
            a.assert_quiet()  # as in RocketMQ: no change is announced for an expiry
        finally:
            for client in (a, b, c):
                client.close()


# --- pulls without a subscription use the registered one -------------------------------------------


def _bodies(resp) -> list[bytes]:
    return [r.body for r in iter_records(resp.records)] if resp.code == common_pb2.SUCCESS else []


def test_pull_without_subscription_uses_the_registered_one(cluster, clients):
    create_topic(cluster, "Sub", 1)
    with Producer(cluster.namesrv_addr) as producer:
        producer.send(Message("Sub", b"a1", tags="TagA"))
        producer.send(Message("Sub", b"b1", tags="TagB"))
        producer.send(Message("Sub", b"a2", tags="TagA"))
    pull = dict(consumer_group="sg", topic="Sub", queue_id=0, queue_offset=0, has_subscription=False)

    resp = pull_once(cluster.broker_addr, **pull)
    assert code_name(resp.code) == "SUBSCRIPTION_NOT_EXIST"  # no consumer of sg registered yet

    clients("c1").heartbeat("sg", {"Sub": "TagA"}, sub_version=5)
    resp = pull_once(cluster.broker_addr, sub_version=5, **pull)
    assert code_name(resp.code) == "SUCCESS" and _bodies(resp) == [b"a1", b"a2"]
    assert code_name(pull_once(cluster.broker_addr, sub_version=6, **pull).code) == "SUBSCRIPTION_NOT_LATEST"
    other = {**pull, "topic": "%RETRY%sg"}
    assert code_name(pull_once(cluster.broker_addr, **other).code) == "SUBSCRIPTION_NOT_EXIST"
    # a pull that posts its own subscription keeps using it
    resp = pull_once(cluster.broker_addr, **{**pull, "has_subscription": True, "subscription_expression": "TagB"})
    assert _bodies(resp) == [b"b1"]


def test_broadcasting_pull_needs_consume_broadcast_enable(cluster, clients):
    create_topic(cluster, "Bc", 1)
    with Producer(cluster.namesrv_addr) as producer:
        producer.send(Message("Bc", b"x"))
    clients("c1").heartbeat("bg", {"Bc": "*"}, model="BROADCASTING")
    pull = dict(consumer_group="bg", topic="Bc", queue_id=0, queue_offset=0, has_subscription=False)
    assert code_name(pull_once(cluster.broker_addr, **pull).code) == "SUCCESS"
    cluster.call(cluster.broker.groups.put, SubscriptionGroupConfig("bg", consume_broadcast_enable=False))
    assert code_name(pull_once(cluster.broker_addr, **pull).code) == "NO_PERMISSION"
