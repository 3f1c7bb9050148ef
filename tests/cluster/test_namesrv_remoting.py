"""The name server's RocketMQ remoting listener in a real cluster: routes list the brokers'
remoting addresses from cluster.json, TBW102 and a group's retry topic are routable as the real
clients need them, unknown topics and codes get RocketMQ's answers, a restart keeps the ports."""

from __future__ import annotations

import json
import time

import pytest
from support import namesrv_remoting as remoting

from harness import LocalCluster, NodeSpec
from nodes.client import Message, Producer

pytestmark = pytest.mark.cluster

GROUP = "remoting_route_group"
TOPIC = "RemotingRouteTopic"
DEFAULT_TOPIC = "TBW102"  # the topic the C++ producer asks for before its own is created


def _route_when_found(addr: str, topic: str, budget_s: float = 20.0) -> dict:
    deadline = time.monotonic() + budget_s
    with remoting.connect(addr) as sock:
        while True:
            answer = remoting.route(sock, topic)
            if answer.code == 0:
                return remoting.route_from_body(answer.body)
            if time.monotonic() > deadline:
                raise AssertionError(f"no route for {topic} after {budget_s} s: {answer.code} {answer.remark}")
            time.sleep(0.1)


def _broker_addrs(cluster: LocalCluster) -> dict[str, str]:
    return {str(p.config.broker_id): p.remoting_addr for p in cluster.nodes("broker")}


def test_routes_over_remoting_list_the_brokers_remoting_addresses(local_cluster: LocalCluster):
    cluster = local_cluster
    data = json.loads((cluster.run_dir / "cluster.json").read_text())
    namesrv = cluster.node("namesrv-0")
    assert data["namesrv_remoting"] == cluster.namesrv_remoting_addr == namesrv.remoting_addr
    assert namesrv.ready is not None and namesrv.ready.extra["remoting_addr"] == namesrv.remoting_addr
    assert namesrv.describe()["details"]["remoting_addr"] == namesrv.remoting_addr
    for entry in data["nodes"]:
        assert entry["remoting_addr"] == cluster.node(entry["id"]).remoting_addr
        assert entry["remoting_addr"] != entry["addr"]

    # auto_create_topic_enable is on by default: the master registers TBW102
    route = _route_when_found(cluster.namesrv_remoting_addr, DEFAULT_TOPIC)
    assert route["brokerDatas"] == [{"brokerAddrs": _broker_addrs(cluster), "brokerName": "broker-a",
                                     "cluster": "DefaultCluster"}]
    assert [(q["brokerName"], q["perm"]) for q in route["queueDatas"]] == [("broker-a", 7)]
    assert route["filterServerTable"] == {}
    for broker_addr in route["brokerDatas"][0]["brokerAddrs"].values():  # what a client dials next
        with remoting.connect(broker_addr) as broker:
            assert remoting.request(broker, 9999).code == 3  # a live remoting listener answers

    with remoting.connect(cluster.namesrv_remoting_addr) as sock:
        missing = remoting.route(sock, "NoSuchTopic")
        assert missing.code == 17 and "NoSuchTopic" in (missing.remark or "")
        unsupported = remoting.request(sock, 38, {"consumerGroup": GROUP})  # a broker's code
        assert unsupported.code == 3 and "38" in (unsupported.remark or "")
        assert remoting.route(sock, DEFAULT_TOPIC).code == 0  # the connection is still good

    # A consumer's heartbeat makes the broker create %RETRY%<group> and register it at once
    # (a consumer finds the brokers to heartbeat through its topic's route: the topic comes first).
    with Producer(cluster.namesrv_addr, timing=cluster.timing) as producer:
        producer.send(Message(TOPIC, b"create the topic"))
    assert _route_when_found(cluster.namesrv_remoting_addr, TOPIC)["queueDatas"][0]["writeQueueNums"] > 0
    cluster.add_node(NodeSpec("consumer-0", "consumer", options={"group": GROUP, "subscriptions": {TOPIC: "*"}}))
    retry = _route_when_found(cluster.namesrv_remoting_addr, f"%RETRY%{GROUP}")
    assert retry["brokerDatas"][0]["brokerAddrs"] == _broker_addrs(cluster)
    assert [q["brokerName"] for q in retry["queueDatas"]] == ["broker-a"]


def test_a_restarted_master_and_name_server_keep_their_remoting_addresses(local_cluster: LocalCluster):
    cluster = local_cluster
    master = cluster.node("broker-a-0")
    before = (cluster.namesrv_remoting_addr, master.remoting_addr)
    cluster.restart("broker-a-0", kill=True)
    cluster.restart("namesrv-0", kill=True)
    cluster.wait_until_routable()
    assert (cluster.namesrv_remoting_addr, master.remoting_addr) == before
    route = _route_when_found(cluster.namesrv_remoting_addr, DEFAULT_TOPIC)
    assert route["brokerDatas"][0]["brokerAddrs"]["0"] == master.remoting_addr
