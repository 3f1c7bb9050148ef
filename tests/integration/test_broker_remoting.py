"""A broker's RocketMQ remoting listener spoken to with raw frames over a socket, beside
mqlab's own gRPC clients on the same broker: sends come back as the same records, consumer
groups mix both worlds, and NOTIFY reaches remoting members on their heartbeat connection."""

from __future__ import annotations

import contextlib
import json
import queue
import socket
import struct
import threading
import time

import pytest
from support.rpc import create_topic

from nodes.broker.transport.remoting_admin import object_keyed_map_from_text
from nodes.client import (
    ConsumeConcurrentlyStatus,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
)
from nodes.common.types import PullStatus
from nodes.remoting.command import RemotingCommand, RequestCode, decode, encode, encode_properties
from nodes.store import message_batch
from nodes.store.record import iter_records

TIMEOUT_S = 10.0
TOPIC = "RemotingT"


class RawClient:
    """One TCP connection speaking remoting frames: answers by opaque, server requests queued."""

    def __init__(self, addr: str) -> None:
        host, _, port = addr.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
        self._opaque = 0
        self._answers: dict[int, queue.Queue[RemotingCommand]] = {}
        self._lock = threading.Lock()
        self.server_requests: queue.Queue[RemotingCommand] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            while True:
                (length,) = struct.unpack(">i", self._exactly(4))
                cmd = decode(self._exactly(length))
                if cmd.is_response:
                    with self._lock:
                        self._answers.setdefault(cmd.opaque, queue.Queue()).put(cmd)
                else:
                    self.server_requests.put(cmd)
        except OSError:
            pass

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    def send_raw_json(self, code: int, ext: dict[str, object], body: bytes = b"") -> int:
        """A frame whose JSON header carries numbers and booleans in extFields, as ali-ons writes it."""
        with self._lock:
            self._opaque += 1
            opaque = self._opaque
            self._answers[opaque] = queue.Queue()
        header = json.dumps({"code": code, "language": "JAVA", "version": 121, "opaque": opaque, "flag": 0,
                             "extFields": ext}).encode()
        self.sock.sendall(struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body)
        return opaque

    def request(self, code: int, ext: dict[str, object] | None = None, body: bytes = b"",
                timeout_s: float = TIMEOUT_S) -> RemotingCommand:
        with self._lock:
            self._opaque += 1
            opaque = self._opaque
            self._answers[opaque] = queue.Queue()
        self.sock.sendall(encode(RemotingCommand(code=code, opaque=opaque, language="CPP", version=63,
                                                 ext={k: str(v) for k, v in (ext or {}).items()}, body=body)))
        return self.answer(opaque, timeout_s)

    def answer(self, opaque: int, timeout_s: float = TIMEOUT_S) -> RemotingCommand:
        return self._answers[opaque].get(timeout=timeout_s)

    def close(self) -> None:
        # shutdown first: a plain close while the reader thread sits in recv sends no FIN
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


@pytest.fixture
def remoting(cluster):
    addr = cluster.call(lambda: cluster.broker.remoting_addr)
    made: list[RawClient] = []

    def connect() -> RawClient:
        made.append(RawClient(addr))
        return made[-1]

    yield connect
    for client in made:
        client.close()


def send_v1(client: RawClient, body: bytes, queue_id: int, props: dict[str, str], *, batch: bool = False
            ) -> RemotingCommand:
    return client.request(RequestCode.SEND_MESSAGE, {
        "producerGroup": "PG", "topic": TOPIC, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
        "queueId": queue_id, "sysFlag": 0, "bornTimestamp": int(time.time() * 1000), "flag": 0,
        "properties": encode_properties(props), "reconsumeTimes": 0, "unitMode": 0, "batch": "1" if batch else "0"},
        body)


