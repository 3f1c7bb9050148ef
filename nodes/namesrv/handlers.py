"""Name-server request handling (RocketMQ DefaultRequestProcessor and the channel side of
BrokerHousekeepingService), with plain request and answer values and no transport.

Owns: checking and applying broker registrations and unregistrations, answering routes and
cluster info, and the broker channels: a channel opened with a registration's token, whose
end (other than by this server's own shutdown) removes that registration at once.
Does not own the route table's rules (route_table) or how a channel is carried.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from nodes.common.clock import Clock
from nodes.common.codes import ResponseCode
from nodes.common.types import TopicConfig
from nodes.namesrv.route_table import BrokerData, RouteTable, TopicRoute


@dataclass(frozen=True, slots=True)
class RegisterBrokerRequest:
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    ha_server_addr: str = ""
    topic_configs: tuple[TopicConfig, ...] = ()
    data_version: tuple[int, int] = (0, 0)
    node_id: str = ""
    channel_token: str = ""
    remoting_addr: str = ""  # the broker's RocketMQ remoting listener; empty when it has none
    rocketmq5_addr: str = ""  # the broker's RocketMQ 5 gRPC endpoint; empty when it has none


@dataclass(frozen=True, slots=True)
class RegisterBrokerResponse:
    """`master_addr` is set for a slave while its master is registered."""

    code: ResponseCode
    remark: str = ""
    master_addr: str = ""
    ha_server_addr: str = ""


@dataclass(frozen=True, slots=True)
class BrokerRef:
    """UNREGISTER_BROKER, and the broker a channel belongs to (with the channel's token)."""

    broker_name: str
    broker_id: int
    broker_addr: str
    cluster_name: str = ""
    channel_token: str = ""


@dataclass(frozen=True, slots=True)
class RouteResponse:
    code: ResponseCode
    remark: str = ""
    route: TopicRoute | None = None


@dataclass(frozen=True, slots=True)
class BrokerLiveInfo:
    broker_addr: str
    node_id: str
    last_update_timestamp_ms: int  # wall time, for humans


@dataclass(frozen=True, slots=True)
class TopicList:
    """GET_ALL_TOPIC_LIST_FROM_NAMESERVER: every topic with a live route, and this server's
    time scale (every RocketMQ timer of it multiplied by that)."""

    topics: tuple[str, ...]
    time_scale: float = 1.0


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    brokers: tuple[BrokerData, ...]
    live: tuple[BrokerLiveInfo, ...]
    topics: tuple[str, ...]
    time_scale: float = 1.0  # a cluster fact: clients built with no timing adopt it


class NameServerHandler:
    def __init__(self, table: RouteTable, clock: Clock, time_scale: float = 1.0) -> None:
        self._table = table
        self._clock = clock
        self._time_scale = time_scale
        # Set before the server stops: it ends every channel normally (not by a broker).
        self._closing = asyncio.Event()
        self.open_channels = 0

    def register_broker(self, req: RegisterBrokerRequest) -> RegisterBrokerResponse:
        if not req.broker_name or not req.broker_addr or req.broker_id < 0:
            return RegisterBrokerResponse(ResponseCode.INVALID_ARGUMENT,
                                          "broker_name, broker_addr and a broker_id >= 0 are required")
        result = self._table.register(
            cluster=req.cluster_name, broker_name=req.broker_name, broker_id=req.broker_id,
            broker_addr=req.broker_addr, ha_server_addr=req.ha_server_addr, topic_configs=list(req.topic_configs),
            data_version=req.data_version, now_ms=self._clock.monotonic_ms(), node_id=req.node_id,
            channel_token=req.channel_token, remoting_addr=req.remoting_addr, rocketmq5_addr=req.rocketmq5_addr)
        return RegisterBrokerResponse(ResponseCode.SUCCESS, master_addr=result.master_addr,
                                      ha_server_addr=result.ha_server_addr)

    def unregister_broker(self, req: BrokerRef) -> ResponseCode:
        self._table.unregister(broker_name=req.broker_name, broker_id=req.broker_id, broker_addr=req.broker_addr)
        return ResponseCode.SUCCESS

    def route(self, topic: str) -> RouteResponse:
        route = self._table.route(topic)
        if route is None:
            return RouteResponse(ResponseCode.TOPIC_ROUTE_NOT_EXIST,
                                 f"no route for topic {topic!r}: no live broker serves it")
        return RouteResponse(ResponseCode.SUCCESS, route=route)

    def cluster_info(self) -> ClusterInfo:
        # liveness is judged on the monotonic clock; report it as wall time for humans
        wall_minus_mono_ms = self._clock.wall_ms() - self._clock.monotonic_ms()
        return ClusterInfo(
            brokers=tuple(sorted(self._table.brokers.values(), key=lambda b: b.broker_name)),
            live=tuple(BrokerLiveInfo(addr, live.node_id, live.last_update_ms + wall_minus_mono_ms)
                       for addr, live in sorted(self._table.live.items())),
            topics=tuple(self._table.topics()), time_scale=self._time_scale)

    def topic_list(self) -> TopicList:
        """Topics some live broker serves: a topic whose every broker went is gone already
        (its queues leave with the last address), and `route` answers each listed one."""
        return TopicList(tuple(t for t in self._table.topics() if self._table.route(t) is not None), self._time_scale)

    # --- broker channels ----------------------------------------------------------------------

    def channel_opened(self, broker: BrokerRef) -> bool:
        """A broker's channel is open; returns whether its token's registration is live."""
        self.open_channels += 1
        live = self._table.live.get(broker.broker_addr)
        return live is not None and live.channel_token == broker.channel_token

    async def until_closing(self) -> None:
        """Returns when this server starts its shutdown (a channel has nothing else to say)."""
        await self._closing.wait()

    def channel_closed(self, broker: BrokerRef) -> None:
        """onChannelDestroy, unless this server's own shutdown ended the channel."""
        self.open_channels -= 1
        if not self._closing.is_set():
            self._table.on_channel_destroy(broker.broker_addr, broker.channel_token)

    def close_channels(self) -> None:
        """End every channel before the server stops (they end removing nothing)."""
        self._closing.set()
