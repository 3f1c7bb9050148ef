"""The operator queries over real gRPC on a real master, slave and name server: topic stats after
sends, consume stats with live push consumers (last puller, lag 0 once consumed, an orderly
consumer's lock holder), the connection list, runtime on both roles, a topic deleted on the
master leaving the name server's routes, and bad names answered with a code."""

from __future__ import annotations

import itertools
import json
import os
import socket
import threading
from collections.abc import Iterator

import grpc
import pytest
from support import namesrv_remoting as remoting
from support.cluster_rpc import wait_for, wait_slave_caught_up

from harness import LocalCluster
from harness.spec import ClusterSpec
from nodes.broker.transport.remoting_admin import object_keyed_map_from_text
from nodes.client import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    Message,
    Producer,
    PushConsumer,
)
from nodes.common.codes import ResponseCode
from nodes.remoting.command import RemotingCommand, RequestCode, encode
from proto import broker_pb2, broker_pb2_grpc, common_pb2, namesrv_pb2, namesrv_pb2_grpc

# one worker runs the whole module, so its tests share one cluster
pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("admin-queries")]

TIME_SCALE = float(os.environ.get("MQLAB_TEST_TIME_SCALE", "0.05"))
TOPIC = "AdminTopic"
DOOMED = "DoomedTopic"
QUEUES = 4
SENT = 40
PUSH_GROUP = "admin_push"
ORDERLY_GROUP = "admin_orderly"
RPC_TIMEOUT_S = 10.0
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
_opaques = itertools.count(1)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[LocalCluster]:
    spec = ClusterSpec.default(time_scale=TIME_SCALE)
    with LocalCluster(spec, run_dir=tmp_path_factory.mktemp("admin") / "run") as cl:
        with Producer(cl.namesrv_addr, timing=cl.timing, default_topic_queue_nums=QUEUES) as producer:
            for i in range(SENT):
                producer.send(Message(TOPIC, f"m{i}".encode()))
            producer.send(Message(DOOMED, b"to be deleted"))
        cl.wait_until_routable(TOPIC)
        cl.wait_until_routable(DOOMED)
        yield cl
        assert not cl.unexpected_exits, f"nodes died unexpectedly: {cl.unexpected_exits}"


def broker(cl: LocalCluster, node_id: str) -> tuple[grpc.Channel, broker_pb2_grpc.BrokerStub]:
    channel = grpc.insecure_channel(cl.node(node_id).addr)
    return channel, broker_pb2_grpc.BrokerStub(channel)


def call(cl: LocalCluster, node_id: str, method: str, request: object) -> object:
    channel, stub = broker(cl, node_id)
    with channel:
        return getattr(stub, method)(request, timeout=RPC_TIMEOUT_S)


def namesrv(cl: LocalCluster, method: str, request: object) -> object:
    with grpc.insecure_channel(cl.namesrv_addr) as channel:
        return getattr(namesrv_pb2_grpc.NameServerStub(channel), method)(request, timeout=RPC_TIMEOUT_S)


def consume_stats(cl: LocalCluster, node_id: str, group: str, topic: str = "") -> broker_pb2.GetConsumeStatsResponse:
    return call(cl, node_id, "GetConsumeStats", broker_pb2.GetConsumeStatsRequest(consumer_group=group, topic=topic))


def test_topic_stats_after_sends_on_master_and_slave(cluster):
    wait_slave_caught_up(cluster)
    master = call(cluster, "broker-a-0", "GetTopicStats", broker_pb2.GetTopicStatsRequest(topic=TOPIC))
    assert master.code == common_pb2.SUCCESS and master.broker_id == 0
    assert [q.queue_id for q in master.queues] == list(range(QUEUES))
    assert sum(q.max_offset - q.min_offset for q in master.queues) == SENT
    assert all(q.last_store_timestamp_ms > 0 for q in master.queues if q.max_offset > 0)
    slave = call(cluster, "broker-a-1", "GetTopicStats", broker_pb2.GetTopicStatsRequest(topic=TOPIC))
    assert slave.code == common_pb2.SUCCESS and slave.broker_id == 1
    assert list(slave.queues) == list(master.queues)


