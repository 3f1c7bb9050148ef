"""The broker's RocketMQ 4.x remoting adapter: request code -> the same handlers gRPC calls.

Owns the code table, the per-connection state (its pull session; its notification pumps live
in `RemotingConsumers`) and what a connection's close undoes. Each code's translation lives
beside its kind: send (remoting_send), pull (remoting_pull), offsets (remoting_offsets),
consumer management, send-back and locks (remoting_consumers), the operator requests
(remoting_admin), offset resets (remoting_reset). The listener itself is `nodes.remoting.server`; the controller starts it
with `dispatch` and `channel_closed`.

A code with no entry answers REQUEST_CODE_NOT_SUPPORTED. A slave refuses sends and locks
through the handlers, exactly as over gRPC.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from nodes.broker.request_table import RequestKind, RequestTable
from nodes.broker.transport import remoting_send
from nodes.broker.transport.remoting_admin import RemotingAdmin
from nodes.broker.transport.remoting_consumers import RemotingConsumers
from nodes.broker.transport.remoting_lookup import RemotingLookup
from nodes.broker.transport.remoting_offsets import RemotingOffsets
from nodes.broker.transport.remoting_pull import RemotingPullSession
from nodes.broker.transport.remoting_reset import RemotingReset
from nodes.common.codes import ResponseCode
from nodes.remoting.command import RemotingCommand, RequestCode
from nodes.remoting.server import Channel

log = logging.getLogger(__name__)

Route = Callable[[RemotingCommand, Channel], Awaitable[RemotingCommand] | RemotingCommand]


class BrokerRemotingAdapter:
    """Loop-confined: every call runs on the broker's event loop."""

    def __init__(self, table: RequestTable) -> None:
        self._send = table[RequestKind.SEND_MESSAGE]
        self._open_pull_session = table[RequestKind.PULL_MESSAGE]
        self.consumers = RemotingConsumers(table)
        offsets = RemotingOffsets(table, self.consumers.client_ids_on)
        admin = RemotingAdmin(table)
        lookup = RemotingLookup(table)
        self._pulls: dict[int, RemotingPullSession] = {}
        self._routes: dict[int, Route] = {
            RequestCode.SEND_MESSAGE: self._send_message,
            RequestCode.SEND_MESSAGE_V2: self._send_message,
            RequestCode.SEND_BATCH_MESSAGE: self._send_message,
            RequestCode.PULL_MESSAGE: self._pull_message,
            RequestCode.QUERY_CONSUMER_OFFSET: offsets.query,
            RequestCode.UPDATE_CONSUMER_OFFSET: offsets.update,
            RequestCode.GET_MAX_OFFSET: offsets.queue_offset,
            RequestCode.GET_MIN_OFFSET: offsets.queue_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: offsets.queue_offset,
            RequestCode.HEART_BEAT: self.consumers.heartbeat,
            RequestCode.UNREGISTER_CLIENT: self.consumers.unregister,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.consumers.consumer_list,
            RequestCode.CONSUMER_SEND_MSG_BACK: self.consumers.send_back,
            RequestCode.LOCK_BATCH_MQ: self.consumers.lock_batch,
            RequestCode.UNLOCK_BATCH_MQ: self.consumers.unlock_batch,
            RequestCode.UPDATE_AND_CREATE_TOPIC: admin.create_topic,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: admin.update_group,
            RequestCode.DELETE_TOPIC_IN_BROKER: admin.delete_topic,
            RequestCode.GET_TOPIC_STATS_INFO: admin.topic_stats,
            RequestCode.GET_CONSUME_STATS: admin.consume_stats,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: admin.connections,
            RequestCode.GET_BROKER_RUNTIME_INFO: admin.runtime,
            RequestCode.QUERY_MESSAGE: lookup.query_message,
            RequestCode.VIEW_MESSAGE_BY_ID: lookup.view_message,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: RemotingReset(table).invoke_reset,
        }

    async def dispatch(self, cmd: RemotingCommand, channel: Channel) -> RemotingCommand:
        route = self._routes.get(cmd.code)
        if route is None:
            return cmd.answer(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                              f"request code {cmd.code} is not supported by this broker")
        answer: Any = route(cmd, channel)
        if isinstance(answer, RemotingCommand):
            return answer
        return await answer

    async def _send_message(self, cmd: RemotingCommand, channel: Channel) -> RemotingCommand:
        return await remoting_send.handle_send(self._send, cmd, channel)

    async def _pull_message(self, cmd: RemotingCommand, channel: Channel) -> RemotingCommand:
        session = self._pulls.get(channel.channel_id)
        if session is None:
            if channel.closed:  # its close has run already; nothing would drop a new session
                return cmd.answer(ResponseCode.SYSTEM_ERROR, "the connection is closed")
            session = self._pulls[channel.channel_id] = RemotingPullSession(self._open_pull_session)
        clients = self.consumers.client_ids_on(channel)
        return await session.pull(cmd, clients[0] if len(clients) == 1 else "")

    def channel_closed(self, channel: Channel) -> None:
        """The connection is gone: drop its held pulls and end its clients' notification channels
        (they leave their groups, and the groups' other members are notified)."""
        session = self._pulls.pop(channel.channel_id, None)
        dropped = session.close() if session is not None else 0
        clients = self.consumers.client_ids_on(channel)
        self.consumers.channel_closed(channel)
        if dropped or clients:
            log.info("remoting connection %s closed: dropped %d held pulls; clients %s", channel.peer, dropped,
                     clients or "-")

    def close(self) -> None:
        """The listener stopped: undo what every connection still open carried."""
        for channel_id in list(self._pulls):
            self._pulls.pop(channel_id).close()
        self.consumers.close()

    def describe(self) -> dict[str, int]:
        return {"pull_sessions": len(self._pulls), "notify_channels": self.consumers.open_pumps(),
                "held_pulls": sum(session.held() for session in self._pulls.values())}
