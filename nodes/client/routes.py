"""Topic routes on the client: what the name server said, and the queue lists derived from it.

Owns the client's view of routes (RocketMQ `MQClientInstance`'s topicRouteTable,
brokerAddrTable, publish and subscribe info) and the polling that keeps it fresh. Does not
own the name server connection (the `ClientInstance` hands in a `fetch_route` coroutine), and
does not choose queues for a send (`queue_selector`).

The rules are pure functions of a `RouteSnapshot`, so they are tested without sockets:
  * `publish_queues`   MQClientInstance#topicRouteData2TopicPublishInfo
  * `auto_create_route` the TBW102 fallback of updateTopicRouteInfoFromNameServer(isDefault)
  * `subscribe_queues` MQClientInstance#topicRouteData2TopicSubscribeInfo
  * `pick_subscribe_address` MQClientInstance#findBrokerAddressInSubscribe
`RouteCache` holds the snapshots and is confined to the client's event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import ClassVar

from nodes.common import constants as c
from nodes.common.errors import BrokerNotFoundError, MqError, RouteNotFoundError
from nodes.common.service import Service
from nodes.common.types import MessageQueue

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = c.PERM_DEFAULT
    topic_sys_flag: int = 0

    @property
    def readable(self) -> bool:
        return bool(self.perm & c.PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & c.PERM_WRITE)


@dataclass(frozen=True, slots=True)
class BrokerData:
    broker_name: str
    addrs: Mapping[int, str]  # broker_id -> "host:port"; id 0 is the master
    cluster: str = ""


@dataclass(frozen=True, slots=True)
class RouteSnapshot:
    """One topic's route as the name server returned it (RocketMQ TopicRouteData)."""

    queue_datas: tuple[QueueData, ...] = ()
    broker_datas: tuple[BrokerData, ...] = ()
    order_topic_conf: str = ""

    def broker_addrs(self, broker_name: str) -> Mapping[int, str] | None:
        for bd in self.broker_datas:
            if bd.broker_name == broker_name:
                return bd.addrs
        return None


@dataclass(frozen=True, slots=True)
class FoundBroker:
    """FindBrokerResult: the address and whether it is a slave's."""

    addr: str
    slave: bool
    broker_id: int = c.MASTER_ID  # the id whose address was chosen


def publish_queues(topic: str, route: RouteSnapshot) -> list[MessageQueue]:
    """The queues a producer may send to, in RocketMQ's order (sorted by broker name).

    Only writable queue data whose broker currently has a master (id 0) counts: a broker name
    without a live master is invisible to producers.
    """
    if route.order_topic_conf:
        # "broker-a:4;broker-b:4": an ordered topic lists its queues explicitly.
        queues = []
        for item in route.order_topic_conf.split(";"):
            name, _, nums = item.partition(":")
            if name and nums.strip().isdigit():
                queues.extend(MessageQueue(topic, name, i) for i in range(int(nums)))
        return queues
    queues = []
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if not qd.writable:
            continue
        addrs = route.broker_addrs(qd.broker_name)
        if not addrs or c.MASTER_ID not in addrs:
            continue
        queues.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.write_queue_nums))
    return queues


def auto_create_route(default_route: RouteSnapshot, queue_nums_max: int) -> RouteSnapshot:
    """The TBW102 route reshaped for a topic that does not exist yet (auto-create path).

    Each broker's queue count is capped at the producer's defaultTopicQueueNums. RocketMQ caps
    `readQueueNums` and copies it to both counts; TBW102 has equal counts, so capping the write
    count (what a producer uses) is the same thing.
    """
    capped = tuple(
        replace(qd, read_queue_nums=min(queue_nums_max, qd.write_queue_nums),
                write_queue_nums=min(queue_nums_max, qd.write_queue_nums))
        for qd in default_route.queue_datas)
    return replace(default_route, queue_datas=capped)


def subscribe_queues(topic: str, route: RouteSnapshot) -> list[MessageQueue]:
    """Readable queues 0..read_queue_nums-1 of every broker, sorted. No master is needed."""
    queues = [
        MessageQueue(topic, qd.broker_name, i)
        for qd in route.queue_datas if qd.readable
        for i in range(qd.read_queue_nums)
    ]
    queues.sort()
    return queues


def pick_publish_address(addrs: Mapping[int, str] | None) -> str | None:
    """findBrokerAddressInPublish: the master's address, or None."""
    if not addrs:
        return None
    return addrs.get(c.MASTER_ID)


