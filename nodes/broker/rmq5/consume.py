"""ReceiveMessage, AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue: a 5.x
consumer's POP calls, answered by the broker's POP engine (`nodes/broker/pop`) through the request
table's POP handlers.

What this layer adds to the engine is the proxy's part:
- a receive's invisible time must be 10 s … 12 h (ILLEGAL_INVISIBLE_TIME), the 10 s floor scaled
  by the broker's time_scale so a scaled cluster's tests can ask 1–2 s (the Python client sends
  whole seconds); an `auto_renew` receive (a PushConsumer's, which asks none) gets
  RMQ5_AUTO_RENEW_INVISIBLE_MS, scaled the same way, and its messages are renewed while the
  client lives (renew.py);
- the long poll is the request's (else the call's remaining deadline), clamped to 5 … 20 s
  scaled, and always cut to end before the call's gRPC deadline: a receive answered after its
  deadline fails the whole call and strands what it popped until the invisible time is over;
- the batch is capped at 32 silently, as the proxy does;
- the queue id of the request is ignored (the whole broker is popped, FIFO too), and FIFO or
  not is the group's `consume_message_orderly`, which the engine reads;
- nothing depends on the client's Telemetry settings: a SimpleConsumer's first receive can
  arrive before them.

A settings answer for a consumer carries its group's FIFO flag and max attempts
(`subscription_settings`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from nodes.broker.pop.values import (
    AckResult,
    ChangeInvisibleRequest,
    ChangeInvisibleResult,
    PopAckRequest,
    PopCode,
    PoppedMessage,
    PopRequest,
    PopResult,
)
from nodes.broker.rmq5.clients import CallContext, Rmq5ClientRegistry
from nodes.broker.rmq5.codes import OK, Rmq5Code, Status
from nodes.broker.rmq5.renew import AutoRenew
from nodes.broker.rmq5.settings import ServerSettings
from nodes.broker.topics import SubscriptionGroupConfig
from nodes.common import constants as c

# how the engine's outcomes reach a 5.x client (the proxy's mapping of the broker's answers)
_BY_POP_CODE: dict[PopCode, Rmq5Code] = {
    PopCode.OK: Rmq5Code.OK,
    PopCode.NOT_FOUND: Rmq5Code.MESSAGE_NOT_FOUND,
    PopCode.POLLING_FULL: Rmq5Code.TOO_MANY_REQUESTS,
    PopCode.INVALID_RECEIPT_HANDLE: Rmq5Code.INVALID_RECEIPT_HANDLE,
    PopCode.ILLEGAL_ARGUMENT: Rmq5Code.BAD_REQUEST,
    PopCode.TOPIC_NOT_EXIST: Rmq5Code.TOPIC_NOT_FOUND,
    PopCode.GROUP_NOT_EXIST: Rmq5Code.CONSUMER_GROUP_NOT_FOUND,
    PopCode.NO_PERMISSION: Rmq5Code.FORBIDDEN,
    PopCode.NOT_MASTER: Rmq5Code.FORBIDDEN,
    PopCode.UNAVAILABLE: Rmq5Code.INTERNAL_SERVER_ERROR,
}


_Result = TypeVar("_Result", AckResult, ChangeInvisibleResult)


def auto_renew_invisible_ms(time_scale: float) -> int:
    """An auto_renew receive's invisible time: RocketMQ's 60 s, scaled, never under the scaled floor."""
    return max(round(c.POP_INVISIBLE_MIN_MS * time_scale), round(c.RMQ5_AUTO_RENEW_INVISIBLE_MS * time_scale), 1)


def pop_status(code: PopCode, remark: str) -> Status:
    return Status(_BY_POP_CODE[code], remark or code.name)


@dataclass(frozen=True, slots=True)
class PopHandlers:
    """The request table's POP handlers (RequestKind.POP_*), as the broker registered them."""

    pop: Callable[[PopRequest], Awaitable[PopResult]]
    ack: Callable[[PopAckRequest], Awaitable[AckResult]]
    change_invisible: Callable[[ChangeInvisibleRequest], Awaitable[ChangeInvisibleResult]]
    forward_to_dlq: Callable[[PopAckRequest], Awaitable[AckResult]]