def test_consume_stats_and_connections_with_live_push_consumers(cluster):
    consumed: set[str] = set()
    lock = threading.Lock()

    def listener(msgs, ctx):
        with lock:
            consumed.update(m.body.decode() for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    push = PushConsumer(cluster.namesrv_addr, PUSH_GROUP, consume_from_where=FIRST, timing=cluster.timing,
                        instance_name="admin-push")
    push.subscribe(TOPIC)
    push.register_listener(listener)
    orderly = PushConsumer(cluster.namesrv_addr, ORDERLY_GROUP, consume_from_where=FIRST, timing=cluster.timing,
                           instance_name="admin-orderly")
    orderly.subscribe(TOPIC)
    orderly.register_orderly_listener(lambda msgs, ctx: ConsumeOrderlyStatus.SUCCESS)
    with push, orderly:  # started on entry
        wait_for(lambda: len(consumed) == SENT, what="the push consumer to consume every message")

        def caught_up() -> broker_pb2.GetConsumeStatsResponse | None:
            stats = consume_stats(cluster, "broker-a-0", PUSH_GROUP, TOPIC)
            done = stats.code == common_pb2.SUCCESS and all(
                q.consumer_offset == q.broker_offset and q.last_puller_client_id == push.client_id
                for q in stats.queues)
            return stats if done else None

        stats = wait_for(caught_up, what="lag 0 and the consumer as every queue's last puller")
        assert len(stats.queues) == QUEUES and all(0 <= q.last_pull_age_ms < 60_000 for q in stats.queues)
        assert all(q.last_consumed_store_timestamp_ms > 0 for q in stats.queues if q.consumer_offset > 0)
        assert all(q.lock_holder_client_id == "" for q in stats.queues)  # a concurrent consumer locks nothing
        # every topic of the group: its subscription and its retry topic
        every = consume_stats(cluster, "broker-a-0", PUSH_GROUP)
        assert {q.topic for q in every.queues} == {TOPIC, f"%RETRY%{PUSH_GROUP}"}

        locked = wait_for(lambda: [q for q in consume_stats(cluster, "broker-a-0", ORDERLY_GROUP, TOPIC).queues
                                   if q.lock_holder_client_id == orderly.client_id],
                          what="the orderly consumer shown as its queues' lock holder")
        assert all(q.lock_lease_left_ms > 0 for q in locked)

        connections = call(cluster, "broker-a-0", "GetConsumerConnections",
                           broker_pb2.GetConsumerConnectionsRequest(consumer_group=PUSH_GROUP))
        assert connections.code == common_pb2.SUCCESS
        assert [(c.client_id, c.protocol) for c in connections.connections] == [(push.client_id, "grpc")]
        assert connections.connections[0].peer.startswith("127.0.0.1:")  # the address alone, no "ipv4:"
        assert connections.consume_type == "CONSUME_PASSIVELY"
        # a push consumer subscribes to its retry topic too, as RocketMQ's does
        assert [s.topic for s in connections.subscriptions] == [f"%RETRY%{PUSH_GROUP}", TOPIC]

        groups = {g.group: g for g in call(cluster, "broker-a-0", "ListConsumerGroups",
                                           broker_pb2.ListConsumerGroupsRequest()).groups}
        assert groups[PUSH_GROUP].online_clients == 1 and TOPIC in groups[PUSH_GROUP].topics
        assert groups[ORDERLY_GROUP].online_clients == 1

        # the slave answers from its copied offsets, with no lock holder (locks live on the master)
        def slave_caught_up() -> broker_pb2.GetConsumeStatsResponse | None:
            stats = consume_stats(cluster, "broker-a-1", PUSH_GROUP, TOPIC)
            ok = stats.code == common_pb2.SUCCESS and all(q.consumer_offset == q.broker_offset
                                                          for q in stats.queues)
            return stats if ok else None

        slave = wait_for(slave_caught_up, what="the slave's copied offsets to show lag 0")
        assert all(q.lock_holder_client_id == "" for q in slave.queues)

    gone = call(cluster, "broker-a-0", "GetConsumerConnections",
                broker_pb2.GetConsumerConnectionsRequest(consumer_group=PUSH_GROUP))
    assert gone.code == common_pb2.CONSUMER_NOT_ONLINE and not gone.connections


def test_runtime_on_master_and_slave(cluster):
    master_addr = cluster.node("broker-a-0").addr
    master = call(cluster, "broker-a-0", "GetBrokerRuntime", broker_pb2.GetBrokerRuntimeRequest())
    assert master.code == common_pb2.SUCCESS and master.role == "ASYNC_MASTER" and master.master_addr == ""
    assert master.max_phys_offset > 0 and 0 < master.disk_used_ratio <= 1 and master.disk_free_bytes > 0
    assert master.time_scale == TIME_SCALE and master.topics > 0 and not master.writes_refused

    def slave_runtime() -> broker_pb2.GetBrokerRuntimeResponse | None:
        slave = call(cluster, "broker-a-1", "GetBrokerRuntime", broker_pb2.GetBrokerRuntimeRequest())
        return slave if slave.slave_lag_bytes >= 0 else None

    slave = wait_for(slave_runtime, what="the slave to know its lag")
    assert slave.role == "SLAVE" and slave.broker_id == 1 and slave.master_addr == master_addr
    assert slave.writes_refused and "slave" in slave.writes_refused_reason
    master = wait_for(lambda: (m := call(cluster, "broker-a-0", "GetBrokerRuntime",
                                         broker_pb2.GetBrokerRuntimeRequest())).slave_lag_bytes >= 0 and m,
                      what="the master to see its slave's acknowledged offset")
    assert master.slave_lag_bytes <= master.max_phys_offset


def test_delete_topic_on_the_master_removes_its_route(cluster):
    topics = namesrv(cluster, "GetTopicList", namesrv_pb2.GetTopicListRequest())
    assert topics.code == common_pb2.SUCCESS and {TOPIC, DOOMED} <= set(topics.topics)
    assert topics.time_scale == TIME_SCALE

    on_slave = call(cluster, "broker-a-1", "DeleteTopic", broker_pb2.DeleteTopicRequest(topic=DOOMED))
    assert on_slave.code == common_pb2.NO_PERMISSION and "master" in on_slave.remark
    deleted = call(cluster, "broker-a-0", "DeleteTopic", broker_pb2.DeleteTopicRequest(topic=DOOMED))
    assert deleted.code == common_pb2.SUCCESS, deleted.remark
    # registered before the answer: the route is gone at once
    route = namesrv(cluster, "GetRouteInfo", namesrv_pb2.GetRouteInfoRequest(topic=DOOMED))
    assert route.code == common_pb2.TOPIC_ROUTE_NOT_EXIST
    assert DOOMED not in namesrv(cluster, "GetTopicList", namesrv_pb2.GetTopicListRequest()).topics
    stats = call(cluster, "broker-a-0", "GetTopicStats", broker_pb2.GetTopicStatsRequest(topic=DOOMED))
    assert stats.code == common_pb2.TOPIC_NOT_EXIST
    # the slave follows the master's table at its next sync
    wait_for(lambda: call(cluster, "broker-a-1", "GetTopicStats", broker_pb2.GetTopicStatsRequest(topic=DOOMED)
                          ).code == common_pb2.TOPIC_NOT_EXIST, what="the slave to drop the topic too")
    again = call(cluster, "broker-a-0", "DeleteTopic", broker_pb2.DeleteTopicRequest(topic=DOOMED))
    assert again.code == common_pb2.TOPIC_NOT_EXIST


@pytest.mark.parametrize(("method", "request_", "code"), [
    ("GetTopicStats", broker_pb2.GetTopicStatsRequest(topic=""), common_pb2.INVALID_ARGUMENT),
    ("GetTopicStats", broker_pb2.GetTopicStatsRequest(topic="no such/topic"), common_pb2.INVALID_ARGUMENT),
    ("GetTopicStats", broker_pb2.GetTopicStatsRequest(topic="NoSuchTopic"), common_pb2.TOPIC_NOT_EXIST),
    ("GetConsumeStats", broker_pb2.GetConsumeStatsRequest(consumer_group=""), common_pb2.INVALID_ARGUMENT),
    ("GetConsumeStats", broker_pb2.GetConsumeStatsRequest(consumer_group="nobody_here"),
     common_pb2.SUBSCRIPTION_GROUP_NOT_EXIST),
    ("GetConsumeStats", broker_pb2.GetConsumeStatsRequest(consumer_group=PUSH_GROUP, topic="NoSuchTopic"),
     common_pb2.TOPIC_NOT_EXIST),
    ("GetConsumerConnections", broker_pb2.GetConsumerConnectionsRequest(consumer_group="x" * 300),
     common_pb2.INVALID_ARGUMENT),
    ("GetConsumerConnections", broker_pb2.GetConsumerConnectionsRequest(consumer_group="nobody_here"),
     common_pb2.CONSUMER_NOT_ONLINE),
    ("DeleteTopic", broker_pb2.DeleteTopicRequest(topic=""), common_pb2.INVALID_ARGUMENT),
    ("DeleteTopic", broker_pb2.DeleteTopicRequest(topic="%RETRY%admin_push"), common_pb2.INVALID_ARGUMENT),
    ("DeleteTopic", broker_pb2.DeleteTopicRequest(topic="SCHEDULE_TOPIC_XXXX"), common_pb2.INVALID_ARGUMENT),
])
def test_bad_names_answer_a_code_and_a_remark(cluster, method, request_, code):
    for node_id in ("broker-a-0", "broker-a-1"):
        answer = call(cluster, node_id, method, request_)
        if node_id == "broker-a-1" and method == "DeleteTopic" and request_.topic:
            assert answer.code == common_pb2.NO_PERMISSION  # a slave refuses every deletion
            continue
        assert answer.code == code and answer.remark, (node_id, answer)


# --- the same requests over RocketMQ 4.x remoting -------------------------------------------------

REMOTING_GROUP = "admin_remoting"
REMOTING_CLIENT = "127.0.0.1@raw-admin"
REMOTING_TOPIC = "RemotingAdminTopic"


def ask(sock: socket.socket, code: int, ext: dict[str, str] | None = None, body: bytes = b"",
        language: str = "JAVA", version: int = 399) -> RemotingCommand:
    """One request and its answer; server requests meanwhile (NOTIFY after a heartbeat) are skipped."""
    opaque = next(_opaques)
    sock.sendall(encode(RemotingCommand(code=code, opaque=opaque, ext=dict(ext or {}), body=body,
                                        language=language, version=version)))
    while True:
        answer = remoting.read_answer(sock)
        if answer.is_response:
            assert answer.opaque == opaque, answer
            return answer


def offset_table(body: bytes) -> dict[tuple[str, str, int], dict[str, int]]:
    """A TopicStatsTable's or ConsumeStats' offsetTable (fastjson's MessageQueue-keyed map)."""
    text = body.decode()
    start = text.index('"offsetTable":') + len('"offsetTable":')
    pairs = object_keyed_map_from_text(text[start:-1])
    return {(mq["topic"], mq["brokerName"], mq["queueId"]): value for mq, value in pairs}


def test_operator_requests_over_remoting(cluster):
    wait_slave_caught_up(cluster)
    master, slave = cluster.node("broker-a-0"), cluster.node("broker-a-1")
    with remoting.connect(master.remoting_addr) as sock, remoting.connect(slave.remoting_addr) as slave_sock:
        created = ask(sock, RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": REMOTING_TOPIC, "defaultTopic": "TBW102", "readQueueNums": "2", "writeQueueNums": "2",
            "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"})
        assert created.code == ResponseCode.SUCCESS, created.remark
        fresh = offset_table(ask(sock, RequestCode.GET_TOPIC_STATS_INFO, {"topic": REMOTING_TOPIC}).body)
        assert fresh == {(REMOTING_TOPIC, "broker-a", q): {"lastUpdateTimestamp": 0, "maxOffset": 0, "minOffset": 0}
                         for q in range(2)}
        stats = offset_table(ask(sock, RequestCode.GET_TOPIC_STATS_INFO, {"topic": TOPIC}).body)
        assert sum(v["maxOffset"] - v["minOffset"] for v in stats.values()) == SENT and len(stats) == QUEUES
        assert ask(sock, RequestCode.GET_TOPIC_STATS_INFO, {"topic": "NoSuchTopic"}).code == \
            ResponseCode.TOPIC_NOT_EXIST

        # a C++-style consumer heartbeats: its language and version show in the connection list
        heartbeat = {"clientID": REMOTING_CLIENT, "consumerDataSet": [{
            "groupName": REMOTING_GROUP, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
            "subscriptionDataSet": [{"topic": TOPIC, "subString": "TagA || TagB", "subVersion": 5}]}]}
        beat = ask(sock, RequestCode.HEART_BEAT, body=json.dumps(heartbeat).encode(), language="CPP", version=63)
        assert beat.code == ResponseCode.SUCCESS, beat.remark
        listed = json.loads(ask(sock, RequestCode.GET_CONSUMER_CONNECTION_LIST,
                                {"consumerGroup": REMOTING_GROUP}).body)
        assert [(x["clientId"], x["language"], x["version"]) for x in listed["connectionSet"]] == [
            (REMOTING_CLIENT, "CPP", 63)]
        assert listed["consumeFromWhere"] == "CONSUME_FROM_FIRST_OFFSET" and listed["messageModel"] == "CLUSTERING"
        assert listed["subscriptionTable"][TOPIC]["tagsSet"] == ["TagA", "TagB"]
        over_grpc = call(cluster, "broker-a-0", "GetConsumerConnections",
                         broker_pb2.GetConsumerConnectionsRequest(consumer_group=REMOTING_GROUP))
        assert [(x.client_id, x.protocol, x.language, x.version) for x in over_grpc.connections] == [
            (REMOTING_CLIENT, "remoting", "CPP", 63)]
        assert ask(sock, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "nobody_here"}).code == \
            ResponseCode.CONSUMER_NOT_ONLINE

        # a commit and a pull on that connection: consume stats over remoting, the puller over gRPC
        queue0 = stats[(TOPIC, "broker-a", 0)]["maxOffset"]
        commit = ask(sock, RequestCode.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": REMOTING_GROUP, "topic": TOPIC, "queueId": "0", "commitOffset": str(queue0)})
        assert commit.code == ResponseCode.SUCCESS, commit.remark
        ask(sock, RequestCode.PULL_MESSAGE, {"consumerGroup": REMOTING_GROUP, "topic": TOPIC, "queueId": "1",
                                             "queueOffset": "0", "maxMsgNums": "8", "sysFlag": "0",
                                             "commitOffset": "-1", "suspendTimeoutMillis": "0", "subVersion": "5"})
        progress = offset_table(ask(sock, RequestCode.GET_CONSUME_STATS,
                                    {"consumerGroup": REMOTING_GROUP, "topic": TOPIC}).body)
        assert progress[(TOPIC, "broker-a", 0)]["consumerOffset"] == progress[(TOPIC, "broker-a", 0)][
            "brokerOffset"] == queue0
        assert progress[(TOPIC, "broker-a", 1)]["consumerOffset"] == 0  # never committed
        puller = consume_stats(cluster, "broker-a-0", REMOTING_GROUP, TOPIC).queues[1]
        assert puller.last_puller_client_id == REMOTING_CLIENT

        for node_sock, role in ((sock, "ASYNC_MASTER"), (slave_sock, "SLAVE")):
            table = json.loads(ask(node_sock, RequestCode.GET_BROKER_RUNTIME_INFO).body)["table"]
            assert table["brokerRole"] == role and int(table["commitLogMaxOffset"]) > 0
            assert float(table["timeScale"]) == TIME_SCALE and all(isinstance(v, str) for v in table.values())

        # bad input: a missing field, a bad name, a retry topic; each answered, the connection kept
        assert ask(sock, RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "NoCounts"}).code != ResponseCode.SUCCESS
        bad_name = ask(sock, RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": "bad name", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"})
        assert bad_name.code != ResponseCode.SUCCESS and "bad name" in bad_name.remark
        retry = ask(sock, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": f"%RETRY%{REMOTING_GROUP}"})
        assert retry.code != ResponseCode.SUCCESS and "retry" in retry.remark
        assert ask(sock, RequestCode.GET_CONSUME_STATS, {"consumerGroup": ""}).code != ResponseCode.SUCCESS

        refused = ask(slave_sock, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": REMOTING_TOPIC})
        assert refused.code == ResponseCode.NO_PERMISSION
        deleted = ask(sock, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": REMOTING_TOPIC})
        assert deleted.code == ResponseCode.SUCCESS, deleted.remark
    with remoting.connect(cluster.namesrv_remoting_addr) as ns_sock:
        topic_list = ask(ns_sock, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        assert topic_list.code == ResponseCode.SUCCESS
        topics = json.loads(topic_list.body)["topicList"]
        assert TOPIC in topics and REMOTING_TOPIC not in topics