def pick_subscribe_address(addrs: Mapping[int, str] | None, broker_id: int,
                           only_this_broker: bool) -> FoundBroker | None:
    """findBrokerAddressInSubscribe, rule by rule."""
    if not addrs:
        return None
    slave = broker_id != c.MASTER_ID
    chosen_id = broker_id
    addr = addrs.get(broker_id)
    if addr is None and slave:
        chosen_id = broker_id + 1
        addr = addrs.get(chosen_id)
    if addr is None and not only_this_broker:
        # Java takes the HashMap's first entry: for small ids, the lowest id present.
        chosen_id = min(addrs)
        addr = addrs[chosen_id]
        slave = chosen_id != c.MASTER_ID
    if addr is None:
        return None
    return FoundBroker(addr, slave, chosen_id)


FetchRoute = Callable[[str], Awaitable[RouteSnapshot | None]]
# told (topic, new route) whenever a topic's stored route differs from the one before (or is its first)
RouteListener = Callable[[str, RouteSnapshot], None]


@dataclass
class _TopicEntry:
    route: RouteSnapshot
    publish: list[MessageQueue] = field(default_factory=list)
    subscribe: list[MessageQueue] = field(default_factory=list)
    from_default: bool = False  # built from TBW102 while the topic has no route of its own


class RouteCache:
    """The client's routes, refreshed on demand and by `RouteRefreshService`.

    Loop-confined: every method runs on the client's event loop, except the lookups of what is
    cached (`route`, `cached_publish_info`, `find_broker_address_in_*`), which the blocking pulls
    and sends make from their callers' threads: each is one dict read of an entry the loop replaces
    whole, never changes in place. `fetch_route(topic)` returns the name server's route, None for
    TOPIC_ROUTE_NOT_EXIST, or raises a TransportError.
    """

    def __init__(self, fetch_route: FetchRoute, *,
                 producer_default_queue_nums: int = c.PRODUCER_DEFAULT_TOPIC_QUEUE_NUMS) -> None:
        self._fetch_route = fetch_route
        self.producer_default_queue_nums = producer_default_queue_nums
        self._topics: dict[str, _TopicEntry] = {}
        self._used: set[str] = set()  # topics to keep polling
        self._broker_addrs: dict[str, dict[int, str]] = {}
        self._listeners: list[RouteListener] = []

    def add_listener(self, listener: RouteListener) -> None:
        """Call `listener(topic, route)` on the loop after every change of a topic's route."""
        self._listeners.append(listener)

    def remove_listener(self, listener: RouteListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    # --- updates -------------------------------------------------------------------
    async def update_topic(self, topic: str, *, use_default: bool = False) -> bool:
        """Fetch `topic`'s route (or, with `use_default`, the TBW102 one); True if stored.

        A topic the name server does not know keeps its previous entry, as RocketMQ does:
        a TBW102-derived route survives until the topic's own route appears.
        """
        self._used.add(topic)
        if use_default:
            default = await self._fetch_route(c.AUTO_CREATE_TOPIC_KEY)
            if default is None:
                return False
            route = auto_create_route(default, self.producer_default_queue_nums)
        else:
            fetched = await self._fetch_route(topic)
            if fetched is None:
                return False
            route = fetched
        self._store(topic, route, from_default=use_default)
        return True

    def _store(self, topic: str, route: RouteSnapshot, *, from_default: bool) -> None:
        old = self._topics.get(topic)
        entry = _TopicEntry(route, publish_queues(topic, route), subscribe_queues(topic, route), from_default)
        self._topics[topic] = entry
        for bd in route.broker_datas:
            self._broker_addrs[bd.broker_name] = dict(bd.addrs)
        if old is None or old.route != route:
            log.info("route of %s%s: publish %d queues, subscribe %d queues, brokers %s",
                     topic, " (from TBW102)" if from_default else "", len(entry.publish),
                     len(entry.subscribe), {bd.broker_name: dict(bd.addrs) for bd in route.broker_datas})
            for listener in list(self._listeners):
                listener(topic, route)

    async def refresh_all(self) -> None:
        """One polling round: refresh every used topic, then drop addresses no route names."""
        for topic in sorted(self._used):
            try:
                await self.update_topic(topic)
            except MqError as err:
                log.warning("route refresh of %s failed: %s", topic, err)
        self.clean_offline_brokers()

    def clean_offline_brokers(self) -> None:
        """cleanOfflineBroker: forget addresses that no cached route mentions any more."""
        live = {addr for e in self._topics.values() for bd in e.route.broker_datas for addr in bd.addrs.values()}
        for name in list(self._broker_addrs):
            addrs = {i: a for i, a in self._broker_addrs[name].items() if a in live}
            if addrs:
                self._broker_addrs[name] = addrs
            else:
                del self._broker_addrs[name]

    # --- queries -------------------------------------------------------------------
    def route(self, topic: str) -> RouteSnapshot | None:
        entry = self._topics.get(topic)
        return entry.route if entry else None

    def used_topics(self) -> frozenset[str]:
        return frozenset(self._used)

    def cached_publish_info(self, topic: str) -> list[MessageQueue] | None:
        """The topic's cached publish list if it has a writable queue, else None (`publish_info`
        fetches); any thread."""
        entry = self._topics.get(topic)
        return entry.publish if entry is not None and entry.publish else None

    async def publish_info(self, topic: str) -> list[MessageQueue]:
        """tryToFindTopicPublishInfo: cached list, else the topic's route, else TBW102's.

        Raises:
            RouteNotFoundError: neither the topic nor TBW102 has a route, or no broker of the
                topic has a writable queue and a live master.
        """
        entry = self._topics.get(topic)
        if entry is None or not entry.publish:
            await self.update_topic(topic)
            entry = self._topics.get(topic)
        if entry is None:
            await self.update_topic(topic, use_default=True)
            entry = self._topics.get(topic)
        if entry is None:
            raise RouteNotFoundError(
                f"no route info of topic {topic}, and no broker offers auto-creation ({c.AUTO_CREATE_TOPIC_KEY}); "
                "create the topic first")
        if not entry.publish:
            raise RouteNotFoundError(
                f"topic {topic} has no writable queue on a broker with a live master; "
                "wait for the master to come back")
        return entry.publish

    async def subscribe_info(self, topic: str, *, refresh: bool = False) -> list[MessageQueue]:
        """The topic's readable queues, sorted. Raises RouteNotFoundError for an unknown topic."""
        await self.ensure_route(topic, refresh=refresh)
        return list(self._topics[topic].subscribe)

    async def ensure_route(self, topic: str, *, refresh: bool = False) -> RouteSnapshot:
        """The topic's own route, fetched if not cached (or if `refresh`); never TBW102's."""
        entry = self._topics.get(topic)
        if refresh or entry is None or entry.from_default:
            await self.update_topic(topic)
            entry = self._topics.get(topic)
        if entry is None or entry.from_default:
            raise RouteNotFoundError(
                f"topic {topic} has no route on the name server; create it first or check the name")
        return entry.route

    def find_broker_address_in_publish(self, broker_name: str) -> str | None:
        return pick_publish_address(self._broker_addrs.get(broker_name))

    def find_broker_address_in_subscribe(self, broker_name: str, broker_id: int,
                                         only_this_broker: bool) -> FoundBroker | None:
        return pick_subscribe_address(self._broker_addrs.get(broker_name), broker_id, only_this_broker)

    async def publish_address(self, topic: str, broker_name: str) -> str:
        """The master address of `broker_name`, refreshing `topic`'s route once if unknown."""
        addr = self.find_broker_address_in_publish(broker_name)
        if addr is None:
            await self.update_topic(topic)
            addr = self.find_broker_address_in_publish(broker_name)
        if addr is None:
            raise BrokerNotFoundError(f"broker {broker_name} has no master in the route of {topic}")
        return addr

    async def subscribe_address(self, topic: str, broker_name: str, broker_id: int,
                                only_this_broker: bool = False) -> FoundBroker:
        """findBrokerAddressInSubscribe, refreshing `topic`'s route once if nothing is found."""
        found = self.find_broker_address_in_subscribe(broker_name, broker_id, only_this_broker)
        if found is None:
            await self.update_topic(topic)
            found = self.find_broker_address_in_subscribe(broker_name, broker_id, only_this_broker)
        if found is None:
            raise BrokerNotFoundError(f"broker {broker_name} is not in the route of {topic}")
        return found


class RouteRefreshService(Service):
    """Polls the name server for every used topic every `interval_ms` (pollNameServerInterval), the
    first time `first_ms` after start."""

    name: ClassVar[str] = "route-refresh"
    expected_errors: ClassVar[tuple[type[BaseException], ...]] = (MqError,)

    def __init__(self, cache: RouteCache, interval_ms: int, first_ms: int) -> None:
        super().__init__(interval_ms, initial_delay_ms=first_ms)
        self.cache = cache

    async def tick(self) -> None:
        await self.cache.refresh_all()
