"""Client heartbeats and membership notifications of one client instance.

Owns: the consumers registered on the instance (group -> what its heartbeat carries, its
topics, whom to tell about a notification), the periodic heartbeat to every broker of their
topics, all groups in one request (RocketMQ `sendHeartbeatToAllBrokerWithLock`), one
`ConsumerManager.Notifications` stream per broker address (a NOTIFY_CONSUMER_IDS_CHANGED for a
group wakes that consumer's rebalance, a RESET_CONSUMER_CLIENT_OFFSET goes to the consumer's
`on_reset`; the stream's end is the broker's "channel closed" for this client), and
unregistering a group on its consumer's shutdown. Does not decide anything about queues; what a
heartbeat carries comes from each consumer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import ClassVar

from nodes.client.routes import RouteCache
from nodes.client.rpc.api import ClientApi, ConsumerData, OffsetReset
from nodes.common.errors import MqError
from nodes.common.service import CrashHandler, Service

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RegisteredConsumer:
    """What the heartbeat needs of one consumer group on this instance."""

    consumer_data: Callable[[], ConsumerData]  # called on the loop, once per heartbeat
    topics: Callable[[], Iterable[str]]  # whose brokers get heartbeats (retry topic included)
    on_notification: Callable[[], None]  # the broker says the group's consumer ids changed
    on_crash: CrashHandler | None = None
    on_reset: Callable[[OffsetReset], None] | None = None  # None: resets are logged and ignored


class HeartbeatService(Service):
    """Heartbeats every `interval_ms` for every registered group and keeps the notification streams open.

    Args:
        api: the broker calls.
        routes: the brokers of each topic.
        client_id: the instance's client id.
        timeout_ms: deadline of one heartbeat or unregister call.
    """

    name: ClassVar[str] = "client-heartbeat"
    expected_errors: ClassVar[tuple[type[BaseException], ...]] = (MqError,)

    def __init__(self, api: ClientApi, routes: RouteCache, client_id: str, *, interval_ms: int,
                 timeout_ms: int) -> None:
        super().__init__(interval_ms, on_crash=self._crashed)
        self._api = api
        self._routes = routes
        self.client_id = client_id
        self.timeout_ms = timeout_ms
        self.consumers: dict[str, RegisteredConsumer] = {}
        self._lock = asyncio.Lock()
        self._watchers: dict[str, asyncio.Task[None]] = {}
        self.heartbeats_ok = 0
        self.heartbeats_failed = 0
        self.notifications = 0

    def register(self, group: str, consumer: RegisteredConsumer) -> None:
        self.consumers[group] = consumer

    def forget(self, group: str) -> None:
        """Leave `group` out of later heartbeats (its consumer is shutting down)."""
        self.consumers.pop(group, None)

    def _crashed(self, err: BaseException) -> None:
        for consumer in list(self.consumers.values()):
            if consumer.on_crash is not None:
                consumer.on_crash(err)

    async def tick(self) -> None:
        await self.send_heartbeat_to_all_brokers()

    def broker_addrs(self) -> list[str]:
        """Every address (masters and slaves) in the routes of the registered groups' topics."""
        return self._addrs_of({topic for consumer in self.consumers.values() for topic in consumer.topics()})

    def _addrs_of(self, topics: Iterable[str]) -> list[str]:
        addrs: set[str] = set()
        for topic in topics:
            route = self._routes.route(topic)
            if route is not None:
                for bd in route.broker_datas:
                    addrs.update(bd.addrs.values())
        return sorted(addrs)

    async def send_heartbeat_to_all_brokers(self) -> int:
        """One heartbeat to every broker, in parallel; returns how many accepted it."""
        async with self._lock:
            if not self.consumers:
                return 0
            consumers = [consumer.consumer_data() for consumer in self.consumers.values()]
            addrs = self.broker_addrs()
            results = await asyncio.gather(*(self._heartbeat(addr, consumers) for addr in addrs))
            return sum(results)

    async def _heartbeat(self, addr: str, consumers: list[ConsumerData]) -> bool:
        try:
            await self._api.heartbeat(addr, self.client_id, consumers, self.timeout_ms)
        except MqError as err:
            self.heartbeats_failed += 1
            log.warning("heartbeat of %s to %s failed: %s", self.client_id, addr, err)
            return False
        self.heartbeats_ok += 1
        self._ensure_watcher(addr)
        return True

    # --- notifications ---------------------------------------------------------------------
    def _ensure_watcher(self, addr: str) -> None:
        task = self._watchers.get(addr)
        if task is None or task.done():
            self._watchers[addr] = asyncio.create_task(self._watch_routine(addr), name=f"notifications-{addr}")

    async def _watch_routine(self, addr: str) -> None:
        """Read one broker's notification stream until it ends; the next heartbeat re-opens it."""
        try:
            async for notice in self._api.notifications(addr, self.client_id):
                self.notifications += 1
                if isinstance(notice, OffsetReset):
                    self._reset(addr, notice)
                    continue
                log.info("%s: consumer ids of %s changed (from %s)", self.client_id, notice, addr)
                consumer = self.consumers.get(notice)
                if consumer is not None:
                    consumer.on_notification()
            log.info("notification stream from %s ended", addr)
        except MqError as err:
            log.info("notification stream from %s closed: %s", addr, err)

    def _reset(self, addr: str, notice: OffsetReset) -> None:
        consumer = self.consumers.get(notice.group)
        log.info("%s: offsets of %s on %s reset by %s: %s", self.client_id, notice.group, notice.topic, addr,
                 {f"{mq.broker_name}:{mq.queue_id}": offset for mq, offset in sorted(notice.offsets.items())})
        if consumer is None or consumer.on_reset is None:
            log.warning("%s: no consumer of %s here takes offset resets (a pull consumer reads the reset "
                        "offsets from the broker with its next offset query)", self.client_id, notice.group)
            return
        consumer.on_reset(notice)

    async def close_notifications(self) -> None:
        """End every notification stream (the brokers then forget this client's channel)."""
        tasks = list(self._watchers.values())
        self._watchers.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    @property
    def open_streams(self) -> list[str]:
        return sorted(addr for addr, task in self._watchers.items() if not task.done())

    # --- leaving ------------------------------------------------------------------------------
    async def unregister(self, group: str, topics: Iterable[str]) -> None:
        """UnregisterClient of `group` at every broker of `topics`, in parallel; failures are only logged."""
        async def one(addr: str) -> None:
            try:
                await self._api.unregister(addr, self.client_id, group, self.timeout_ms)
            except MqError as err:
                log.warning("unregistering %s from %s failed: %s", self.client_id, addr, err)

        async with self._lock:
            await asyncio.gather(*(one(addr) for addr in self._addrs_of(topics)))
