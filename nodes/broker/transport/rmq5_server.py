"""A broker's RocketMQ 5 endpoint: the MessagingService handlers built over the broker's send
path, topics and name servers, served by their own gRPC server on `rocketmq5_port` (its own
port, so 5.x clients and mqlab's own protocol never share a listener's options or interceptors)."""

from __future__ import annotations

import logging
from typing import Any

import grpc.aio

from nodes.broker.request_table import RequestKind, RequestTable
from nodes.broker.rmq5.clients import Rmq5ClientRegistry
from nodes.broker.rmq5.consume import GroupLookup, PopHandlers, Rmq5Consume, auto_renew_invisible_ms
from nodes.broker.rmq5.renew import AutoRenew, AutoRenewService
from nodes.broker.rmq5.route import Rmq5Routes, TopicLookup
from nodes.broker.rmq5.send import Rmq5Send
from nodes.broker.rmq5.service import Rmq5Service
from nodes.broker.rmq5.settings import ServerSettings
from nodes.broker.rmq5.transaction import Rmq5Transactions
from nodes.broker.transaction import CheckRequest
from nodes.broker.transport import rmq5_convert as conv
from nodes.broker.transport.rmq5_namesrv import NamesrvRoutes
from nodes.broker.transport.rmq5_servicer import MessagingServicer
from nodes.common.clock import Clock
from nodes.common.config import BrokerConfig
from nodes.common.node import crash_node
from nodes.common.rpc import bind, make_server
from proto import rmq5_service_pb2_grpc

log = logging.getLogger(__name__)


class Rmq5Endpoint:
    def __init__(self, config: BrokerConfig, table: RequestTable, topics: TopicLookup, groups: GroupLookup,
                 clock: Clock, delay_levels_ms: tuple[int, ...]) -> None:
        self._config = config
        registry = Rmq5ClientRegistry(clock.monotonic_ms)
        self.renew = AutoRenew(table[RequestKind.POP_CHANGE_INVISIBLE], registry, clock, time_scale=config.time_scale,
                               invisible_ms=auto_renew_invisible_ms(config.time_scale))
        self._renew_service = AutoRenewService(self.renew, config.timing.rmq5_renew_scan_ms, on_crash=crash_node,
                                               clock=clock)
        self._routes = NamesrvRoutes(config)
        body_max = config.store.message_body_bytes_max
        self.service = Rmq5Service(
            clients=registry, routes=Rmq5Routes(topics, self._routes, registry),
            send=Rmq5Send(topics=topics, send=table[RequestKind.SEND_MESSAGE], registry=registry, now_ms=clock.wall_ms,
                          body_bytes_max=body_max, delay_levels_ms=delay_levels_ms),
            consume=Rmq5Consume(registry, PopHandlers(
                pop=table[RequestKind.POP_MESSAGE], ack=table[RequestKind.POP_ACK],
                change_invisible=table[RequestKind.POP_CHANGE_INVISIBLE],
                forward_to_dlq=table[RequestKind.POP_FORWARD_TO_DLQ]), groups, time_scale=config.time_scale,
                renew=self.renew),
            settings=ServerSettings(max_body_bytes=body_max),
            transactions=Rmq5Transactions(table[RequestKind.END_TRANSACTION], registry))
        self._server: grpc.aio.Server | None = None
        self.addr = ""

    async def start(self) -> str:
        server = make_server()
        rmq5_service_pb2_grpc.add_MessagingServiceServicer_to_server(MessagingServicer(self.service), server)
        port = bind(server, self._config.listen_host, self._config.rocketmq5_port)
        await server.start()
        self._server = server
        self._renew_service.start()
        self.addr = f"{self._config.listen_host}:{port}"
        log.info("RocketMQ 5 endpoint (MessagingService) on %s", self.addr)
        return self.addr

    async def stop(self) -> None:
        await self._renew_service.stop()
        if self._server is not None:
            await self._server.stop(grace=0.5)
        await self._routes.close()

    def send_check(self, check: CheckRequest) -> bool:
        """Push a half message's check on a producer's Telemetry stream; False when none is open."""
        client = self.service.transactions.producer_for(check.real_topic)
        if client is None or client.push is None:
            return False
        client.push(conv.check_command(check))
        return True

    def describe(self) -> dict[str, Any]:
        return {"addr": self.addr, **self.service.describe(),
                "auto_renew": {"held": len(self.renew), "renewed": self.renew.renewed, "released": self.renew.released}}
