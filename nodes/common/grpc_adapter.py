"""What every gRPC adapter over the request handlers shares: answer codes to and from the
wire enum, and the one place a servicer turns an exception raised by one request into its
answer.

A client's mistake or an unexpected exception in one request is logged and answered
SYSTEM_ERROR with the exception in the remark; the node keeps serving everyone else. Only a
broken invariant of our own (`InvariantViolation`) brings the node down (exit 70), since
its state can no longer be trusted.

Bytes that are no request at all never reach a servicer: `grpc_guard.RequestGuard` answers
them first.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc.aio

from nodes.common.codes import ResponseCode
from nodes.common.errors import InvariantViolation
from nodes.common.node import crash_node
from proto import common_pb2

log = logging.getLogger(__name__)

_Method = TypeVar("_Method", bound=Callable[..., Awaitable[Any]])

# By name. A code the wire enum lacks (REQUEST_CODE_NOT_SUPPORTED: gRPC answers an unknown
# method itself, with UNIMPLEMENTED) goes out as SYSTEM_ERROR.
_WIRE_NAMES = frozenset(common_pb2.Code.keys())
CODE_TO_PB: dict[ResponseCode, int] = {
    code: common_pb2.Code.Value(code.name) if code.name in _WIRE_NAMES else common_pb2.SYSTEM_ERROR
    for code in ResponseCode}
_CODE_FROM_PB: dict[int, ResponseCode] = {common_pb2.Code.Value(code.name): code for code in ResponseCode
                                          if code.name in _WIRE_NAMES}


def code_from_pb(code: int) -> ResponseCode:
    """A peer's code; one this build does not know reads as SYSTEM_ERROR."""
    return _CODE_FROM_PB.get(code, ResponseCode.SYSTEM_ERROR)


def failure_remark(what: str, exc: BaseException) -> str:
    """Log a failed request and return the remark its SYSTEM_ERROR answer carries; crash the
    node (and re-raise) on a broken invariant."""
    if isinstance(exc, InvariantViolation):
        crash_node(exc)
        raise exc
    log.error("%s failed", what, exc_info=exc)
    return f"{what} failed on the node: {exc!r}"


def answers_errors(response_type: type[Any], what: str) -> Callable[[_Method], _Method]:
    """Decorate a unary servicer method: an exception becomes a SYSTEM_ERROR `response_type`."""
    fields = response_type.DESCRIPTOR.fields_by_name

    def decorate(method: _Method) -> _Method:
        @functools.wraps(method)
        async def guarded(self: Any, request: Any, context: Any) -> Any:
            try:
                return await method(self, request, context)
            except grpc.aio.AbortError:
                raise  # the call already ended with its status (e.g. no cluster credential)
            except Exception as exc:
                remark = failure_remark(what, exc)
                answer = response_type()
                if "code" in fields:
                    answer.code = common_pb2.SYSTEM_ERROR
                if "remark" in fields:
                    answer.remark = remark
                return answer
        return guarded  # type: ignore[return-value]

    return decorate
