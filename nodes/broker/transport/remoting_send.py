"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320) -> the send handler.

V2 is V1 with one-letter field names (RocketMQ's SendMessageRequestHeaderV2); both become
one `SendRequest`. A batch is code 320, or code 10/310 with `batch` set: the C++ client sends
its batches as code 10 with `batch "1"`, which a Java 4.9 broker would read as false and store
as one message; here "1" counts, so the batch is stored message by message. The answer carries
the offset message id (comma-joined for a batch), the queue and the first queue offset, plus
the region and trace fields a Java broker always writes.

A body the client compressed (sysFlag bit 1; both real clients zlib-compress bodies over
4 KiB) is stored inflated with the bit cleared. A Java broker stores it as sent and leaves
inflating to Java consumers; mqlab's consumers never inflate, so storing what the producer
meant is what lets them read the same body (and a real consumer reads it either way).
"""

from __future__ import annotations

import zlib
from collections.abc import Awaitable, Callable

from nodes.broker.send import IncomingMessage, SendRequest, SendResponse
from nodes.broker.transport import remoting_codes
from nodes.common import constants as c
from nodes.common.codes import ResponseCode
from nodes.remoting.command import HeaderFieldError, RemotingCommand, RequestCode, decode_properties
from nodes.remoting.server import Channel
from nodes.store.record import SYS_FLAG_BORN_HOST_V6, SYS_FLAG_STORE_HOST_V6

SendHandler = Callable[[SendRequest], Awaitable[SendResponse]]

# SendMessageRequestHeaderV2's short names -> V1's
_V2_FIELDS = {"a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums", "e": "queueId",
              "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties", "j": "reconsumeTimes",
              "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch", "n": "brokerName"}


def v1_header(cmd: RemotingCommand) -> RemotingCommand:
    """The request with V1 field names, whichever header it came with."""
    if cmd.code not in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        return cmd
    ext = {long: cmd.ext[short] for short, long in _V2_FIELDS.items() if short in cmd.ext}
    # a Java client may still send V1 names on 320; keep any it sent
    ext.update({k: v for k, v in cmd.ext.items() if k not in _V2_FIELDS})
    return RemotingCommand(code=cmd.code, opaque=cmd.opaque, ext=ext, body=cmd.body)


def peer_host(channel: Channel) -> tuple[str, int]:
    host, _, port = channel.peer.rpartition(":")
    try:
        return host or "127.0.0.1", int(port)
    except ValueError:
        return "127.0.0.1", 0


def send_request_from_command(cmd: RemotingCommand, born_host: tuple[str, int]) -> SendRequest:
    header = v1_header(cmd)
    batch = cmd.code == RequestCode.SEND_BATCH_MESSAGE or header.ext_bool("batch")
    born_ms = header.ext_int("bornTimestamp", 0)
    sys_flag = header.ext_int("sysFlag", 0)
    body = cmd.body
    messages: list[IncomingMessage] = []
    if not batch:
        if sys_flag & c.REMOTING_SYS_FLAG_COMPRESSED:
            body, sys_flag = _inflate(body), sys_flag & ~c.REMOTING_SYS_FLAG_COMPRESSED
        messages.append((body, header.ext_int("flag", 0), decode_properties(header.ext_str("properties", "")),
                         born_ms))
    # a batch's messages carry their own properties in the body; the header's (WAIT) are the batch's
    return SendRequest(topic=header.ext_str("topic"), queue_id=header.ext_int("queueId"), messages=messages,
                       batch_body=body if batch else b"", born_timestamp_ms=born_ms,
                       default_topic_queue_nums=header.ext_int("defaultTopicQueueNums", 0), born_host=born_host,
                       sys_flag=sys_flag, reconsume_times=header.ext_int("reconsumeTimes", 0))


def _inflate(body: bytes) -> bytes:
    """A compressed body, inflated to at most a frame's size (the send handler then applies
    the broker's own body limit), so a small body cannot inflate without bound."""
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(body, c.REMOTING_FRAME_BYTES_MAX + 1)
    except zlib.error as exc:
        raise HeaderFieldError(f"the body is flagged compressed but does not inflate: {exc}") from None
    if len(out) > c.REMOTING_FRAME_BYTES_MAX or not inflater.eof:
        raise HeaderFieldError(f"the compressed body inflates past {c.REMOTING_FRAME_BYTES_MAX} bytes or is truncated")
    return out


def send_answer(cmd: RemotingCommand, response: SendResponse) -> RemotingCommand:
    if not response.appended:
        return remoting_codes.answer(cmd, response.code, response.remark)
    # 10/11/12 still stored the messages: the client is told where, as on success
    ext = {"msgId": ",".join(a.offset_msg_id for a in response.appended), "queueId": response.queue_id,
           "queueOffset": response.appended[0].queue_offset, "MSG_REGION": c.REMOTING_MSG_REGION,
           "TRACE_ON": c.REMOTING_TRACE_ON}
    return remoting_codes.answer(cmd, response.code, response.remark, ext)


async def handle_send(send: SendHandler, cmd: RemotingCommand, channel: Channel) -> RemotingCommand:
    request = send_request_from_command(cmd, peer_host(channel))
    if request.sys_flag & (SYS_FLAG_BORN_HOST_V6 | SYS_FLAG_STORE_HOST_V6):
        return remoting_codes.answer(cmd, ResponseCode.MESSAGE_ILLEGAL, "IPv6 hosts are not supported")
    return send_answer(cmd, await send(request))
