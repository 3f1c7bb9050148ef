"""The name server's route table (RocketMQ RouteInfoManager): pure state, no I/O.

Owns: topic -> broker name -> queue data; broker name -> addresses (gRPC, and RocketMQ
remoting where a broker has a listener) by broker_id; broker liveness by (gRPC) address. Does not talk to anyone: the handler feeds it registrations, asks it
to expire silent brokers with `expire(now_ms)` and reports a broker's ended channel with
`on_channel_destroy(addr, token)`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from nodes.common import constants as c
from nodes.common.types import TopicConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0


@dataclass(slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)
    # broker_id -> RocketMQ remoting address, for the ids whose broker registered one
    remoting_addrs: dict[int, str] = field(default_factory=dict)
    # broker_id -> RocketMQ 5 gRPC endpoint, for the ids whose broker registered one
    rocketmq5_addrs: dict[int, str] = field(default_factory=dict)


@dataclass(slots=True)
class BrokerLive:
    last_update_ms: int
    data_version: tuple[int, int]
    ha_server_addr: str
    node_id: str = ""
    # Which broker process (and which of its channels) this registration came from: a channel
    # that ends removes the entry only while it still carries that channel's token.
    channel_token: str = ""


@dataclass(frozen=True, slots=True)
class RegisterResult:
    master_addr: str = ""
    ha_server_addr: str = ""


@dataclass(frozen=True, slots=True)
class TopicRoute:
    queue_datas: list[QueueData]
    broker_datas: list[BrokerData]


class RouteTable:
    def __init__(self) -> None:
        self.topic_queues: dict[str, dict[str, QueueData]] = {}
        self.brokers: dict[str, BrokerData] = {}
        self.clusters: dict[str, set[str]] = {}
        self.live: dict[str, BrokerLive] = {}

    def register(self, *, cluster: str, broker_name: str, broker_id: int, broker_addr: str,
                 ha_server_addr: str, topic_configs: list[TopicConfig], data_version: tuple[int, int],
                 now_ms: int, node_id: str = "", channel_token: str = "",
                 remoting_addr: str = "", rocketmq5_addr: str = "") -> RegisterResult:
        """Record a broker heartbeat; returns the master address for slaves."""
        self.clusters.setdefault(cluster, set()).add(broker_name)
        broker = self.brokers.setdefault(broker_name, BrokerData(cluster, broker_name))
        # One address holds one id: a node that changed role drops its old entry first.
        for other_id, addr in list(broker.broker_addrs.items()):
            if addr == broker_addr and other_id != broker_id:
                del broker.broker_addrs[other_id]
                broker.remoting_addrs.pop(other_id, None)
                broker.rocketmq5_addrs.pop(other_id, None)
        first_registration = broker_addr not in broker.broker_addrs.values()
        broker.broker_addrs[broker_id] = broker_addr
        if remoting_addr:
            broker.remoting_addrs[broker_id] = remoting_addr
        else:  # a broker restarted without its listener must not keep the old address
            broker.remoting_addrs.pop(broker_id, None)
        if rocketmq5_addr:
            broker.rocketmq5_addrs[broker_id] = rocketmq5_addr
        else:
            broker.rocketmq5_addrs.pop(broker_id, None)

        previous = self.live.get(broker_addr)
        changed = previous is None or previous.data_version != data_version
        self.live[broker_addr] = BrokerLive(now_ms, data_version, ha_server_addr, node_id, channel_token)
        if previous is not None and previous.channel_token != channel_token:
            log.info("broker at %s registered with a new channel token %r (was %r)",
                     broker_addr, channel_token, previous.channel_token)
        if first_registration:
            log.info("broker registered: %s %s id=%d at %s", cluster, broker_name, broker_id, broker_addr)

        # Topic configs are taken only from masters (RocketMQ), and only when they changed.
        if broker_id == c.MASTER_ID and (changed or first_registration):
            self._apply_topics(broker_name, topic_configs)

        if broker_id != c.MASTER_ID:
            master_addr = broker.broker_addrs.get(c.MASTER_ID, "")
            if master_addr and master_addr in self.live:
                return RegisterResult(master_addr, self.live[master_addr].ha_server_addr)
        return RegisterResult()

    def _apply_topics(self, broker_name: str, topic_configs: list[TopicConfig]) -> None:
        """A master's whole table: its queues of every listed topic, and none of a topic it no
        longer lists (deleted on the broker), as RocketMQ 5's full registrations do."""
        listed = {cfg.topic for cfg in topic_configs}
        for topic, queues in list(self.topic_queues.items()):
            if topic not in listed and broker_name in queues:
                del queues[broker_name]
                log.info("topic %s no longer on %s", topic, broker_name)
                if not queues:
                    del self.topic_queues[topic]
        for cfg in topic_configs:
            queue = QueueData(broker_name, cfg.read_queue_nums, cfg.write_queue_nums, cfg.perm,
                              cfg.topic_sys_flag)
            queues = self.topic_queues.setdefault(cfg.topic, {})
            if queues.get(broker_name) != queue:
                log.info("topic %s on %s: %s", cfg.topic, broker_name, queue)
            queues[broker_name] = queue

    def unregister(self, *, broker_name: str, broker_id: int, broker_addr: str) -> bool:
        """A clean broker stop. Returns whether anything was removed."""
        if broker_addr not in self.live:
            return False
        log.info("broker unregistered: %s id=%d at %s", broker_name, broker_id, broker_addr)
        self._remove_address(broker_addr)
        return True

    def expire(self, now_ms: int, expiry_ms: int) -> list[str]:
        """Drop brokers silent for more than `expiry_ms`; returns their addresses."""
        expired = [addr for addr, live in self.live.items() if now_ms - live.last_update_ms > expiry_ms]
        for addr in expired:
            log.warning("broker at %s expired: silent for %d ms (limit %d ms)",
                        addr, now_ms - self.live[addr].last_update_ms, expiry_ms)
            self._remove_address(addr)
        return expired

    def on_channel_destroy(self, broker_addr: str, channel_token: str) -> bool:
        """RocketMQ RouteInfoManager.onChannelDestroy: the broker's channel closed, so its route
        goes at once, exactly as expiry would remove it. Only while the registration of
        `broker_addr` still carries `channel_token`: a broker restarted at the same address
        (or re-registered over a new channel) has a new token, and the old channel's late end
        must not remove it. Returns whether anything was removed."""
        live = self.live.get(broker_addr)
        if live is None or not channel_token or live.channel_token != channel_token:
            return False
        log.info("broker %s at %s channel closed: route removed", live.node_id or "?", broker_addr)
        self._remove_address(broker_addr)
        return True

    def _remove_address(self, broker_addr: str) -> None:
        self.live.pop(broker_addr, None)
        for broker_name, broker in list(self.brokers.items()):
            for broker_id, addr in list(broker.broker_addrs.items()):
                if addr == broker_addr:
                    del broker.broker_addrs[broker_id]
                    broker.remoting_addrs.pop(broker_id, None)
                    broker.rocketmq5_addrs.pop(broker_id, None)
            if broker.broker_addrs:
                continue
            # No address of this broker name is left: its queues disappear from every topic.
            del self.brokers[broker_name]
            for cluster_brokers in self.clusters.values():
                cluster_brokers.discard(broker_name)
            for topic, queues in list(self.topic_queues.items()):
                queues.pop(broker_name, None)
                if not queues:
                    del self.topic_queues[topic]

    def route(self, topic: str) -> TopicRoute | None:
        """RocketMQ pickupTopicRouteData: None when the topic has no queues or no brokers."""
        queues = self.topic_queues.get(topic)
        if not queues:
            return None
        broker_datas = [
            BrokerData(b.cluster, b.broker_name, dict(b.broker_addrs), dict(b.remoting_addrs), dict(b.rocketmq5_addrs))
            for name in sorted(queues) if (b := self.brokers.get(name)) is not None
        ]
        if not broker_datas:
            return None
        return TopicRoute([queues[name] for name in sorted(queues)], broker_datas)

    def topics(self) -> list[str]:
        return sorted(self.topic_queues)
