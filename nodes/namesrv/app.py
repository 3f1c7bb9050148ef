"""The name server process: its wiring (route table, handler, gRPC adapter) and broker expiry.

Owns the RouteTable of this process and its two listeners: gRPC (brokers, mqlab clients, the
harness) and RocketMQ remoting (real 4.x clients' route lookups). Does not persist anything:
like RocketMQ's name server, it rebuilds its state from broker registrations after a restart.

A broker's liveness has two signals, as in RocketMQ: its periodic registration (silence past
`broker_expiry_ms` expires it) and its channel (see nodes.namesrv.transport.servicer).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import grpc.aio

from nodes.common.clock import SYSTEM_CLOCK, Clock
from nodes.common.config import NamesrvConfig
from nodes.common.events import EventLog
from nodes.common.node import NodeStatus, add_control_plane, crash_node, set_serving
from nodes.common.rpc import bind, make_server
from nodes.common.service import Lifecycle, LifecycleState, Service
from nodes.namesrv.handlers import NameServerHandler
from nodes.namesrv.route_table import RouteTable
from nodes.namesrv.transport.remoting import NamesrvRemoting
from nodes.namesrv.transport.servicer import NameServerServicer
from nodes.remoting.server import RemotingServer
from proto import namesrv_pb2_grpc

log = logging.getLogger(__name__)


class BrokerExpiryService(Service):
    """RocketMQ scanNotActiveBroker: drop brokers silent for longer than broker_expiry_ms."""

    name = "broker-expiry"

    def __init__(self, table: RouteTable, clock: Clock, scan_ms: int, expiry_ms: int) -> None:
        super().__init__(scan_ms, clock=clock)
        self._table = table
        self._clock = clock
        self._expiry_ms = expiry_ms

    async def tick(self) -> None:
        self._table.expire(self._clock.monotonic_ms(), self._expiry_ms)


class NamesrvApp:
    role = "namesrv"

    def __init__(self, config: NamesrvConfig, shutdown_requested: asyncio.Event,
                 clock: Clock = SYSTEM_CLOCK, history_clock: Clock = SYSTEM_CLOCK) -> None:
        """`clock`: broker expiry (a SkewedClock under clock control); `history_clock`: the event log's."""
        self.config = config
        self.node_id = config.node_id
        self._clock = clock
        # an event log only under clock control: its `clock` events are all a name server records
        self.events = (EventLog(Path(config.run_dir) / "events.jsonl", config.node_id, history_clock)
                       if config.clock_control else None)
        self._shutdown_requested = shutdown_requested
        self.table = RouteTable()
        self.lifecycle = LifecycleState(f"namesrv {config.node_id}", clock)
        self._server: grpc.aio.Server | None = None
        self.handler = NameServerHandler(self.table, clock, time_scale=config.time_scale)
        self._expiry = BrokerExpiryService(self.table, clock, config.timing.broker_expiry_scan_ms,
                                           config.timing.broker_expiry_ms)
        # RocketMQ 4.x clients ask for routes here; on by default, bound before the node is READY
        self._remoting = RemotingServer(f"namesrv {config.node_id} remoting",
                                        NamesrvRemoting(self.handler).dispatch, crash=crash_node)
        self.addr = ""
        self.remoting_addr = ""

    async def start(self) -> str:
        self.lifecycle.transition(Lifecycle.STARTING)
        server = make_server()
        namesrv_pb2_grpc.add_NameServerServicer_to_server(NameServerServicer(self.handler, self.config.cluster_credential), server)
        health_servicer = add_control_plane(server, self, self._shutdown_requested,
                                   self.config.cluster_credential)
        port = bind(server, self.config.listen_host, self.config.port)
        await server.start()
        self._server = server
        self.addr = f"{self.config.listen_host}:{port}"
        remoting_port = await self._remoting.start(self.config.listen_host, self.config.remoting_port)
        self.remoting_addr = f"{self.config.listen_host}:{remoting_port}"
        self._expiry.start()
        await set_serving(health_servicer, True)
        self.lifecycle.transition(Lifecycle.RUNNING)
        return self.addr

    async def stop(self) -> None:
        self.lifecycle.transition(Lifecycle.STOPPING)
        await self._expiry.stop()
        self.handler.close_channels()
        await self._remoting.stop()
        if self._server is not None:
            await self._server.stop(grace=0.5)
        if self.events is not None:
            self.events.close()
        self.lifecycle.transition(Lifecycle.STOPPED)

    def status(self) -> NodeStatus:
        brokers = {name: {str(k): v for k, v in b.broker_addrs.items()} for name, b in self.table.brokers.items()}
        return NodeStatus(
            node_id=self.node_id, role=self.role, state=self.lifecycle.state.name,
            status_line=f"{self.node_id} N {self.lifecycle.state.name} brokers={len(self.table.live)} "
                        f"topics={len(self.table.topic_queues)}",
            details={"addr": self.addr, "remoting_addr": self.remoting_addr, "brokers": brokers,
                     "topics": self.table.topics(), "open_channels": self.handler.open_channels})
