"""PushConsumer: subscribe, register a listener, start; messages arrive on a thread pool.

The facade of RocketMQ's DefaultMQPushConsumer for concurrent listeners.
Owns argument checks, the wiring of the parts and the lifecycle (start / shutdown order).

    instance.ClientInstance         shared per client id: routes, RPCs, heartbeats (heartbeat.*)
    rebalance.RebalanceImpl/Service owned queues, consume-from-where, subscription table
    consumer_state.ConsumerState    subscriptions, owned queues, the lock-validity rule
    push_rebalance.*                what rebalance asks for: consumer list, offsets, locks, pull loops
    pull_service.PullService        one long-polling pull loop per owned queue
    consume_concurrently.*          the listener pool, ack index, offsets, expired messages
    consume_orderly.*               orderly listeners: one call at a time per locked queue
    lock_service.QueueLocker        orderly queue locks on the masters (lock, renew, unlock)
    send_back.MessageSender         failed messages back to the broker (or the internal producer)
    offset_store.*                  remote (CLUSTERING) or local file (BROADCASTING) offsets

Everything but the listener runs on the `ClientInstance` loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from nodes.client.allocate import AllocateAveragely, AllocateStrategy
from nodes.client.consume_concurrently import CleanExpiredService, ConsumeMessageConcurrentlyService, Listener
from nodes.client.consume_orderly import (
    ConsumeMessageOrderlyService,
    OrderlyListener,
)
from nodes.client.consumer_state import ConsumerState
from nodes.client.flow_control import FlowThresholds
from nodes.client.heartbeat import RegisteredConsumer
from nodes.client.instance import (
    CLIENT_MANAGER,
    ROLE_CONSUMER,
    SYNC_WAIT_SLACK_S,
    make_client_id,
    validate_group,
)
from nodes.client.lock_service import LockRenewalService, QueueLocker
from nodes.client.offset_reset import OffsetResets
from nodes.client.offset_store import (
    ConsumerOffsetPersistService,
    LocalFileOffsetStore,
    OffsetStore,
    RemoteBrokerOffsetStore,
)
from nodes.client.process_queue import ProcessQueue
from nodes.client.pull_api import PullApi
from nodes.client.pull_service import PullService
from nodes.client.push_rebalance import PushOrderlyLocks, PushRebalanceDeps
from nodes.client.rebalance import RebalanceImpl, RebalanceService
from nodes.client.rpc.api import ConsumerData
from nodes.client.send_back import MessageSender
from nodes.common import constants as c
from nodes.common.clock import SYSTEM_CLOCK, Clock
from nodes.common.config import Timing
from nodes.common.errors import ClientStateError, InvalidArgumentError, InvalidMessageError, MqError
from nodes.common.service import CrashHandler, Lifecycle, LifecycleState, Service
from nodes.common.types import (
    ConsumeFromWhere,
    MessageExt,
    MessageModel,
    MessageQueue,
    validate_topic,
)

log = logging.getLogger(__name__)

DEFAULT_OFFSET_STORE_DIR = Path.home() / ".mqlab_offsets"  # rocketmq.client.localOffsetStoreDir
EventSink = Callable[[dict[str, Any]], None]


def _check_int(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidArgumentError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    return value


class PushConsumer:
    """A RocketMQ-style push consumer with a concurrent or an orderly listener.

    Args:
        namesrv_addr: "host:port" of the name server (several separated by ';').
        group: the consumer group.
        message_model: CLUSTERING (queues shared by the group) or BROADCASTING (every consumer
            gets every message; offsets in a local file; failed messages are dropped).
        allocate: the queue allocation strategy (CLUSTERING).
        consume_from_where: where a queue with no committed offset starts.

    Keyword options (RocketMQ's names in brackets): `timing` (default: RocketMQ's at the cluster's
    time scale, which the name server tells at start()); `dial_overrides`;
    `consume_thread_min` [consumeThreadMin]; `consume_message_batch_max_size`;
    `pull_batch_size`; `max_reconsume_times` (-1 = 16); `consume_timestamp_ms` (for
    CONSUME_FROM_TIMESTAMP; default half an hour ago); `instance_name`; `offset_store_dir`
    (BROADCASTING files); `flow_thresholds`; `post_subscription_when_pull`;
    `await_termination_ms` (how long shutdown lets running listener calls finish; RocketMQ's
    default 0); `suspend_current_queue_time_ms` [suspendCurrentQueueTimeMillis] (orderly: how long
    a suspended queue waits; default `timing.suspend_current_queue_ms`); `on_event` (rebalance,
    offset-commit, pull-route, send-back and, orderly, lock events, called on the client's loop
    thread); `on_crash` (an unexpected error in a background service); `fault_switches` (tests
    only: names from constants.CONSUMER_FAULT_SWITCHES, each breaking one rule on purpose).
    """

    def __init__(self, namesrv_addr: str, group: str, message_model: MessageModel = MessageModel.CLUSTERING,
                 allocate: AllocateStrategy = AllocateAveragely(),
                 consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, *,
                 timing: Timing | None = None, dial_overrides: Mapping[str, str] | None = None,
                 consume_thread_min: int = c.CONSUME_THREAD_MIN,
                 consume_message_batch_max_size: int = c.CONSUME_MESSAGE_BATCH_MAX_SIZE,
                 pull_batch_size: int = c.PULL_BATCH_SIZE, max_reconsume_times: int = -1,
                 consume_timestamp_ms: int | None = None, instance_name: str = c.CLIENT_INSTANCE_NAME_DEFAULT,
                 offset_store_dir: str | Path | None = None, flow_thresholds: FlowThresholds | None = None,
                 post_subscription_when_pull: bool = False, await_termination_ms: int = 0,
                 on_event: EventSink | None = None, on_crash: CrashHandler | None = None,
                 clock: Clock = SYSTEM_CLOCK, suspend_current_queue_time_ms: int | None = None,
                 fault_switches: Collection[str] = ()) -> None:
        validate_group(group, "consumer")
        unknown = sorted(set(fault_switches) - set(c.CONSUMER_FAULT_SWITCHES))
        if unknown:
            raise InvalidArgumentError(f"unknown fault switch(es) {unknown}; known: {sorted(c.CONSUMER_FAULT_SWITCHES)}")
        self.fault_switches = frozenset(fault_switches)
        if not isinstance(message_model, MessageModel):
            raise InvalidArgumentError(f"message_model must be a MessageModel, got {message_model!r}")
        if not isinstance(consume_from_where, ConsumeFromWhere):
            raise InvalidArgumentError(f"consume_from_where must be a ConsumeFromWhere, got {consume_from_where!r}")
        if not callable(getattr(allocate, "allocate", None)):
            raise InvalidArgumentError(f"allocate must be an allocation strategy (nodes.client.allocate), got {allocate!r}")
        self.consume_thread_min = _check_int("consume_thread_min", consume_thread_min, 1, 1000)
        self.consume_message_batch_max_size = _check_int(
            "consume_message_batch_max_size", consume_message_batch_max_size, 1, 1024)
        self.pull_batch_size = _check_int("pull_batch_size", pull_batch_size, 1, c.PULL_BATCH_COUNT_MAX)
        self.max_reconsume_times = _check_int("max_reconsume_times", max_reconsume_times, -1, 2**31 - 1)
        self.await_termination_ms = _check_int("await_termination_ms", await_termination_ms, 0, 2**31 - 1)
        self.suspend_current_queue_time_ms = None if suspend_current_queue_time_ms is None else _check_int(
            "suspend_current_queue_time_ms", suspend_current_queue_time_ms, 0, 2**31 - 1)
        if not isinstance(instance_name, str) or not instance_name:
            raise InvalidArgumentError(f"instance_name must be a non-empty string, got {instance_name!r}")
        self.group = group
        self.message_model = message_model
        self.allocate = allocate
        self.consume_from_where = consume_from_where
        self.instance_name = instance_name
        self.offset_store_dir = Path(offset_store_dir) if offset_store_dir is not None else DEFAULT_OFFSET_STORE_DIR
        self.flow_thresholds = flow_thresholds or FlowThresholds()
        self.post_subscription_when_pull = post_subscription_when_pull
        self._clock = clock
        self.consume_timestamp_ms = (clock.wall_ms() - c.CONSUME_TIMESTAMP_BACK_MS
                                     if consume_timestamp_ms is None else consume_timestamp_ms)
        self._on_event = on_event
        self._on_crash = on_crash
        self.client_id = make_client_id(instance_name, message_model)
        self._instance = CLIENT_MANAGER.instance(self.client_id, namesrv_addr, name=f"push-consumer-{group}",
                                                 timing=timing, dial_overrides=dial_overrides)
        self.timing = self._instance.timing
        self.lifecycle = LifecycleState(f"push consumer {group}", clock)
        self._subscriptions: dict[str, str] = {}
        self._listener: Listener | OrderlyListener | None = None
        self._orderly = False
        self._locker: QueueLocker | None = None
        self._thresholds = self.flow_thresholds
        self._state = ConsumerState(group=group, message_model=message_model, clock=clock,
                                    client_lock_lease_ms=self.timing.client_lock_lease_ms)
        self._sender: MessageSender | None = None
        self._services: list[Service] = []

    # --- configuration ------------------------------------------------------------------
    @property
    def effective_max_reconsume_times(self) -> int:
        """-1 means 16 for a concurrent listener, unbounded (Integer.MAX_VALUE) for an orderly one."""
        if self.max_reconsume_times != -1:
            return self.max_reconsume_times
        return c.ORDERLY_MAX_RECONSUME_TIMES_DEFAULT if self._orderly else c.MAX_RECONSUME_TIMES_DEFAULT

    @property
    def orderly(self) -> bool:
        return self._orderly

    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Consume `topic`'s messages whose tag matches `expression` ("*" or "TagA || TagB")."""
        if not isinstance(topic, str):
            raise InvalidArgumentError(f"topic must be a string, got {type(topic).__name__}")
        try:
            validate_topic(topic)
        except InvalidMessageError as err:
            raise InvalidArgumentError(str(err)) from None
        if expression is None:
            expression = "*"
        if not isinstance(expression, str):
            raise InvalidArgumentError(f"expression must be a tag expression like 'a || b' or '*', got {expression!r}")
        self._subscriptions[topic] = expression
        if self._instance.running and self.lifecycle.state == Lifecycle.RUNNING:
            self._instance.run(self._asubscribe(topic, expression), self._rpc_budget_s(), f"subscribe {topic}")

    async def _asubscribe(self, topic: str, expression: str) -> None:
        self._state.subscribe(topic, expression)
        try:
            await self._instance.routes.update_topic(topic)
        except MqError as err:
            log.warning("route of %s: %s", topic, err)
        await self._heartbeat.send_heartbeat_to_all_brokers()
        self._rebalance_service.wakeup()

    def register_listener(self, listener: Listener) -> None:
        """`listener(msgs, ctx) -> ConsumeConcurrentlyStatus`, called on the consume threads.

        An exception or any other return value counts as RECONSUME_LATER.
        """
        if not callable(listener):
            raise InvalidArgumentError(f"listener must be callable as listener(msgs, ctx), got {listener!r}")
        if self.lifecycle.state != Lifecycle.INIT:
            raise ClientStateError("register the listener before start()")
        self._listener = listener
        self._orderly = False

    def register_orderly_listener(self, listener: OrderlyListener) -> None:
        """`listener(msgs, ctx) -> ConsumeOrderlyStatus`: one call at a time per queue, in queue order.

        In CLUSTERING each queue is locked on its master first. An exception or any other
        return value counts as SUSPEND_CURRENT_QUEUE_A_MOMENT (the same messages come back first).
        """
        if not callable(listener):
            raise InvalidArgumentError(f"listener must be callable as listener(msgs, ctx), got {listener!r}")
        if self.lifecycle.state != Lifecycle.INIT:
            raise ClientStateError("register the listener before start()")
        self._listener = listener
        self._orderly = True

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        if self.lifecycle.state != Lifecycle.INIT:
            raise ClientStateError(f"push consumer {self.group} was already started ({self.lifecycle.state.name})")
        if self._listener is None:
            raise ClientStateError("no listener: call register_listener(fn) or register_orderly_listener(fn) "
                                   "before start()")
        if self._orderly:
            t = self.timing
            if not t.lock_renew_interval_ms < t.client_lock_lease_ms < t.broker_lock_lease_ms:
                raise InvalidArgumentError(
                    "orderly consumption needs timing.lock_renew_interval_ms < client_lock_lease_ms < "
                    f"broker_lock_lease_ms, got {t.lock_renew_interval_ms} / {t.client_lock_lease_ms} / "
                    f"{t.broker_lock_lease_ms}")
        if not self._subscriptions:
            raise ClientStateError("no subscription: call subscribe(topic) before start()")
        self.lifecycle.transition(Lifecycle.STARTING)
        try:
            self._instance.attach(ROLE_CONSUMER, self.group)
        except BaseException:
            self.lifecycle.transition(Lifecycle.FAILED)
            raise
        self.timing = self._instance.timing  # the cluster's, when none was given (cluster_timing)
        self._state.client_lock_lease_ms = self.timing.client_lock_lease_ms
        try:
            self._instance.run(self._astart(), self._rpc_budget_s() * 2 + 10, f"start push consumer {self.group}")
        except BaseException:
            self.lifecycle.transition(Lifecycle.FAILED)
            self._instance.detach(ROLE_CONSUMER, self.group)
            raise
        self.lifecycle.transition(Lifecycle.RUNNING)
        log.info("push consumer %s started as %s (%s, %s)", self.group, self.client_id, self.message_model.value,
                 self.allocate.name)

    def _rpc_budget_s(self) -> float:
        return self.timing.rpc_timeout_ms / 1000 + SYNC_WAIT_SLACK_S

    async def _astart(self) -> None:
        timing = self.timing
        instance = self._instance
        commit_pulled = c.FAULT_COMMIT_PULLED_OFFSET in self.fault_switches
        if self.message_model is MessageModel.CLUSTERING:
            self._offset_store: OffsetStore = RemoteBrokerOffsetStore(
                instance, self.group, timeout_ms=timing.query_offset_timeout_ms, on_event=self._on_event,
                client_id=self.client_id, commit_pulled_offset=commit_pulled, may_commit=self._state.may_commit,
                clock=self._clock)
        else:
            self._offset_store = LocalFileOffsetStore(self.offset_store_dir, self.client_id, self.group,
                                                      on_event=self._on_event, commit_pulled_offset=commit_pulled)
        self._offset_store.load()
        orderly = self._orderly
        state = self._state
        state.orderly = orderly
        state.copy_subscription(self._subscriptions)
        if orderly and self.message_model is MessageModel.CLUSTERING:
            self._locker = QueueLocker(instance, state, self.client_id, on_event=self._on_event,
                                       on_regained=lambda mq, pq, sent_ms: self._rebalance.resume_regained(
                                           mq, pq, sent_ms),
                                       renew_gives_up=c.FAULT_RENEW_GIVES_UP in self.fault_switches)
        self._sender = MessageSender(instance, self.group, max_reconsume_times=self.effective_max_reconsume_times,
                                     on_event=self._on_event)
        assert self._listener is not None
        self._consume: ConsumeMessageConcurrentlyService | ConsumeMessageOrderlyService
        if orderly:
            locker = self._locker
            self._consume = ConsumeMessageOrderlyService(
                state=state, listener=self._listener,
                offset_store=self._offset_store, lock_one=self._lock_one, send_back=self._sender.dead_letter_orderly,
                timing=timing, thread_count=self.consume_thread_min,
                batch_max_size=self.consume_message_batch_max_size, max_reconsume_times=self.max_reconsume_times,
                suspend_ms=self.suspend_current_queue_time_ms,
                on_lock_expired=locker.note_expired if locker is not None else None,
                take_newest_first=c.FAULT_ORDERLY_TAKE_NEWEST in self.fault_switches)
        else:
            self._consume = ConsumeMessageConcurrentlyService(
                group=self.group, listener=self._listener, message_model=self.message_model,
                offset_store=self._offset_store, send_back=self._sender.send_back, clock=self._clock,
                thread_count=self.consume_thread_min, batch_max_size=self.consume_message_batch_max_size,
                resubmit_delay_ms=timing.consume_resubmit_delay_ms, consume_timeout_ms=timing.consume_timeout_ms,
                redeliver_times=(c.FAULT_REDELIVER_TIMES
                                 if c.FAULT_REDELIVER_CONSUMED_BATCH in self.fault_switches else 0),
                skip_every_requests=(c.FAULT_ACK_UNHANDED_EVERY
                                     if c.FAULT_ACK_UNHANDED_REQUEST in self.fault_switches else 0))
        orderly_locks = None
        if self._locker is not None:
            assert isinstance(self._consume, ConsumeMessageOrderlyService)
            orderly_locks = PushOrderlyLocks(self._locker, self._consume)
        deps = PushRebalanceDeps(
            instance=instance, state=state, dispatch=lambda request: self._pull.execute_pull_request_immediately(request),
            queues_changed=self._queues_changed, consume_timestamp_ms=self.consume_timestamp_ms,
            rpc_timeout_ms=timing.rpc_timeout_ms, on_event=self._on_event, client_id=self.client_id,
            ignore_returned_queues=c.FAULT_REBALANCE_IGNORE_RETURNED in self.fault_switches)
        self._rebalance_deps = deps
        deps.watch_routes()
        self._rebalance = RebalanceImpl(
            state=state, client_id=self.client_id, allocate=self.allocate,
            consume_from_where=self.consume_from_where, offset_store=self._offset_store, deps=deps,
            pull_max_idle_ms=timing.pull_max_idle_ms, on_event=self._on_event, orderly=orderly_locks,
            consume_lock_try_ms=timing.consume_lock_try_ms, unlock_delay_ms=timing.unlock_delay_ms)
        self._consume.start()
        self._pull = PullService(
            api=PullApi(instance, self.group, self._routing_event, client_id=self.client_id,
                        ignore_pull_suggestion=c.FAULT_IGNORE_PULL_SUGGESTION in self.fault_switches),
            state=state, offset_store=self._offset_store, submit=self._submit_concurrently,
            remove_process_queue=self._rebalance.remove_process_queue, thresholds=lambda: self._thresholds,
            message_model=self.message_model, timing=timing, clock=self._clock,
            pull_batch_size=self.pull_batch_size, post_subscription=self.post_subscription_when_pull,
            orderly_submit=self._consume.submit_consume_request if isinstance(
                self._consume, ConsumeMessageOrderlyService) else None,
            compute_pull_from_where=self._rebalance.compute_pull_from_where if orderly else None,
            on_pulled=self._offset_store.note_pulled if commit_pulled else None)
        self._rebalance_service = RebalanceService(self._rebalance, timing.rebalance_interval_ms, on_crash=self._on_crash)
        self._resets = OffsetResets(self._rebalance, self.client_id, self._emit)
        self._heartbeat = await instance.register_consumer(self.group, RegisteredConsumer(
            consumer_data=self._consumer_data, topics=state.topics,
            on_notification=self._rebalance_service.wakeup, on_crash=self._on_crash, on_reset=self._resets.apply))
        for topic in state.topics():
            try:
                await instance.routes.update_topic(topic)
            except MqError as err:
                log.warning("route of %s: %s", topic, err)
        await self._heartbeat.send_heartbeat_to_all_brokers()
        self._services = [
            ConsumerOffsetPersistService(self._offset_store, state.queues_to_persist,
                                         timing.consumer_offset_persist_ms, timing.consumer_offset_persist_first_ms,
                                         on_crash=self._on_crash),
        ]
        if isinstance(self._consume, ConsumeMessageConcurrentlyService):  # cleanExpiredMsg skips orderly queues
            self._services.append(CleanExpiredService(self._consume, lambda: state.process_queue_table,
                                                      timing.consume_timeout_ms, on_crash=self._on_crash))
        if self._locker is not None:  # lockMQPeriodically
            self._services.append(LockRenewalService(self._locker, timing.lock_renew_interval_ms,
                                                     timing.lock_renew_first_ms, on_crash=self._on_crash))
        self._services.append(self._rebalance_service)  # first round at once: rebalanceImmediately
        for service in self._services:
            service.start()

    def shutdown(self) -> None:
        """Stop pulling, let running listener calls finish (`await_termination_ms`), persist offsets,
        unregister from the brokers, close everything. Idempotent."""
        state = self.lifecycle.state
        if state in (Lifecycle.STOPPING, Lifecycle.STOPPED):
            return
        if state in (Lifecycle.INIT, Lifecycle.FAILED):
            self.lifecycle.transition(Lifecycle.STOPPED)
            return
        self.lifecycle.transition(Lifecycle.STOPPING)
        budget_s = self.await_termination_ms / 1000 + 3 * self._rpc_budget_s() + 5
        try:
            self._instance.run(self._ashutdown(), budget_s, f"shutdown push consumer {self.group}")
        except (MqError, TimeoutError) as err:
            log.warning("push consumer %s did not shut down cleanly: %s", self.group, err)
        finally:
            self._instance.detach(ROLE_CONSUMER, self.group)
            if self._sender is not None:
                self._sender.close()
            self.lifecycle.transition(Lifecycle.STOPPED)

    async def _ashutdown(self) -> None:
        for service in self._services:
            await service.stop()
        await self._resets.close()
        await self._pull.stop()
        await self._consume.shutdown(self.await_termination_ms)
        # persistConsumerOffset. RocketMQ unlocks an orderly consumer's queues first; here the
        # offsets are committed while the locks are still held (a queue whose lock is not valid
        # commits nothing), then the queues are unlocked: no commit after another client may own them
        owned = list(self._state.process_queue_table)
        await self._offset_store.persist_all(owned)
        if self._locker is not None:
            await self._locker.unlock_all()
            await self._locker.close()
        self._rebalance.drop_all()
        await self._rebalance.close()
        self._rebalance_deps.unwatch_routes()
        await self._instance.unregister_consumer(self.group, self._state.topics())

    def __enter__(self) -> PushConsumer:
        if self.lifecycle.state == Lifecycle.INIT:
            self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    # --- observation ------------------------------------------------------------------------
    def fetch_subscribe_message_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's readable queues, fresh from the name server (needs a started consumer).

        Raises:
            RouteNotFoundError: the topic has no route.
        """
        if not self._started():
            raise ClientStateError("fetch_subscribe_message_queues needs a started consumer; call start() first")
        budget_s = self._rpc_budget_s() * len(self._instance.namesrv_addrs)
        return self._instance.run(self._instance.routes.subscribe_info(topic, refresh=True), budget_s,
                                  f"fetch_subscribe_message_queues({topic})")

    def _started(self) -> bool:
        """Started and not yet shut down (the instance may be shared: its own state is not enough)."""
        return self.lifecycle.state in (Lifecycle.RUNNING, Lifecycle.STOPPING) and self._instance.running

    def owned_queues(self) -> list[MessageQueue]:
        """The queues this consumer holds now (all topics, the retry topic included), sorted."""
        if not self._started():
            return []
        return self._instance.run(self._aowned(), self._rpc_budget_s(), "owned_queues")

    async def _aowned(self) -> list[MessageQueue]:
        return self._state.owned_queues()

    def describe(self) -> dict[str, Any]:
        """A snapshot for status lines: owned queues, caches, offsets, counters."""
        if not self._instance.running or self.lifecycle.state != Lifecycle.RUNNING:
            return {"client_id": self.client_id, "state": self.lifecycle.state.name}
        return self._instance.run(self._adescribe(), self._rpc_budget_s(), "describe")

    async def _adescribe(self) -> dict[str, Any]:
        table = self._state.process_queue_table
        offsets = self._offset_store.offsets()
        return {
            "client_id": self.client_id, "state": self.lifecycle.state.name, "group": self.group,
            "model": self.message_model.value, "allocate": self.allocate.name,
            "queues": [{"topic": mq.topic, "broker_name": mq.broker_name, "queue_id": mq.queue_id,
                        "cached": pq.msg_count, "offset": offsets.get(mq, -1), "locked": pq.locked,
                        "dropped": pq.dropped} for mq, pq in sorted(table.items())],
            "orderly": self._orderly,
            "rebalance": {"rounds": self._rebalance.stats.rounds, "changes": self._rebalance.stats.changes},
            "pull": vars(self._pull.stats).copy(),
            "consume": {k: v for k, v in vars(self._consume.stats).items()},
            "heartbeat": {"ok": self._heartbeat.heartbeats_ok, "failed": self._heartbeat.heartbeats_failed,
                          "notifications": self._heartbeat.notifications,
                          "streams": self._heartbeat.open_streams},
        }

    # --- wiring callbacks (loop) ---------------------------------------------------------------
    def _consumer_data(self) -> ConsumerData:
        subs = [(s.topic, s.expression, s.sub_version) for s in self._state.subscriptions.values()]
        return ConsumerData(group=self.group, consume_type=c.CONSUME_TYPE_PASSIVELY,
                            message_model=self.message_model.value,
                            consume_from_where=self.consume_from_where.value, subscriptions=subs)

    def _routing_event(self, event: dict[str, Any]) -> None:
        """Every pull's routing: who pulled which queue from which broker, and when, is what the
        read-routing check decides on (a long poll returns at least every suspend period, so the
        volume follows the pull rate, not the message rate)."""
        if self._on_event is not None:
            self._on_event(event)

    def _emit(self, event: dict[str, Any]) -> None:
        if self._on_event is not None:
            self._on_event(event)

    async def _queues_changed(self, queue_count: int) -> None:
        """After a rebalance changed the owned queues: per-queue thresholds, and a heartbeat now."""
        self._thresholds = self.flow_thresholds.for_queue_count(queue_count)
        await self._heartbeat.send_heartbeat_to_all_brokers()

    def _submit_concurrently(self, msgs: Sequence[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        consume = self._consume
        assert isinstance(consume, ConsumeMessageConcurrentlyService)
        consume.submit_consume_request(msgs, pq, mq)

    # --- orderly (loop) ------------------------------------------------------------------------------
    async def _lock_one(self, mq: MessageQueue) -> bool:
        """lockOneMQ: lock one queue on its master (BROADCASTING never needs to)."""
        if self._locker is None:
            return True
        return await self._locker.lock(mq, reason="consume") is not None
