"""gRPC plumbing: server and channel factories, and the one place that maps grpc errors.

Servers bind with `grpc.so_reuseport=0`, so a second node on the same port fails loudly.
Channels honour `dial_overrides` (peer address -> address to dial instead): the harness
uses it to route node-to-node traffic through its link proxies; it is empty in production.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import grpc
import grpc.aio

from nodes.common.errors import MqError, RequestTimeoutError, TransportError

# Large pull responses carry up to 1024 records; leave room for maximum-size bodies.
MESSAGE_BYTES_MAX = 64 * 1024 * 1024

_SERVER_OPTIONS = [
    ("grpc.so_reuseport", 0),
    ("grpc.max_receive_message_length", MESSAGE_BYTES_MAX),
    ("grpc.max_send_message_length", MESSAGE_BYTES_MAX),
]
_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MESSAGE_BYTES_MAX),
    ("grpc.max_send_message_length", MESSAGE_BYTES_MAX),
    # Reconnect quickly after a restart: chaos restarts a master on the same port.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    # gRPC takes this one as the shortest deadline of a connection attempt (TCP and the HTTP/2
    # SETTINGS exchange), not as a backoff: at 100 ms a node just started on a loaded machine, or
    # a link with 150 ms of latency, failed every first attempt ("timed out before receiving
    # SETTINGS frame") and the sends behind it failed fast. A refused connection still retries
    # after the 100 ms backoff; RocketMQ's own connect timeout is 3 s.
    ("grpc.min_reconnect_backoff_ms", 1000),
    ("grpc.enable_retries", 0),
]


def timeout_s(ms: float) -> float:
    return max(0.001, ms / 1000.0)


def make_server() -> grpc.aio.Server:
    """A server whose requests are parsed by `grpc_guard.RequestGuard` (garbage is answered
    INVALID_ARGUMENT with one log line per peer, not a traceback per call)."""
    from nodes.common.grpc_guard import RequestGuard  # server side only: clients never load it

    return grpc.aio.server(options=_SERVER_OPTIONS, interceptors=[RequestGuard()])


def bind(server: grpc.aio.Server, host: str, port: int) -> int:
    """Bind an insecure port; raise TransportError naming the address if it is taken."""
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError as exc:
        raise TransportError(f"cannot bind {host}:{port}: {exc}; is another node using that port?") from exc
    if bound == 0:
        raise TransportError(f"cannot bind {host}:{port}; is another node using that port?")
    return bound


def dial_address(addr: str, overrides: Mapping[str, str] | None = None) -> str:
    if overrides:
        return overrides.get(addr, addr)
    return addr


def make_channel(addr: str, overrides: Mapping[str, str] | None = None) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(dial_address(addr, overrides), options=_CHANNEL_OPTIONS)


def make_sync_channel(addr: str, overrides: Mapping[str, str] | None = None) -> grpc.Channel:
    return grpc.insecure_channel(dial_address(addr, overrides), options=_CHANNEL_OPTIONS)


def ignore_grpc_poller_noise(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """An event loop exception handler for processes that run several grpc.aio loops (a client
    instance per thread, one after another). grpc.aio wakes every loop it ever bound when a call
    completes (grpc/grpc#25364): the loops that lose the race for the wake-up byte raise
    BlockingIOError, and a call of a client already closed completes its cancellation on a loop
    that is closed (RuntimeError). Both come from `PollerCompletionQueue._handle_events` and lose
    nothing (the call was cancelled by its own close); anything else goes to the default handler."""
    exc = context.get("exception")
    source = repr(context.get("handle") or context.get("message") or "")
    noise = isinstance(exc, BlockingIOError) or (isinstance(exc, RuntimeError) and str(exc) == "Event loop is closed")
    if noise and "PollerCompletionQueue._handle_events" in source:
        return
    loop.default_exception_handler(context)


def map_rpc_error(exc: grpc.RpcError, what: str) -> MqError:
    """Turn a transport-level gRPC failure into our error tree."""
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return RequestTimeoutError(f"{what}: deadline exceeded; the outcome is unknown")
    if code == grpc.StatusCode.UNAVAILABLE:
        return TransportError(f"{what}: peer unavailable ({details})")
    if code == grpc.StatusCode.CANCELLED:
        return TransportError(f"{what}: cancelled ({details})")
    err = TransportError(f"{what}: {code.name if code else 'error'} ({details})")
    return err
