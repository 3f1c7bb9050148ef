"""The request journal's tap on a gRPC connection (HTTP/2, plaintext): mqlab's own API and RocketMQ 5's.

A call is a stream: its method is the `:path` of the client's HEADERS, HPACK-compressed against
a dynamic table both ends keep per direction, so each direction has its own decoder and every
header block of every stream goes through it (pulls' too: skipping one would break the table).
A header block may continue in CONTINUATION frames; HEADERS may carry padding and a priority.
The request and the answer are gRPC messages in DATA frames (`flag(1) | length(4) | protobuf`),
which may split across frames; the call ends with the trailers (`grpc-status`), or with a
trailers-only answer. Only the streams of journalled methods are followed: the DATA of every other
stream (pulls, sends) is counted past, never copied.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import hpack
from google.protobuf.message import DecodeError, Message

from harness.frames import HTTP2_PREFACE, Frames, Http2Frames
from nodes.common.receipt_handle import MalformedHandle, ReceiptHandle
from proto import broker_pb2, common_pb2, consumer_pb2, rmq5_definition_pb2, rmq5_service_pb2

log = logging.getLogger(__name__)

Emit = Callable[[str, dict[str, Any]], None]

_DATA, _HEADERS, _RST_STREAM, _PUSH_PROMISE, _CONTINUATION = 0x0, 0x1, 0x3, 0x5, 0x9
_END_STREAM, _END_HEADERS, _PADDED, _PRIORITY = 0x1, 0x4, 0x8, 0x20
_GRPC_PREFIX_BYTES = 5
# HPACK tables may grow to what a peer's SETTINGS allow; the journal reads, it does not police
_TABLE_BYTES_MAX = 1 << 20
_CLIENT_ID_HEADER = "x-mq-client-id"  # RocketMQ 5 clients name themselves in every call's metadata
_MQLAB_SUCCESS = common_pb2.Code.Value("SUCCESS")
_RMQ5_OK = rmq5_definition_pb2.Code.Value("OK")
_MQLAB, _RMQ5 = "/mqlab.v1.", "/apache.rocketmq.v2.MessagingService/"


def _queues(req: Any) -> list[dict[str, Any]]:
    base = {"group": req.consumer_group, "client_id": req.client_id}
    return [{**base, "topic": q.topic, "broker_name": q.broker_name, "queue_id": q.queue_id}
            for q in req.queues] or [base]


def handle_fields(handle: str) -> dict[str, Any]:
    """What an mqlab receipt handle names (nodes/common/receipt_handle.py's layout); only the handle
    itself for a foreign one."""
    out: dict[str, Any] = {"receipt_handle": handle[:300]}
    try:
        parsed = ReceiptHandle.parse(handle)
    except MalformedHandle:
        return out
    return {**out, "broker_name": parsed.broker_name, "handle_group": parsed.group, "queue_topic": parsed.queue_topic,
            "queue_id": parsed.queue_id, "queue_offset": parsed.queue_offset, "generation": parsed.generation}


def _rmq5_entries(req: Any) -> list[dict[str, Any]]:
    group = req.group.name if req.HasField("group") else None
    if isinstance(req, rmq5_service_pb2.AckMessageRequest):
        return [{"group": group, "topic": req.topic.name, "message_id": e.message_id,
                 **handle_fields(e.receipt_handle)} for e in req.entries] or [{"group": group}]
    if isinstance(req, rmq5_service_pb2.ChangeInvisibleDurationRequest):
        invisible_ms = req.invisible_duration.seconds * 1000 + req.invisible_duration.nanos // 1_000_000
        return [{"group": group, "topic": req.topic.name, "message_id": req.message_id,
                 "invisible_ms": invisible_ms, **handle_fields(req.receipt_handle)}]
    if isinstance(req, rmq5_service_pb2.ForwardMessageToDeadLetterQueueRequest):
        return [{"group": group, "topic": req.topic.name, "message_id": req.message_id,
                 **handle_fields(req.receipt_handle)}]
    return [{"group": group}]


@dataclass(frozen=True)
class _Method:
    kind: str
    request: type[Message]
    response: type[Message]
    entries: Callable[[Any], list[dict[str, Any]]]


METHODS: dict[str, _Method] = {
    _MQLAB + "Broker/UpdateConsumerOffset": _Method(
        "offset-commit", broker_pb2.UpdateConsumerOffsetRequest, broker_pb2.UpdateConsumerOffsetResponse,
        lambda r: [{"group": r.consumer_group, "client_id": r.client_id or None, "topic": r.topic,
                    "queue_id": r.queue_id, "offset": r.offset, "commit_seq": r.commit_seq or None}]),
    _MQLAB + "ConsumerManager/LockBatchMQ": _Method(
        "lock", consumer_pb2.LockBatchRequest, consumer_pb2.LockBatchResponse, _queues),
    _MQLAB + "ConsumerManager/UnlockBatchMQ": _Method(
        "unlock", consumer_pb2.UnlockBatchRequest, consumer_pb2.UnlockBatchResponse, _queues),
    _MQLAB + "ConsumerManager/Heartbeat": _Method(
        "heartbeat", consumer_pb2.HeartbeatRequest, consumer_pb2.HeartbeatResponse,
        lambda r: [{"group": d.group, "client_id": r.client_id} for d in r.consumers]
        or [{"group": None, "client_id": r.client_id}]),
    _MQLAB + "ConsumerManager/UnregisterClient": _Method(
        "unregister", consumer_pb2.UnregisterClientRequest, consumer_pb2.UnregisterClientResponse,
        lambda r: [{"group": r.consumer_group or None, "client_id": r.client_id}]),
    _RMQ5 + "Heartbeat": _Method(
        "heartbeat", rmq5_service_pb2.HeartbeatRequest, rmq5_service_pb2.HeartbeatResponse, _rmq5_entries),
    _RMQ5 + "AckMessage": _Method(
        "ack", rmq5_service_pb2.AckMessageRequest, rmq5_service_pb2.AckMessageResponse, _rmq5_entries),
    _RMQ5 + "ChangeInvisibleDuration": _Method(
        "change-invisible", rmq5_service_pb2.ChangeInvisibleDurationRequest,
        rmq5_service_pb2.ChangeInvisibleDurationResponse, _rmq5_entries),
    _RMQ5 + "ForwardMessageToDeadLetterQueue": _Method(
        "forward-dlq", rmq5_service_pb2.ForwardMessageToDeadLetterQueueRequest,
        rmq5_service_pb2.ForwardMessageToDeadLetterQueueResponse, _rmq5_entries),
    _RMQ5 + "NotifyClientTermination": _Method(
        "client-termination", rmq5_service_pb2.NotifyClientTerminationRequest,
        rmq5_service_pb2.NotifyClientTerminationResponse, _rmq5_entries),
}


def answer_status(response: Message) -> tuple[str | None, int | None, bool]:
    """(status name, status code, ok) of a decoded answer: mqlab's `code`, RocketMQ 5's `status.code`."""
    if hasattr(response, "code"):
        code = int(response.code)
        return common_pb2.Code.Name(code) if code in common_pb2.Code.values() else str(code), code, \
            code == _MQLAB_SUCCESS
    status = response.status  # type: ignore[attr-defined]
    code = int(status.code)
    name = rmq5_definition_pb2.Code.Name(code) if code in rmq5_definition_pb2.Code.values() else str(code)
    return name, code, code == _RMQ5_OK


@dataclass
class _Call:
    method: str
    spec: _Method
    client_id: str | None
    buffers: dict[bool, bytearray] = field(default_factory=lambda: {True: bytearray(), False: bytearray()})
    entries: list[dict[str, Any]] | None = None
    sent_mono_ms: int | None = None
    response: Message | None = None
    grpc_status: int | None = None
    grpc_message: str | None = None
    undecodable: bool = False


class GrpcTap:
    protocol = "grpc"

    def __init__(self, emit: Emit, context: dict[str, Any]) -> None:
        self._emit = emit
        self._context = {**context, "protocol": self.protocol}
        self.calls: dict[int, _Call] = {}
        self._decoders = {True: hpack.Decoder(), False: hpack.Decoder()}
        for d in self._decoders.values():
            d.max_allowed_table_size = _TABLE_BYTES_MAX
        self._blocks: dict[bool, tuple[int, int, bytearray] | None] = {True: None, False: None}
        self.forward_walker = Http2Frames(self.forward_frame, hold=False, preface=HTTP2_PREFACE, skip=self._skippable)
        self.backward_walker = Http2Frames(self.backward_frame, hold=False, skip=self._skippable)
        self.broken = False

    def _skippable(self, buf: Frames, at: int) -> bool:
        """The DATA of a stream no journalled call is on (pulls, sends): walked past, never copied."""
        return buf[at + 3] == _DATA and (int.from_bytes(buf[at + 5:at + 9], "big") & 0x7FFFFFFF) not in self.calls

    def forward_frame(self, frame: bytes) -> None:
        self._frame(True, frame)

    def backward_frame(self, frame: bytes) -> None:
        self._frame(False, frame)

    def _frame(self, forward: bool, frame: bytes) -> None:
        if self.broken:
            return
        ftype, flags = frame[3], frame[4]
        stream = int.from_bytes(frame[5:9], "big") & 0x7FFFFFFF
        payload = memoryview(frame)[9:]
        if ftype == _DATA:
            call = self.calls.get(stream)
            if call is not None:
                if flags & _PADDED:
                    payload = payload[1:len(payload) - payload[0]]
                self._data(forward, stream, call, payload)
        elif ftype in (_HEADERS, _PUSH_PROMISE):
            pos, pad = 0, 0
            if flags & _PADDED:
                pad, pos = payload[0], 1
            if ftype == _PUSH_PROMISE:
                pos += 4
            elif flags & _PRIORITY:
                pos += 5
            fragment = payload[pos:len(payload) - pad]
            if flags & _END_HEADERS:
                self._headers(forward, stream, bytes(fragment), bool(flags & _END_STREAM) and ftype == _HEADERS)
            else:
                self._blocks[forward] = (stream, flags & _END_STREAM if ftype == _HEADERS else 0, bytearray(fragment))
        elif ftype == _CONTINUATION:
            block = self._blocks[forward]
            if block is None:
                return
            block[2].extend(payload)
            if flags & _END_HEADERS:
                self._blocks[forward] = None
                self._headers(forward, block[0], bytes(block[2]), bool(block[1]))
        elif ftype == _RST_STREAM:
            self.calls.pop(stream, None)  # cancelled or refused: no answer passed; the check counts it unanswered

    def _headers(self, forward: bool, stream: int, block: bytes, end_stream: bool) -> None:
        try:
            headers = self._decoders[forward].decode(block, raw=False)
        except (hpack.HPACKError, UnicodeDecodeError) as exc:
            # the tables are out of step from here on: this connection is journalled no further
            log.warning("request journal %s: a header block does not decode (%s); stop journalling this connection",
                        self._context.get("link"), exc)
            self.broken = True
            self.calls.clear()
            return
        if forward:
            path = next((v for k, v in headers if k == ":path"), None)
            spec = METHODS.get(path or "")
            if spec is not None:
                client = next((v for k, v in headers if k == _CLIENT_ID_HEADER), None)
                self.calls[stream] = _Call(path or "", spec, client)
            return
        call = self.calls.get(stream)
        if call is None:
            return
        for k, v in headers:
            if k == "grpc-status":
                try:
                    call.grpc_status = int(v)
                except ValueError:
                    call.grpc_status = -1
            elif k == "grpc-message":
                call.grpc_message = v[:200]
        if end_stream:
            self._answer(stream, call)

    def _data(self, forward: bool, stream: int, call: _Call, payload: memoryview) -> None:
        buf = call.buffers[forward]
        buf += payload
        while len(buf) >= _GRPC_PREFIX_BYTES:
            length = int.from_bytes(buf[1:5], "big")
            if len(buf) < _GRPC_PREFIX_BYTES + length:
                break
            compressed = buf[0]
            raw = bytes(buf[_GRPC_PREFIX_BYTES:_GRPC_PREFIX_BYTES + length])
            del buf[:_GRPC_PREFIX_BYTES + length]
            message = None
            if not compressed:
                message = (call.spec.request if forward else call.spec.response)()
                try:
                    message.ParseFromString(raw)
                except DecodeError:
                    message = None
            if message is None:
                call.undecodable = True
            if forward:
                self._request(stream, call, message)
            else:
                call.response = message

    def _request(self, stream: int, call: _Call, message: Message | None) -> None:
        call.sent_mono_ms = time.monotonic_ns() // 1_000_000
        call.entries = call.spec.entries(message) if message is not None else [{}]
        for entry in call.entries:
            entry.setdefault("client_id", call.client_id)
        base = {**self._context, "kind": call.spec.kind, "method": call.method, "request_id": stream}
        for i, entry in enumerate(call.entries):
            self._emit("request", {**base, "entry": i, **entry})

    def _answer(self, stream: int, call: _Call) -> None:
        del self.calls[stream]
        if call.entries is None:
            return  # the request never passed whole: nothing was journalled to answer
        status, code, ok = (None, None, False) if call.response is None else answer_status(call.response)
        ok = ok and call.grpc_status == 0
        per_entry: dict[str, tuple[str | None, int | None, bool]] = {}
        locked: set[tuple[str, str, int]] | None = None
        if isinstance(call.response, rmq5_service_pb2.AckMessageResponse):
            for e in call.response.entries:
                name, ecode, eok = answer_status(e)
                per_entry[e.receipt_handle[:300]] = (name, ecode, eok and call.grpc_status == 0)
        elif isinstance(call.response, consumer_pb2.LockBatchResponse):
            locked = {(q.topic, q.broker_name, q.queue_id) for q in call.response.locked}
        now = time.monotonic_ns() // 1_000_000
        base = {**self._context, "kind": call.spec.kind, "method": call.method, "request_id": stream,
                "sent_mono_ms": call.sent_mono_ms, "answered_mono_ms": now, "grpc_status": call.grpc_status,
                "grpc_message": call.grpc_message, "status": status, "response_code": code, "ok": ok}
        for i, entry in enumerate(call.entries):
            line = {**base, "entry": i, **entry}
            handle = entry.get("receipt_handle")
            if handle in per_entry:
                line["status"], line["response_code"], line["ok"] = per_entry[handle]
            if locked is not None:
                line["locked"] = ok and (entry.get("topic"), entry.get("broker_name"), entry.get("queue_id")) in locked
            self._emit("answer", line)
