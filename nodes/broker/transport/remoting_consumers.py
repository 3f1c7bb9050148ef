"""Consumer management over remoting: HEART_BEAT (34), UNREGISTER_CLIENT (35),
GET_CONSUMER_LIST_BY_GROUP (38), CONSUMER_SEND_MSG_BACK (36), LOCK_BATCH_MQ (41) and
UNLOCK_BATCH_MQ (42) -> the same handlers the gRPC ConsumerManager calls; and the
NOTIFY_CONSUMER_IDS_CHANGED (40) and RESET_CONSUMER_CLIENT_OFFSET (220) pushes.

A remoting client has no notification stream: its notices travel as oneway requests on the
connection it heartbeats on. So the first heartbeat with consumers of a client id on a
connection opens a notification channel for it (the handler's `open_channel`, as a gRPC
Notifications stream does) and a pump task writes every group it is told of as a NOTIFY on
that connection, and every offset reset as a RESET_CONSUMER_CLIENT_OFFSET (remoting_reset). When the connection closes the pumps end their channels, which is the
registry's channel-closed path (RocketMQ's ClientHousekeepingService): the client leaves
its groups and the remaining members are told.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from nodes.broker.client_manage import (
    ClientManageResponse,
    ConsumerListRequest,
    HeartbeatRequest,
    NotificationChannel,
    UnregisterClientRequest,
)
from nodes.broker.consumers import ClientConnection
from nodes.broker.request_table import RequestKind, RequestTable
from nodes.broker.send_back import SendBackRequest
from nodes.broker.transport import remoting_codes, remoting_json, remoting_reset
from nodes.common import constants as c
from nodes.common.codes import ResponseCode
from nodes.remoting.command import RemotingCommand, RequestCode
from nodes.remoting.server import Channel

log = logging.getLogger(__name__)


def channel_key(channel: Channel) -> str:
    """The registry's name for a remoting connection (gRPC members are keyed by their peer)."""
    return f"remoting:{channel.peer}#{channel.channel_id}"


