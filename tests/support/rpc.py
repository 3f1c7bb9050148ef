"""Raw gRPC calls for tests that must reach the broker below the client library."""

from __future__ import annotations

import time

import grpc

from proto import broker_pb2, broker_pb2_grpc, common_pb2, namesrv_pb2, namesrv_pb2_grpc

TIMEOUT_S = 10.0


def broker_stub(addr: str) -> tuple[grpc.Channel, broker_pb2_grpc.BrokerStub]:
    channel = grpc.insecure_channel(addr)
    return channel, broker_pb2_grpc.BrokerStub(channel)


def create_topic(cluster, topic: str, queue_nums: int = 4, perm: int = 6) -> None:
    """Create a topic on the cluster's broker and wait until the name server routes it.

    The broker registers a new topic with the name server right away but asynchronously,
    as RocketMQ's does; clients that look the route up too early would not find it.
    """
    channel, stub = broker_stub(cluster.broker_addr)
    with channel:
        resp = stub.CreateTopic(broker_pb2.CreateTopicRequest(config=common_pb2.TopicConfig(
            topic=topic, read_queue_nums=queue_nums, write_queue_nums=queue_nums, perm=perm)), timeout=TIMEOUT_S)
    assert resp.code == common_pb2.SUCCESS, resp.remark
    with grpc.insecure_channel(cluster.namesrv_addr) as channel:
        namesrv = namesrv_pb2_grpc.NameServerStub(channel)
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            route = namesrv.GetRouteInfo(namesrv_pb2.GetRouteInfoRequest(topic=topic), timeout=TIMEOUT_S)
            if route.code == common_pb2.SUCCESS:
                return
            assert time.monotonic() < deadline, f"topic {topic} never reached the name server"
            time.sleep(0.01)


def pull_once(addr: str, **fields) -> broker_pb2.PullResponse:
    """One request on a fresh Pull stream; returns its response."""
    fields.setdefault("request_id", 1)
    fields.setdefault("max_msg_nums", 32)
    fields.setdefault("consumer_group", "raw-group")
    fields.setdefault("has_subscription", True)
    fields.setdefault("subscription_expression", "*")
    channel, stub = broker_stub(addr)
    with channel:
        responses = stub.Pull(iter([broker_pb2.PullRequest(**fields)]), timeout=TIMEOUT_S)
        return next(iter(responses))


def code_name(code: int) -> str:
    return common_pb2.Code.Name(code)
