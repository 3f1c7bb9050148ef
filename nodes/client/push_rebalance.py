"""The push consumer's side of rebalance's two dependency protocols.

`PushRebalanceDeps` serves `rebalance.RebalanceDeps` (routes, the group's consumer list from one
random broker of the topic, queue-offset queries behind consume-from-where, starting pull loops,
messageQueueChanged) and journals the subscribed topics' route changes (`route` events: the
queues the client's route lists and the name server that answered) and `PushOrderlyLocks` serves `rebalance.OrderlyLocks` (queue locks through
the `QueueLocker`, the orderly service's consume lock). Both get their collaborators handed in
by the push consumer and run on its client loop; neither knows the consumer itself.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable, Sequence

from nodes.client.consume_orderly import ConsumeMessageOrderlyService
from nodes.client.consumer_state import ConsumerState
from nodes.client.instance import ClientInstance
from nodes.client.lock_service import QueueLocker
from nodes.client.offset_store import query_queue_offset
from nodes.client.process_queue import ProcessQueue
from nodes.client.pull_service import PullRequest
from nodes.client.rebalance import EventSink, StartKind
from nodes.client.routes import RouteSnapshot, subscribe_queues
from nodes.client.rpc.api import OffsetKind
from nodes.common import constants as c
from nodes.common.errors import MqError
from nodes.common.types import MessageQueue

log = logging.getLogger(__name__)


class PushOrderlyLocks:
    """The queue locks rebalance needs (`rebalance.OrderlyLocks`): the locker's and the orderly service's (loop)."""

    def __init__(self, locker: QueueLocker, consume: ConsumeMessageOrderlyService) -> None:
        self._locker = locker
        self._consume = consume

    async def lock(self, mq: MessageQueue, *, reason: str) -> int | None:
        return await self._locker.lock(mq, reason=reason)

    async def wait_consume_idle(self, pq: ProcessQueue, timeout_ms: int) -> bool:
        return await self._consume.wait_consume_idle(pq, timeout_ms)

    async def unlock(self, mq: MessageQueue, *, oneway: bool, reason: str) -> None:
        await self._locker.unlock(mq, oneway=oneway, reason=reason)

    def unlock_later(self, mq: MessageQueue, delay_ms: int) -> None:
        self._locker.unlock_later(mq, delay_ms)


class PushRebalanceDeps:
    """The I/O `RebalanceImpl` needs (loop).

    Args:
        instance: routes and the broker calls.
        state: the subscriptions (sub versions renewed on a change).
        dispatch: starts the pull loop of a newly owned queue (the pull service's).
        queues_changed: told the number of owned queues after a change (flow-control thresholds,
            a heartbeat now).
        consume_timestamp_ms: CONSUME_FROM_TIMESTAMP's timestamp.
        rpc_timeout_ms: deadline of a queue-offset query.
        on_event, client_id: where `route` events go, and the client they name.
        ignore_returned_queues: the test-only fault switch FAULT_REBALANCE_IGNORE_RETURNED.
    """

    def __init__(self, *, instance: ClientInstance, state: ConsumerState, dispatch: Callable[[PullRequest], None],
                 queues_changed: Callable[[int], Awaitable[None]], consume_timestamp_ms: int,
                 rpc_timeout_ms: int, rng: random.Random | None = None, on_event: EventSink | None = None,
                 client_id: str = "", ignore_returned_queues: bool = False) -> None:
        self._instance = instance
        self._state = state
        self._dispatch = dispatch
        self._queues_changed = queues_changed
        self.consume_timestamp_ms = consume_timestamp_ms
        self.rpc_timeout_ms = rpc_timeout_ms
        self._rng = rng or random.Random()
        self._on_event = on_event
        self._client_id = client_id
        self._ignore_returned = ignore_returned_queues
        self._kept_queues: dict[str, list[MessageQueue]] = {}  # the switch's queue lists, per topic

    # --- route journal ------------------------------------------------------------------
    def watch_routes(self) -> None:
        """Journal every later route change of a subscribed topic, and the routes known now."""
        if self._on_event is None:
            return
        self._instance.routes.add_listener(self._route_changed)
        for topic in sorted(self._state.subscriptions):
            route = self._instance.routes.route(topic)
            if route is not None:
                self._route_changed(topic, route)

    def unwatch_routes(self) -> None:
        self._instance.routes.remove_listener(self._route_changed)

    def _route_changed(self, topic: str, route: RouteSnapshot) -> None:
        if self._on_event is None or topic not in self._state.subscriptions:
            return
        self._on_event({"event": "route", "side": "client", "group": self._state.group, "client_id": self._client_id,
                        "topic": topic, "namesrv": self._instance.route_source,
                        "queues": [[mq.broker_name, mq.queue_id] for mq in subscribe_queues(topic, route)],
                        "brokers": {bd.broker_name: {str(i): a for i, a in sorted(bd.addrs.items())}
                                    for bd in route.broker_datas}})

    # --- RebalanceDeps ------------------------------------------------------------------
    async def subscribe_queues(self, topic: str) -> list[MessageQueue] | None:
        routes = self._instance.routes
        route = routes.route(topic)
        if route is None:
            try:
                await routes.update_topic(topic)
            except MqError as err:
                log.debug("route of %s: %s", topic, err)
                return None
            route = routes.route(topic)
        if route is None:
            return None
        queues = subscribe_queues(topic, route)
        if self._ignore_returned:  # the bug: a queue once gone from the route stays gone
            kept = self._kept_queues.get(topic)
            queues = queues if kept is None else [mq for mq in queues if mq in kept]
            self._kept_queues[topic] = queues
        return queues

    async def consumer_ids(self, topic: str) -> list[str] | None:
        """findConsumerIdList: GetConsumerList from one random broker of the topic (master if it has one)."""
        group = self._state.group
        route = self._instance.routes.route(topic)
        brokers = [bd for bd in route.broker_datas if bd.addrs] if route is not None else []
        if not brokers:
            return None
        bd = self._rng.choice(brokers)
        addr = bd.addrs.get(c.MASTER_ID) or self._rng.choice(sorted(bd.addrs.values()))
        try:
            cids = await self._instance.api.consumer_list(addr, group, c.CONSUMER_LIST_TIMEOUT_MS)
        except MqError as err:
            log.warning("consumer list of %s from %s failed: %s", group, addr, err)
            return None
        if self._on_event is not None:
            # which broker answered matters: brokers may disagree on the members (one that expired a
            # silent client, one that still hears from it), and a rebalance follows the one it asked
            self._on_event({"event": "consumer-ids", "side": "client", "group": group, "client_id": self._client_id,
                            "topic": topic, "broker_name": bd.broker_name, "addr": addr, "cids": list(cids)})
        return cids

    async def queue_offset(self, mq: MessageQueue, kind: StartKind) -> int:
        if kind is StartKind.MAX_OFFSET:
            return await query_queue_offset(self._instance, mq, OffsetKind.MAX, timeout_ms=self.rpc_timeout_ms)
        return await query_queue_offset(self._instance, mq, OffsetKind.BY_TIMESTAMP,
                                        timestamp_ms=self.consume_timestamp_ms, timeout_ms=self.rpc_timeout_ms)

    def dispatch_pull(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int, *,
                      resume_floor: int | None = None) -> None:
        self._dispatch(PullRequest(mq, pq, next_offset, resume_floor=resume_floor))

    async def message_queue_changed(self, topic: str, mq_all: Sequence[MessageQueue],
                                    mq_divided: Sequence[MessageQueue]) -> None:
        """RebalancePushImpl#messageQueueChanged: new sub version, thresholds, heartbeat now."""
        self._state.renew_sub_version(topic)
        await self._queues_changed(len(self._state.process_queue_table))
