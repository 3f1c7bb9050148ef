"""Which consumers a broker knows, per group (RocketMQ ConsumerManager + ConsumerGroupInfo +
ClientHousekeepingService).

Owns: group -> members (one channel per client connection, with its last heartbeat),
the group's subscriptions by topic (with their sub_version), message model and consume
type; change detection on heartbeat; the removal paths (unregister, channel closed, silent
expiry) and which of them raise a CHANGE; consumer join/leave events. Does not own sending
notifications (client_manage listens for CHANGE) nor topics or groups configs.

A "channel" is one client connection: heartbeats are keyed by (client id, connection), so
two processes sharing a client id show up twice in `client_ids`, as in RocketMQ. Time is
passed in (`now_ms`, monotonic), so the logic is driven by a fake clock in unit tests.

Removal paths:
    unregister       -> CHANGE if the group was known (and the group allows notifications)
    channel_closed   -> CHANGE for every group that lost a member, always
    scan_expired     -> no CHANGE: peers notice at their next rebalance
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from nodes.common import constants as c
from nodes.common.events import EventLog
from nodes.common.service import CrashHandler, Service

log = logging.getLogger(__name__)

# (group, client ids still in it) -> None; called on every CHANGE
ChangeListener = Callable[[str, list[str]], None]


@dataclass(frozen=True, slots=True)
class Subscription:
    topic: str
    expression: str
    sub_version: int


@dataclass(frozen=True, slots=True)
class ConsumerRegistration:
    """One group entry of a heartbeat (RocketMQ ConsumerData)."""

    group: str
    consume_type: str = c.CONSUME_TYPE_PASSIVELY
    message_model: str = c.MESSAGE_MODEL_CLUSTERING
    consume_from_where: str = ""
    subscriptions: tuple[Subscription, ...] = ()


@dataclass(frozen=True, slots=True)
class ClientConnection:
    """What a heartbeat tells of the connection it came on, for operators (RocketMQ's
    ClientChannelInfo): its remote address, the protocol, and, over remoting, the client's
    language and version code from the command header (gRPC clients are mqlab's: "" and 0)."""

    peer: str = ""
    protocol: str = c.PROTOCOL_GRPC
    language: str = ""
    version: int = 0


@dataclass(slots=True)
class ClientChannel:
    client_id: str
    channel_key: str  # which connection (its peer address); "" when unknown
    last_heartbeat_ms: int
    connection: ClientConnection = ClientConnection()


@dataclass
class ConsumerGroupInfo:
    group: str
    consume_type: str
    message_model: str
    consume_from_where: str
    channels: dict[tuple[str, str], ClientChannel] = field(default_factory=dict)
    subscriptions: dict[str, Subscription] = field(default_factory=dict)
    last_update_ms: int = 0

    def update_channel(self, client_id: str, channel_key: str, reg: ConsumerRegistration, now_ms: int,
                       connection: ClientConnection | None = None) -> bool:
        """updateChannel: True when this connection is new to the group."""
        self.consume_type = reg.consume_type
        self.message_model = reg.message_model
        self.consume_from_where = reg.consume_from_where
        key = (client_id, channel_key)
        channel = self.channels.get(key)
        if channel is None:
            self.channels[key] = ClientChannel(client_id, channel_key, now_ms,
                                               connection or ClientConnection(peer=channel_key))
            return True
        channel.last_heartbeat_ms = now_ms
        if connection is not None:
            channel.connection = connection
        return False

    def update_subscriptions(self, subscriptions: Iterable[Subscription], now_ms: int) -> bool:
        """updateSubscription: True when a topic was added or dropped.

        A newer sub_version of a known topic replaces the old one without counting as a
        change, as in RocketMQ (only the topic set decides a rebalance).
        """
        updated = False
        incoming = {sub.topic: sub for sub in subscriptions}
        for topic, sub in incoming.items():
            old = self.subscriptions.get(topic)
            if old is None:
                self.subscriptions[topic] = sub
                updated = True
            elif sub.sub_version > old.sub_version:
                if self.consume_type == c.CONSUME_TYPE_PASSIVELY:
                    log.info("subscription of %s to %s changed: %r -> %r", self.group, topic, old.expression,
                             sub.expression)
                self.subscriptions[topic] = sub
        for topic in [t for t in self.subscriptions if t not in incoming]:
            del self.subscriptions[topic]
            updated = True
        self.last_update_ms = now_ms
        return updated

    def client_ids(self) -> list[str]:
        return [channel.client_id for channel in self.channels.values()]

    def remove_client(self, client_id: str) -> int:
        """Drop every channel of `client_id`; returns how many there were."""
        keys = [key for key in self.channels if key[0] == client_id]
        for key in keys:
            del self.channels[key]
        return len(keys)


class ConsumerRegistry:
    def __init__(self, *, channel_expiry_ms: int, events: EventLog | None = None,
                 on_change: ChangeListener | None = None) -> None:
        self.channel_expiry_ms = channel_expiry_ms
        self.groups: dict[str, ConsumerGroupInfo] = {}
        self._events = events
        self.on_change = on_change

    def register(self, client_id: str, reg: ConsumerRegistration, now_ms: int, *, channel_key: str = "",
                 notify: bool = True, connection: ClientConnection | None = None) -> bool:
        """registerConsumer: record a heartbeat; True when membership or subscriptions changed.

        Caller: the Heartbeat RPC, once per group of the heartbeat. Affects: the group's
        channels, subscriptions and last heartbeat; raises CHANGE when something changed and
        `notify` (the group's notify_consumer_ids_changed_enable) allows it.
        """
        info = self.groups.get(reg.group)
        if info is None:
            info = self.groups[reg.group] = ConsumerGroupInfo(reg.group, reg.consume_type, reg.message_model,
                                                              reg.consume_from_where)
        joined = info.update_channel(client_id, channel_key, reg, now_ms, connection)
        if joined:
            log.info("consumer %s joined group %s (connection %s)", client_id, reg.group, channel_key or "-")
            self._record("consumer-join", reg.group, client_id, channel_key=channel_key)
        changed = info.update_subscriptions(reg.subscriptions, now_ms)
        if (joined or changed) and notify:
            self._change(info)
        return joined or changed

    def unregister(self, client_id: str, group: str, *, notify: bool = True) -> bool:
        """unregisterConsumer (a client shutting down): CHANGE whenever the group is known."""
        info = self.groups.get(group)
        if info is None:
            return False
        if info.remove_client(client_id):
            log.info("consumer %s left group %s (unregister)", client_id, group)
            self._record("consumer-leave", group, client_id, reason="unregister")
        self._drop_if_empty(info)
        if notify:
            self._change(info)
        return True

    def channel_closed(self, client_id: str) -> list[str]:
        """doChannelCloseEvent (the client's Notifications stream ended): every group that lost
        a member gets a CHANGE, whatever its notify setting. Returns those groups."""
        changed = []
        for info in list(self.groups.values()):
            if info.remove_client(client_id):
                log.info("consumer %s left group %s (channel closed)", client_id, info.group)
                self._record("consumer-leave", info.group, client_id, reason="channel-closed")
                changed.append(info)
                self._drop_if_empty(info)
        for info in changed:
            self._change(info)
        return [info.group for info in changed]

    def scan_expired(self, now_ms: int) -> list[tuple[str, str]]:
        """scanNotActiveChannel: drop channels silent for more than `channel_expiry_ms`,
        WITHOUT a CHANGE. Returns the (group, client id) pairs dropped."""
        removed = []
        for info in list(self.groups.values()):
            for key, channel in list(info.channels.items()):
                silent_ms = now_ms - channel.last_heartbeat_ms
                if silent_ms > self.channel_expiry_ms:
                    del info.channels[key]
                    removed.append((info.group, channel.client_id))
                    log.warning("consumer %s of group %s expired after %d ms without a heartbeat",
                                channel.client_id, info.group, silent_ms)
                    self._record("consumer-leave", info.group, channel.client_id, reason="expired",
                                 silent_ms=silent_ms)
            self._drop_if_empty(info)
        return removed

    def find(self, group: str) -> ConsumerGroupInfo | None:
        return self.groups.get(group)

    def client_ids(self, group: str) -> list[str]:
        """Every member's client id, one per connection (duplicates are possible)."""
        info = self.groups.get(group)
        return info.client_ids() if info is not None else []

    def has_client(self, client_id: str) -> bool:
        return any(key[0] == client_id for info in self.groups.values() for key in info.channels)

    def describe(self) -> dict[str, list[str]]:
        return {group: info.client_ids() for group, info in sorted(self.groups.items())}

    def _drop_if_empty(self, info: ConsumerGroupInfo) -> None:
        if not info.channels and self.groups.get(info.group) is info:
            del self.groups[info.group]
            log.info("group %s has no consumer left here", info.group)

    def _change(self, info: ConsumerGroupInfo) -> None:
        if self.on_change is not None:
            self.on_change(info.group, info.client_ids())

    def _record(self, event: str, group: str, client_id: str, **extra: object) -> None:
        if self._events is not None:
            self._events.record({"event": event, "group": group, "client_id": client_id, **extra})


class ClientHousekeepingService(Service):
    """Runs `scan_expired` every `client_housekeeping_ms` (first after one interval)."""

    name = "client-housekeeping"

    def __init__(self, registry: ConsumerRegistry, monotonic_ms: Callable[[], int], interval_ms: int,
                 on_expired: Callable[[list[tuple[str, str]]], None], on_crash: CrashHandler) -> None:
        super().__init__(interval_ms, on_crash=on_crash)
        self._registry = registry
        self._monotonic_ms = monotonic_ms
        self._on_expired = on_expired

    async def tick(self) -> None:
        removed = self._registry.scan_expired(self._monotonic_ms())
        if removed:
            self._on_expired(removed)
