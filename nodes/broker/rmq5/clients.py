"""The 5.x clients a broker knows: who called (metadata), what each said it is (heartbeats and
Telemetry settings), and the one Telemetry stream each keeps open for server pushes.

A client is keyed by its `x-mq-client-id`. It is recorded at its first call and forgotten at
`NotifyClientTermination` or, when it went away without one, once it has made no call and
holds no stream for RMQ5_CLIENT_IDLE_FORGET_MS. Nothing here is persisted: a restarted broker
learns its clients again from their next heartbeat (every 10 s) and their streams' reopening.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nodes.common import constants as c

log = logging.getLogger(__name__)

# What the server pushes on a client's stream; the transport supplies it and owns the command's shape.
Push = Callable[[Any], None]


@dataclass(frozen=True, slots=True)
class CallContext:
    """Who made one call: its metadata headers and the peer address gRPC saw."""

    client_id: str
    language: str = ""
    version: str = ""
    namespace: str = ""
    peer: str = ""


@dataclass(slots=True)
class Rmq5Client:
    client_id: str
    language: str
    version: str
    peer: str
    first_seen_ms: int
    last_seen_ms: int
    client_type: str = ""  # PRODUCER, PUSH_CONSUMER, SIMPLE_CONSUMER, ... as the client said
    group: str = ""
    topics: tuple[str, ...] = ()
    heartbeats: int = 0
    settings_received: int = 0
    stream_token: int = 0  # 0: no Telemetry stream open
    push: Push | None = field(default=None, repr=False)

    def describe(self) -> dict[str, Any]:
        return {"client_id": self.client_id, "language": self.language, "version": self.version, "peer": self.peer,
                "client_type": self.client_type, "group": self.group, "topics": list(self.topics),
                "heartbeats": self.heartbeats, "settings_received": self.settings_received,
                "telemetry_open": self.stream_token != 0, "last_seen_ms": self.last_seen_ms}


class Rmq5ClientRegistry:
    def __init__(self, now_ms: Callable[[], int], idle_forget_ms: int = c.RMQ5_CLIENT_IDLE_FORGET_MS) -> None:
        self._now_ms = now_ms
        self._idle_forget_ms = idle_forget_ms
        self._clients: dict[str, Rmq5Client] = {}
        self._next_token = 1
        self.calls: dict[str, int] = {}  # RPC name -> calls answered, for Describe and tests
        self.terminated = 0

    def touch(self, ctx: CallContext, rpc: str) -> Rmq5Client:
        """Record one call of `rpc` by the client of `ctx` (created at its first call)."""
        self.calls[rpc] = self.calls.get(rpc, 0) + 1
        now = self._now_ms()
        client = self._clients.get(ctx.client_id)
        if client is None:
            self._forget_idle(now)
            client = Rmq5Client(ctx.client_id, ctx.language, ctx.version, ctx.peer, now, now)
            self._clients[ctx.client_id] = client
            log.info("rocketmq5 client %s (%s %s) from %s", ctx.client_id, ctx.language or "?",
                     ctx.version or "?", ctx.peer or "?")
        client.last_seen_ms = now
        return client

    def heartbeat(self, ctx: CallContext, client_type: str, group: str) -> None:
        client = self.touch(ctx, "Heartbeat")
        client.heartbeats += 1
        if client_type:
            client.client_type = client_type
        if group:
            client.group = group

    def settings(self, ctx: CallContext, client_type: str, group: str, topics: tuple[str, ...]) -> Rmq5Client:
        client = self.touch(ctx, "Telemetry.settings")
        client.settings_received += 1
        client.client_type = client_type or client.client_type
        client.group = group or client.group
        client.topics = topics or client.topics
        return client

    def open_stream(self, ctx: CallContext, push: Push) -> int:
        """A Telemetry stream opened: it replaces the client's previous one (the newest is where
        pushes go). Returns the token `close_stream` takes."""
        client = self.touch(ctx, "Telemetry")
        token = self._next_token
        self._next_token += 1
        client.stream_token, client.push = token, push
        return token

    def close_stream(self, client_id: str, token: int) -> None:
        client = self._clients.get(client_id)
        if client is not None and client.stream_token == token:
            client.stream_token, client.push = 0, None
            client.last_seen_ms = self._now_ms()

    def terminate(self, ctx: CallContext, group: str) -> None:
        """NotifyClientTermination: the client is gone (its stream, if still open, ends with it)."""
        self.calls["NotifyClientTermination"] = self.calls.get("NotifyClientTermination", 0) + 1
        if self._clients.pop(ctx.client_id, None) is not None:
            self.terminated += 1
            log.info("rocketmq5 client %s terminated%s", ctx.client_id, f" (group {group})" if group else "")

    def now_ms(self) -> int:
        """The registry's clock (monotonic): what `last_seen_ms` is measured on."""
        return self._now_ms()

    def get(self, client_id: str) -> Rmq5Client | None:
        return self._clients.get(client_id)

    def producers_with_stream(self, topic: str) -> list[Rmq5Client]:
        """The producers publishing `topic` (as their settings said) whose Telemetry stream is open."""
        return [cl for cl in self._clients.values()
                if cl.push is not None and cl.client_type == "PRODUCER" and topic in cl.topics]

    def _forget_idle(self, now: int) -> None:
        for client_id, client in list(self._clients.items()):
            if client.stream_token == 0 and now - client.last_seen_ms > self._idle_forget_ms:
                del self._clients[client_id]

    def describe(self) -> dict[str, Any]:
        self._forget_idle(self._now_ms())
        return {"clients": [cl.describe() for cl in self._clients.values()], "calls": dict(self.calls),
                "terminated": self.terminated}
