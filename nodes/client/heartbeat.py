"""Client heartbeats, membership notifications and the client id (reference §13).

Owns: the client id (`ip@instanceName`, where CLUSTERING replaces the default instance name
by `pid#nanos`), the periodic heartbeat to every broker of the consumer's topics (RocketMQ
`sendHeartbeatToAllBrokerWithLock`), one `ConsumerManager.Notifications` stream per broker
address (a NOTIFY_CONSUMER_IDS_CHANGED for our group wakes rebalance; the stream's end is the
broker's "channel closed" for this client), and unregistering on shutdown. Does not decide
anything about queues; what the heartbeat carries comes from the facade.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, ClassVar

from nodes.client.msg_id import local_ipv4
from nodes.client.rpc.api import ConsumerData
from nodes.common import constants as c
from nodes.common.errors import MqError
from nodes.common.service import CrashHandler, Service
from nodes.common.types import MessageModel

if TYPE_CHECKING:
    from nodes.client.instance import ClientInstance

log = logging.getLogger(__name__)


def make_client_id(instance_name: str, message_model: MessageModel, *, ip: str | None = None,
                   pid: int | None = None, nanos: int | None = None) -> str:
    """`ip@instanceName`; in CLUSTERING the default instance name becomes `pid#nanoTime`.

    BROADCASTING keeps the instance name, so a restarted broadcasting consumer finds its local
    offset file again (the file lives under the client id).
    """
    name = instance_name
    if message_model is MessageModel.CLUSTERING and instance_name == c.CLIENT_INSTANCE_NAME_DEFAULT:
        name = f"{os.getpid() if pid is None else pid}#{time.monotonic_ns() if nanos is None else nanos}"
    return f"{local_ipv4() if ip is None else ip}@{name}"


class HeartbeatService(Service):
    """Heartbeats every `client_heartbeat_ms` and keeps the notification streams open.

    Args:
        instance: connections and routes.
        client_id: this client's id.
        consumer_data: builds the ConsumerData list of one heartbeat (called on the loop).
        topics: the topics whose brokers get heartbeats (the subscribed ones, retry included).
        on_notification: called with the group named by a NOTIFY_CONSUMER_IDS_CHANGED.
        timeout_ms: deadline of one heartbeat or unregister call.
    """

    name: ClassVar[str] = "client-heartbeat"
    expected_errors: ClassVar[tuple[type[BaseException], ...]] = (MqError,)

    def __init__(self, instance: ClientInstance, client_id: str, *,
                 consumer_data: Callable[[], list[ConsumerData]], topics: Callable[[], Iterable[str]],
                 on_notification: Callable[[str], None], interval_ms: int, timeout_ms: int,
                 on_crash: CrashHandler | None = None) -> None:
        super().__init__(interval_ms, on_crash=on_crash)
        self._instance = instance
        self.client_id = client_id
        self._consumer_data = consumer_data
        self._topics = topics
        self._on_notification = on_notification
        self.timeout_ms = timeout_ms
        self._lock = asyncio.Lock()
        self._watchers: dict[str, asyncio.Task[None]] = {}
        self.heartbeats_ok = 0
        self.heartbeats_failed = 0
        self.notifications = 0

    async def tick(self) -> None:
        await self.send_heartbeat_to_all_brokers()

    def broker_addrs(self) -> list[str]:
        """Every address (masters and slaves) in the routes of the consumer's topics."""
        addrs: set[str] = set()
        for topic in self._topics():
            route = self._instance.routes.route(topic)
            if route is None:
                continue
            for bd in route.broker_datas:
                addrs.update(bd.addrs.values())
        return sorted(addrs)

    async def send_heartbeat_to_all_brokers(self) -> int:
        """One heartbeat to every broker, in parallel; returns how many accepted it."""
        async with self._lock:
            consumers = self._consumer_data()
            addrs = self.broker_addrs()
            results = await asyncio.gather(*(self._heartbeat(addr, consumers) for addr in addrs))
            return sum(results)

    async def _heartbeat(self, addr: str, consumers: list[ConsumerData]) -> bool:
        try:
            await self._instance.api.heartbeat(addr, self.client_id, consumers, self.timeout_ms)
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
            async for group in self._instance.api.notifications(addr, self.client_id):
                self.notifications += 1
                log.info("%s: consumer ids of %s changed (from %s)", self.client_id, group, addr)
                self._on_notification(group)
            log.info("notification stream from %s ended", addr)
        except MqError as err:
            log.info("notification stream from %s closed: %s", addr, err)

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
    async def unregister(self, group: str) -> None:
        """UnregisterClient at every broker, in parallel; failures are only logged."""
        async def one(addr: str) -> None:
            try:
                await self._instance.api.unregister(addr, self.client_id, group, self.timeout_ms)
            except MqError as err:
                log.warning("unregistering %s from %s failed: %s", self.client_id, addr, err)

        async with self._lock:
            await asyncio.gather(*(one(addr) for addr in self.broker_addrs()))
