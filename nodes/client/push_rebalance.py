"""The push consumer's side of rebalance's two dependency protocols.

`PushRebalanceDeps` serves `rebalance.RebalanceDeps` (routes, the group's consumer list from one
random broker of the topic, queue-offset queries behind consume-from-where, starting pull loops,
messageQueueChanged) and `PushOrderlyLocks` serves `rebalance.OrderlyLocks` (queue locks through
the consumer's `QueueLocker`, the orderly service's consume lock). Both are thin adapters over the
`PushConsumer` that owns the parts; they run on its client loop.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from nodes.client.consume_orderly import ConsumeMessageOrderlyService
from nodes.client.offset_store import query_queue_offset
from nodes.client.process_queue import ProcessQueue
from nodes.client.pull_service import PullRequest
from nodes.client.rebalance import StartKind
from nodes.client.routes import subscribe_queues
from nodes.client.rpc.api import OffsetKind
from nodes.common import constants as c
from nodes.common.errors import MqError
from nodes.common.types import MessageQueue

if TYPE_CHECKING:
    from nodes.client.push_consumer import PushConsumer

log = logging.getLogger(__name__)


class PushOrderlyLocks:
    """The queue locks rebalance needs (`rebalance.OrderlyLocks`), served by the push consumer (loop)."""

    def __init__(self, consumer: PushConsumer) -> None:
        self._c = consumer

    async def lock(self, mq: MessageQueue, *, reason: str) -> int | None:
        assert self._c._locker is not None
        return await self._c._locker.lock(mq, reason=reason)

    async def wait_consume_idle(self, pq: ProcessQueue, timeout_ms: int) -> bool:
        consume = self._c._consume
        assert isinstance(consume, ConsumeMessageOrderlyService)
        return await consume.wait_consume_idle(pq, timeout_ms)

    async def unlock(self, mq: MessageQueue, *, oneway: bool, reason: str) -> None:
        assert self._c._locker is not None
        await self._c._locker.unlock(mq, oneway=oneway, reason=reason)

    def unlock_later(self, mq: MessageQueue, delay_ms: int) -> None:
        assert self._c._locker is not None
        self._c._locker.unlock_later(mq, delay_ms)

    def holds_lock(self, pq: ProcessQueue) -> bool:
        assert self._c._locker is not None
        return self._c._locker.holds(pq)


class PushRebalanceDeps:
    """The I/O `RebalanceImpl` needs, served by the push consumer (loop)."""

    def __init__(self, consumer: PushConsumer) -> None:
        self._c = consumer

    async def subscribe_queues(self, topic: str) -> list[MessageQueue] | None:
        routes = self._c._instance.routes
        route = routes.route(topic)
        if route is None:
            try:
                await routes.update_topic(topic)
            except MqError as err:
                log.debug("route of %s: %s", topic, err)
                return None
            route = routes.route(topic)
        return subscribe_queues(topic, route) if route is not None else None

    async def consumer_ids(self, topic: str) -> list[str] | None:
        """findConsumerIdList: GetConsumerList from one random broker of the topic (master if it has one)."""
        consumer = self._c
        route = consumer._instance.routes.route(topic)
        brokers = [bd for bd in route.broker_datas if bd.addrs] if route is not None else []
        if not brokers:
            return None
        bd = consumer._rng.choice(brokers)
        addr = bd.addrs.get(c.MASTER_ID) or consumer._rng.choice(sorted(bd.addrs.values()))
        try:
            return await consumer._instance.api.consumer_list(addr, consumer.group, c.CONSUMER_LIST_TIMEOUT_MS)
        except MqError as err:
            log.warning("consumer list of %s from %s failed: %s", consumer.group, addr, err)
            return None

    async def queue_offset(self, mq: MessageQueue, kind: StartKind) -> int:
        consumer = self._c
        if kind is StartKind.MAX_OFFSET:
            return await query_queue_offset(consumer._instance, mq, OffsetKind.MAX,
                                            timeout_ms=consumer.timing.rpc_timeout_ms)
        return await query_queue_offset(consumer._instance, mq, OffsetKind.BY_TIMESTAMP,
                                        timestamp_ms=consumer.consume_timestamp_ms,
                                        timeout_ms=consumer.timing.rpc_timeout_ms)

    def dispatch_pull(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int, *,
                      resume_floor: int | None = None) -> None:
        self._c._pull.execute_pull_request_immediately(PullRequest(mq, pq, next_offset, resume_floor=resume_floor))

    async def message_queue_changed(self, topic: str, mq_all: Sequence[MessageQueue],
                                    mq_divided: Sequence[MessageQueue]) -> None:
        """RebalancePushImpl#messageQueueChanged: new sub version, thresholds, heartbeat now."""
        consumer = self._c
        subscription = consumer._rebalance.subscriptions.get(topic)
        if subscription is not None:
            subscription.sub_version = consumer._clock.wall_ms()
        consumer._thresholds = consumer.flow_thresholds.for_queue_count(len(consumer._rebalance.process_queue_table))
        await consumer._heartbeat.send_heartbeat_to_all_brokers()
