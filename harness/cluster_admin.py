"""Operator queries against a running cluster, as RocketMQ's mqadmin makes them: what `mqlab admin`
shows and does.

Owns the calls an operator makes: the name server's topic list, routes and broker registrations,
and each broker's topic creation and deletion, topic stats, consume stats, consumer connections,
group list and runtime. Callers get plain rows; a broker that does not answer is a row with its
error (one broken broker never hides the others), a name server that does not answer is a
`NamesrvUnreachable` saying what to do next.

Everything goes through the cluster's open gRPC services (the calls RocketMQ answers to any
client), so it works with only a name server address.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc

from harness.errors import HarnessError, NamesrvUnreachable
from nodes.common import constants as c
from nodes.common.rpc import make_sync_channel
from nodes.common.timing_margins import LOCK_LEASE, broken_margins
from proto import broker_pb2, broker_pb2_grpc, common_pb2, namesrv_pb2, namesrv_pb2_grpc

ADMIN_RPC_TIMEOUT_MS = 3_000
# `mqlab admin topic create --type`: stored as the topic's message type (RocketMQ 5's attribute
# message.type, which a RocketMQ 5 client reads to know what the topic takes; a 4.x client ignores
# it); FIFO also sets the config's `order` flag (RocketMQ 4.x's TopicConfig.order)
TOPIC_TYPES = c.TOPIC_MESSAGE_TYPES
# `mqlab admin topic update --perm`: RocketMQ's permission letters -> bits
PERMS = {"RW": c.PERM_READ | c.PERM_WRITE, "R": c.PERM_READ, "W": c.PERM_WRITE, "-": 0}
PERM_KEEP = c.TOPIC_PERM_KEEP  # an update that leaves the perm as stored
DEFAULT_CREATE_QUEUES = c.BROKER_DEFAULT_TOPIC_QUEUE_NUMS

T = TypeVar("T")


@dataclass(frozen=True)
class BrokerRef:
    cluster: str
    broker_name: str
    broker_id: int
    addr: str

    @property
    def label(self) -> str:
        return f"{self.broker_name}/{self.broker_id}"

    @property
    def is_master(self) -> bool:
        return self.broker_id == c.MASTER_ID


@dataclass(frozen=True)
class RouteQueues:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    addrs: dict[int, str]  # broker id -> gRPC address
    remoting_addrs: dict[int, str]


@dataclass(frozen=True)
class Route:
    topic: str
    queues: list[RouteQueues]
    order_topic_conf: str


@dataclass
class BrokerAnswer:
    """One broker's part of a query: its rows, or why there are none."""

    broker: BrokerRef
    code: str = "SUCCESS"
    remark: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.code == "SUCCESS"

    def to_json(self) -> dict[str, Any]:
        return {"broker_name": self.broker.broker_name, "broker_id": self.broker.broker_id, "addr": self.broker.addr,
                "code": self.code, "remark": self.remark, "rows": self.rows, **self.extra}


def real_client_margins(broker_lock_lease_ms: int, consumer_channel_expiry_ms: int) -> list[str]:
    """What a RocketMQ client, whose timers nothing scales, breaks against a broker's timers (none
    at time scale 1): one sentence each, naming the margin and what to do."""
    lines = []
    for margin in broken_margins(broker_lock_lease_ms=broker_lock_lease_ms,
                                 consumer_channel_expiry_ms=consumer_channel_expiry_ms,
                                 lock_renew_interval_ms=c.LOCK_RENEW_INTERVAL_MS,
                                 client_heartbeat_ms=c.CLIENT_HEARTBEAT_MS):
        if margin.kind == LOCK_LEASE:
            lines.append(f"the brokers lease orderly locks for {margin.broker_ms / 1000:g} s but a RocketMQ client "
                         f"renews them every {margin.client_ms / 1000:g} s: its locks lapse between renewals "
                         "and another consumer can take a queue it still consumes (run the cluster at time scale 1, "
                         f"or keep broker_lock_lease_ms = {c.BROKER_LOCK_LEASE_MS} in the spec's [timing])")
        else:
            lines.append(f"the brokers drop a client silent for {margin.broker_ms / 1000:g} s but a RocketMQ "
                         f"client heartbeats every {margin.client_ms / 1000:g} s: it leaves its group between "
                         f"heartbeats (keep consumer_channel_expiry_ms = {c.CONSUMER_CHANNEL_EXPIRY_MS} in [timing])")
    return lines