def pull(client: RawClient, queue_id: int, queue_offset: int, *, sys_flag: int = 4, group: str = "RG",
         timeout_ms: int = 1_000, **extra: object) -> RemotingCommand:
    return client.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": group, "topic": TOPIC, "queueId": queue_id, "queueOffset": queue_offset, "maxMsgNums": 32,
        "sysFlag": sys_flag, "commitOffset": -1, "suspendTimeoutMillis": timeout_ms, "subscription": "*",
        "subVersion": 0, **extra})


def heartbeat_body(client_id: str, group: str) -> bytes:
    return json.dumps({"clientID": client_id, "consumerDataSet": [{
        "consumeFromWhere": 0, "consumeType": 1, "groupName": group, "messageModel": 1,
        "subscriptionDataSet": [{"subString": "*", "subVersion": "1", "topic": TOPIC}]}]}).encode()


def test_v1_v2_and_batch_sends_pull_back_as_records(cluster, remoting):
    client = remoting()
    v1 = send_v1(client, b"one", 0, {"TAGS": "A", "KEYS": "k1", "UNIQ_KEY": "U1"})
    assert v1.code == 0 and v1.ext["queueOffset"] == "0", v1.remark
    opaque = client.send_raw_json(RequestCode.SEND_MESSAGE_V2, {
        "a": "PG", "b": TOPIC, "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": 1_700_000_000_000, "h": 0,
        "i": encode_properties({"TAGS": "B", "KEYS": "k2"}), "j": 0, "k": False}, b"two")
    v2 = client.answer(opaque)
    assert v2.code == 0 and v2.ext["queueOffset"] == "1", v2.remark
    batch_body = b"".join(message_batch.encode_entry(f"b{i}".encode(), 0, {"UNIQ_KEY": f"BU{i}"}) for i in range(3))
    batch = send_v1(client, batch_body, 0, {"WAIT": "true"}, batch=True)
    assert batch.code == 0 and len(batch.ext["msgId"].split(",")) == 3, batch.remark

    answer = pull(client, 0, 0)
    assert answer.code == 0 and answer.ext["nextBeginOffset"] == "5"
    records = list(iter_records(answer.body))
    assert [r.body for r in records] == [b"one", b"two", b"b0", b"b1", b"b2"]
    assert (records[0].tags, records[0].keys, records[0].properties["UNIQ_KEY"]) == ("A", "k1", "U1")
    assert (records[1].tags, records[1].born_timestamp_ms) == ("B", 1_700_000_000_000)
    assert [r.offset_msg_id for r in records[2:]] == batch.ext["msgId"].split(",")

    assert pull(client, 0, 5, sys_flag=4 | 2, timeout_ms=200).code == 19  # long-polled, then not found
    assert client.request(999).code == 3


def test_a_long_polled_pull_answers_when_a_message_arrives(unscanned_cluster):
    # no hold scan on this broker: a held pull that answers with the message was woken by its arrival
    addr = unscanned_cluster.call(lambda: unscanned_cluster.broker.remoting_addr)
    puller, sender = RawClient(addr), RawClient(addr)
    try:
        assert send_v1(sender, b"first", 1, {}).code == 0
        opaque_holder: list[RemotingCommand] = []
        thread = threading.Thread(target=lambda: opaque_holder.append(
            pull(puller, 1, 1, sys_flag=4 | 2, timeout_ms=8_000)))
        thread.start()
        time.sleep(0.3)
        assert send_v1(sender, b"second", 1, {}).code == 0
        thread.join(TIMEOUT_S)
        [answer] = opaque_holder
        assert answer.code == 0 and [r.body for r in iter_records(answer.body)] == [b"second"]
    finally:
        puller.close()
        sender.close()


def test_heartbeat_then_consumer_list_and_close_unregisters(cluster, remoting):
    first, second = remoting(), remoting()
    assert first.request(RequestCode.HEART_BEAT, body=heartbeat_body("c-1", "MixG")).code == 0
    assert second.request(RequestCode.HEART_BEAT, body=heartbeat_body("c-2", "MixG")).code == 0
    listed = first.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "MixG"})
    assert listed.code == 0 and sorted(json.loads(listed.body)["consumerIdList"]) == ["c-1", "c-2"]
    second.close()
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        listed = first.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "MixG"})
        assert listed.code == 0, listed
        if json.loads(listed.body)["consumerIdList"] == ["c-1"]:
            break
        assert time.monotonic() < deadline, "the closed connection's client is still listed"
        time.sleep(0.05)
    empty = first.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "NoSuchGroup"})
    assert empty.code == 1 and "no consumer for this group" in empty.remark


