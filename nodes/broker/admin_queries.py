"""Operator queries (RocketMQ AdminBrokerProcessor's read side: GET_TOPIC_STATS_INFO,
GET_CONSUME_STATS, GET_CONSUMER_CONNECTION_LIST, the consumer-group listing and
GET_BROKER_RUNTIME_INFO).

Owns: what each answer holds, read from the broker's own tables: the store's queues, the
committed offsets, the consumer registry, who pulled each queue last (last_pullers), the
orderly queue locks, and replication's view of the slaves or the master. Nothing here
changes state. A slave answers from its own store and its copied offsets; it holds no locks,
so it shows no lock holder.

Every request is checked first: a bad name is INVALID_ARGUMENT, an unknown topic
TOPIC_NOT_EXIST, a group the broker knows nothing of SUBSCRIPTION_GROUP_NOT_EXIST, a group
with no client connected CONSUMER_NOT_ONLINE (an empty list); each remark says what to do.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from nodes.broker import validation
from nodes.broker.consumers import ConsumerRegistry, Subscription
from nodes.broker.ha_master import ReplicationState
from nodes.broker.ha_slave import HaClient, HaClientState
from nodes.broker.last_pullers import LastPullers
from nodes.broker.offsets import ConsumerOffsetTable
from nodes.broker.queue_locks import QueueLockManager
from nodes.broker.topics import SubscriptionGroupManager, TopicConfigManager
from nodes.common import constants as c
from nodes.common.clock import Clock
from nodes.common.codes import ResponseCode
from nodes.common.config import BrokerConfig
from nodes.common.errors import StoreError
from nodes.common.types import MessageQueue, topic_message_type
from nodes.store.consume_queue import is_hole
from nodes.store.disk_guard import UNMEASURED, measure_space
from nodes.store.message_store import MessageStore

log = logging.getLogger(__name__)

UNKNOWN = -1  # a lag, age or offset this broker does not know


# --- requests and answers --------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class TopicStatsRequest:
    topic: str


@dataclass(frozen=True, slots=True)
class QueueStats:
    queue_id: int
    min_offset: int  # queue offsets
    max_offset: int
    last_store_timestamp_ms: int  # of the message at max_offset - 1; 0 when the queue is empty


@dataclass(frozen=True, slots=True)
class TopicStatsResponse:
    code: ResponseCode
    remark: str = ""
    broker_name: str = ""
    broker_id: int = 0
    queues: tuple[QueueStats, ...] = ()
    message_type: str = ""  # `topic_message_type`: what the type set on it reads as


@dataclass(frozen=True, slots=True)
class ConsumeStatsRequest:
    consumer_group: str
    topic: str = ""  # "" = every topic the group subscribes to, has offsets in or pulled here


@dataclass(frozen=True, slots=True)
class QueueConsumeStats:
    topic: str
    queue_id: int
    broker_offset: int  # the queue's max queue offset
    consumer_offset: int  # the group's committed offset; -1 when none
    last_consumed_store_timestamp_ms: int  # of the message at consumer_offset - 1; 0 when none
    last_puller_client_id: str = ""
    last_pull_age_ms: int = UNKNOWN
    lock_holder_client_id: str = ""
    lock_lease_left_ms: int = 0


@dataclass(frozen=True, slots=True)
class ConsumeStatsResponse:
    code: ResponseCode
    remark: str = ""
    broker_name: str = ""
    broker_id: int = 0
    queues: tuple[QueueConsumeStats, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerConnectionsRequest:
    consumer_group: str


@dataclass(frozen=True, slots=True)
class ConsumerConnection:
    client_id: str
    peer: str
    protocol: str
    language: str
    version: int
    last_heartbeat_age_ms: int


@dataclass(frozen=True, slots=True)
class ConsumerConnectionsResponse:
    code: ResponseCode
    remark: str = ""
    consume_type: str = ""
    message_model: str = ""
    consume_from_where: str = ""
    connections: tuple[ConsumerConnection, ...] = ()
    subscriptions: tuple[Subscription, ...] = ()


@dataclass(frozen=True, slots=True)
class ListConsumerGroupsRequest:
    pass


@dataclass(frozen=True, slots=True)
class ConsumerGroupSummary:
    group: str
    online_clients: int
    topics: tuple[str, ...]
    consume_type: str = ""
    message_model: str = ""


@dataclass(frozen=True, slots=True)
class ListConsumerGroupsResponse:
    code: ResponseCode
    remark: str = ""
    groups: tuple[ConsumerGroupSummary, ...] = ()


@dataclass(frozen=True, slots=True)
class BrokerRuntimeRequest:
    pass


@dataclass(frozen=True, slots=True)
class BrokerRuntimeResponse:
    code: ResponseCode
    remark: str = ""
    broker_name: str = ""
    broker_id: int = 0
    role: str = ""
    min_phys_offset: int = 0
    max_phys_offset: int = 0
    slave_lag_bytes: int = UNKNOWN
    disk_used_ratio: float = UNMEASURED
    disk_free_bytes: int = UNKNOWN
    writes_refused: bool = False
    writes_refused_reason: str = ""
    time_scale: float = 1.0
    topics: int = 0
    store_errors: int = 0
    master_addr: str = ""
    broker_lock_lease_ms: int = 0
    consumer_channel_expiry_ms: int = 0


# --- the handler -------------------------------------------------------------------------------

class AdminQueryHandler:
    """Args:
        queue_locks, lock_now_ms: the master's lock table and its lease clock (None on a slave).
        ha_client, master_addr: read when asked (the controller creates them after the handlers).
    """

    def __init__(self, *, config: BrokerConfig, store: MessageStore, topics: TopicConfigManager,
                 groups: SubscriptionGroupManager, offsets: ConsumerOffsetTable, consumers: ConsumerRegistry,
                 last_pullers: LastPullers, clock: Clock, replication: ReplicationState,
                 queue_locks: QueueLockManager | None = None, lock_now_ms: Callable[[], int] | None = None,
                 ha_client: Callable[[], HaClient | None] = lambda: None,
                 master_addr: Callable[[], str] = lambda: "") -> None:
        self._config = config
        self._store = store
        self._topics = topics
        self._groups = groups
        self._offsets = offsets
        self._consumers = consumers
        self._last_pullers = last_pullers
        self._clock = clock
        self._replication = replication
        self._queue_locks = queue_locks
        self._lock_now_ms = lock_now_ms or clock.monotonic_ms
        self._ha_client = ha_client
        self._master_addr = master_addr

    # --- topic stats ---------------------------------------------------------------------------

    def topic_stats(self, req: TopicStatsRequest) -> TopicStatsResponse:
        if refusal := validation.names_refusal(topic=req.topic):
            return TopicStatsResponse(*refusal)
        config = self._topics.get(req.topic)
        if config is None:
            return TopicStatsResponse(ResponseCode.TOPIC_NOT_EXIST, self._no_topic(req.topic))
        queues = []
        for queue_id in range(config.write_queue_nums):  # RocketMQ counts a topic's write queues here
            max_offset = self._store.max_queue_offset(req.topic, queue_id)
            queues.append(QueueStats(queue_id, self._store.min_queue_offset(req.topic, queue_id), max_offset,
                                     self._store_time(req.topic, queue_id, max_offset - 1)))
        return TopicStatsResponse(ResponseCode.SUCCESS, "", self._config.broker_name, self._config.broker_id,
                                  tuple(queues), topic_message_type(config))

    # --- consume stats -------------------------------------------------------------------------

    def consume_stats(self, req: ConsumeStatsRequest) -> ConsumeStatsResponse:
        if refusal := validation.names_refusal(group=req.consumer_group):
            return ConsumeStatsResponse(*refusal)
        if req.topic:
            if refusal := validation.names_refusal(topic=req.topic):
                return ConsumeStatsResponse(*refusal)
            if self._topics.get(req.topic) is None:
                return ConsumeStatsResponse(ResponseCode.TOPIC_NOT_EXIST, self._no_topic(req.topic))
        group = req.consumer_group
        if not self._group_known(group):
            return ConsumeStatsResponse(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"{self._config.broker_name} knows no consumer group {group!r}: no client of it heartbeats here "
                "and it has no offsets here; check the name, or ask the broker its consumers use")
        topics = [req.topic] if req.topic else self._topics_of(group)
        now_ms = self._clock.monotonic_ms()
        lock_now_ms = self._lock_now_ms()
        queues = []
        for topic in topics:
            config = self._topics.get(topic)
            if config is None:  # deleted since the group used it
                continue
            for queue_id in range(config.read_queue_nums):
                queues.append(self._queue_consume_stats(group, topic, queue_id, now_ms, lock_now_ms))
        return ConsumeStatsResponse(ResponseCode.SUCCESS, "", self._config.broker_name, self._config.broker_id,
                                    tuple(queues))

    def _queue_consume_stats(self, group: str, topic: str, queue_id: int, now_ms: int,
                             lock_now_ms: int) -> QueueConsumeStats:
        consumer_offset = self._offsets.query(group, topic, queue_id)
        last_pull = self._last_pullers.get(group, topic, queue_id)
        lease = None
        if self._queue_locks is not None:
            lease = self._queue_locks.lease(group, MessageQueue(topic, self._config.broker_name, queue_id),
                                            lock_now_ms)
        return QueueConsumeStats(
            topic=topic, queue_id=queue_id, broker_offset=self._store.max_queue_offset(topic, queue_id),
            consumer_offset=consumer_offset,
            last_consumed_store_timestamp_ms=self._store_time(topic, queue_id, consumer_offset - 1),
            last_puller_client_id=last_pull[0] if last_pull else "",
            last_pull_age_ms=max(0, now_ms - last_pull[1]) if last_pull else UNKNOWN,
            lock_holder_client_id=lease[0] if lease else "", lock_lease_left_ms=lease[1] if lease else 0)

    def _group_known(self, group: str) -> bool:
        return (self._consumers.find(group) is not None or group in self._groups.groups
                or group in self._offset_groups() or group in self._last_pullers.groups())

    def _topics_of(self, group: str) -> list[str]:
        """Every topic the group subscribes to here, has offsets in, or pulled here; with its
        retry topic when this broker has it (RocketMQ's whichTopicByConsumer plus the live view)."""
        topics = self._known_topics(group)
        topics.update(self._last_pullers.topics_of(group))
        retry_topic = c.RETRY_GROUP_TOPIC_PREFIX + group
        if self._topics.get(retry_topic) is not None:
            topics.add(retry_topic)
        return sorted(topics)

    def _known_topics(self, group: str) -> set[str]:
        """The topics the group has offsets in or, with a client online, subscribes to."""
        topics = {topic for topic, g in self._offsets.offsets if g == group}
        info = self._consumers.find(group)
        if info is not None:
            topics.update(info.subscriptions)
        return topics

    def _offset_groups(self) -> set[str]:
        return {group for _, group in self._offsets.offsets}

    # --- consumer connections ------------------------------------------------------------------

    def consumer_connections(self, req: ConsumerConnectionsRequest) -> ConsumerConnectionsResponse:
        if refusal := validation.names_refusal(group=req.consumer_group):
            return ConsumerConnectionsResponse(*refusal)
        info = self._consumers.find(req.consumer_group)
        if info is None or not info.channels:
            return ConsumerConnectionsResponse(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"the consumer group {req.consumer_group!r} has no client connected to "
                f"{self._config.broker_name}; start one, or check the group's name")
        now_ms = self._clock.monotonic_ms()
        connections = tuple(
            ConsumerConnection(ch.client_id, ch.connection.peer, ch.connection.protocol, ch.connection.language,
                               ch.connection.version, max(0, now_ms - ch.last_heartbeat_ms))
            for ch in sorted(info.channels.values(), key=lambda ch: (ch.client_id, ch.channel_key)))
        return ConsumerConnectionsResponse(
            ResponseCode.SUCCESS, "", info.consume_type, info.message_model, info.consume_from_where, connections,
            tuple(info.subscriptions[topic] for topic in sorted(info.subscriptions)))

    # --- consumer groups -----------------------------------------------------------------------

    def list_consumer_groups(self, req: ListConsumerGroupsRequest) -> ListConsumerGroupsResponse:
        names = (set(self._consumers.groups) | set(self._groups.groups) | self._offset_groups()
                 | self._last_pullers.groups())
        summaries = []
        for group in sorted(names):
            info = self._consumers.find(group)
            summaries.append(ConsumerGroupSummary(
                group, len(set(info.client_ids())) if info is not None else 0, tuple(sorted(self._known_topics(group))),
                info.consume_type if info is not None else "", info.message_model if info is not None else ""))
        return ListConsumerGroupsResponse(ResponseCode.SUCCESS, groups=tuple(summaries))

    # --- broker runtime ------------------------------------------------------------------------

    def broker_runtime(self, req: BrokerRuntimeRequest) -> BrokerRuntimeResponse:
        store = self._store
        reasons = self._write_refusals()
        ha_client = self._ha_client()
        master_addr = ""
        if not self._config.is_master:
            master_addr = self._master_addr() or (ha_client.connected_to if ha_client is not None else "")
        ratio, free_bytes = measure_space(store.root)
        return BrokerRuntimeResponse(
            ResponseCode.SUCCESS, "", self._config.broker_name, self._config.broker_id, self._config.role,
            min_phys_offset=store.min_phys_offset, max_phys_offset=store.max_phys_offset,
            slave_lag_bytes=self._slave_lag_bytes(ha_client), disk_used_ratio=ratio, disk_free_bytes=free_bytes,
            writes_refused=bool(reasons), writes_refused_reason="; ".join(reasons),
            time_scale=self._config.time_scale, topics=len(self._topics.topics),
            store_errors=store.store_errors, master_addr=master_addr,
            broker_lock_lease_ms=self._config.timing.broker_lock_lease_ms,
            consumer_channel_expiry_ms=self._config.timing.consumer_channel_expiry_ms)

    def _write_refusals(self) -> list[str]:
        """Why a send to this broker is refused now; empty when it takes sends."""
        reasons = []
        if not self._config.is_master:
            reasons.append("a slave takes no sends: they go to its master")
        if not self._config.broker_perm & c.PERM_WRITE:
            reasons.append(f"broker_perm {self._config.broker_perm} has no write permission")
        if self._replication.writes.reason:
            reasons.append(f"writes held: {self._replication.writes.reason}")
        if disk := self._store.disk_refusal():
            reasons.append(disk)
        return reasons

    def _slave_lag_bytes(self, ha_client: HaClient | None) -> int:
        """Master: its max phys offset minus the slowest connected slave's acknowledged one.
        Slave: the master's max phys offset as last streamed minus its own, while streaming.
        -1 when unknown (no slave connected; a slave not streaming)."""
        max_phys_offset = self._store.max_phys_offset
        if self._config.is_master:
            acked = [conn.acked_offset for conn in self._replication.connections.values()]
            return max(0, max_phys_offset - min(acked)) if acked else UNKNOWN
        if ha_client is None or ha_client.state is not HaClientState.STREAMING:
            return UNKNOWN
        return max(0, ha_client.master_max_phys_offset - max_phys_offset)

    # --- shared --------------------------------------------------------------------------------

    def _store_time(self, topic: str, queue_id: int, queue_offset: int) -> int:
        """Store time of the message at `queue_offset`; 0 when there is none (or it is damaged,
        or retention removed it)."""
        if queue_offset < 0:
            return 0
        try:
            unit = self._store.queue_unit(topic, queue_id, queue_offset)
            if unit is None or is_hole(unit[0], unit[1]):
                return 0
            record = self._store.lookup_message(unit[0], unit[1])
        except StoreError as exc:
            log.warning("no store time for %s queue %d offset %d: %s", topic, queue_id, queue_offset, exc)
            return 0
        return record.store_timestamp_ms if record is not None else 0

    def _no_topic(self, topic: str) -> str:
        return (f"topic {topic!r} does not exist on {self._config.broker_name}; list the topics with the name "
                "server's topic list")
