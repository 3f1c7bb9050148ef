"""The harness's read-only view of a name server: which brokers are registered, and which brokers
hold a topic's writable queues (what `LocalCluster.wait_until_routable` waits for).

Owns the gRPC calls to the name server's NameServer service; callers see plain values and
`NamesrvUnreachable`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import grpc

from harness.errors import NamesrvUnreachable
from nodes.common.rpc import make_sync_channel
from proto import common_pb2, namesrv_pb2, namesrv_pb2_grpc

NAMESRV_RPC_TIMEOUT_MS = 2_000


@dataclass(frozen=True)
class Registrations:
    addr_of: dict[tuple[str, int], str]  # (broker name, broker id) -> address
    last_seen_ms: dict[str, int]  # broker address -> wall clock of its last registration


@dataclass(frozen=True)
class TopicRoute:
    answer: str  # the name server's answer code, "SUCCESS" when it has a route
    writable_brokers: frozenset[str]  # broker names with at least one writable queue


class NamesrvView:
    """Queries to one name server over a channel kept until `close()`."""

    def __init__(self, addr: str, timeout_ms: int = NAMESRV_RPC_TIMEOUT_MS) -> None:
        self.addr = addr
        self.timeout_ms = timeout_ms
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None

    def registrations(self) -> Registrations:
        try:
            info = self._stub().GetClusterInfo(namesrv_pb2.GetClusterInfoRequest(), timeout=self.timeout_ms / 1000)
        except grpc.RpcError as exc:
            raise self._unreachable("GetClusterInfo", exc) from exc
        return Registrations(
            addr_of={(b.broker_name, bid): addr for b in info.brokers for bid, addr in b.broker_addrs.items()},
            last_seen_ms={live.broker_addr: live.last_update_timestamp_ms for live in info.live})

    def route(self, topic: str) -> TopicRoute:
        try:
            resp = self._stub().GetRouteInfo(namesrv_pb2.GetRouteInfoRequest(topic=topic),
                                             timeout=self.timeout_ms / 1000)
        except grpc.RpcError as exc:
            raise self._unreachable("GetRouteInfo", exc) from exc
        if resp.code != common_pb2.SUCCESS:
            return TopicRoute(common_pb2.Code.Name(resp.code), frozenset())
        return TopicRoute("SUCCESS", frozenset(q.broker_name for q in resp.route.queue_datas if q.write_queue_nums > 0))

    def close(self) -> None:
        with self._lock:
            channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()

    def _stub(self) -> namesrv_pb2_grpc.NameServerStub:
        with self._lock:
            if self._channel is None:
                self._channel = make_sync_channel(self.addr)
            return namesrv_pb2_grpc.NameServerStub(self._channel)

    def _unreachable(self, method: str, exc: grpc.RpcError) -> NamesrvUnreachable:
        code = exc.code().name if isinstance(exc, grpc.Call) else "error"
        return NamesrvUnreachable(f"name server {self.addr} did not answer {method} ({code})")