def _notified(client: RawClient, group: str, budget_s: float = TIMEOUT_S) -> bool:
    deadline = time.monotonic() + budget_s
    while time.monotonic() < deadline:
        try:
            cmd = client.server_requests.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            return False
        if cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED and cmd.ext.get("consumerGroup") == group:
            return True
    return False


def test_remoting_members_are_notified_when_a_grpc_push_consumer_joins(cluster, remoting):
    create_topic(cluster, TOPIC, 4)
    first, second = remoting(), remoting()
    assert first.request(RequestCode.HEART_BEAT, body=heartbeat_body("r-1", "NotifyG")).code == 0
    assert second.request(RequestCode.HEART_BEAT, body=heartbeat_body("r-2", "NotifyG")).code == 0
    time.sleep(0.3)
    for client in (first, second):
        while not client.server_requests.empty():
            client.server_requests.get()
    consumer = PushConsumer(cluster.namesrv_addr, "NotifyG", timing=cluster.timing)
    consumer.subscribe(TOPIC)
    consumer.register_listener(lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    with consumer:
        assert _notified(first, "NotifyG") and _notified(second, "NotifyG")
        listed = first.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "NotifyG"})
        assert len(json.loads(listed.body)["consumerIdList"]) == 3  # gRPC and remoting members together


def test_a_remoting_send_is_read_by_the_pull_consumer_with_its_properties(cluster, remoting):
    client = remoting()
    answer = send_v1(client, b"from-remoting", 2, {"TAGS": "TagX", "KEYS": "key-1 key-2", "UNIQ_KEY": "UNIQ-1",
                                                   "color": "blue"})
    assert answer.code == 0, answer.remark
    with PullConsumer(cluster.namesrv_addr, "PullG", timing=cluster.timing) as consumer:
        result = consumer.pull(MessageQueue(TOPIC, "broker-a", 2), 0)
    assert result.status == PullStatus.FOUND
    [msg] = result.messages
    assert msg.body == b"from-remoting" and msg.tags == "TagX" and msg.keys == "key-1 key-2"
    assert msg.properties["color"] == "blue" and msg.msg_id == "UNIQ-1"
    assert msg.offset_msg_id == answer.ext["msgId"]


def test_a_producer_send_is_pulled_over_remoting_with_its_properties(cluster, remoting):
    create_topic(cluster, TOPIC, 4)
    with Producer(cluster.namesrv_addr, timing=cluster.timing) as producer:
        sent = producer.send(Message(TOPIC, b"from-grpc", tags="TagY", keys="kk", properties={"size": "L"}))
    queue_id, queue_offset = sent.message_queue.queue_id, sent.queue_offset
    answer = pull(remoting(), queue_id, queue_offset)
    assert answer.code == 0
    record = next(iter_records(answer.body))
    assert record.body == b"from-grpc" and record.tags == "TagY" and record.keys == "kk"
    assert record.properties["size"] == "L" and record.properties["UNIQ_KEY"] == sent.msg_id


