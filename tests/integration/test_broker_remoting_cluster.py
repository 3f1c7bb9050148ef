"""The whole remoting path in a real cluster of processes, as a RocketMQ client walks it: the
name server's route names each broker's remoting listener, a send to the master's listener
auto-creates the topic and gets a route, the record pulls back from the master and, once
replicated, from the slave; the slave refuses sends."""

from __future__ import annotations

import itertools
import time

import pytest
from support import namesrv_remoting

from harness import LocalCluster
from harness.spec import ClusterSpec
from nodes.remoting.command import RemotingCommand, RequestCode, encode, encode_properties
from nodes.store.record import iter_records

pytestmark = pytest.mark.cluster

TIME_SCALE = 0.05
TOPIC = "RemotingClusterT"
_opaques = itertools.count(1)


@pytest.fixture
def local_cluster(tmp_path):
    spec = ClusterSpec.default(time_scale=TIME_SCALE)
    with LocalCluster(spec, time_scale=TIME_SCALE, run_dir=tmp_path / "run") as cluster:
        yield cluster
        assert not cluster.unexpected_exits, f"nodes died unexpectedly: {cluster.unexpected_exits}"


def call(addr: str, code: int, ext: dict[str, object], body: bytes = b"") -> RemotingCommand:
    with namesrv_remoting.connect(addr) as sock:
        opaque = next(_opaques)
        sock.sendall(encode(RemotingCommand(code=code, opaque=opaque, ext={k: str(v) for k, v in ext.items()},
                                            body=body)))
        answer = namesrv_remoting.read_answer(sock)
    assert answer.opaque == opaque and answer.is_response
    return answer


def send(addr: str, body: bytes, queue_id: int) -> RemotingCommand:
    return call(addr, RequestCode.SEND_MESSAGE, {
        "producerGroup": "PG", "topic": TOPIC, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
        "queueId": queue_id, "sysFlag": 0, "bornTimestamp": int(time.time() * 1000), "flag": 0,
        "properties": encode_properties({"TAGS": "T", "UNIQ_KEY": "U-1"}), "reconsumeTimes": 0, "batch": "0"}, body)


def pull(addr: str, queue_id: int) -> RemotingCommand:
    return call(addr, RequestCode.PULL_MESSAGE, {
        "consumerGroup": "RG", "topic": TOPIC, "queueId": queue_id, "queueOffset": 0, "maxMsgNums": 32,
        "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 1_000, "subscription": "*", "subVersion": 0})


def until(fetch, done, budget_s: float = 20.0):
    deadline = time.monotonic() + budget_s
    while True:
        value = fetch()
        if done(value):
            return value
        assert time.monotonic() < deadline, f"gave up waiting; last: {value}"
        time.sleep(0.1)


def test_route_send_and_pull_from_master_and_slave_over_remoting(local_cluster: LocalCluster):
    cluster = local_cluster
    namesrv = cluster.namesrv_remoting_addr.split(";")[0]
    master, slave = cluster.node("broker-a-0"), cluster.node("broker-a-1")
    # the bound address, in the READY line and in status
    assert master.ready is not None and master.ready.extra["remoting_addr"] == master.remoting_addr
    assert master.describe()["details"]["remoting_addr"] == master.remoting_addr

    def route(topic: str) -> dict | None:
        with namesrv_remoting.connect(namesrv) as sock:
            answer = namesrv_remoting.route(sock, topic)
        return namesrv_remoting.route_from_body(answer.body) if answer.code == 0 else None

    template = until(lambda: route("TBW102"), bool)
    addrs = template["brokerDatas"][0]["brokerAddrs"]
    assert addrs["0"] == master.remoting_addr
    until(lambda: route("TBW102")["brokerDatas"][0]["brokerAddrs"], lambda a: a.get("1") == slave.remoting_addr)

    sent = send(addrs["0"], b"over-remoting", 1)
    assert sent.code == 0 and sent.ext["queueOffset"] == "0", sent.remark
    assert route(TOPIC)["queueDatas"][0]["writeQueueNums"] == 4  # registered before the send answered

    from_master = pull(master.remoting_addr, 1)
    assert from_master.code == 0
    [record] = list(iter_records(from_master.body))
    assert (record.body, record.tags, record.properties["UNIQ_KEY"]) == (b"over-remoting", "T", "U-1")
    assert record.offset_msg_id == sent.ext["msgId"]

    from_slave = until(lambda: pull(slave.remoting_addr, 1), lambda a: a.code == 0)
    assert [r.body for r in iter_records(from_slave.body)] == [b"over-remoting"]
    assert send(slave.remoting_addr, b"refused", 1).code == 14