class GroupLookup(Protocol):
    def find(self, group: str) -> SubscriptionGroupConfig | None: ...


@dataclass(frozen=True, slots=True)
class ReceiveRequest:
    """One ReceiveMessage as plain values (durations in ms; None where the request had none)."""

    group: str
    topic: str
    batch_size: int
    invisible_ms: int | None = None
    auto_renew: bool = False
    long_polling_ms: int | None = None
    attempt_id: str = ""
    filter_type: str = "TAG"  # TAG, SQL, or "" when unspecified (a tag filter then)
    filter_expression: str = "*"
    remaining_ms: int | None = None  # what is left of the call's deadline; None: no deadline


@dataclass(frozen=True, slots=True)
class ReceiveAnswer:
    status: Status
    messages: tuple[PoppedMessage, ...] = ()


@dataclass(frozen=True, slots=True)
class HandleAnswer:
    """Ack (per entry), change-invisible (with the new handle) and forward-to-DLQ answers."""

    status: Status
    receipt_handle: str = ""


class Rmq5Consume:
    """Args:
        time_scale: the broker's (config.time_scale): the invisible floor, the auto-renew
            invisible time and the long-poll clamp are RocketMQ's durations times it.
    """

    def __init__(self, registry: Rmq5ClientRegistry, pop: PopHandlers, groups: GroupLookup,
                 time_scale: float = 1.0, renew: AutoRenew | None = None) -> None:
        self._registry = registry
        self._pop = pop
        self._groups = groups
        self.renew = renew
        self.invisible_min_ms = max(1, round(c.POP_INVISIBLE_MIN_MS * time_scale))
        self.auto_renew_invisible_ms = auto_renew_invisible_ms(time_scale)
        self.poll_min_ms = max(1, round(c.RMQ5_RECEIVE_POLL_MIN_MS * time_scale))
        self.poll_max_ms = max(self.poll_min_ms, round(c.RMQ5_RECEIVE_POLL_MAX_MS * time_scale))

    # --- receive ---------------------------------------------------------------------------------

    async def receive(self, ctx: CallContext, req: ReceiveRequest) -> ReceiveAnswer:
        self._registry.touch(ctx, "ReceiveMessage")
        if req.filter_type == "SQL":
            return ReceiveAnswer(Status(Rmq5Code.ILLEGAL_FILTER_EXPRESSION,
                                        "SQL92 filters are not supported by mqlab; subscribe with a TAG expression"))
        if req.batch_size <= 0:
            return ReceiveAnswer(Status(Rmq5Code.BAD_REQUEST,
                                        f"batch size {req.batch_size}: ask for at least one message"))
        if req.auto_renew:
            invisible_ms = self.auto_renew_invisible_ms
        else:
            invisible_ms = req.invisible_ms or 0
            if not self.invisible_min_ms <= invisible_ms <= c.POP_INVISIBLE_MAX_MS:
                return ReceiveAnswer(Status(
                    Rmq5Code.ILLEGAL_INVISIBLE_TIME,
                    f"invisible duration {invisible_ms} ms is outside {self.invisible_min_ms} ms … "
                    f"{c.POP_INVISIBLE_MAX_MS} ms; ask for one in that range"))
        result = await self._pop.pop(PopRequest(
            group=req.group, topic=req.topic, max_nums=min(req.batch_size, c.POP_BATCH_MAX), invisible_ms=invisible_ms,
            poll_timeout_ms=self.poll_ms(req.long_polling_ms, req.remaining_ms), fifo=None,
            attempt_id=req.attempt_id, tag_expression=req.filter_expression.strip() or "*", client_id=ctx.client_id))
        if result.code is PopCode.OK and result.messages:
            if req.auto_renew and self.renew is not None:
                self.renew.hold(ctx.client_id, req.group, result.messages)
            return ReceiveAnswer(OK, tuple(result.messages))
        return ReceiveAnswer(pop_status(result.code, result.remark))

    def poll_ms(self, long_polling_ms: int | None, remaining_ms: int | None) -> int:
        """The proxy's rule: the request's long poll, else the deadline's; clamped to the scaled
        5 … 20 s; cut to end a margin before the deadline (lenient: never refused for a short one)."""
        wanted = long_polling_ms if long_polling_ms is not None else remaining_ms
        poll = min(max(wanted if wanted is not None else self.poll_max_ms, self.poll_min_ms), self.poll_max_ms)
        if remaining_ms is not None:
            poll = min(poll, remaining_ms - c.RMQ5_RECEIVE_DEADLINE_MARGIN_MS)
        return max(0, poll)

    # --- handles ---------------------------------------------------------------------------------

    async def ack(self, ctx: CallContext, group: str, topic: str, message_id: str, receipt_handle: str) -> HandleAnswer:
        self._registry.touch(ctx, "AckMessage")

        async def ack(handle: str) -> AckResult:
            return await self._pop.ack(PopAckRequest(group=group, topic=topic, receipt_handle=handle))
        result = await self._with_newest(group, receipt_handle, ack)
        return HandleAnswer(pop_status(result.code, result.remark), receipt_handle)

    async def change_invisible(self, ctx: CallContext, group: str, topic: str, message_id: str,
                               receipt_handle: str, invisible_ms: int) -> HandleAnswer:
        self._registry.touch(ctx, "ChangeInvisibleDuration")
        if not 0 <= invisible_ms <= c.POP_INVISIBLE_MAX_MS:
            # the client stores the answer's handle into its message before it checks the status:
            # a refusal hands its own back so it is not wiped
            return HandleAnswer(Status(Rmq5Code.ILLEGAL_INVISIBLE_TIME,
                                       f"invisible duration {invisible_ms} ms is outside 0 … "
                                       f"{c.POP_INVISIBLE_MAX_MS} ms"), receipt_handle)

        async def change(handle: str) -> ChangeInvisibleResult:
            return await self._pop.change_invisible(ChangeInvisibleRequest(
                group=group, topic=topic, receipt_handle=handle, invisible_ms=invisible_ms))
        result = await self._with_newest(group, receipt_handle, change)
        status = pop_status(result.code, result.remark)
        return HandleAnswer(status, result.receipt_handle if status.ok else receipt_handle)

    async def forward_to_dlq(self, ctx: CallContext, group: str, topic: str, message_id: str,
                             receipt_handle: str) -> HandleAnswer:
        self._registry.touch(ctx, "ForwardMessageToDeadLetterQueue")

        async def forward(handle: str) -> AckResult:
            return await self._pop.forward_to_dlq(PopAckRequest(group=group, topic=topic, receipt_handle=handle))
        result = await self._with_newest(group, receipt_handle, forward)
        return HandleAnswer(pop_status(result.code, result.remark))

    async def _with_newest(self, group: str, handle: str, call: Callable[[str], Awaitable[_Result]]) -> _Result:
        """`call` with the newest handle of the message the client's `handle` names: the handle
        itself, or the one auto-renew last got for it (the message is not renewed after the
        client's own ack, nack or forward, unless the engine could not take it: then it may try again)."""
        held = self.renew.held(group, handle) if self.renew is not None else None
        if held is None:
            return await call(handle)
        async with held.lock:
            result = await call(held.latest)
            if result.code is not PopCode.UNAVAILABLE and self.renew is not None:
                self.renew.settle(group, handle)
            return result

    async def client_gone(self, client_id: str) -> None:
        """NotifyClientTermination: what the client's auto_renew receives still hold comes back soon."""
        if self.renew is not None:
            await self.renew.release_client(client_id)

    # --- settings --------------------------------------------------------------------------------

    def subscription_settings(self, group: str, server: ServerSettings) -> ServerSettings:
        """The server's settings for a consumer of `group`: its FIFO flag (consumeMessageOrderly)
        and max attempts (retryMaxTimes + 1), as the proxy answers them."""
        config = self._groups.find(group) if group else None
        if config is None:
            return server
        return dataclasses.replace(server, fifo=config.consume_message_orderly,
                                   consumer_max_attempts=config.retry_max_times + 1)
