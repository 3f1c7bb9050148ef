"""What a chaos run sets up on its cluster before the workload starts: the suite's topic, spread
over the masters, and (for a RocketMQ 5 client in an orderly suite) a FIFO consumer group."""

from __future__ import annotations

from chaos.bounds import Bounds
from harness import LocalCluster
from harness.waiting import WaitTimeout
from nodes.common import constants as c
from nodes.common.rpc import make_sync_channel
from proto import broker_pb2, broker_pb2_grpc, common_pb2


def make_group_fifo(cluster: LocalCluster, group: str) -> None:
    """The group consumes orderly on every master (RocketMQ updateSubGroup): a FIFO group for POP."""
    for master in (n for n in cluster.spec.broker_nodes() if n.is_master):
        with make_sync_channel(cluster.node(master.id).addr) as channel:
            resp = broker_pb2_grpc.BrokerStub(channel).UpdateSubscriptionGroup(
                broker_pb2.UpdateSubscriptionGroupRequest(group=group, consume_message_orderly=True),
                timeout=cluster.timing.rpc_timeout_ms / 1000)
        if resp.code != common_pb2.SUCCESS:
            raise RuntimeError(f"making group {group} FIFO on {master.id} failed: {resp.remark}")


def create_topic(cluster: LocalCluster, topic: str, queues: int, bounds: Bounds) -> None:
    """Create the suite's topic with `queues` queues in all, spread evenly over the masters (every
    topology has the same queue count, so a queue carries the same share of the load), then wait
    until the name server routes it."""
    masters = [n for n in cluster.spec.broker_nodes() if n.is_master]
    queues = max(1, queues // len(masters))
    for master in masters:
        proc = cluster.node(master.id)
        with make_sync_channel(proc.addr) as channel:
            resp = broker_pb2_grpc.BrokerStub(channel).CreateTopic(broker_pb2.CreateTopicRequest(
                config=common_pb2.TopicConfig(topic=topic, read_queue_nums=queues, write_queue_nums=queues,
                                              perm=c.PERM_READ | c.PERM_WRITE)),
                timeout=cluster.timing.rpc_timeout_ms / 1000)
        if resp.code != common_pb2.SUCCESS:
            raise RuntimeError(f"creating topic {topic} on {master.id} failed: {resp.remark}")
    try:
        cluster.wait_until_routable(topic=topic)
    except WaitTimeout as exc:
        raise RuntimeError(f"topic {topic} never became routable: {exc}") from exc