class ClusterAdmin:
    """Queries to one cluster through its name server; channels are kept until `close()`."""

    def __init__(self, namesrv_addr: str, timeout_ms: int = ADMIN_RPC_TIMEOUT_MS) -> None:
        self.namesrv_addr = namesrv_addr
        self.timeout_ms = timeout_ms
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}

    def __enter__(self) -> ClusterAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            channel.close()

    # ---- the name server ---------------------------------------------------------------------

    def brokers(self) -> list[BrokerRef]:
        """Every broker registered with the name server, masters first per group."""
        resp = self._namesrv("GetClusterInfo", namesrv_pb2.GetClusterInfoRequest())
        return sorted((BrokerRef(b.cluster, b.broker_name, int(bid), addr)
                       for b in resp.brokers for bid, addr in b.broker_addrs.items()),
                      key=lambda r: (r.broker_name, r.broker_id))

    def topics(self) -> tuple[list[str], float]:
        """(every topic with a live route, the name server's time scale)."""
        resp = self._namesrv("GetTopicList", namesrv_pb2.GetTopicListRequest())
        return sorted(resp.topics), resp.time_scale

    def route(self, topic: str) -> Route:
        resp = self._namesrv("GetRouteInfo", namesrv_pb2.GetRouteInfoRequest(topic=topic))
        if resp.code != common_pb2.SUCCESS:
            raise HarnessError(f"no route for topic {topic!r} ({common_pb2.Code.Name(resp.code)}"
                               + (f": {resp.remark}" if resp.remark else "") + "): `mqlab admin topic list` shows "
                               "the topics there are; create one with `mqlab admin topic create --topic T`")
        brokers = {b.broker_name: b for b in resp.route.broker_datas}
        queues = []
        for q in sorted(resp.route.queue_datas, key=lambda q: q.broker_name):
            b = brokers.get(q.broker_name)
            queues.append(RouteQueues(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm,
                                      {int(k): v for k, v in b.broker_addrs.items()} if b else {},
                                      {int(k): v for k, v in b.remoting_addrs.items()} if b else {}))
        return Route(topic, queues, resp.route.order_topic_conf)

    # ---- topics on the brokers ---------------------------------------------------------------

    def create_topic(self, topic: str, *, queues: int = DEFAULT_CREATE_QUEUES, topic_type: str = "NORMAL",
                     broker_name: str | None = None) -> list[BrokerAnswer]:
        """Create (or update) TOPIC on every master, or on BROKER_NAME's master only."""
        if topic_type not in TOPIC_TYPES:
            raise HarnessError(f"topic type {topic_type!r} is not one a topic can have: types are "
                               f"{', '.join(TOPIC_TYPES)}")
        config = common_pb2.TopicConfig(topic=topic, read_queue_nums=queues, write_queue_nums=queues,
                                        perm=c.PERM_DEFAULT, order=topic_type == "FIFO", message_type=topic_type)
        return self._on_masters(broker_name, "CreateTopic", broker_pb2.CreateTopicRequest(config=config))

    def update_topic(self, topic: str, *, read_queues: int = 0, write_queues: int = 0, perm: int = PERM_KEEP
                     ) -> list[BrokerAnswer]:
        """updateTopic on an existing topic, on every master of its route: 0 or PERM_KEEP keeps a value."""
        masters = [b for b in self._route_brokers(self.route(topic)) if b.is_master]
        if not masters:
            raise HarnessError(f"no master of topic {topic!r} is registered: `mqlab admin cluster` shows the brokers")
        config = common_pb2.TopicConfig(topic=topic, read_queue_nums=read_queues, write_queue_nums=write_queues,
                                        perm=perm)
        return [self._ask(ref, "CreateTopic", broker_pb2.CreateTopicRequest(config=config, update=True))[0]
                for ref in masters]

    def topic_types(self, topics: Iterable[str]) -> dict[str, str]:
        """Each topic's message type as the first master that has it answers (`topic_message_type`:
        an unset one reads FIFO on an order topic, else NORMAL; "" when no master answered)."""
        masters = [b for b in self.brokers() if b.is_master]
        types = {}
        for topic in topics:
            types[topic] = ""
            for ref in masters:
                answer, pb = self._ask(ref, "GetTopicStats", broker_pb2.GetTopicStatsRequest(topic=topic))
                if pb is not None and answer.ok:
                    types[topic] = pb.message_type or c.TOPIC_MESSAGE_TYPE_DEFAULT
                    break
        return types

    def delete_topic(self, topic: str, *, broker_name: str | None = None) -> list[BrokerAnswer]:
        return self._on_masters(broker_name, "DeleteTopic", broker_pb2.DeleteTopicRequest(topic=topic))

    def update_group(self, group: str, *, orderly: bool | None = None, retry_max_times: int | None = None,
                     broker_name: str | None = None) -> list[BrokerAnswer]:
        """Create GROUP or change its FIFO flag and retries on every master (RocketMQ updateSubGroup);
        each answer's row is the group as that master stored it."""
        request = broker_pb2.UpdateSubscriptionGroupRequest(group=group)
        if orderly is not None:
            request.consume_message_orderly = orderly
        if retry_max_times is not None:
            request.retry_max_times = retry_max_times

        def fill(answer: BrokerAnswer, resp: Any) -> None:
            if answer.ok:
                answer.rows.append({"group": group, "orderly": resp.consume_message_orderly,
                                    "retry_max_times": resp.retry_max_times})
        return self._ask_each(self._masters(broker_name), "UpdateSubscriptionGroup", request, fill)

    def topic_status(self, topic: str) -> list[BrokerAnswer]:
        """Per queue on every broker of the topic's route, masters and slaves: min, max, last store time."""
        return self._ask_each(self._route_brokers(self.route(topic)), "GetTopicStats",
                              broker_pb2.GetTopicStatsRequest(topic=topic), _topic_stats_rows)

    # ---- consumers -----------------------------------------------------------------------------

    def reset_offset(self, group: str, topic: str, timestamp_ms: int) -> list[BrokerAnswer]:
        """resetOffsetByTime on every master of the topic's route: per queue the old and new offset,
        and (extra `clients_told`) the clients each master told."""
        masters = [b for b in self._route_brokers(self.route(topic)) if b.is_master]
        if not masters:
            raise HarnessError(f"no master of topic {topic!r} is registered (its slaves keep a copy of the "
                               "offsets and refuse resets): `mqlab admin cluster` shows the brokers")
        return self._ask_each(masters, "ResetConsumerOffset", broker_pb2.ResetConsumerOffsetRequest(
            consumer_group=group, topic=topic, timestamp_ms=timestamp_ms), _reset_rows)

    def consumer_progress(self, group: str, topic: str = "") -> list[BrokerAnswer]:
        """Per (topic, queue) on every broker: broker offset, the group's offset, lag, who pulls it."""
        return self._ask_each(self.brokers(), "GetConsumeStats",
                              broker_pb2.GetConsumeStatsRequest(consumer_group=group, topic=topic), _progress_rows)

    def consumer_connections(self, group: str) -> list[BrokerAnswer]:
        return self._ask_each(self.brokers(), "GetConsumerConnections",
                              broker_pb2.GetConsumerConnectionsRequest(consumer_group=group), _connection_rows)

    def groups(self) -> list[BrokerAnswer]:
        return self._ask_each(self.brokers(), "ListConsumerGroups", broker_pb2.ListConsumerGroupsRequest(),
                              _group_rows)

    def runtime(self) -> list[BrokerAnswer]:
        """Every registered broker's runtime: role, offsets, slave lag, disk, time scale."""
        return self._ask_each(self.brokers(), "GetBrokerRuntime", broker_pb2.GetBrokerRuntimeRequest(),
                              _runtime_rows)

    # ---- plumbing -----------------------------------------------------------------------------

    def _route_brokers(self, route: Route) -> Iterator[BrokerRef]:
        cluster = {(b.broker_name, b.broker_id): b.cluster for b in self.brokers()}
        for q in route.queues:
            for bid, addr in sorted(q.addrs.items()):
                yield BrokerRef(cluster.get((q.broker_name, bid), ""), q.broker_name, bid, addr)

    def _on_masters(self, broker_name: str | None, method: str, request: Any) -> list[BrokerAnswer]:
        return [self._ask(ref, method, request)[0] for ref in self._masters(broker_name)]

    def _masters(self, broker_name: str | None) -> list[BrokerRef]:
        brokers = self.brokers()
        masters = [b for b in brokers if b.is_master and broker_name in (None, b.broker_name)]
        if not masters:
            known = sorted({b.broker_name for b in brokers})
            raise HarnessError(f"no live master of broker {broker_name!r} is registered; brokers are "
                               f"{', '.join(known) or 'none'} (`mqlab admin cluster`)" if broker_name else
                               "no master broker is registered with the name server: is the cluster up "
                               "(`mqlab status`)?")
        return masters

    def _ask_each(self, refs: Iterable[BrokerRef], method: str, request: Any,
                  fill: Callable[[BrokerAnswer, Any], None]) -> list[BrokerAnswer]:
        """`method` on every broker of `refs`; `fill(answer, response)` for each that answered."""
        answers = []
        for ref in refs:
            answer, pb = self._ask(ref, method, request)
            if pb is not None:
                fill(answer, pb)
            answers.append(answer)
        return answers

    def _ask(self, ref: BrokerRef, method: str, request: Any) -> tuple[BrokerAnswer, Any]:
        """One broker call: its code and remark, and its message (None when the broker did not answer)."""
        try:
            resp = self._call(broker_pb2_grpc.BrokerStub(self._channel(ref.addr)), method, request)
        except grpc.RpcError as exc:
            code = exc.code().name if isinstance(exc, grpc.Call) else "error"
            return BrokerAnswer(ref, code="UNREACHABLE", remark=f"{method} to {ref.addr}: {code}"), None
        return BrokerAnswer(ref, code=common_pb2.Code.Name(resp.code), remark=resp.remark), resp

    def _namesrv(self, method: str, request: Any) -> Any:
        try:
            return self._call(namesrv_pb2_grpc.NameServerStub(self._channel(self.namesrv_addr)), method, request)
        except grpc.RpcError as exc:
            code = exc.code().name if isinstance(exc, grpc.Call) else "error"
            raise NamesrvUnreachable(f"name server {self.namesrv_addr} did not answer {method} ({code}): is the "
                                     "cluster up (`mqlab status`), and is that the name server's gRPC address "
                                     "(`namesrv` in cluster.json)?") from exc

    def _call(self, stub: Any, method: str, request: Any) -> Any:
        fn: Callable[..., Any] = getattr(stub, method)
        return fn(request, timeout=self.timeout_ms / 1000)

    def _channel(self, addr: str) -> grpc.Channel:
        with self._lock:
            channel = self._channels.get(addr)
            if channel is None:
                channel = self._channels[addr] = make_sync_channel(addr)
            return channel


