"""The handlers of one broker's MessagingService, built once by the broker's wiring and handed
to the gRPC servicer: the client registry, routes, sends, the consumer calls, the server's
settings and transactions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nodes.broker.rmq5.clients import Rmq5ClientRegistry
from nodes.broker.rmq5.consume import Rmq5Consume
from nodes.broker.rmq5.route import Rmq5Routes
from nodes.broker.rmq5.send import Rmq5Send
from nodes.broker.rmq5.settings import ServerSettings
from nodes.broker.rmq5.transaction import Rmq5Transactions


@dataclass(frozen=True, slots=True)
class Rmq5Service:
    clients: Rmq5ClientRegistry
    routes: Rmq5Routes
    send: Rmq5Send
    consume: Rmq5Consume
    settings: ServerSettings
    transactions: Rmq5Transactions

    def describe(self) -> dict[str, Any]:
        return self.clients.describe()
