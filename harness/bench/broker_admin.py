"""The benchmark's admin calls to a broker: create a topic, read its queues' max offsets."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import grpc

from harness.bench.processes import BenchError
from harness.cluster import LocalCluster
from nodes.common import constants as c
from nodes.common.rpc import make_sync_channel, map_rpc_error
from proto import broker_pb2, broker_pb2_grpc, common_pb2

RPC_TIMEOUT_S = 10.0


@contextlib.contextmanager
def _broker_stub(addr: str, what: str) -> Iterator[broker_pb2_grpc.BrokerStub]:
    """A stub over a channel to `addr`; a failed call comes out as a BenchError that says which
    broker did not answer `what` (a broker too busy to answer within RPC_TIMEOUT_S, or gone)."""
    channel = make_sync_channel(addr)
    try:
        with channel:
            yield broker_pb2_grpc.BrokerStub(channel)
    except grpc.RpcError as exc:
        err = map_rpc_error(exc, f"the broker at {addr} did not answer {what}")
        raise BenchError(f"{err}; its node.log in the run dir says what it was doing") from None


def create_topic(cluster: LocalCluster, topic: str, queues: int) -> None:
    addr = cluster.node("broker-a-0").addr
    with _broker_stub(addr, f"creating topic {topic}") as stub:
        resp = stub.CreateTopic(broker_pb2.CreateTopicRequest(config=common_pb2.TopicConfig(
            topic=topic, read_queue_nums=queues, write_queue_nums=queues, perm=c.PERM_DEFAULT)), timeout=RPC_TIMEOUT_S)
    if resp.code != common_pb2.SUCCESS:
        raise BenchError(f"creating topic {topic} failed: {resp.remark}")
    cluster.wait_until_routable(topic)


def queue_max_offsets(addr: str, topic: str, queues: int) -> list[int]:
    with _broker_stub(addr, f"the max offsets of {topic}") as stub:
        return [stub.GetQueueOffset(broker_pb2.GetQueueOffsetRequest(topic=topic, queue_id=q, kind=broker_pb2.MAX),
                                    timeout=RPC_TIMEOUT_S).offset for q in range(queues)]