# ---- broker answers as rows ------------------------------------------------------------------------


def _topic_stats_rows(answer: BrokerAnswer, pb: broker_pb2.GetTopicStatsResponse) -> None:
    answer.rows = [{"queue_id": q.queue_id, "min_offset": q.min_offset, "max_offset": q.max_offset,
                    "last_store_timestamp_ms": q.last_store_timestamp_ms}
                   for q in sorted(pb.queues, key=lambda q: q.queue_id)]
    if answer.ok:
        answer.extra["message_type"] = pb.message_type or c.TOPIC_MESSAGE_TYPE_DEFAULT


def _progress_rows(answer: BrokerAnswer, pb: broker_pb2.GetConsumeStatsResponse) -> None:
    answer.rows = [{
        "topic": q.topic, "queue_id": q.queue_id, "broker_offset": q.broker_offset,
        "consumer_offset": q.consumer_offset,
        # no stored offset: where the group starts depends on its consume-from-where
        "lag": q.broker_offset - q.consumer_offset if q.consumer_offset >= 0 else None,
        "last_consumed_store_timestamp_ms": q.last_consumed_store_timestamp_ms,
        "last_puller_client_id": q.last_puller_client_id, "last_pull_age_ms": q.last_pull_age_ms,
        "lock_holder_client_id": q.lock_holder_client_id, "lock_lease_left_ms": q.lock_lease_left_ms,
    } for q in sorted(pb.queues, key=lambda q: (q.topic, q.queue_id))]


