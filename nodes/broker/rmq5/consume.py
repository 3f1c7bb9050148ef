"""ReceiveMessage, AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue: a 5.x
consumer's POP calls.

mqlab has no POP engine behind them yet, so each answers NOT_IMPLEMENTED with what to use
instead; a 5.x SimpleConsumer's receive raises it and a PushConsumer retries its receive every
second. This module is the one place the engine gets wired in: the servicer calls these four
methods with plain values and converts their answers, so nothing else changes then.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodes.broker.rmq5.clients import CallContext, Rmq5ClientRegistry
from nodes.broker.rmq5.codes import Rmq5Code, Status

_NOT_YET = ("{call} needs POP consumption, which mqlab does not have yet; consume with a 4.x client "
            "(pull or push) or mqlab's own consumers meanwhile")


@dataclass(frozen=True, slots=True)
class ReceiveAnswer:
    status: Status
    messages: tuple[object, ...] = ()  # the received messages, once there is an engine


@dataclass(frozen=True, slots=True)
class HandleAnswer:
    """Ack (per entry), change-invisible (with the new handle) and forward-to-DLQ answers."""

    status: Status
    receipt_handle: str = ""


class Rmq5Consume:
    def __init__(self, registry: Rmq5ClientRegistry) -> None:
        self._registry = registry

    async def receive(self, ctx: CallContext, group: str, topic: str) -> ReceiveAnswer:
        return ReceiveAnswer(self._refuse(ctx, "ReceiveMessage"))

    async def ack(self, ctx: CallContext, group: str, topic: str, message_id: str, receipt_handle: str) -> HandleAnswer:
        return HandleAnswer(self._refuse(ctx, "AckMessage"))

    async def change_invisible(self, ctx: CallContext, group: str, topic: str, message_id: str,
                               receipt_handle: str, invisible_ms: int) -> HandleAnswer:
        # the client stores the answer's handle into its message before it checks the status:
        # hand its own back so a refusal does not wipe it
        return HandleAnswer(self._refuse(ctx, "ChangeInvisibleDuration"), receipt_handle)

    async def forward_to_dlq(self, ctx: CallContext, group: str, topic: str, message_id: str,
                             receipt_handle: str) -> HandleAnswer:
        return HandleAnswer(self._refuse(ctx, "ForwardMessageToDeadLetterQueue"))

    def _refuse(self, ctx: CallContext, call: str) -> Status:
        self._registry.touch(ctx, call)
        return Status(Rmq5Code.NOT_IMPLEMENTED, _NOT_YET.format(call=call))
