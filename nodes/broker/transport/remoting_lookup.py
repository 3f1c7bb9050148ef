"""The message lookups over remoting (what RocketMQ 4.x's clients and mqadmin send a broker) ->
the same handlers gRPC calls: QUERY_MESSAGE (12) and VIEW_MESSAGE_BY_ID (33).

QUERY_MESSAGE's header is QueryMessageRequestHeader (topic, key, maxNum, beginTimestamp,
endTimestamp) with the `_UNIQUE_KEY_QUERY` extField "true" when the key is a client message id
(queryMessageByUniqKey). The answer's body is the records found, back to back, exactly as the
commitlog holds them (what a pull answer carries, so a client decodes them the same way), and
its header QueryMessageResponseHeader (indexLastUpdateTimestamp, indexLastUpdatePhyoffset).
Nothing found is QUERY_NOT_FOUND (22), as RocketMQ's broker answers.

VIEW_MESSAGE_BY_ID's header is ViewMessageRequestHeader (offset: the phys offset a client took
from an offset message id); the answer's body is that one record. Nothing valid there is
SYSTEM_ERROR with RocketMQ's remark ("can not find message by the offset, ...").
"""

from __future__ import annotations

from nodes.broker.message_lookup import MessageLookupResponse, QueryMessageRequest, ViewMessageRequest
from nodes.broker.request_table import RequestKind, RequestTable
from nodes.broker.transport import remoting_codes
from nodes.common import constants as c
from nodes.common.codes import ResponseCode
from nodes.remoting.command import RemotingCommand
from nodes.remoting.server import Channel

UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"  # RocketMQ MixAll.UNIQUE_MSG_QUERY_FLAG


class RemotingLookup:
    def __init__(self, table: RequestTable) -> None:
        self._query = table[RequestKind.QUERY_MESSAGE]
        self._view = table[RequestKind.VIEW_MESSAGE]

    def query_message(self, cmd: RemotingCommand, channel: Channel) -> RemotingCommand:
        unique = cmd.ext_bool(UNIQUE_KEY_QUERY)
        # a unique-key query asks for the default count whatever maxNum says, as RocketMQ's broker does
        max_count = c.INDEX_QUERY_MAX_DEFAULT if unique else cmd.ext_int("maxNum", c.INDEX_QUERY_MAX_DEFAULT)
        answer: MessageLookupResponse = self._query(QueryMessageRequest(
            cmd.ext_str("topic"), cmd.ext_str("key"), max_count, cmd.ext_int("beginTimestamp", 0),
            cmd.ext_int("endTimestamp", 0), unique))
        ext = {"indexLastUpdateTimestamp": answer.index_last_update_timestamp_ms,
               "indexLastUpdatePhyoffset": answer.index_last_update_phys_offset}
        if answer.code != ResponseCode.SUCCESS:
            return remoting_codes.answer(cmd, answer.code, answer.remark, ext)
        return remoting_codes.answer(cmd, answer.code, ext=ext, body=b"".join(m.raw for m in answer.messages))

    def view_message(self, cmd: RemotingCommand, channel: Channel) -> RemotingCommand:
        phys_offset = cmd.ext_int("offset")
        answer: MessageLookupResponse = self._view(ViewMessageRequest(phys_offset=max(phys_offset, 0)))
        if answer.code != ResponseCode.SUCCESS or phys_offset < 0:
            return remoting_codes.answer(cmd, ResponseCode.SYSTEM_ERROR,
                                         f"can not find message by the offset, {phys_offset}: {answer.remark}")
        return remoting_codes.answer(cmd, answer.code, body=answer.messages[0].raw)
