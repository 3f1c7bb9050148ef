"""BrokerController: builds the store, tables, processors and services of one broker and
runs its lifecycle (RocketMQ BrokerController).

Start: open the store (recovery), load metadata, build the handlers and the one request
table the transport adapters serve, bind gRPC, the RocketMQ remoting listener and the RocketMQ 5
endpoint, register with every name server and keep a
channel open to each, start the background services. Stop (SIGTERM): unregister, close the
name server channels, stop serving (gRPC and remoting), persist offsets, flush and close the store cleanly (the
abort file goes away).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from nodes.broker.admin_queries import AdminQueryHandler
from nodes.broker.client_manage import ClientManageHandler
from nodes.broker.consumers import ClientHousekeepingService, ConsumerRegistry
from nodes.broker.group_admin import GroupAdminHandler
from nodes.broker.ha_check import StoreErrors
from nodes.broker.ha_master import ReplicationMaster, ReplicationState
from nodes.broker.ha_slave import HaClient
from nodes.broker.last_pullers import LastPullers
from nodes.broker.master_sync import MasterSyncHandler
from nodes.broker.message_lookup import MessageLookupHandler
from nodes.broker.offset_requests import OffsetRequestHandler
from nodes.broker.offset_reset import OffsetResetHandler
from nodes.broker.offsets import ConsumerOffsetTable, OffsetPersistService
from nodes.broker.pop import PopEngine, PopReviveService
from nodes.broker.pull import PullProcessor
from nodes.broker.pull_hold import PullRequestHoldService
from nodes.broker.queue_locks import (
    LockExpiryScanService,
    QueueLockHandler,
    QueueLockManager,
    lease_to_real_mono,
)
from nodes.broker.registrar import NamesrvRegistrar, RegistrationService
from nodes.broker.request_table import RequestKind, RequestTable
from nodes.broker.schedule import ScheduleMessageService
from nodes.broker.send import SendHandler, SendProcessor
from nodes.broker.send_back import SendBackProcessor
from nodes.broker.slave_sync import SlaveSyncService
from nodes.broker.store_services import CleanService, DiskCheckService
from nodes.broker.topic_admin import TopicAdminHandler
from nodes.broker.topics import SubscriptionGroupManager, TopicConfigManager
from nodes.broker.transaction import EndTransactionHandler, TransactionalMessages
from nodes.broker.transaction_check import TransactionCheckService
from nodes.broker.transport.broker_servicer import BrokerServicer
from nodes.broker.transport.clients import GrpcMasterLink, GrpcNamesrvApi
from nodes.broker.transport.consumer_servicer import ConsumerManagerServicer
from nodes.broker.transport.remoting_adapter import BrokerRemotingAdapter
from nodes.broker.transport.replication_servicer import ReplicationServicer
from nodes.broker.transport.rmq5_server import Rmq5Endpoint
from nodes.common import constants as c
from nodes.common.clock import SYSTEM_CLOCK, Clock
from nodes.common.config import BrokerConfig, store_config_with_switches
from nodes.common.errors import StoreError
from nodes.common.events import EventLog
from nodes.common.node import NodeStatus, add_control_plane, crash_node, set_serving, warn_fault_switches
from nodes.common.rpc import bind, make_server
from nodes.common.service import Lifecycle, LifecycleState, Service
from nodes.remoting.server import RemotingServer
from nodes.store.delay import parse_delay_levels
from nodes.store.message_store import MessageStore, RecoveryReport
from proto import broker_pb2_grpc, consumer_pb2_grpc, replication_pb2_grpc

log = logging.getLogger(__name__)


def _fan_out(listeners: list[Callable[..., None]]) -> Callable[..., None]:
    """One store arrival listener calling several, in order."""
    if len(listeners) == 1:
        return listeners[0]

    def notify(*args: object) -> None:
        for listener in listeners:
            listener(*args)
    return notify


class FlushService(Service):
    """Flushes the commitlog and consume queues to disk (msync) off the event loop."""

    name = "store-flush"

    def __init__(self, store: MessageStore, interval_ms: int) -> None:
        super().__init__(interval_ms, on_crash=crash_node)
        self._store = store

    async def tick(self) -> None:
        await asyncio.to_thread(self._store.flush)


class BrokerController:
    role = "broker"

    def __init__(self, config: BrokerConfig, shutdown_requested: asyncio.Event, clock: Clock = SYSTEM_CLOCK,
                 history_clock: Clock = SYSTEM_CLOCK) -> None:
        """`clock`: leases, timers and store timestamps (a SkewedClock under clock control);
        `history_clock`: the real clocks of the event log."""
        self.config = config
        self.node_id = config.node_id
        self._clock = clock
        self._shutdown_requested = shutdown_requested
        self.lifecycle = LifecycleState(f"broker {config.node_id}", clock)
        warn_fault_switches(config.node_id, config.fault_switches, c.BROKER_FAULT_SWITCHES)
        store_config = store_config_with_switches(config.store, config.fault_switches)
        self.events = EventLog(Path(config.run_dir) / "events.jsonl", config.node_id, history_clock)
        # store-error and store-recovered events go to the broker's event log
        self.store = MessageStore(Path(config.run_dir) / "store", store_config, is_slave=not config.is_master,
                                  offset_check_in_slave=config.offset_check_in_slave, clock=clock,
                                  delay_levels_ms=parse_delay_levels(config.message_delay_level,
                                                                     config.timing.delay_level_unit_ms),
                                  reporter=self.events.record)
        self.replication = ReplicationState(
            clock, async_transfer_wait_ms=0 if config.is_sync_master else config.timing.ha_async_transfer_wait_ms)
        self.ha_client: HaClient | None = None
        self.slave_sync: SlaveSyncService | None = None
        self.recovery: RecoveryReport | None = None
        self.addr = ""
        self.remoting_addr = ""
        self._server: grpc.aio.Server | None = None
        self._remoting: RemotingServer | None = None
        self.remoting_adapter: BrokerRemotingAdapter | None = None
        self.rocketmq5_addr = ""
        self.rocketmq5: Rmq5Endpoint | None = None
        self._services: list[Service] = []
        self._background: list[asyncio.Task[None]] = []
        self.consumers = ConsumerRegistry(channel_expiry_ms=config.timing.consumer_channel_expiry_ms,
                                          events=self.events)
        self.schedule: ScheduleMessageService | None = None
        self.transactions: TransactionalMessages | None = None  # masters only
        self.transaction_check: TransactionCheckService | None = None
        self.client_manage: ClientManageHandler | None = None
        self.table = RequestTable()
        # orderly consumers' queue locks: masters only, in memory only (a restart frees them all)
        # FAULT SWITCH lease-wall-clock: leases measured on the wall clock, as RocketMQ does
        wall_leases = c.FAULT_LEASE_WALL_CLOCK in config.fault_switches
        self._lock_now_ms = clock.wall_ms if wall_leases else clock.monotonic_ms
        self.queue_locks = QueueLockManager(
            lease_ms=config.timing.broker_lock_lease_ms, events=self.events,
            no_exclusion=c.FAULT_LOCK_NO_EXCLUSION in config.fault_switches,
            slow_takeover=c.FAULT_LOCK_SLOW_TAKEOVER in config.fault_switches,
            lease_to_mono=lease_to_real_mono(clock, wall_leases=wall_leases)) if config.is_master else None

    async def start(self) -> str:
        self.lifecycle.transition(Lifecycle.STARTING)
        self.recovery = self.store.open()
        log.info("store opened: %s", self.recovery)
        restore_wait_ms = self._hold_writes_for_restore()
        md = self.store.metadata
        now_ms = self._clock.wall_ms()
        self.topics = TopicConfigManager(md, auto_create_enable=self.config.auto_create_topic_enable,
                                         default_queue_nums=self.config.default_topic_queue_nums, now_ms=now_ms)
        self.groups = SubscriptionGroupManager(md, auto_create_enable=self.config.auto_create_subscription_group)
        self.offsets = ConsumerOffsetTable(md, events=self.events, broker_name=self.config.broker_name,
                                           broker_id=self.config.broker_id)
        self.registrar = NamesrvRegistrar(self.config, self.topics,
                                          [GrpcNamesrvApi(addr, self.config) for addr in self.config.namesrv_addrs],
                                          self._clock)
        timing = self.config.timing
        poll_ms = timing.long_poll_scan_ms if self.config.long_polling_enable else timing.short_poll_ms
        self.pull_hold = PullRequestHoldService(self.store, self._clock, poll_ms, on_crash=crash_node)
        self.send = SendProcessor(self.config, self.store, self.topics, self._clock, groups=self.groups)
        if self.config.is_master:
            self._build_transactions()
        self.pop = PopEngine(store=self.store, topics=self.topics, groups=self.groups, clock=self._clock,
                             broker_name=self.config.broker_name, is_master=self.config.is_master, events=self.events,
                             writes_open=lambda: self.replication.writes.is_open, on_put=self.replication.log_grew,
                             on_topics_changed=self._register_now,
                             readable=lambda: bool(self.config.broker_perm & c.PERM_READ),
                             fault_switches=frozenset(self.config.fault_switches))
        self.pop.load()
        self.pop.bind_loop()
        if self.config.is_master:
            # held pulls (with long polling) and waiting pops both hear of every arrival
            listeners = [self.pull_hold.notify_arrival] if self.config.long_polling_enable else []
            listeners.append(self.pop.notify_arrival)
            self.store.on_arrival = _fan_out(listeners)
        self._register_handlers()

        server = make_server()
        broker_pb2_grpc.add_BrokerServicer_to_server(BrokerServicer(self.table), server)
        consumer_pb2_grpc.add_ConsumerManagerServicer_to_server(ConsumerManagerServicer(self.table), server)
        replication_pb2_grpc.add_ReplicationServicer_to_server(ReplicationServicer(self.table, self.config.cluster_credential), server)
        health_servicer = add_control_plane(server, self, self._shutdown_requested,
                                   self.config.cluster_credential)
        port = bind(server, self.config.listen_host, self.config.port)
        await server.start()
        self._server = server
        self.addr = f"{self.config.listen_host}:{port}"
        self.send.bind_port(port)
        self.registrar.broker_addr = self.addr
        await self._start_remoting()
        # RocketMQ 5's endpoint, before the first registration too: routes name it
        self.rocketmq5 = Rmq5Endpoint(self.config, self.table, self.topics, self.groups, self._clock,
                                       self.store.delay_levels_ms)
        self.rocketmq5_addr = self.registrar.rocketmq5_addr = await self.rocketmq5.start()

        try:
            await self.registrar.register_all()
        except Exception as exc:  # the name server may start later; the service keeps trying
            log.warning("first registration failed (%s); retrying every %d ms", exc,
                        self.config.timing.register_interval_ms)
        self.registrar.start_channels()
        await self.registrar.wait_channels_open(timing.register_timeout_ms)
        assert self.client_manage is not None
        self._registration = RegistrationService(self.registrar, timing.register_interval_ms, crash_node)
        self._services = [
            self._registration,
            FlushService(self.store, timing.flush_commitlog_ms),
            DiskCheckService(self.store, timing, crash_node),
            CleanService(self.store, timing, self._clock, crash_node),
            OffsetPersistService(self.offsets, timing.consumer_offset_persist_ms, crash_node),
            self.pull_hold,
            ClientHousekeepingService(self.consumers, self._clock.monotonic_ms, timing.client_housekeeping_ms,
                                      self.client_manage.close_channels_of_expired, crash_node),
        ]
        if self.config.is_master:  # ScheduleMessageService runs only where puts are allowed
            self.schedule = ScheduleMessageService(
                self.store, self._clock, poll_ms=timing.schedule_poll_ms,
                first_delay_ms=timing.schedule_first_delay_ms, error_backoff_ms=timing.schedule_error_backoff_ms,
                persist_ms=timing.delay_offset_persist_ms, on_put=self.replication.log_grew, on_crash=crash_node,
                topics=self.topics)
            if self.replication.writes.is_open:
                self._services.append(self.schedule)
            else:  # it writes too: not before the lost tail is back (or the wait gave up)
                self._background.append(asyncio.create_task(self._start_when_writable(self.schedule),
                                                            name="schedule-after-restore"))
        if self.transaction_check is not None:  # it writes too (commits, discards)
            assert self.rocketmq5 is not None
            self.transaction_check.add_sender(self.rocketmq5.send_check)
            if self.replication.writes.is_open:
                self._services.append(self.transaction_check)
            else:
                self._background.append(asyncio.create_task(self._start_when_writable(self.transaction_check),
                                                            name="transaction-check-after-restore"))
        if self.config.is_master:
            self._services.append(PopReviveService(self.pop, timing.pop_revive_interval_ms, on_crash=crash_node,
                                                   clock=self._clock))
        if self.queue_locks is not None:
            self._services.append(LockExpiryScanService(self.queue_locks, self._lock_now_ms,
                                                        timing.broker_lock_expiry_scan_ms, on_crash=crash_node,
                                                        clock=self._clock))
        if not self.config.is_master:
            master_link = GrpcMasterLink(self.config)
            self.slave_sync = SlaveSyncService(
                config=self.config, store=self.store, topics=self.topics, groups=self.groups,
                offsets=self.offsets, master_addr=self._master_addr, fetch=master_link.fetch_metadata,
                on_crash=crash_node)
            self._services.append(self.slave_sync)
            self.ha_client = HaClient(self.config, self.store, self._master_addr, self._clock,
                                      master_link.replicate, on_event=self.events.record, errors=self._store_errors())
            self.ha_client.start()
        for service in self._services:
            service.start()
        if restore_wait_ms is not None:  # counted from now: the slave can reach us from here on
            self._background.append(asyncio.create_task(self.replication.writes.open_after(restore_wait_ms),
                                                        name="restore-wait"))
        await set_serving(health_servicer, True)
        self.lifecycle.transition(Lifecycle.RUNNING)
        return self.addr

    def _build_transactions(self) -> None:
        """Half messages and their check (masters only): the open ones rebuilt from the store."""
        timing = self.config.timing
        txns = self.transactions = TransactionalMessages(
            self.store, self._clock, self.events, timeout_ms=timing.transaction_timeout_ms,
            check_interval_ms=timing.transaction_check_interval_ms, on_put=self.replication.log_grew)
        txns.load()
        check = self.transaction_check = TransactionCheckService(txns, self._clock, on_crash=crash_node)

        def half_stored(entries: list[tuple[int, int, str, str]]) -> None:
            txns.half_stored(entries)
            check.half_stored()
        self.send.on_half = half_stored

    def _hold_writes_for_restore(self) -> int | None:
        """A master that lost its log tail (unclean start) holds writes until a slave gave the
        tail back or a bounded wait ends: a message it acknowledged lives on in that slave. Under
        ASYNC_MASTER too: a slave runs ahead of the master's disk, and a master that wrote at once
        would reuse the queue offsets of the bytes the slave holds, which are then cut away; so
        an async power loss loses only what neither replica had. The wait (returned) covers the
        slave learning our address again from its next registration and its slowest reconnects,
        jitter included."""
        assert self.recovery is not None
        if not self.config.is_master or self.recovery.clean_shutdown:
            return None
        timing = self.config.timing
        wait_ms = timing.register_interval_ms + round(
            c.HA_RESTORE_WAIT_RECONNECTS * timing.ha_reconnect_max_ms * c.HA_RECONNECT_JITTER_MAX)
        self.replication.writes.close(f"unclean start: waiting up to {wait_ms} ms for a slave to restore the tail")
        return wait_ms

    def _store_errors(self) -> StoreErrors:
        """Replication's store errors, its bad records deduplicated with the store's own (one
        line per phys offset per process, whoever tripped over it first)."""
        return StoreErrors(self.events.record, self.config.store.commitlog_segment_bytes,
                           self.store.report_bad_record)

    async def _start_when_writable(self, service: Service) -> None:
        await self.replication.writes.wait_open()
        if self.lifecycle.state in (Lifecycle.STARTING, Lifecycle.RUNNING):
            service.start()
            self._services.append(service)

    def _register_handlers(self) -> None:
        """The one wiring place: every request kind's handler, whatever transport carries it."""
        config, clock, table = self.config, self._clock, self.table
        last_pullers = LastPullers()
        pull = PullProcessor(config, self.store, self.topics, self.groups, self.offsets, clock, self.pull_hold,
                             self.events, consumers=self.consumers,
                             writes_open=lambda: self.replication.writes.is_open, last_pullers=last_pullers)
        drop_every = c.FAULT_OFFSET_COMMIT_DROP_EVERY if (
            config.is_master and c.FAULT_OFFSET_COMMIT_DROP in config.fault_switches) else 0
        offsets = OffsetRequestHandler(self.store, self.topics, self.offsets, drop_every=drop_every)
        self.client_manage = ClientManageHandler(config=config, registry=self.consumers, groups=self.groups,
                                                 topics=self.topics, clock=clock, on_topics_changed=self._register_now)
        send_back = SendBackProcessor(config, self.store, self.topics, self.groups, clock,
                                      on_put=self.replication.log_grew, on_topics_changed=self._register_now)
        locks = QueueLockHandler(self.queue_locks, self._lock_now_ms, config.node_id)
        master = None
        if config.is_master:
            assert self.recovery is not None
            master = ReplicationMaster(
                config, self.store, self.replication, clock,
                errors=self._store_errors(),
                clean_start=self.recovery.clean_shutdown,
                recovered_max_phys_offset=self.recovery.commitlog_max_phys_offset)
        gate = self.replication.writes.guard
        master_sync = MasterSyncHandler(config=config, store=self.store, topics=self.topics, groups=self.groups,
                                        offsets=self.offsets, master=master)
        table.register(RequestKind.SEND_MESSAGE,
                       gate(SendHandler(self.send, self.replication, self._register_now).handle))
        table.register(RequestKind.PULL_MESSAGE, pull.open_session)
        table.register(RequestKind.QUERY_CONSUMER_OFFSET, offsets.query_consumer_offset)
        table.register(RequestKind.UPDATE_CONSUMER_OFFSET, offsets.update_consumer_offset)
        table.register(RequestKind.GET_QUEUE_OFFSET, offsets.get_queue_offset)
        topic_admin = TopicAdminHandler(self.topics, clock, self._register_now, is_master=config.is_master,
                                        broker_name=config.broker_name, on_topic_deleted=last_pullers.forget_topic,
                                        master_addr=self._master_addr)
        table.register(RequestKind.CREATE_TOPIC, topic_admin.create_topic)
        table.register(RequestKind.DELETE_TOPIC, topic_admin.delete_topic)
        table.register(RequestKind.UPDATE_SUBSCRIPTION_GROUP,
                       GroupAdminHandler(self.groups, is_master=config.is_master).update_group)
        table.register(RequestKind.HEART_BEAT, self.client_manage.heartbeat)
        table.register(RequestKind.UNREGISTER_CLIENT, self.client_manage.unregister_client)
        table.register(RequestKind.GET_CONSUMER_LIST_BY_GROUP, self.client_manage.consumer_list)
        table.register(RequestKind.NOTIFY_CONSUMER_IDS_CHANGED, self.client_manage.open_channel)
        table.register(RequestKind.CONSUMER_SEND_MSG_BACK, gate(send_back.handle))
        table.register(RequestKind.LOCK_BATCH_MQ, locks.lock_batch)
        table.register(RequestKind.UNLOCK_BATCH_MQ, locks.unlock_batch)
        table.register(RequestKind.REPLICATE, master_sync.replicate)
        table.register(RequestKind.SYNC_METADATA, master_sync.sync_metadata)
        table.register(RequestKind.DIGEST, master_sync.digest)
        table.register(RequestKind.VERIFY_STORE, master_sync.verify_store)
        admin = AdminQueryHandler(config=config, store=self.store, topics=self.topics, groups=self.groups,
                                  offsets=self.offsets, consumers=self.consumers, last_pullers=last_pullers, clock=clock,
                                  replication=self.replication, queue_locks=self.queue_locks,
                                  lock_now_ms=self._lock_now_ms, ha_client=lambda: self.ha_client,
                                  master_addr=self._master_addr)
        table.register(RequestKind.TOPIC_STATS, admin.topic_stats)
        table.register(RequestKind.CONSUME_STATS, admin.consume_stats)
        table.register(RequestKind.CONSUMER_CONNECTIONS, admin.consumer_connections)
        table.register(RequestKind.LIST_CONSUMER_GROUPS, admin.list_consumer_groups)
        table.register(RequestKind.BROKER_RUNTIME, admin.broker_runtime)
        lookup = MessageLookupHandler(config=config, store=self.store, topics=self.topics, offsets=self.offsets)
        table.register(RequestKind.QUERY_MESSAGE, lookup.query_message)
        table.register(RequestKind.VIEW_MESSAGE, lookup.view_message)
        table.register(RequestKind.VIEW_QUEUE_MESSAGE, lookup.view_queue_message)
        table.register(RequestKind.POP_MESSAGE, self.pop.handle_pop)
        table.register(RequestKind.POP_ACK, self.pop.handle_ack)
        table.register(RequestKind.POP_CHANGE_INVISIBLE, self.pop.handle_change_invisible)
        table.register(RequestKind.POP_FORWARD_TO_DLQ, self.pop.handle_forward_to_dlq)
        resets = OffsetResetHandler(config=config, store=self.store, topics=self.topics, offsets=self.offsets,
                                    consumers=self.consumers, client_manage=self.client_manage, master_addr=self._master_addr)
        table.register(RequestKind.RESET_CONSUMER_OFFSET, resets.reset)
        table.register(RequestKind.END_TRANSACTION, gate(EndTransactionHandler(
            self.transactions, node_id=config.node_id, broker_name=config.broker_name,
            writable=lambda: bool(config.broker_perm & c.PERM_WRITE)).handle))

    async def _start_remoting(self) -> None:
        """The remoting listener, before the first registration, so the name servers learn its
        address with the broker's."""
        self.remoting_adapter = BrokerRemotingAdapter(self.table)
        self._remoting = RemotingServer(f"broker {self.node_id} remoting", self.remoting_adapter.dispatch,
                                        crash=crash_node, on_channel_closed=self.remoting_adapter.channel_closed)
        remoting_port = await self._remoting.start(self.config.listen_host, self.config.remoting_port)
        self.remoting_addr = f"{self.config.listen_host}:{remoting_port}"
        # A record's store host is the broker's remoting address, as in RocketMQ: the C++ client
        # sends CONSUMER_SEND_MSG_BACK to a message's store host, not to the route's address.
        self.send.bind_port(remoting_port)
        self.registrar.remoting_addr = self.remoting_addr
        log.info("remoting listener on %s", self.remoting_addr)

    def _master_addr(self) -> str:
        return self.registrar.master_addr

    async def _register_now(self) -> None:
        """Register the changed topic table at once (RocketMQ's registerBrokerAll on topic creation)."""
        try:
            await self.registrar.register_all()
        except Exception as exc:
            log.warning("registering the new topic failed (%s); the periodic registration retries", exc)

    async def stop(self) -> None:
        self.lifecycle.transition(Lifecycle.STOPPING)
        # Stop the periodic registration first, or one could land after the unregister.
        await self._registration.stop()
        await self.registrar.unregister_all()
        if self._remoting is not None:
            await self._remoting.stop()
        if self.remoting_adapter is not None:
            self.remoting_adapter.close()
            await asyncio.sleep(0)  # let the cancelled notification pumps end their channels
        if self.rocketmq5 is not None:
            await self.rocketmq5.stop()
        if self._server is not None:
            await self._server.stop(grace=0.5)
        if self.ha_client is not None:
            await self.ha_client.stop()
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        for service in self._services:
            await service.stop()
        try:
            self.offsets.persist()
        except StoreError as exc:  # a full disk: the store still closes cleanly
            log.error("consumer offsets not persisted at stop: %s", exc)
        self.store.close()
        self.events.close()
        self.lifecycle.transition(Lifecycle.STOPPED)

    def status(self) -> NodeStatus:
        running = self.lifecycle.state == Lifecycle.RUNNING
        stats = self.store.stats() if running else {}
        topics = sorted(self.topics.topics) if running else []
        details: dict[str, Any] = {
            "addr": self.addr, "remoting_addr": self.remoting_addr, "broker_name": self.config.broker_name, "broker_id": self.config.broker_id,
            "store": stats, "topics": topics,
            "held_pulls": self.pull_hold.holds.count() if running else 0,
            "recovery": dataclasses.asdict(self.recovery) if self.recovery else None,
            "broker_role": self.config.role,
            "slaves": self.replication.describe(),
            "push2slave_max_offset": self.replication.push2slave_max_offset,
            "writes_held": self.replication.writes.reason,
            "ha_client": self.ha_client.describe() if self.ha_client else None,
            "master_addr": self.registrar.master_addr if running else "",
            # the channel tokens stay out: a token names the broker's channel to the name servers
            "namesrv_channels": [{k: v for k, v in link.items() if k != "token"} for link in self.registrar.describe()]
            if running else [],
            "slave_syncs": self.slave_sync.syncs if self.slave_sync else 0,
            "consumer_groups": self.consumers.describe(),
            "notification_streams": self.client_manage.open_channels() if self.client_manage else 0,
            "remoting": self.remoting_adapter.describe() if self.remoting_adapter else None,
            "rocketmq5": self.rocketmq5.describe() if self.rocketmq5 else None,
            "schedule": self.schedule.describe() if self.schedule else None,
            "queue_locks": self.queue_locks.describe(self._lock_now_ms()) if self.queue_locks else None,
            "pop": self.pop.describe() if running else None,
            "transactions": self.transactions.describe() if self.transactions else None,
        }
        role = "M" if self.config.is_master else "S"
        if self.ha_client is not None and running:
            role += f" ha={self.ha_client.state.value}"
        return NodeStatus(
            node_id=self.node_id, role=self.role, state=self.lifecycle.state.name,
            status_line=f"{self.node_id} {role} {self.lifecycle.state.name} "
                        f"max={stats.get('max_phys_offset', '-')} topics={len(topics)} "
                        f"held_pulls={details['held_pulls']} store_errors={stats.get('store_errors', '-')}"
                        + (f" delay_set_aside={self.schedule.set_aside}" if self.schedule and self.schedule.set_aside else ""),
            details=details)