def test_mqadmin_update_sub_group_makes_a_group_orderly_with_its_retries(cluster, remoting):
    client = remoting()
    config = {"groupName": "RemotingFifo", "consumeEnable": True, "consumeBroadcastEnable": True,
              "consumeMessageOrderly": True, "retryQueueNums": 1, "retryMaxTimes": 3, "brokerId": 0,
              "whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": True}
    made = client.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(config).encode())
    assert made.code == 0, made.remark
    stored = cluster.call(lambda: cluster.broker.groups.groups["RemotingFifo"])
    assert (stored.consume_message_orderly, stored.retry_max_times) == (True, 3)
    # the body replaces the config: what it leaves out takes RocketMQ's default
    assert client.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                          body=b'{"groupName":"RemotingFifo"}').code == 0
    stored = cluster.call(lambda: cluster.broker.groups.groups["RemotingFifo"])
    assert (stored.consume_message_orderly, stored.retry_max_times) == (False, 16)
    bad = client.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=b'{"groupName":"bad group!"}')
    assert bad.code != 0 and "bad group!" in bad.remark
    no_name = client.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=b'{"retryMaxTimes":1}')
    assert no_name.code != 0 and "groupName" in no_name.remark


def test_invoke_broker_to_reset_offset_answers_the_tool_and_tells_each_client_in_its_shape(cluster, remoting):
    """INVOKE_BROKER_TO_RESET_OFFSET (222) from a tool: the answer and the stored offsets are the first
    message at or after the time, and every member's heartbeat connection gets a oneway
    RESET_CONSUMER_CLIENT_OFFSET (220): a Java client fastjson's MessageQueue-keyed map, a C++ client
    the list its decoder reads (ResetOffsetBodyForC)."""
    create_topic(cluster, TOPIC, 2)
    sender, cpp, java, tool = remoting(), remoting(), remoting(), remoting()
    for i in range(3):
        assert send_v1(sender, f"early-{i}".encode(), 0, {}).code == 0
    time.sleep(0.05)
    reset_ms = int(time.time() * 1000)
    time.sleep(0.05)
    for i in range(2):
        assert send_v1(sender, f"late-{i}".encode(), 0, {}).code == 0
    assert cpp.request(RequestCode.HEART_BEAT, body=heartbeat_body("cpp-1", "ResetG")).code == 0
    java_hb = java.send_raw_json(RequestCode.HEART_BEAT, {}, heartbeat_body("java-1", "ResetG"))
    assert java.answer(java_hb).code == 0
    assert cpp.request(RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "ResetG", "topic": TOPIC, "queueId": 0,
                                                            "commitOffset": 5}).code == 0

    opaque = tool.send_raw_json(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                                {"topic": TOPIC, "group": "ResetG", "timestamp": reset_ms, "isForce": True})
    answer = tool.answer(opaque)
    assert answer.code == 0, answer.remark
    table = {(k["topic"], k["queueId"]): v for k, v in
             object_keyed_map_from_text(answer.body.decode()[len('{"offsetTable":'):-1])}
    assert table == {(TOPIC, 0): 3, (TOPIC, 1): 0}
    stored = cpp.request(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "ResetG", "topic": TOPIC, "queueId": 0})
    assert stored.code == 0 and stored.ext["offset"] == "3"

    to_cpp, to_java = _reset_frame(cpp), _reset_frame(java)
    for frame in (to_cpp, to_java):
        assert frame.flag & 2  # oneway: the client answers nothing
        assert {k: frame.ext[k] for k in ("topic", "group", "timestamp", "isForce")} == \
            {"topic": TOPIC, "group": "ResetG", "timestamp": str(reset_ms), "isForce": "true"}
    assert sorted((e["topic"], e["queueId"], e["offset"]) for e in json.loads(to_cpp.body)["offsetTable"]) == \
        [(TOPIC, 0, 3), (TOPIC, 1, 0)]
    assert {(k["topic"], k["queueId"]): v for k, v in
            object_keyed_map_from_text(to_java.body.decode()[len('{"offsetTable":'):-1])} == table

    unknown = tool.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                           {"topic": TOPIC, "group": "NoSuchGroup", "timestamp": reset_ms, "isForce": "true"})
    assert unknown.code == 26 and "NoSuchGroup" in unknown.remark  # SUBSCRIPTION_GROUP_NOT_EXIST


def _reset_frame(client: RawClient) -> RemotingCommand:
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        frame = client.server_requests.get(timeout=max(0.01, deadline - time.monotonic()))
        if frame.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
            return frame
