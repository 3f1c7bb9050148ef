"""ConsumerApp: the `consumer` role, one PushConsumer with a workload listener, as a node.

Owns the process wiring: the Admin/health server (so the harness sees it like any node),
the delivery journal (`<run_dir>/deliveries.jsonl`), the event log (`<run_dir>/events.jsonl`:
rebalance, route, offset-commit, pull-route and send-back events from the client; its own
consumer-start, consumer-stopping and consumer-stop), and the order of
start and stop. SIGTERM (or Admin.Shutdown) is a graceful stop: running listener calls get
`await_termination_ms`, offsets are persisted, the client unregisters. Does not consume
anything itself (`nodes.client.PushConsumer` does).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import grpc.aio

from nodes.client import (
    AllocateAveragely,
    AllocateAveragelyByCircle,
    AllocateConsistentHash,
    ConsumeFromWhere,
    MessageModel,
    PushConsumer,
)
from nodes.client.allocate import AllocateStrategy
from nodes.common import constants as c
from nodes.common.clock import SYSTEM_CLOCK, Clock
from nodes.common.config import ConsumerConfig
from nodes.common.errors import ConfigError, MqError
from nodes.common.events import EventLog
from nodes.common.node import NodeStatus, add_control_plane, crash_node, set_serving, warn_fault_switches
from nodes.common.rpc import bind, make_server
from nodes.common.service import Lifecycle, LifecycleState
from nodes.consumer.journal import JOURNAL_FILE_NAME, DeliveryJournal
from nodes.consumer.workload import OrderlyWorkloadListener, WorkloadListener

log = logging.getLogger(__name__)

EVENTS_FILE_NAME = "events.jsonl"
OFFSETS_DIR_NAME = "offsets"


def allocate_strategy(name: str) -> AllocateStrategy:
    """The strategy a config names (constants.ALLOCATE_STRATEGY_NAMES)."""
    strategies: dict[str, type[Any]] = {"AVG": AllocateAveragely, "AVG_BY_CIRCLE": AllocateAveragelyByCircle,
                                        "CONSISTENT_HASH": AllocateConsistentHash}
    try:
        return strategies[name]()
    except KeyError:
        raise ConfigError(f"allocate_strategy {name!r} is not one of {sorted(strategies)}") from None


def build_push_consumer(config: ConsumerConfig, **kwargs: Any) -> PushConsumer:
    """A PushConsumer set up as `config` says, subscribed but not started."""
    consumer = PushConsumer(
        ";".join(config.namesrv_addrs), config.group, MessageModel(config.message_model),
        allocate_strategy(config.allocate_strategy), ConsumeFromWhere(config.consume_from_where),
        timing=config.timing, dial_overrides=config.dial_overrides, consume_thread_min=config.consume_thread_min,
        consume_message_batch_max_size=config.consume_message_batch_max_size,
        pull_batch_size=config.pull_batch_size, max_reconsume_times=config.max_reconsume_times,
        instance_name=config.instance_name, offset_store_dir=Path(config.run_dir) / OFFSETS_DIR_NAME,
        await_termination_ms=config.await_termination_ms, fault_switches=config.fault_switches, **kwargs)
    for topic, expression in sorted(config.subscriptions.items()):
        consumer.subscribe(topic, expression)
    return consumer


class ConsumerApp:
    """A NodeApp (nodes.common.node): start() returns the Admin address, stop() is graceful."""

    role = "consumer"

    def __init__(self, config: ConsumerConfig, shutdown_requested: asyncio.Event, clock: Clock = SYSTEM_CLOCK,
                 history_clock: Clock = SYSTEM_CLOCK) -> None:
        """`clock`: the push consumer's leases and timers (a SkewedClock under clock control);
        `history_clock`: the real clocks of the event log and the delivery journal."""
        self.config = config
        self.node_id = config.node_id
        self._shutdown_requested = shutdown_requested
        self._clock = clock
        self.lifecycle = LifecycleState(f"consumer {config.node_id}", clock)
        warn_fault_switches(config.node_id, config.fault_switches, c.CONSUMER_FAULT_SWITCHES)
        run_dir = Path(config.run_dir)
        self.events = EventLog(run_dir / EVENTS_FILE_NAME, config.node_id, history_clock)
        self.journal = DeliveryJournal(run_dir / JOURNAL_FILE_NAME, config.node_id, config.group, history_clock)
        self.consumer = build_push_consumer(config, on_event=self.events.record, on_crash=crash_node, clock=clock)
        if config.orderly:
            # the journal's consume times on the real clock: the consumer's own start stamp is on
            # `clock`, usable only when that is the real one too
            self.listener: WorkloadListener = OrderlyWorkloadListener(
                config, self.journal, clock=history_clock, ctx_start_on_clock=clock is history_clock)
            self.consumer.register_orderly_listener(self.listener)
        else:
            self.listener = WorkloadListener(config, self.journal)
            self.consumer.register_listener(self.listener)
        self.addr = ""
        self._server: grpc.aio.Server | None = None

    async def start(self) -> str:
        self.lifecycle.transition(Lifecycle.STARTING)
        server = make_server()
        health = add_control_plane(server, self, self._shutdown_requested,
                                   self.config.cluster_credential)
        port = bind(server, self.config.listen_host, self.config.port)
        await server.start()
        self._server = server
        self.addr = f"{self.config.listen_host}:{port}"
        try:
            await asyncio.to_thread(self.consumer.start)
        except MqError as err:
            raise ConfigError(f"the push consumer could not start: {err}") from err
        self.journal.client_id = self.consumer.client_id
        self.events.record({"event": "consumer-start", "group": self.config.group,
                            "client_id": self.consumer.client_id, "subscriptions": self.config.subscriptions,
                            "model": self.config.message_model, "allocate": self.config.allocate_strategy,
                            "workload": self.config.workload, "orderly": self.config.orderly})
        await set_serving(health, True)
        self.lifecycle.transition(Lifecycle.RUNNING)
        return self.addr

    async def stop(self) -> None:
        self.lifecycle.transition(Lifecycle.STOPPING)
        # before the shutdown unregisters: from here on the others may take this consumer's queues
        self.events.record({"event": "consumer-stopping", "group": self.config.group,
                            "client_id": self.consumer.client_id})
        await asyncio.to_thread(self.consumer.shutdown)
        self.events.record({"event": "consumer-stop", "group": self.config.group, "client_id": self.consumer.client_id,
                            "results": dict(self.listener.results)})
        if self._server is not None:
            await self._server.stop(grace=0.5)
        self.journal.close()
        self.events.close()
        self.lifecycle.transition(Lifecycle.STOPPED)

    def status(self) -> NodeStatus:
        state = self.lifecycle.state.name
        details: dict[str, Any] = {"addr": self.addr, "group": self.config.group, "client_id": self.consumer.client_id,
                                   "deliveries": self.journal.lines, "results": dict(self.listener.results)}
        if self.lifecycle.state == Lifecycle.RUNNING:
            try:
                details["consumer"] = self.consumer.describe()
            except MqError as err:
                details["error"] = str(err)
        queues = details.get("consumer", {}).get("queues", [])
        owned = [q for q in queues if not q["topic"].startswith("%RETRY%")]
        return NodeStatus(
            node_id=self.node_id, role=self.role, state=state,
            status_line=f"{self.node_id} C {state} group={self.config.group} queues={len(owned)} "
                        f"deliveries={self.journal.lines}",
            details=details)
