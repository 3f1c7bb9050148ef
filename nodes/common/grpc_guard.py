"""The gRPC servers' guard against requests that are no request: every server parses its
requests here before any servicer sees them (installed by `rpc.make_server`).

Bytes that are not the method's protobuf message are answered INVALID_ARGUMENT — on a stream,
after the requests read before the garbage — with one log line per peer and interval and no
traceback (gRPC's own deserializer logs a full traceback per call and, on a stream, just ends
the requests, so the stream closed OK). A big request has its top-level entries counted before
it is parsed, and one with more than its method allows is refused unparsed: parsing 8 MiB of
empty repeated entries holds the event loop for about 1.6 s, the count stops at the limit.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import grpc.aio

from nodes.common import constants as c
from nodes.common.reject_log import RejectLog

log = logging.getLogger(__name__)

# method -> (the repeated field whose entries are limited, the limit); every other method's
# top-level fields are limited to c.REQUEST_ENTRIES_MAX
_ENTRY_LIMITS: dict[str, tuple[int, int]] = {
    "/mqlab.v1.Broker/SendMessage": (4, c.BATCH_MESSAGES_MAX),  # messages
    "/mqlab.v1.Broker/SendStream": (4, c.BATCH_MESSAGES_MAX),  # each stream message is a SendMessageRequest
    "/mqlab.v1.NameServer/RegisterBroker": (6, c.REGISTER_TOPICS_MAX),  # topic_configs
}
_FIELDS_BEYOND_ENTRIES = 64  # other top-level fields a request may carry besides its entries


def too_many_entries(raw: bytes, method: str) -> str | None:
    """Why a big request is refused unparsed (more top-level entries than its method allows), or
    None. Walks the wire format's top-level fields only and stops at the limit, so it costs at
    most that many steps; a framing error is left to the parser to report."""
    if len(raw) < c.REQUEST_SCAN_BYTES_MIN:
        return None
    field_number, limit = _ENTRY_LIMITS.get(method, (0, c.REQUEST_ENTRIES_MAX))
    fields_max = limit + _FIELDS_BEYOND_ENTRIES
    pos, end, fields, entries = 0, len(raw), 0, 0
    while pos < end:
        key, pos = _varint(raw, pos)
        wire_type = key & 7
        if wire_type == 0:
            _, pos = _varint(raw, pos)
        elif wire_type == 1:
            pos += 8
        elif wire_type == 2:
            length, pos = _varint(raw, pos)
            pos += length
        elif wire_type == 5:
            pos += 4
        else:
            return None
        fields += 1
        if key >> 3 == field_number:
            entries += 1
        if entries > limit or fields > fields_max:
            return f"the request carries more than {limit} entries; split it"
    return None


def _varint(raw: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while pos < len(raw) and shift < 64:
        byte = raw[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    return value, len(raw) + 1  # truncated: ends the walk


class RequestGuard(grpc.aio.ServerInterceptor):
    """Parses every request before the servicer sees it; see the module doc."""

    def __init__(self) -> None:
        self.rejects = RejectLog(log)
        # method -> (the servicer's handler, our wrapper): handlers are fixed per method
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
                                details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is None or handler.request_deserializer is None:
            return handler
        method = details.method
        cached = self._wrapped.get(method)
        if cached is None or cached[0] is not handler:
            cached = (handler, self._wrap(handler, method))
            self._wrapped[method] = cached
        return cached[1]

    def _wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        parse = handler.request_deserializer
        serialize = handler.response_serializer
        rejects = self.rejects

        async def parsed(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
            if (why := too_many_entries(raw, method)) is not None:
                rejects.reject(context.peer() or "", f"an oversize {method} request", why)
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, why)
            try:
                return parse(raw)
            except Exception as exc:
                rejects.reject(context.peer() or "", f"a malformed {method} request", exc)
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"the request is no {method} message: {exc}")

        async def parsed_stream(raw_requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
                                ) -> AsyncIterator[Any]:
            async for raw in raw_requests:
                if (why := too_many_entries(raw, method)) is not None:
                    rejects.reject(context.peer() or "", f"an oversize {method} stream message", why)
                    context.set_code(grpc.StatusCode.INVALID_ARGUMENT)
                    context.set_details(why)
                    return
                try:
                    request = parse(raw)
                except Exception as exc:
                    # The servicer sees the requests end; the call then ends with this status.
                    rejects.reject(context.peer() or "", f"a malformed {method} stream message", exc)
                    context.set_code(grpc.StatusCode.INVALID_ARGUMENT)
                    context.set_details(f"a stream message is no {method} message: {exc}")
                    return
                yield request

        if handler.unary_unary is not None:
            unary = handler.unary_unary

            async def unary_unary(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
                return await unary(await parsed(raw, context), context)
            return grpc.unary_unary_rpc_method_handler(unary_unary, response_serializer=serialize)
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                _same_kind(handler.unary_stream, lambda raw, context: parsed(raw, context), awaited=True),
                response_serializer=serialize)
        if handler.stream_unary is not None:
            stream_unary = handler.stream_unary

            async def stream_unary_call(raw: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> Any:
                return await stream_unary(parsed_stream(raw, context), context)
            return grpc.stream_unary_rpc_method_handler(stream_unary_call, response_serializer=serialize)
        return grpc.stream_stream_rpc_method_handler(
            _same_kind(handler.stream_stream, parsed_stream, awaited=False), response_serializer=serialize)


def _same_kind(behavior: Callable[..., Any], convert: Callable[..., Any], *, awaited: bool) -> Callable[..., Any]:
    """`behavior` with its request converted first, as an async generator when it is one (gRPC
    serves a streaming response from a generator or from a coroutine that writes)."""
    if inspect.isasyncgenfunction(behavior):
        async def generator(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            converted = await convert(request, context) if awaited else convert(request, context)
            async for response in behavior(converted, context):
                yield response
        return generator

    async def coroutine(request: Any, context: grpc.aio.ServicerContext) -> Any:
        converted = await convert(request, context) if awaited else convert(request, context)
        return await behavior(converted, context)
    return coroutine
