"""EndTransaction, and which producer a half message's check goes to.

An end names the half message by the `transaction_id` its send answered; the broker's
END_TRANSACTION handler (nodes/broker/transaction.py) resolves it. An id this broker never gave
out, or one whose half message has another message id, is INVALID_TRANSACTION_ID.

A check goes, as `recover_orphaned_transaction_command`, to a producer that publishes the
message's topic and holds a Telemetry stream open here (a 5.x producer has no group: Apache's
proxy registers its producers under the topics they publish). Several such producers take the
checks in turn, as RocketMQ picks one channel of the producer group per check.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from nodes.broker.rmq5.clients import CallContext, Rmq5Client, Rmq5ClientRegistry
from nodes.broker.rmq5.codes import Rmq5Code, Status, status_of
from nodes.broker.transaction import SOURCE_CHECK, SOURCE_CLIENT, EndOutcome, EndTransactionRequest
from nodes.common.codes import ResponseCode

EndHandler = Callable[[EndTransactionRequest], Awaitable[EndOutcome]]


class Rmq5Transactions:
    def __init__(self, end: EndHandler, registry: Rmq5ClientRegistry) -> None:
        self._end = end
        self._registry = registry
        self._turn = 0

    async def end(self, ctx: CallContext, message_id: str, transaction_id: str, resolution: str,
                  source: str) -> Status:
        """`resolution` COMMIT or ROLLBACK, `source` SOURCE_CLIENT or SOURCE_SERVER_CHECK (protocol names)."""
        self._registry.touch(ctx, "EndTransaction")
        if resolution not in ("COMMIT", "ROLLBACK"):
            return Status(Rmq5Code.BAD_REQUEST, f"resolution {resolution or 'unspecified'} is neither COMMIT nor "
                          "ROLLBACK")
        if not transaction_id.strip():
            return Status(Rmq5Code.INVALID_TRANSACTION_ID, "the request has no transaction_id; send the one the "
                          "half message's send answered")
        outcome = await self._end(EndTransactionRequest(
            transaction_id=transaction_id, message_id=message_id, commit=resolution == "COMMIT",
            source=SOURCE_CHECK if source == "SOURCE_SERVER_CHECK" else SOURCE_CLIENT))
        if outcome.code == ResponseCode.QUERY_NOT_FOUND:
            return Status(Rmq5Code.INVALID_TRANSACTION_ID, outcome.remark)
        return status_of(outcome.code, outcome.remark)

    def producer_for(self, topic: str) -> Rmq5Client | None:
        """The producer the next check about a message of `topic` goes to (None: none is connected)."""
        producers = self._registry.producers_with_stream(topic)
        if not producers:
            return None
        self._turn += 1
        return producers[self._turn % len(producers)]
