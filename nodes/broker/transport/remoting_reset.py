"""Offset resets over remoting: INVOKE_BROKER_TO_RESET_OFFSET (222) from a tool -> the same
handler gRPC's ResetConsumerOffset calls, and the RESET_CONSUMER_CLIENT_OFFSET (220) frames the
notification pumps send a RocketMQ client.

Both carry RocketMQ's ResetOffsetRequestHeader (topic, group, timestamp, isForce) and a
ResetOffsetBody: `{"offsetTable":{MessageQueue: offset}}` keyed by the queue's JSON object as
fastjson writes a Map<MessageQueue, Long>, or, for a C++ client (the header's language CPP),
RocketMQ's ResetOffsetBodyForC, a list of `{"brokerName","offset","queueId","topic"}`, which is
what the C++ client's decoder reads.
"""

from __future__ import annotations

from nodes.broker.client_manage import ResetNotice
from nodes.broker.offset_reset import ResetOffsetRequest, ResetOffsetResponse
from nodes.broker.request_table import RequestKind, RequestTable
from nodes.broker.transport import remoting_codes
from nodes.broker.transport.remoting_admin import object_keyed_map
from nodes.broker.transport.remoting_json import dumps
from nodes.common.codes import ResponseCode
from nodes.remoting.command import RemotingCommand
from nodes.remoting.server import Channel

LANGUAGE_CPP = "CPP"


def reset_header(notice: ResetNotice) -> dict[str, str]:
    """ResetOffsetRequestHeader of a RESET_CONSUMER_CLIENT_OFFSET (mqlab's resets are forced)."""
    return {"topic": notice.topic, "group": notice.group, "timestamp": str(notice.timestamp_ms), "isForce": "true"}


def reset_body(topic: str, broker_name: str, offsets: tuple[tuple[int, int], ...], *, for_c: bool) -> bytes:
    """ResetOffsetBody (Java), or ResetOffsetBodyForC when `for_c`."""
    if for_c:
        return dumps({"offsetTable": [{"brokerName": broker_name, "offset": offset, "queueId": queue_id,
                                       "topic": topic} for queue_id, offset in offsets]})
    table = object_keyed_map(({"brokerName": broker_name, "queueId": queue_id, "topic": topic}, offset)
                             for queue_id, offset in offsets)
    return f'{{"offsetTable":{table}}}'.encode()


def notice_frame(notice: ResetNotice, language: str) -> tuple[dict[str, str], bytes]:
    """The header and body of the RESET_CONSUMER_CLIENT_OFFSET a client of `language` reads."""
    return reset_header(notice), reset_body(notice.topic, notice.broker_name, notice.offsets,
                                            for_c=language == LANGUAGE_CPP)


class RemotingReset:
    def __init__(self, table: RequestTable) -> None:
        self._reset = table[RequestKind.RESET_CONSUMER_OFFSET]

    def invoke_reset(self, cmd: RemotingCommand, channel: Channel) -> RemotingCommand:
        """INVOKE_BROKER_TO_RESET_OFFSET: ResetOffsetRequestHeader (topic, group, timestamp;
        isForce is read and ignored: a reset here always sets the offsets it computes). The
        answer's body is the offsets set, as the clients were told them."""
        answer: ResetOffsetResponse = self._reset(
            ResetOffsetRequest(cmd.ext_str("group"), cmd.ext_str("topic"), cmd.ext_int("timestamp")))
        if answer.code != ResponseCode.SUCCESS:
            return remoting_codes.answer(cmd, answer.code, answer.remark)
        offsets = tuple((q.queue_id, q.new_offset) for q in answer.queues)
        topic = cmd.ext_str("topic")
        return remoting_codes.answer(cmd, answer.code, body=reset_body(topic, answer.broker_name, offsets,
                                                                       for_c=cmd.language == LANGUAGE_CPP))
