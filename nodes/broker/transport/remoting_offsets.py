"""The offset codes over remoting -> the offset handler: QUERY_CONSUMER_OFFSET (14, with the
handler's young-queue rule; 22 when the group has none), UPDATE_CONSUMER_OFFSET (15, always
answered: neither real client sets the oneway flag and the C++ client waits for it),
GET_MAX_OFFSET (30), GET_MIN_OFFSET (31) and SEARCH_OFFSET_BY_TIMESTAMP (29). Every answer
carries the offset as ext `offset`.
"""

from __future__ import annotations

from collections.abc import Callable

from nodes.broker.offset_requests import (
    GetQueueOffsetRequest,
    OffsetKind,
    OffsetResponse,
    QueryConsumerOffsetRequest,
    UpdateConsumerOffsetRequest,
)
from nodes.broker.request_table import RequestKind, RequestTable
from nodes.broker.transport import remoting_codes
from nodes.common.codes import ResponseCode
from nodes.remoting.command import RemotingCommand, RequestCode
from nodes.remoting.server import Channel

_KIND_BY_CODE = {RequestCode.GET_MAX_OFFSET: OffsetKind.MAX, RequestCode.GET_MIN_OFFSET: OffsetKind.MIN,
                 RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: OffsetKind.BY_TIMESTAMP}


def _offset_answer(cmd: RemotingCommand, answer: OffsetResponse) -> RemotingCommand:
    ext = {"offset": answer.offset} if answer.code == ResponseCode.SUCCESS else None
    return remoting_codes.answer(cmd, answer.code, answer.remark, ext)


class RemotingOffsets:
    def __init__(self, table: RequestTable, client_ids_on: Callable[[Channel], list[str]] | None = None) -> None:
        # UPDATE_CONSUMER_OFFSET names no client: the one client that heartbeats on the same
        # connection is the committer (recorded with the stored offset; commits stay unordered)
        self._client_ids_on = client_ids_on
        self._query = table[RequestKind.QUERY_CONSUMER_OFFSET]
        self._update = table[RequestKind.UPDATE_CONSUMER_OFFSET]
        self._queue_offset = table[RequestKind.GET_QUEUE_OFFSET]

    def query(self, cmd: RemotingCommand, channel: Channel) -> RemotingCommand:
        return _offset_answer(cmd, self._query(QueryConsumerOffsetRequest(
            cmd.ext_str("consumerGroup"), cmd.ext_str("topic"), cmd.ext_int("queueId"))))

    def update(self, cmd: RemotingCommand, channel: Channel) -> RemotingCommand:
        clients = self._client_ids_on(channel) if self._client_ids_on is not None else []
        answer = self._update(UpdateConsumerOffsetRequest(
            cmd.ext_str("consumerGroup"), cmd.ext_str("topic"), cmd.ext_int("queueId"), cmd.ext_int("commitOffset"),
            client_id=clients[0] if len(clients) == 1 else ""))
        return remoting_codes.answer(cmd, answer.code, answer.remark)

    def queue_offset(self, cmd: RemotingCommand, channel: Channel) -> RemotingCommand:
        kind = _KIND_BY_CODE[RequestCode(cmd.code)]
        timestamp_ms = cmd.ext_int("timestamp") if kind is OffsetKind.BY_TIMESTAMP else 0
        return _offset_answer(cmd, self._queue_offset(GetQueueOffsetRequest(
            cmd.ext_str("topic"), cmd.ext_int("queueId"), kind, timestamp_ms)))