def _connection_rows(answer: BrokerAnswer, pb: broker_pb2.GetConsumerConnectionsResponse) -> None:
    answer.rows = [{"client_id": x.client_id, "peer": x.peer, "protocol": x.protocol, "language": x.language,
                    "version": x.version, "last_heartbeat_age_ms": x.last_heartbeat_age_ms} for x in pb.connections]
    answer.extra.update(consume_type=pb.consume_type, message_model=pb.message_model,
                        consume_from_where=pb.consume_from_where,
                        subscriptions=[{"topic": x.topic, "expression": x.expression, "sub_version": x.sub_version}
                                       for x in pb.subscriptions])


def _group_rows(answer: BrokerAnswer, pb: broker_pb2.ListConsumerGroupsResponse) -> None:
    answer.rows = [{"group": g.group, "online_clients": g.online_clients, "topics": sorted(g.topics),
                    "consume_type": g.consume_type, "message_model": g.message_model}
                   for g in sorted(pb.groups, key=lambda g: g.group)]


def _runtime_rows(answer: BrokerAnswer, pb: broker_pb2.GetBrokerRuntimeResponse) -> None:
    if not answer.ok:
        return
    answer.rows = [{
        "role": pb.role, "min_phys_offset": pb.min_phys_offset, "max_phys_offset": pb.max_phys_offset,
        "slave_lag_bytes": pb.slave_lag_bytes, "disk_used_ratio": pb.disk_used_ratio,
        "disk_free_bytes": pb.disk_free_bytes, "writes_refused": pb.writes_refused,
        "writes_refused_reason": pb.writes_refused_reason, "time_scale": pb.time_scale,
        "topics": pb.topics, "store_errors": pb.store_errors, "master_addr": pb.master_addr,
        "broker_lock_lease_ms": pb.broker_lock_lease_ms, "consumer_channel_expiry_ms": pb.consumer_channel_expiry_ms}]


def _reset_rows(answer: BrokerAnswer, pb: broker_pb2.ResetConsumerOffsetResponse) -> None:
    answer.rows = [{"queue_id": q.queue_id, "old_offset": q.old_offset, "new_offset": q.new_offset}
                   for q in sorted(pb.queues, key=lambda q: q.queue_id)]
    answer.extra["clients_told"] = list(pb.clients_told)
