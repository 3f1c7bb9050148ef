"""POP consumption through a real broker process over the Broker gRPC API: pop and ack on the
master, a slave's refusal, and the in-flight state across a master SIGKILL and restart (nothing
handed out early, old handles still ack, an expired hand-out revived with attempt 2)."""

from __future__ import annotations

import grpc
import pytest
from support.cluster_rpc import wait_for
from support.timing import slack_ms

from nodes.client import Producer
from nodes.common.types import Message
from proto import broker_pb2, broker_pb2_grpc

pytestmark = pytest.mark.cluster

GROUP, TOPIC = "pop-cluster-g", "PopCluster"
LONG_MS = 600_000  # never expires within the test
SHORT_MS = 1_000


def _pop(stub, *, invisible_ms: int, max_nums: int = 32, poll_timeout_ms: int = 0):
    return stub.PopMessage(broker_pb2.PopMessageRequest(
        group=GROUP, topic=TOPIC, max_nums=max_nums, invisible_ms=invisible_ms, poll_timeout_ms=poll_timeout_ms),
        timeout=poll_timeout_ms / 1000 + 10)


def _ack(stub, handle: str) -> str:
    answer = stub.AckPopMessage(broker_pb2.AckPopMessageRequest(group=GROUP, topic=TOPIC, receipt_handle=handle),
                                timeout=10)
    return answer.pop_code


@pytest.mark.slow  # a cluster, a master SIGKILL and its restart with the tail restore: ~20 s
def test_pop_state_survives_a_master_sigkill_and_restart(local_cluster):
    cluster = local_cluster
    with Producer(cluster.namesrv_addr) as producer:
        for i in range(6):
            producer.send(Message(TOPIC, f"m{i}".encode()))
    master, slave = cluster.node("broker-a-0"), cluster.node("broker-a-1")

    with grpc.insecure_channel(master.addr) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        popped = wait_for(lambda: (r := _pop(stub, invisible_ms=LONG_MS, max_nums=5)).messages and r, 10,
                          "a pop to find the messages")
        assert popped.pop_code == "OK"
        long_handles = [m.receipt_handle for m in popped.messages]
        short = _pop(stub, invisible_ms=SHORT_MS, max_nums=1, poll_timeout_ms=2_000)
        assert short.pop_code == "OK" and short.messages[0].delivery_attempt == 1
        bodies = {m.body for m in popped.messages} | {short.messages[0].body}
        assert bodies == {f"m{i}".encode() for i in range(6)}
        assert _ack(stub, long_handles[0]) == "OK"

    with grpc.insecure_channel(slave.addr) as channel:
        refused = _pop(broker_pb2_grpc.BrokerStub(channel), invisible_ms=LONG_MS)
        assert refused.pop_code == "NOT_MASTER"

    cluster.kill("broker-a-0")
    cluster.restart("broker-a-0")
    cluster.wait_until_routable()

    with grpc.insecure_channel(master.addr) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        # an unclean start holds writes (and so pops) until the slave restored the tail
        first = wait_for(lambda: (r := _pop(stub, invisible_ms=LONG_MS, poll_timeout_ms=SHORT_MS + slack_ms()))
                         .pop_code != "UNAVAILABLE" and r, 60, "the restarted master to take pops")
        # the only message handed out again is the short one, after its deadline, attempt 2
        assert first.pop_code == "OK" and [m.body for m in first.messages] == [short.messages[0].body]
        assert first.messages[0].delivery_attempt == 2
        assert first.messages[0].invisible_deadline_wall_ms > short.messages[0].invisible_deadline_wall_ms
        assert [_ack(stub, h) for h in long_handles] == ["OK"] * len(long_handles)
        assert _ack(stub, short.messages[0].receipt_handle) == "INVALID_RECEIPT_HANDLE"
        assert _ack(stub, first.messages[0].receipt_handle) == "OK"
        assert _pop(stub, invisible_ms=LONG_MS).pop_code == "NOT_FOUND"
