"""The harness's client for the Admin service every node serves (the control plane).

Owns Admin calls and turning Admin.Describe into plain dicts; never faulted by chaos.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import grpc

from harness.errors import HarnessError
from nodes.common.rpc import make_sync_channel
from proto import admin_pb2, admin_pb2_grpc

DESCRIBE_TIMEOUT_MS = 2_000


def describe_response_to_dict(resp: admin_pb2.DescribeResponse) -> dict[str, Any]:
    try:
        details = json.loads(resp.details_json) if resp.details_json else {}
    except ValueError:
        details = {"unparsed": resp.details_json}
    return {"node_id": resp.node_id, "role": resp.role, "state": resp.state,
            "status_line": resp.status_line, "details": details, "pid": resp.pid}


def _describe(channel: grpc.Channel, addr: str, timeout_ms: int, name: str) -> dict[str, Any]:
    try:
        resp = admin_pb2_grpc.AdminStub(channel).Describe(admin_pb2.DescribeRequest(), timeout=timeout_ms / 1000)
    except grpc.RpcError as exc:
        code = exc.code().name if isinstance(exc, grpc.Call) else "error"
        raise HarnessError(f"{name} at {addr} did not answer Admin.Describe ({code})") from exc
    return describe_response_to_dict(resp)


def describe_addr(addr: str, timeout_ms: int = DESCRIBE_TIMEOUT_MS, *, name: str | None = None) -> dict[str, Any]:
    """Admin.Describe of the node at `addr` on a channel of its own, as a dict (see
    `describe_response_to_dict`).

    Raises:
        HarnessError: no answer within `timeout_ms`.
    """
    channel = make_sync_channel(addr)
    try:
        return _describe(channel, addr, timeout_ms, name or "node")
    finally:
        channel.close()


class AdminClient:
    """Admin calls to one node over a channel kept until `close()` (a node's restart closes it)."""

    def __init__(self, addr: str, name: str) -> None:
        self.addr = addr
        self.name = name
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None

    def describe(self, timeout_ms: int = DESCRIBE_TIMEOUT_MS) -> dict[str, Any]:
        """Admin.Describe as a dict (details parsed from JSON).

        Raises:
            HarnessError: the node did not answer within `timeout_ms`.
        """
        return _describe(self._open(), self.addr, timeout_ms, self.name)

    def close(self) -> None:
        with self._lock:
            channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()

    def _open(self) -> grpc.Channel:
        with self._lock:
            if self._channel is None:
                self._channel = make_sync_channel(self.addr)
            return self._channel
