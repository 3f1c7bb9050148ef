"""What a link proxy's journal reads of one connection: the requests that matter and their answers.

`ConnectionTap` sits on one proxied connection of a consumer's link to a broker. It tells the
protocol from the client's first bytes (the HTTP/2 preface: gRPC, mqlab's own API or RocketMQ 5's;
anything else: RocketMQ 4.x remoting) and hands the bytes to that protocol's tap, which walks
the frames of both directions (`harness.frames`) and writes to the `RequestJournal`:

- `request` when a request that matters has passed the proxy towards the broker, one line per
  entry (a queue of a lock or unlock, a receipt handle of an ack, a group of a heartbeat);
- `answer` when its answer passes back: the request's fields again, with the answer's status.

Requests that matter (`kind`): `offset-commit`, `lock`, `unlock`, `heartbeat`, `unregister`
(mqlab), `ack`, `change-invisible`, `forward-dlq`, `client-termination` (RocketMQ 5). Pulls and
sends are walked past, never decoded. A connection whose bytes stop making sense (a header block
HPACK cannot decode, a frame no client sends) stops being journalled; its bytes pass as before.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.frames import HTTP2_PREFACE, Frames, RemotingFrames
from harness.grpc_tap import GrpcTap
from nodes.remoting.command import FrameError, RemotingCommand, RequestCode, decode

log = logging.getLogger(__name__)

Emit = Callable[[str, dict[str, Any]], None]

# the RocketMQ 4.x requests the journal follows
UPDATE_CONSUMER_OFFSET = int(RequestCode.UPDATE_CONSUMER_OFFSET)
HEART_BEAT = int(RequestCode.HEART_BEAT)
LOCK_BATCH_MQ = int(RequestCode.LOCK_BATCH_MQ)
UNLOCK_BATCH_MQ = int(RequestCode.UNLOCK_BATCH_MQ)
REMOTING_KINDS = {UPDATE_CONSUMER_OFFSET: "offset-commit", HEART_BEAT: "heartbeat", LOCK_BATCH_MQ: "lock",
                  UNLOCK_BATCH_MQ: "unlock"}
_WITH_BODY = (HEART_BEAT, LOCK_BATCH_MQ, UNLOCK_BATCH_MQ)
# what the broker may say before the client's first bytes tell the protocol (an HTTP/2 server's SETTINGS)
_EARLY_BYTES_MAX = 64 * 1024


def mono_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class ConnectionTap:
    """One proxied connection: `forward(bytes)` for the client's bytes, `backward(bytes)` for the
    broker's (or `backward_frame(frame)` when a rewriter already walks them); both return their
    input unchanged."""

    def __init__(self, emit: Emit, context: dict[str, Any]) -> None:
        self._emit = emit
        self._context = context
        self._impl: RemotingTap | GrpcTap | None = None
        self._head = b""
        self._early: list[tuple[bool, bytes]] = []  # the broker's bytes before the client said its protocol
        self._early_bytes = 0
        self.failed = False

    @property
    def protocol(self) -> str | None:
        return self._impl.protocol if self._impl is not None else None

    def forward(self, data: bytes) -> bytes:
        if not self.failed:
            self._guarded(self._forward, data)
        return data

    def backward(self, data: bytes) -> bytes:
        if not self.failed:
            self._guarded(self._backward, data, False)
        return data

    def backward_frame(self, frame: bytes) -> None:
        if not self.failed:
            self._guarded(self._backward, frame, True)

    def _guarded(self, fn: Callable[..., None], *args: Any) -> None:
        # the tap rides on the proxy's reader: a bug of its own must cost the journal, never the bytes
        try:
            fn(*args)
        except Exception:
            self.failed = True
            log.exception("request journal %s: tap failed; this connection is journalled no further",
                          self._context.get("link"))

    def _forward(self, data: bytes) -> None:
        if self._impl is not None:
            self._impl.forward_walker.feed(data)
            return
        self._head += data
        if len(self._head) < 4 and HTTP2_PREFACE.startswith(self._head):
            return  # too few bytes to tell yet
        self._choose(self._head.startswith(HTTP2_PREFACE[:4]))
        head, self._head = self._head, b""
        assert self._impl is not None
        self._impl.forward_walker.feed(head)

    def _backward(self, data: bytes, whole: bool) -> None:
        if self._impl is None:
            self._early.append((whole, data))
            self._early_bytes += len(data)
            if self._early_bytes > _EARLY_BYTES_MAX:  # a peer that talks and talks to a silent client
                self.failed = True
                self._early.clear()
        elif whole:
            self._impl.backward_frame(data)
        else:
            self._impl.backward_walker.feed(data)

    def _choose(self, http2: bool) -> None:
        ctx = dict(self._context)
        self._impl = GrpcTap(self._emit, ctx) if http2 else RemotingTap(self._emit, ctx)
        for whole, data in self._early:
            if whole:
                self._impl.backward_frame(data)
            else:
                self._impl.backward_walker.feed(data)
        self._early.clear()


# ---- RocketMQ 4.x remoting ----------------------------------------------------------------------


@dataclass
class _Pending:
    kind: str
    code: int
    sent_mono_ms: int
    entries: list[dict[str, Any]] = field(default_factory=list)


class RemotingTap:
    protocol = "remoting"

    def __init__(self, emit: Emit, context: dict[str, Any]) -> None:
        self._emit = emit
        self._context = {**context, "protocol": self.protocol}
        self._pending: dict[int, _Pending] = {}
        # remoting names no committer: the client id of the last heartbeat on this connection does
        self._client_id: str | None = None
        self.forward_walker = RemotingFrames(self._request, hold=False, skip=self._skip_request)
        self.backward_walker = RemotingFrames(self.backward_frame, hold=False, skip=self._skip_answer)
        self.undecodable = 0

    # a frame whose header is in and says it is of no interest (a send, a pull's answer) is walked
    # past: its body is never copied
    def _skip_request(self, buf: Frames, at: int) -> bool:
        cmd = self._buffered_header(buf, at)
        return cmd is not None and (cmd.is_response or cmd.code not in REMOTING_KINDS)

    def _skip_answer(self, buf: Frames, at: int) -> bool:
        cmd = self._buffered_header(buf, at)
        return cmd is not None and not (cmd.is_response and cmd.opaque in self._pending)

    @staticmethod
    def _buffered_header(buf: Frames, at: int) -> RemotingCommand | None:
        if len(buf) - at < 8:
            return None
        end = at + 8 + int.from_bytes(buf[at + 5:at + 8], "big")
        if len(buf) < end:
            return None
        try:
            return decode(bytes(buf[at + 4:end]))
        except FrameError:
            return None

    def _request(self, frame: bytes) -> None:
        cmd = self._header(frame)
        if cmd is None or cmd.is_response or cmd.code not in REMOTING_KINDS:
            return
        kind = REMOTING_KINDS[cmd.code]
        body = _json_body(frame) if cmd.code in _WITH_BODY else None
        if cmd.code == HEART_BEAT and isinstance(body, dict) and body.get("clientID"):
            self._client_id = str(body["clientID"])
        entries = _remoting_entries(cmd, body, self._client_id)
        base = {**self._context, "kind": kind, "code": cmd.code, "request_id": cmd.opaque,
                "oneway": cmd.is_oneway or None}
        for i, entry in enumerate(entries):
            self._emit("request", {**base, "entry": i, **entry})
        if not cmd.is_oneway:
            self._pending[cmd.opaque] = _Pending(kind, cmd.code, mono_ms(), entries)

    def backward_frame(self, frame: bytes) -> None:
        if not self._pending:
            return
        cmd = self._header(frame)
        if cmd is None or not cmd.is_response:
            return
        pending = self._pending.pop(cmd.opaque, None)
        if pending is None:
            return
        locked: set[tuple[Any, Any, Any]] | None = None
        if pending.code == LOCK_BATCH_MQ and cmd.code == 0:
            body = _json_body(frame)
            mqs = body.get("lockOKMQSet") if isinstance(body, dict) else None
            locked = {_mq_key(mq) for mq in mqs or () if isinstance(mq, dict)}
        answered = mono_ms()
        base = {**self._context, "kind": pending.kind, "code": pending.code, "request_id": cmd.opaque,
                "sent_mono_ms": pending.sent_mono_ms, "answered_mono_ms": answered, "response_code": cmd.code,
                "ok": cmd.code == 0, "remark": (cmd.remark or "")[:200] or None}
        for i, entry in enumerate(pending.entries):
            extra = {}
            if locked is not None or pending.code == LOCK_BATCH_MQ:
                extra["locked"] = locked is not None and (entry.get("topic"), entry.get("broker_name"),
                                                          entry.get("queue_id")) in locked
            self._emit("answer", {**base, "entry": i, **entry, **extra})

    def _header(self, frame: bytes) -> RemotingCommand | None:
        """The frame's header only (the body, a pull's messages, is never copied)."""
        header_len = int.from_bytes(frame[5:8], "big")
        try:
            return decode(memoryview(frame)[4:8 + header_len])
        except FrameError:
            self.undecodable += 1
            return None


def _json_body(frame: bytes) -> Any:
    header_len = int.from_bytes(frame[5:8], "big")
    try:
        return json.loads(frame[8 + header_len:])
    except (UnicodeDecodeError, ValueError):
        return None


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _mq_key(mq: dict[str, Any]) -> tuple[Any, Any, Any]:
    return mq.get("topic"), mq.get("brokerName"), _int(mq.get("queueId"))


def _remoting_entries(cmd: RemotingCommand, body: Any, client_id: str | None) -> list[dict[str, Any]]:
    body = body if isinstance(body, dict) else {}
    if cmd.code == UPDATE_CONSUMER_OFFSET:
        return [{"group": cmd.ext.get("consumerGroup"), "client_id": client_id, "topic": cmd.ext.get("topic"),
                 "queue_id": _int(cmd.ext.get("queueId")), "offset": _int(cmd.ext.get("commitOffset"))}]
    if cmd.code == HEART_BEAT:
        who = body.get("clientID") or client_id
        groups = [d.get("groupName") for d in body.get("consumerDataSet") or () if isinstance(d, dict)]
        return [{"group": g, "client_id": who} for g in groups] or [{"group": None, "client_id": who}]
    group, who = body.get("consumerGroup"), body.get("clientId") or client_id
    mqs = [mq for mq in body.get("mqSet") or () if isinstance(mq, dict)]
    return [{"group": group, "client_id": who, "topic": t, "broker_name": b, "queue_id": q}
            for t, b, q in map(_mq_key, mqs)] or [{"group": group, "client_id": who}]
