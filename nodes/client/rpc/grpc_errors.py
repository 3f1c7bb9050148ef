"""The client's one mapping of a gRPC failure to the project's error tree."""

from __future__ import annotations

import grpc

from nodes.common import rpc
from nodes.common.errors import MqError, OutcomeUnknownError

# gRPC core's wording when no connection could be made: the request never left the client.
_NOT_SENT_DETAILS = ("failed to connect", "connection refused", "dns resolution failed")


def never_sent(exc: grpc.RpcError) -> bool:
    """Whether a failed call certainly did not reach the peer (connection never established)."""
    code = exc.code() if hasattr(exc, "code") else None
    details = (exc.details() if hasattr(exc, "details") else str(exc)) or ""
    return code == grpc.StatusCode.UNAVAILABLE and any(s in details.lower() for s in _NOT_SENT_DETAILS)


def rpc_error(exc: grpc.RpcError, what: str, *, side_effects: bool = False) -> MqError:
    """A gRPC failure as a project error: TransportError, or RequestTimeoutError on a deadline.

    With `side_effects` (a send), a failure that may have come after the peer got the request
    is an OutcomeUnknownError (`indeterminate`); only a failure to connect at all stays a
    plain, determinate TransportError.
    """
    err = rpc.map_rpc_error(exc, what)
    if side_effects and not err.indeterminate and not never_sent(exc):
        return OutcomeUnknownError(f"{err}; the request may have been applied")
    return err