class _Pump:
    """One client id's notices on one connection (`language`: its heartbeat header's, which
    decides the shape of a reset's body)."""

    def __init__(self, notices: NotificationChannel, channel: Channel, on_done: Callable[[_Pump], None],
                 language: str = "") -> None:
        self.notices = notices
        self.channel = channel
        self.language = language
        self._on_done = on_done
        self.task = asyncio.create_task(self._run(), name=f"remoting-notify-{notices.client_id}")

    async def _run(self) -> None:
        try:
            while (notices := await self.notices.next_notices()) is not None:
                for notice in notices:
                    if isinstance(notice, str):
                        self.channel.send_oneway(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": notice})
                    else:
                        header, body = remoting_reset.notice_frame(notice, self.language)
                        self.channel.send_oneway(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, header, body)
                with contextlib.suppress(ConnectionError):
                    await self.channel.drain()
        finally:
            self._on_done(self)
            self.notices.end()


class RemotingConsumers:
    """The consumer-management codes and the notification pumps of every connection."""

    def __init__(self, table: RequestTable) -> None:
        self._heartbeat = table[RequestKind.HEART_BEAT]
        self._unregister = table[RequestKind.UNREGISTER_CLIENT]
        self._consumer_list = table[RequestKind.GET_CONSUMER_LIST_BY_GROUP]
        self._open_channel = table[RequestKind.NOTIFY_CONSUMER_IDS_CHANGED]
        self._send_back = table[RequestKind.CONSUMER_SEND_MSG_BACK]
        self._lock_batch = table[RequestKind.LOCK_BATCH_MQ]
        self._unlock_batch = table[RequestKind.UNLOCK_BATCH_MQ]
        # channel id -> client id -> its pump: which connection each client id heartbeats on
        self._pumps: dict[int, dict[str, _Pump]] = {}

    # --- membership ---------------------------------------------------------------------------

    async def heartbeat(self, cmd: RemotingCommand, channel: Channel) -> RemotingCommand:
        client_id, consumers = remoting_json.heartbeat_from_body(cmd.body)
        if channel.closed:
            # its close has run: a registration now would outlive the connection until expiry
            return remoting_codes.answer(cmd, ResponseCode.SYSTEM_ERROR, "the connection is closed")
        if consumers:
            self._ensure_pump(client_id, channel, cmd.language)
        # the header's language and version code name the client for operators (RocketMQ keeps
        # them per channel from the heartbeat likewise)
        connection = ClientConnection(peer=channel.peer, protocol=c.PROTOCOL_REMOTING, language=cmd.language,
                                      version=cmd.version)
        answer: ClientManageResponse = await self._heartbeat(
            HeartbeatRequest(client_id, consumers, channel_key=channel_key(channel), connection=connection))
        return remoting_codes.answer(cmd, answer.code, answer.remark)

    def unregister(self, cmd: RemotingCommand, channel: Channel) -> RemotingCommand:
        client_id = cmd.ext_str("clientID")
        group = cmd.ext_str("consumerGroup", "")
        answer: ClientManageResponse = self._unregister(UnregisterClientRequest(client_id, group))
        return remoting_codes.answer(cmd, answer.code, answer.remark)

    def consumer_list(self, cmd: RemotingCommand, channel: Channel) -> RemotingCommand:
        answer: ClientManageResponse = self._consumer_list(ConsumerListRequest(cmd.ext_str("consumerGroup")))
        if answer.code != ResponseCode.SUCCESS:
            return remoting_codes.answer(cmd, answer.code, answer.remark)
        return remoting_codes.answer(cmd, answer.code, body=remoting_json.consumer_list_body(answer.client_ids))

    def _ensure_pump(self, client_id: str, channel: Channel, language: str) -> None:
        pumps = self._pumps.setdefault(channel.channel_id, {})
        if client_id not in pumps:
            pumps[client_id] = _Pump(self._open_channel(client_id, channel_key(channel)), channel, self._pump_done,
                                     language)

    def _pump_done(self, pump: _Pump) -> None:
        pumps = self._pumps.get(pump.channel.channel_id, {})
        if pumps.get(pump.notices.client_id) is pump:
            del pumps[pump.notices.client_id]
        if not pumps:
            self._pumps.pop(pump.channel.channel_id, None)

    def channel_closed(self, channel: Channel) -> None:
        """The connection is gone: end its pumps (each ends its notification channel)."""
        for pump in list(self._pumps.get(channel.channel_id, {}).values()):
            pump.task.cancel()

    def close(self) -> None:
        """Every connection is going away (the listener stopped)."""
        for pumps in list(self._pumps.values()):
            for pump in list(pumps.values()):
                pump.task.cancel()

    def client_ids_on(self, channel: Channel) -> list[str]:
        return sorted(self._pumps.get(channel.channel_id, {}))

    def open_pumps(self) -> int:
        return sum(len(pumps) for pumps in self._pumps.values())

    # --- send-back and locks ------------------------------------------------------------------

    async def send_back(self, cmd: RemotingCommand, channel: Channel) -> RemotingCommand:
        answer = await self._send_back(SendBackRequest(
            consumer_group=cmd.ext_str("group"), phys_offset=cmd.ext_int("offset"),
            delay_level=cmd.ext_int("delayLevel", 0), origin_msg_id=cmd.ext_str("originMsgId", ""),
            origin_topic=cmd.ext_str("originTopic", ""), max_reconsume_times=cmd.ext_int("maxReconsumeTimes", 0)))
        return remoting_codes.answer(cmd, answer.code, answer.remark)

    def lock_batch(self, cmd: RemotingCommand, channel: Channel) -> RemotingCommand:
        answer = self._lock_batch(remoting_json.lock_batch_from_body(cmd.body))
        if answer.code != ResponseCode.SUCCESS:
            return remoting_codes.answer(cmd, answer.code, answer.remark)
        return remoting_codes.answer(cmd, answer.code, body=remoting_json.mq_set_body(answer.locked))

    def unlock_batch(self, cmd: RemotingCommand, channel: Channel) -> RemotingCommand:
        answer = self._unlock_batch(remoting_json.lock_batch_from_body(cmd.body))
        return remoting_codes.answer(cmd, answer.code, answer.remark)
