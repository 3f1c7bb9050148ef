"""QueryRoute and QueryAssignment: a topic's master queues, each with its broker's RocketMQ 5
endpoint and the message types the topic accepts.

The route comes from the name servers (every broker registers its rocketmq5 endpoint beside its
addresses), so any broker's endpoint answers for the whole cluster, as a RocketMQ "local proxy"
does. Only masters are listed: a 5.x client sends to and receives from broker id 0 only, and
opens a Telemetry stream and heartbeats to every endpoint a route names.

An unknown topic is TOPIC_NOT_FOUND, as Apache's proxy answers (no auto-creation through a 5.x
route): create topics first (`mqlab admin topic create`), or let a 4.x client's send create them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from nodes.broker import validation
from nodes.broker.rmq5.clients import CallContext, Rmq5ClientRegistry
from nodes.broker.rmq5.codes import OK, Rmq5Code, Status
from nodes.common import constants as c
from nodes.common.errors import MqError
from nodes.common.types import TopicConfig, topic_message_type

MESSAGE_TYPES = c.TOPIC_MESSAGE_TYPES


@dataclass(frozen=True, slots=True)
class BrokerQueues:
    """One broker name's queues of a topic as the name servers route them."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    endpoint: str  # the master's RocketMQ 5 endpoint "host:port"; "" when it registered none


@dataclass(frozen=True, slots=True)
class RouteQueue:
    broker_name: str
    queue_id: int  # -1 in an assignment: the whole broker
    readable: bool
    writable: bool
    host: str
    port: int
    accept_types: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RouteAnswer:
    status: Status
    queues: tuple[RouteQueue, ...] = ()


# topic -> its brokers' queues, or None when the name servers route no such topic
RouteSource = Callable[[str], Awaitable[list[BrokerQueues] | None]]


class TopicLookup(Protocol):
    def get(self, topic: str) -> TopicConfig | None: ...


class Rmq5Routes:
    def __init__(self, topics: TopicLookup, source: RouteSource, registry: Rmq5ClientRegistry) -> None:
        self._topics = topics
        self._source = source
        self._registry = registry

    async def query_route(self, ctx: CallContext, topic: str) -> RouteAnswer:
        self._registry.touch(ctx, "QueryRoute")
        if refusal := validation.names_refusal(topic=topic):
            return RouteAnswer(Status(Rmq5Code.ILLEGAL_TOPIC, refusal.remark))
        brokers = await self._routed(topic)
        if isinstance(brokers, Status):
            return RouteAnswer(brokers)
        accept = (topic_message_type(self._topics.get(topic)),)
        queues = []
        for b in brokers:
            host, port = _host_port(b.endpoint)
            for queue_id in range(max(b.read_queue_nums, b.write_queue_nums)):
                queues.append(RouteQueue(
                    b.broker_name, queue_id, readable=bool(b.perm & c.PERM_READ) and queue_id < b.read_queue_nums,
                    writable=bool(b.perm & c.PERM_WRITE) and queue_id < b.write_queue_nums, host=host, port=port,
                    accept_types=accept))
        return RouteAnswer(OK, tuple(queues))

    async def query_assignment(self, ctx: CallContext, topic: str, group: str) -> RouteAnswer:
        """One assignment per master broker with readable queues, queue id -1 (a concurrent
        group's shape: the broker picks the queues at each receive)."""
        self._registry.touch(ctx, "QueryAssignment")
        if refusal := validation.names_refusal(topic=topic):
            return RouteAnswer(Status(Rmq5Code.ILLEGAL_TOPIC, refusal.remark))
        if refusal := validation.names_refusal(group=group):
            return RouteAnswer(Status(Rmq5Code.ILLEGAL_CONSUMER_GROUP, refusal.remark))
        brokers = await self._routed(topic)
        if isinstance(brokers, Status):
            return RouteAnswer(brokers)
        readable = [b for b in brokers if b.perm & c.PERM_READ and b.read_queue_nums > 0]
        if not readable:
            return RouteAnswer(Status(Rmq5Code.FORBIDDEN, f"topic {topic} has no readable queue"))
        return RouteAnswer(OK, tuple(RouteQueue(b.broker_name, -1, readable=True, writable=bool(b.perm & c.PERM_WRITE),
                                                host=host, port=port)
                                     for b in readable for host, port in [_host_port(b.endpoint)]))

    async def _routed(self, topic: str) -> list[BrokerQueues] | Status:
        try:
            brokers = await self._source(topic)
        except MqError as exc:  # no name server answered: the client asks again at its next refresh
            return Status(Rmq5Code.INTERNAL_SERVER_ERROR, f"no name server answered this broker's route query ({exc}); "
                          "check that the name servers are up")
        if brokers is None:
            return Status(Rmq5Code.TOPIC_NOT_FOUND,
                          f"topic {topic} does not exist; create it first (mqlab admin topic create {topic})")
        served = [b for b in brokers if b.endpoint]
        if not served:
            return Status(Rmq5Code.TOPIC_NOT_FOUND,
                          f"topic {topic} is on no master with a RocketMQ 5 endpoint (is every master up?)")
        return served


def _host_port(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host, int(port) if port.isdigit() else 0
