"""The 2x2 topology as real processes: every broker registers with both name servers, a topic
created on both masters routes over both groups, and with one name server killed a client given
both addresses (RocketMQ's `;`-separated namesrvAddr) still finds the route and sends to both."""

import grpc
import pytest

from harness import LocalCluster
from harness.topology import topology_spec
from nodes.client import Producer
from nodes.common import constants as c
from nodes.common.types import Message, SendStatus
from proto import broker_pb2, broker_pb2_grpc, common_pb2, namesrv_pb2, namesrv_pb2_grpc

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
TOPIC = "TwoGroups"


def _live_brokers(namesrv_addr):
    with grpc.insecure_channel(namesrv_addr) as channel:
        info = namesrv_pb2_grpc.NameServerStub(channel).GetClusterInfo(namesrv_pb2.GetClusterInfoRequest(), timeout=5)
    return {live.broker_addr for live in info.live}


def _create_topic(cluster, master_id, queues=4):
    with grpc.insecure_channel(cluster.node(master_id).addr) as channel:
        resp = broker_pb2_grpc.BrokerStub(channel).CreateTopic(broker_pb2.CreateTopicRequest(
            config=common_pb2.TopicConfig(topic=TOPIC, read_queue_nums=queues, write_queue_nums=queues,
                                          perm=c.PERM_READ | c.PERM_WRITE)), timeout=5)
    assert resp.code == common_pb2.SUCCESS, resp.remark


def _send_all(namesrv_addr, timing, n=40):
    with Producer(namesrv_addr, timing=timing) as producer:
        results = [producer.send(Message(TOPIC, f"m{i}".encode())) for i in range(n)]
    assert all(r.status is SendStatus.SEND_OK for r in results)
    return {r.message_queue.broker_name for r in results}


def test_two_name_servers_route_both_groups_and_one_survives_the_other(tmp_path, time_scale):
    with LocalCluster(topology_spec("2x2", time_scale=time_scale), run_dir=tmp_path / "run") as cluster:
        brokers = {cluster.node(n).addr for n in ("broker-a-0", "broker-a-1", "broker-b-0", "broker-b-1")}
        for addr in cluster.namesrv_addrs:
            assert _live_brokers(addr) == brokers
        for master in ("broker-a-0", "broker-b-0"):
            _create_topic(cluster, master)
        cluster.wait_until_routable(TOPIC)
        both = ";".join(cluster.namesrv_addrs)
        assert _send_all(both, cluster.timing) == {"broker-a", "broker-b"}
        cluster.kill("namesrv-0")
        # a fresh client: its first route lookup meets the dead name server and moves to the other
        assert _send_all(both, cluster.timing) == {"broker-a", "broker-b"}
        assert _live_brokers(cluster.namesrv_addrs[1]) == brokers
        cluster.restart("namesrv-0")
        assert not cluster.unexpected_exits
