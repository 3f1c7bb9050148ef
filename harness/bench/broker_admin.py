"""The benchmark's admin calls to a broker: create a topic, read its queues' max offsets."""

from __future__ import annotations

import grpc

from harness.bench.processes import BenchError
from harness.cluster import LocalCluster
from nodes.common import constants as c
from nodes.common.rpc import make_sync_channel
from proto import broker_pb2, broker_pb2_grpc, common_pb2

RPC_TIMEOUT_S = 10.0


def _broker_stub(addr: str) -> tuple[grpc.Channel, broker_pb2_grpc.BrokerStub]:
    channel = make_sync_channel(addr)
    return channel, broker_pb2_grpc.BrokerStub(channel)


def create_topic(cluster: LocalCluster, topic: str, queues: int) -> None:
    channel, stub = _broker_stub(cluster.node("broker-a-0").addr)
    with channel:
        resp = stub.CreateTopic(broker_pb2.CreateTopicRequest(config=common_pb2.TopicConfig(
            topic=topic, read_queue_nums=queues, write_queue_nums=queues, perm=c.PERM_DEFAULT)), timeout=RPC_TIMEOUT_S)
    if resp.code != common_pb2.SUCCESS:
        raise BenchError(f"creating topic {topic} failed: {resp.remark}")
    cluster.wait_until_routable(topic)


def queue_max_offsets(addr: str, topic: str, queues: int) -> list[int]:
    channel, stub = _broker_stub(addr)
    with channel:
        return [stub.GetQueueOffset(broker_pb2.GetQueueOffsetRequest(topic=topic, queue_id=q, kind=broker_pb2.MAX),
                                    timeout=RPC_TIMEOUT_S).offset for q in range(queues)]
