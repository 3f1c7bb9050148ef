"""The harness's client for the Admin service every node serves (the control plane).

Owns turning Admin.Describe into plain dicts; never faulted by chaos (DESIGN §7).
"""

from __future__ import annotations

import json
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


def describe_addr(addr: str, timeout_ms: int = DESCRIBE_TIMEOUT_MS, *, name: str | None = None) -> dict[str, Any]:
    """Admin.Describe of the node at `addr`, as a dict (see `describe_response_to_dict`).

    Raises:
        HarnessError: no answer within `timeout_ms`.
    """
    channel = make_sync_channel(addr)
    try:
        resp = admin_pb2_grpc.AdminStub(channel).Describe(admin_pb2.DescribeRequest(), timeout=timeout_ms / 1000)
    except grpc.RpcError as exc:
        code = exc.code().name if hasattr(exc, "code") else "error"
        raise HarnessError(f"{name or 'node'} at {addr} did not answer Admin.Describe ({code})") from exc
    finally:
        channel.close()
    return describe_response_to_dict(resp)
