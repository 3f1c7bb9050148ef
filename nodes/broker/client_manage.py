"""Consumer management (RocketMQ ClientManageProcessor, the consumer-list part of
ConsumerManageProcessor, and DefaultConsumerIdsChangeListener).

Owns: turning heartbeats into registry registrations (and creating `%RETRY%<group>` on the
way), unregistering, the consumer list, and the membership-change notices: one
`NotificationChannel` per open client channel, to which a group's CHANGE is pushed for every
member; a channel's end counts as the client's channel closing. Does not own membership
rules (consumers.py) nor how a channel is carried (the transport adapters).

Notices for a group are coalesced while the client has not read them (RocketMQ sends them
oneway and may drop them too). Loop-confined.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from nodes.broker import validation
from nodes.broker.consumers import ClientConnection, ConsumerRegistration, ConsumerRegistry
from nodes.broker.send_back import ensure_retry_topic
from nodes.broker.topics import SubscriptionGroupManager, TopicConfigManager
from nodes.common.clock import Clock
from nodes.common.codes import ResponseCode
from nodes.common.config import BrokerConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """HEART_BEAT. `channel_key` names the connection it came on (its peer address);
    `connection` describes it for operators (None: a gRPC peer named by `channel_key`)."""

    client_id: str
    consumers: tuple[ConsumerRegistration, ...] = ()
    channel_key: str = ""
    connection: ClientConnection | None = None


@dataclass(frozen=True, slots=True)
class UnregisterClientRequest:
    client_id: str
    consumer_group: str = ""


@dataclass(frozen=True, slots=True)
class ConsumerListRequest:
    consumer_group: str


@dataclass(frozen=True, slots=True)
class ClientManageResponse:
    code: ResponseCode
    remark: str = ""
    client_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ResetNotice:
    """RESET_CONSUMER_CLIENT_OFFSET: the group's offsets of these queues of this broker were reset
    (queue id -> queue offset); the client restarts each queue it holds from there."""

    group: str
    topic: str
    broker_name: str
    timestamp_ms: int
    offsets: tuple[tuple[int, int], ...]


Notice = str | ResetNotice  # a group name: NOTIFY_CONSUMER_IDS_CHANGED for it


class NotificationChannel:
    """The pending notices of one open client channel: group names (coalesced) and offset resets
    (each kept, in order: a later reset of another topic does not replace an earlier one)."""

    def __init__(self, client_id: str, peer: str, on_end: Callable[[NotificationChannel], None]) -> None:
        self.client_id = client_id
        self.peer = peer
        self._on_end = on_end
        self.pending: dict[str, None] = {}
        self.resets: list[ResetNotice] = []
        self.closed = False
        self.wakeup = asyncio.Event()

    def push(self, group: str) -> None:
        self.pending[group] = None
        self.wakeup.set()

    def push_reset(self, notice: ResetNotice) -> None:
        self.resets.append(notice)
        self.wakeup.set()

    def close(self) -> None:
        self.closed = True
        self.wakeup.set()

    def end(self) -> None:
        """The transport's channel ended (the client went away, or its stream was cancelled)."""
        self._on_end(self)

    async def next_notices(self) -> list[Notice] | None:
        """The notices since the last call (waits for one): changed groups, then resets; None
        once closed."""
        while True:
            await self.wakeup.wait()
            self.wakeup.clear()
            if self.closed:
                return None
            if self.pending or self.resets:
                notices: list[Notice] = [*self.pending, *self.resets]
                self.pending, self.resets = {}, []
                return notices


