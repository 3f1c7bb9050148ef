"""The harness's client for the Admin service every node serves (the control plane).

Owns Admin calls and turning Admin.Describe into plain dicts; never faulted by chaos.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import grpc

from harness.errors import HarnessError
from nodes.common.credential import call_metadata
from nodes.common.rpc import make_sync_channel
from proto import admin_pb2, admin_pb2_grpc

DESCRIBE_TIMEOUT_MS = 2_000
CONFIG_FILE = "config.json"  # in each node's run dir (harness.process writes it)


def describe_response_to_dict(resp: admin_pb2.DescribeResponse) -> dict[str, Any]:
    try:
        details = json.loads(resp.details_json) if resp.details_json else {}
    except ValueError:
        details = {"unparsed": resp.details_json}
    return {"node_id": resp.node_id, "role": resp.role, "state": resp.state,
            "status_line": resp.status_line, "details": details, "pid": resp.pid}


def credential_of(node_run_dir: str | Path) -> str:
    """The cluster credential from a node's config file ("" when it has none or the file is
    unreadable): how `mqlab status` reaches a cluster it did not start."""
    try:
        data = json.loads((Path(node_run_dir) / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return ""
    credential = data.get("cluster_credential", "") if isinstance(data, dict) else ""
    return credential if isinstance(credential, str) else ""


def _describe(channel: grpc.Channel, addr: str, timeout_ms: int, name: str, credential: str) -> dict[str, Any]:
    try:
        resp = admin_pb2_grpc.AdminStub(channel).Describe(admin_pb2.DescribeRequest(), timeout=timeout_ms / 1000,
                                                          metadata=call_metadata(credential))
    except grpc.RpcError as exc:
        code = exc.code().name if isinstance(exc, grpc.Call) else "error"
        raise HarnessError(f"{name} at {addr} did not answer Admin.Describe ({code})") from exc
    return describe_response_to_dict(resp)


def describe_addr(addr: str, timeout_ms: int = DESCRIBE_TIMEOUT_MS, *, name: str | None = None,
                  credential: str = "") -> dict[str, Any]:
    """Admin.Describe of the node at `addr` on a channel of its own, as a dict (see
    `describe_response_to_dict`).

    Raises:
        HarnessError: no answer within `timeout_ms`.
    """
    channel = make_sync_channel(addr)
    try:
        return _describe(channel, addr, timeout_ms, name or "node", credential)
    finally:
        channel.close()


class AdminClient:
    """Admin calls to one node over a channel kept until `close()` (a node's restart closes it);
    each carries the cluster credential."""

    def __init__(self, addr: str, name: str, credential: str = "") -> None:
        self.addr = addr
        self.name = name
        self._credential = credential
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None

    def describe(self, timeout_ms: int = DESCRIBE_TIMEOUT_MS) -> dict[str, Any]:
        """Admin.Describe as a dict (details parsed from JSON).

        Raises:
            HarnessError: the node did not answer within `timeout_ms`.
        """
        return _describe(self._open(), self.addr, timeout_ms, self.name, self._credential)

    def shutdown(self, timeout_ms: int = DESCRIBE_TIMEOUT_MS) -> None:
        """Admin.Shutdown: the node stops as on SIGTERM.

        Raises:
            HarnessError: the node did not answer within `timeout_ms`.
        """
        try:
            admin_pb2_grpc.AdminStub(self._open()).Shutdown(admin_pb2.ShutdownRequest(), timeout=timeout_ms / 1000,
                                                            metadata=call_metadata(self._credential))
        except grpc.RpcError as exc:
            code = exc.code().name if isinstance(exc, grpc.Call) else "error"
            raise HarnessError(f"{self.name} at {self.addr} did not answer Admin.Shutdown ({code})") from exc

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
