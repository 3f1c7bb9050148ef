"""Raw calls to a live node for cluster tests: describe, digest, verify, raw pulls."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc

from proto import broker_pb2, broker_pb2_grpc, replication_pb2, replication_pb2_grpc

TIMEOUT_S = 30.0


def digest(addr: str, to_phys_offset: int) -> str:
    with grpc.insecure_channel(addr) as channel:
        resp = replication_pb2_grpc.ReplicationStub(channel).Digest(
            replication_pb2.DigestRequest(to_phys_offset=to_phys_offset), timeout=TIMEOUT_S)
    assert resp.to_phys_offset == to_phys_offset, resp.remark
    return resp.sha256


def verify_store(addr: str) -> replication_pb2.VerifyStoreResponse:
    with grpc.insecure_channel(addr) as channel:
        return replication_pb2_grpc.ReplicationStub(channel).VerifyStore(replication_pb2.VerifyStoreRequest(),
                                                                         timeout=TIMEOUT_S)


def query_offset(addr: str, group: str, topic: str, queue_id: int) -> int:
    with grpc.insecure_channel(addr) as channel:
        resp = broker_pb2_grpc.BrokerStub(channel).QueryConsumerOffset(broker_pb2.QueryConsumerOffsetRequest(
            consumer_group=group, topic=topic, queue_id=queue_id), timeout=TIMEOUT_S)
    return resp.offset


def max_phys_offset(node: Any) -> int:
    return int(node.describe()["details"]["store"]["max_phys_offset"])


def wait_for(predicate: Callable[[], Any], budget_s: float = 20.0, what: str = "condition",
             interval_s: float = 0.05) -> Any:
    deadline = time.monotonic() + budget_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except Exception as exc:  # a node restarting answers nothing for a moment
            last = exc
        else:
            if last:
                return last
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {budget_s:.1f} s waiting for {what}; last saw {last!r}")


def wait_slave_caught_up(cluster: Any, budget_s: float = 30.0) -> int:
    master, slave = cluster.node("broker-a-0"), cluster.node("broker-a-1")

    def caught_up() -> int | None:
        target = max_phys_offset(master)
        return target if max_phys_offset(slave) == target else None

    return wait_for(caught_up, budget_s, "the slave to hold everything the master has")


def wait_slave_connected(cluster: Any, budget_s: float = 30.0) -> None:
    """A SYNC_MASTER answers SLAVE_NOT_AVAILABLE until its slave's stream is up."""
    master = cluster.node("broker-a-0")
    wait_for(lambda: master.describe()["details"]["slaves"], budget_s, "the slave to connect to its master")