class ClientManageHandler:
    def __init__(self, *, config: BrokerConfig, registry: ConsumerRegistry, groups: SubscriptionGroupManager,
                 topics: TopicConfigManager, clock: Clock, on_topics_changed: Callable[[], Awaitable[None]]) -> None:
        self._config = config
        self._registry = registry
        self._groups = groups
        self._topics = topics
        self._clock = clock
        self._on_topics_changed = on_topics_changed
        self._channels: dict[str, list[NotificationChannel]] = {}
        self.notifications_sent = 0
        registry.on_change = self.notify_change

    # --- membership ----------------------------------------------------------------------

    async def heartbeat(self, request: HeartbeatRequest) -> ClientManageResponse:
        if not request.client_id:
            return ClientManageResponse(ResponseCode.INVALID_ARGUMENT, "client_id is required")
        if refusal := validation.heartbeat_refusal(request.consumers):
            return ClientManageResponse(*refusal)
        version = self._topics.data_version
        now_ms = self._clock.monotonic_ms()
        for reg in request.consumers:
            group = self._groups.find(reg.group)  # auto-created by default
            notify = True
            if group is not None:
                notify = group.notify_consumer_ids_changed_enable
                if self._config.is_master:  # a slave takes its topics from the master
                    ensure_retry_topic(self._topics, group, self._clock.wall_ms())
            self._registry.register(request.client_id, reg, now_ms, channel_key=request.channel_key, notify=notify,
                                    connection=request.connection)
        if self._topics.data_version != version:
            await self._on_topics_changed()  # the new %RETRY% topic gets a route at once
        return ClientManageResponse(ResponseCode.SUCCESS)

    def unregister_client(self, request: UnregisterClientRequest) -> ClientManageResponse:
        if request.consumer_group:
            group = self._groups.find(request.consumer_group)
            notify = group.notify_consumer_ids_changed_enable if group is not None else True
            self._registry.unregister(request.client_id, request.consumer_group, notify=notify)
        return ClientManageResponse(ResponseCode.SUCCESS)

    def consumer_list(self, request: ConsumerListRequest) -> ClientManageResponse:
        if refusal := validation.names_refusal(group=request.consumer_group):
            return ClientManageResponse(*refusal)
        client_ids = self._registry.client_ids(request.consumer_group)
        if not client_ids:
            return ClientManageResponse(ResponseCode.SYSTEM_ERROR,
                                        f"no consumer for this group, {request.consumer_group}")
        return ClientManageResponse(ResponseCode.SUCCESS, client_ids=tuple(client_ids))

    # --- notification channels -------------------------------------------------------------

    def open_channel(self, client_id: str, peer: str) -> NotificationChannel:
        channel = NotificationChannel(client_id, peer, self._channel_ended)
        self._channels.setdefault(client_id, []).append(channel)
        log.info("notification stream of %s opened (%s)", client_id, peer)
        return channel

    def _channel_ended(self, channel: NotificationChannel) -> None:
        """The client's channel closed (it went away, or its stream was cancelled)."""
        channels = self._channels.get(channel.client_id, [])
        if channel in channels:
            channels.remove(channel)
        if channels:
            return  # another channel of this client id is still open
        self._channels.pop(channel.client_id, None)
        changed = self._registry.channel_closed(channel.client_id)
        log.info("notification stream of %s ended%s", channel.client_id,
                 f"; removed it from {changed}" if changed else "")

    def notify_change(self, group: str, client_ids: list[str]) -> None:
        """DefaultConsumerIdsChangeListener on CHANGE: tell every member of the group."""
        if not self._config.notify_consumer_ids_changed_enable:
            return
        for client_id in dict.fromkeys(client_ids):
            for channel in self._channels.get(client_id, []):
                channel.push(group)
                self.notifications_sent += 1

    def notify_reset(self, notice: ResetNotice) -> list[str]:
        """Broker2Client#resetOffset's sends: the notice to every open channel of every member of
        the group; returns the client ids it went to (none: the group is offline here)."""
        told = []
        for client_id in dict.fromkeys(self._registry.client_ids(notice.group)):
            channels = self._channels.get(client_id, [])
            for channel in channels:
                channel.push_reset(notice)
            if channels:
                told.append(client_id)
        return told

    def close_channels_of_expired(self, removed: list[tuple[str, str]]) -> None:
        """After the housekeeping scan: close the channel of a client that is now gone from
        every group (its end then finds nothing to remove, so no CHANGE)."""
        for client_id in dict.fromkeys(cid for _, cid in removed):
            if not self._registry.has_client(client_id):
                for channel in self._channels.get(client_id, []):
                    channel.close()

    def open_channels(self) -> int:
        return sum(len(channels) for channels in self._channels.values())
