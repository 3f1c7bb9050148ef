"""BrokerController: builds the store, tables, processors and services of one broker and
runs its lifecycle (RocketMQ BrokerController).

Start: open the store (recovery), load metadata, bind gRPC, register with every name
server and keep a channel open to each, start the background services. Stop (SIGTERM):
unregister, close the name server channels, stop serving, persist offsets, flush and close
the store cleanly (the abort file goes away).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from nodes.broker.consumer_servicer import ConsumerManagerServicer
from nodes.broker.consumers import ClientHousekeepingService, ConsumerRegistry
from nodes.broker.ha_master import ReplicationMaster, ReplicationState
from nodes.broker.ha_slave import HaClient
from nodes.broker.offsets import ConsumerOffsetTable, OffsetPersistService
from nodes.broker.pull import LongPollScanService, PullProcessor
from nodes.broker.queue_locks import LockExpiryScanService, QueueLockManager
from nodes.broker.schedule import ScheduleMessageService
from nodes.broker.send import SendProcessor
from nodes.broker.send_back import SendBackProcessor
from nodes.broker.servicer import BrokerServicer
from nodes.broker.slave_sync import ReplicationServicer, SlaveSyncService
from nodes.broker.topics import SubscriptionGroupManager, TopicConfigManager
from nodes.common import constants as c
from nodes.common import wire
from nodes.common.clock import SYSTEM_CLOCK, Clock
from nodes.common.config import BrokerConfig
from nodes.common.events import EventLog
from nodes.common.node import NodeStatus, add_control_plane, crash_node, set_serving, warn_fault_switches
from nodes.common.rpc import bind, make_channel, make_server, map_rpc_error, timeout_s
from nodes.common.service import Lifecycle, LifecycleState, Service
from nodes.store.delay import parse_delay_levels
from nodes.store.message_store import MessageStore, RecoveryReport
from proto import (
    broker_pb2_grpc,
    common_pb2,
    consumer_pb2_grpc,
    namesrv_pb2,
    namesrv_pb2_grpc,
    replication_pb2_grpc,
)

log = logging.getLogger(__name__)


# Re-registering after a lost channel starts at this fraction of the registration interval
# (500 ms unscaled) and doubles up to the interval itself, so it never waits longer than the
# periodic registration would and scales with the rest of Timing.
_REREGISTER_FIRST_DIVISOR = 60


@dataclass
class _NamesrvLink:
    """One name server as this broker sees it: the stub, and the channel (WatchChannel stream)."""

    addr: str
    stub: namesrv_pb2_grpc.NameServerStub
    process_token: str
    # Bumped whenever the channel ends: the next registration carries a new token, so the old
    # channel's late end at the name server cannot remove the new registration.
    generation: int = 0
    # Set by a successful registration carrying the current token; the channel opens after it.
    registered: asyncio.Event = field(default_factory=asyncio.Event)
    channel_open: bool = False
    reregistering: bool = False
    channels_lost: int = 0
    task: asyncio.Task[None] | None = None

    @property
    def token(self) -> str:
        return f"{self.process_token}-{self.generation}"


class NamesrvRegistrar:
    """Registers this broker with every name server (in parallel), keeps one channel open to
    each, and unregisters on stop.

    The channel is a `WatchChannel` server stream on the same gRPC channel as registrations, so
    it shares their connection (and their link proxy): when this process dies or the connection
    is reset, the stream ends and the name server drops this broker's route at once (RocketMQ's
    onChannelDestroy). No keepalive runs on it (see nodes.common.rpc): a silent partition must
    stay silent and leave the broker to the name server's expiry, as in RocketMQ.
    """

    def __init__(self, config: BrokerConfig, topics: TopicConfigManager, clock: Clock = SYSTEM_CLOCK) -> None:
        self._config = config
        self._topics = topics
        self._clock = clock
        # Made at process start: names this broker process at the name servers.
        process_token = uuid.uuid4().hex[:16]
        self._links = [_NamesrvLink(addr, namesrv_pb2_grpc.NameServerStub(make_channel(addr, config.dial_overrides)),
                                    process_token)
                       for addr in config.namesrv_addrs]
        self._stopping = False
        self.broker_addr = ""
        self.master_addr = ""
        self.registered_ok = 0

    async def register_all(self, links: list[_NamesrvLink] | None = None) -> None:
        """RegisterBroker with every name server (or only `links`), in parallel."""
        links = self._links if links is None else links
        version = self._topics.data_version
        request = namesrv_pb2.RegisterBrokerRequest(
            cluster_name=self._config.cluster_name, broker_name=self._config.broker_name,
            broker_id=self._config.broker_id, broker_addr=self.broker_addr, ha_server_addr=self.broker_addr,
            topic_configs=[wire.topic_config_to_pb(t) for t in self._topics.all()],
            data_version=namesrv_pb2.DataVersion(timestamp_ms=version[0], counter=version[1]),
            node_id=self._config.node_id)
        results = await asyncio.gather(*(self._register_one(link, request) for link in links),
                                       return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        answers = [r for r in results
                   if isinstance(r, namesrv_pb2.RegisterBrokerResponse) and r.code == common_pb2.SUCCESS]
        self.registered_ok += len(answers)
        if answers:
            # A slave's master is known only while a name server says one is registered.
            master_addr = next((r.master_addr for r in answers if r.master_addr), "")
            if master_addr != self.master_addr:
                log.info("master address: %r -> %r", self.master_addr, master_addr)
            self.master_addr = master_addr
        if failures and len(failures) == len(results):
            raise failures[0]

    async def _register_one(self, link: _NamesrvLink,
                            request: namesrv_pb2.RegisterBrokerRequest) -> namesrv_pb2.RegisterBrokerResponse:
        token = link.token
        one = namesrv_pb2.RegisterBrokerRequest()
        one.CopyFrom(request)
        one.channel_token = token
        try:
            answer = await link.stub.RegisterBroker(one, timeout=timeout_s(self._config.timing.register_timeout_ms))
        except grpc.RpcError as exc:
            raise map_rpc_error(exc, "register with name server") from exc
        # A registration sent before the channel ended carries the old token: it does not count.
        if answer.code == common_pb2.SUCCESS and token == link.token:
            link.registered.set()
        return answer

    def start_channels(self) -> None:
        for link in self._links:
            link.task = asyncio.create_task(self._keep_channel(link), name=f"namesrv-channel {link.addr}")

    async def _keep_channel(self, link: _NamesrvLink) -> None:
        """Hold the channel to one name server open; after it ends, re-register and open a new one."""
        timing = self._config.timing
        first_ms = max(1, timing.register_interval_ms // _REREGISTER_FIRST_DIVISOR)
        backoff_ms = first_ms
        while not self._stopping:
            await link.registered.wait()
            if self._stopping:
                return
            opened_ms = self._clock.monotonic_ms()
            reason = await self._hold_channel(link)
            if self._stopping:
                return
            # A channel that lived a registration interval was healthy: start the backoff afresh.
            # One that dies young (a flapping link) keeps doubling it.
            if self._clock.monotonic_ms() - opened_ms >= timing.register_interval_ms:
                backoff_ms = first_ms
            link.generation += 1
            link.registered.clear()
            link.channels_lost += 1
            log.warning("channel to name server %s closed (%s); re-registering with token %s",
                        link.addr, reason, link.token)
            link.reregistering = True
            try:
                while not link.registered.is_set() and not self._stopping:
                    await asyncio.sleep(backoff_ms / 1000)
                    backoff_ms = min(backoff_ms * 2, timing.register_interval_ms)
                    try:
                        await self.register_all([link])  # only this name server lost its channel
                    except Exception as exc:  # the name server may be down; keep trying, never crash
                        log.info("re-registration with name server %s failed: %s", link.addr, exc)
            finally:
                link.reregistering = False

    async def _hold_channel(self, link: _NamesrvLink) -> str:
        """Open the WatchChannel stream and wait for its end; returns why it ended."""
        request = namesrv_pb2.WatchChannelRequest(
            cluster_name=self._config.cluster_name, broker_name=self._config.broker_name,
            broker_id=self._config.broker_id, broker_addr=self.broker_addr, channel_token=link.token)
        # No deadline: the stream lives as long as this process and the connection do.
        call = link.stub.WatchChannel(request)
        try:
            async for event in call:
                if not link.channel_open:
                    log.info("channel to name server %s open (token %s, registered=%s)",
                             link.addr, link.token, event.registered)
                link.channel_open = True
            return "ended by the name server"
        except grpc.RpcError as exc:
            return str(map_rpc_error(exc, "name server channel"))
        except Exception as exc:  # a broken stream must never take the broker down
            log.warning("channel to name server %s failed unexpectedly", link.addr, exc_info=True)
            return repr(exc)
        finally:
            link.channel_open = False
            call.cancel()

    async def unregister_all(self) -> None:
        """A clean stop: unregister everywhere, then close the channels (their late end finds
        nothing to remove)."""
        self._stopping = True
        # A re-registration in flight could land after the unregister: cancel those first.
        await self._cancel(link for link in self._links if link.reregistering)
        request = namesrv_pb2.UnregisterBrokerRequest(
            cluster_name=self._config.cluster_name, broker_name=self._config.broker_name,
            broker_id=self._config.broker_id, broker_addr=self.broker_addr)
        for link in self._links:
            try:
                await link.stub.UnregisterBroker(request, timeout=timeout_s(self._config.timing.rpc_timeout_ms))
            except grpc.RpcError as exc:
                log.warning("unregister failed: %s", map_rpc_error(exc, "unregister"))
        await self._cancel(self._links)

    @staticmethod
    async def _cancel(links: Iterable[_NamesrvLink]) -> None:
        tasks = [link.task for link in links if link.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def describe(self) -> list[dict[str, Any]]:
        return [{"addr": link.addr, "token": link.token, "channel_open": link.channel_open,
                 "channels_lost": link.channels_lost}
                for link in self._links]


class RegistrationService(Service):
    name = "namesrv-registration"

    def __init__(self, registrar: NamesrvRegistrar, interval_ms: int) -> None:
        super().__init__(interval_ms, on_crash=crash_node)
        self._registrar = registrar

    async def tick(self) -> None:
        await self._registrar.register_all()


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

    def __init__(self, config: BrokerConfig, shutdown_requested: asyncio.Event, clock: Clock = SYSTEM_CLOCK
                 ) -> None:
        self.config = config
        self.node_id = config.node_id
        self._clock = clock
        self._shutdown_requested = shutdown_requested
        self.lifecycle = LifecycleState(f"broker {config.node_id}", clock)
        warn_fault_switches(config.node_id, config.fault_switches, c.BROKER_FAULT_SWITCHES)
        store_config = config.store
        if c.FAULT_RECOVERY_TRUST_CHECKPOINT in config.fault_switches:
            store_config = dataclasses.replace(store_config, recovery_trust_checkpoint=True)
        self.store = MessageStore(Path(config.run_dir) / "store", store_config, is_slave=not config.is_master,
                                  offset_check_in_slave=config.offset_check_in_slave, clock=clock,
                                  delay_levels_ms=parse_delay_levels(config.message_delay_level,
                                                                     config.timing.delay_level_unit_ms))
        self.events = EventLog(Path(config.run_dir) / "events.jsonl", config.node_id, clock)
        self.replication = ReplicationState(clock)
        self.ha_client: HaClient | None = None
        self.slave_sync: SlaveSyncService | None = None
        self.recovery: RecoveryReport | None = None
        self.addr = ""
        self._server: grpc.aio.Server | None = None
        self._services: list[Service] = []
        self._servicer: BrokerServicer | None = None
        self.consumers = ConsumerRegistry(channel_expiry_ms=config.timing.consumer_channel_expiry_ms,
                                          events=self.events)
        self.schedule: ScheduleMessageService | None = None
        self._consumer_servicer: ConsumerManagerServicer | None = None
        # orderly consumers' queue locks: masters only, in memory only (a restart frees them all)
        self.queue_locks = QueueLockManager(
            lease_ms=config.timing.broker_lock_lease_ms, events=self.events,
            no_exclusion=c.FAULT_LOCK_NO_EXCLUSION in config.fault_switches) if config.is_master else None

    async def start(self) -> str:
        self.lifecycle.transition(Lifecycle.STARTING)
        self.recovery = self.store.open()
        log.info("store opened: %s", self.recovery)
        md = self.store.metadata
        now_ms = self._clock.wall_ms()
        self.topics = TopicConfigManager(md, auto_create_enable=self.config.auto_create_topic_enable,
                                         default_queue_nums=self.config.default_topic_queue_nums, now_ms=now_ms)
        self.groups = SubscriptionGroupManager(md, auto_create_enable=self.config.auto_create_subscription_group)
        self.offsets = ConsumerOffsetTable(md, events=self.events, broker_name=self.config.broker_name,
                                           broker_id=self.config.broker_id)
        self.pull = PullProcessor(self.config, self.store, self.topics, self.groups, self.offsets, self._clock,
                                  self.events, consumers=self.consumers)
        self.registrar = NamesrvRegistrar(self.config, self.topics, self._clock)
        self.send = SendProcessor(self.config, self.store, self.topics, self._clock, groups=self.groups)
        if self.config.is_master and self.config.long_polling_enable:
            self.store.on_arrival = self._on_arrival

        server = make_server()
        self._servicer = BrokerServicer(store=self.store, topics=self.topics, offsets=self.offsets, pull=self.pull,
                                        send=self.send, clock=self._clock,
                                        on_topics_changed=self._register_now, replication=self.replication)
        broker_pb2_grpc.add_BrokerServicer_to_server(self._servicer, server)
        self._consumer_servicer = ConsumerManagerServicer(
            config=self.config, registry=self.consumers, groups=self.groups, topics=self.topics,
            send_back=SendBackProcessor(self.config, self.store, self.topics, self.groups, self._clock,
                                        on_put=self.replication.log_grew),
            clock=self._clock, on_topics_changed=self._register_now, locks=self.queue_locks)
        consumer_pb2_grpc.add_ConsumerManagerServicer_to_server(self._consumer_servicer, server)
        master = ReplicationMaster(self.config, self.store, self.replication, self._clock) \
            if self.config.is_master else None
        replication_pb2_grpc.add_ReplicationServicer_to_server(ReplicationServicer(
            config=self.config, store=self.store, topics=self.topics, groups=self.groups, offsets=self.offsets,
            master=master), server)
        health_servicer = add_control_plane(server, self, self._shutdown_requested)
        port = bind(server, self.config.listen_host, self.config.port)
        await server.start()
        self._server = server
        self.addr = f"{self.config.listen_host}:{port}"
        self.send.bind_port(port)
        self.registrar.broker_addr = self.addr

        try:
            await self.registrar.register_all()
        except Exception as exc:  # the name server may start later; the service keeps trying
            log.warning("first registration failed (%s); retrying every %d ms", exc,
                        self.config.timing.register_interval_ms)
        self.registrar.start_channels()
        timing = self.config.timing
        self._registration = RegistrationService(self.registrar, timing.register_interval_ms)
        poll_ms = timing.long_poll_scan_ms if self.config.long_polling_enable else timing.short_poll_ms
        self._services = [
            self._registration,
            FlushService(self.store, timing.flush_commitlog_ms),
            OffsetPersistService(self.offsets, timing.consumer_offset_persist_ms, crash_node),
            LongPollScanService(self.pull, poll_ms, crash_node),
            ClientHousekeepingService(self.consumers, self._clock.monotonic_ms, timing.client_housekeeping_ms,
                                      self._consumer_servicer.close_streams_of_expired, crash_node),
        ]
        if self.config.is_master:  # ScheduleMessageService runs only where puts are allowed
            self.schedule = ScheduleMessageService(
                self.store, self._clock, poll_ms=timing.schedule_poll_ms,
                first_delay_ms=timing.schedule_first_delay_ms, error_backoff_ms=timing.schedule_error_backoff_ms,
                persist_ms=timing.delay_offset_persist_ms, on_put=self.replication.log_grew, on_crash=crash_node)
            self._services.append(self.schedule)
        if self.queue_locks is not None:
            self._services.append(LockExpiryScanService(self.queue_locks, self._clock.monotonic_ms,
                                                        timing.broker_lock_expiry_scan_ms, on_crash=crash_node))
        if not self.config.is_master:
            self.slave_sync = SlaveSyncService(
                config=self.config, store=self.store, topics=self.topics, groups=self.groups,
                offsets=self.offsets, master_addr=self._master_addr, on_crash=crash_node)
            self._services.append(self.slave_sync)
            self.ha_client = HaClient(self.config, self.store, self._master_addr, self._clock,
                                      on_event=self.events.record)
            self.ha_client.start()
        for service in self._services:
            service.start()
        await set_serving(health_servicer, True)
        self.lifecycle.transition(Lifecycle.RUNNING)
        return self.addr

    def _on_arrival(self, topic: str, queue_id: int, max_queue_offset: int, tag_hash: int, *_: Any) -> None:
        self.pull.on_arrival(topic, queue_id, max_queue_offset, tag_hash)

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
        if self._server is not None:
            await self._server.stop(grace=0.5)
        if self.ha_client is not None:
            await self.ha_client.stop()
        for service in self._services:
            await service.stop()
        self.offsets.persist()
        self.store.close()
        self.events.close()
        self.lifecycle.transition(Lifecycle.STOPPED)

    def status(self) -> NodeStatus:
        running = self.lifecycle.state == Lifecycle.RUNNING
        stats = self.store.stats() if running else {}
        topics = sorted(self.topics.topics) if running else []
        details: dict[str, Any] = {
            "addr": self.addr, "broker_name": self.config.broker_name, "broker_id": self.config.broker_id,
            "store": stats, "topics": topics,
            "held_pulls": self.pull.holds.count() if running else 0,
            "recovery": dataclasses.asdict(self.recovery) if self.recovery else None,
            "broker_role": self.config.role,
            "slaves": self.replication.describe(),
            "push2slave_max_offset": self.replication.push2slave_max_offset,
            "ha_client": self.ha_client.describe() if self.ha_client else None,
            "master_addr": self.registrar.master_addr if running else "",
            "namesrv_channels": self.registrar.describe() if running else [],
            "slave_syncs": self.slave_sync.syncs if self.slave_sync else 0,
            "consumer_groups": self.consumers.describe(),
            "notification_streams": self._consumer_servicer.open_streams() if self._consumer_servicer else 0,
            "schedule": self.schedule.describe() if self.schedule else None,
            "queue_locks": self.queue_locks.describe(self._clock.monotonic_ms()) if self.queue_locks else None,
        }
        role = "M" if self.config.is_master else "S"
        if self.ha_client is not None and running:
            role += f" ha={self.ha_client.state.value}"
        return NodeStatus(
            node_id=self.node_id, role=self.role, state=self.lifecycle.state.name,
            status_line=f"{self.node_id} {role} {self.lifecycle.state.name} "
                        f"max={stats.get('max_phys_offset', '-')} topics={len(topics)} "
                        f"held_pulls={details['held_pulls']}",
            details=details)
