"""Producer: validate, stamp a unique id, choose a queue, send with bounded retries.

Owns the send policy of RocketMQ's DefaultMQProducerImpl: queue selection
(round robin, a retry prefers another broker), 1 + retry_times attempts within one send
timeout, which broker codes are retried, the SendStatus mapping, orderly (sharding-key) and
batch sends, and the bounded window of asynchronous sends. Does not own connections or
routes (`ClientInstance`, `RouteCache`), nor how asynchronous sends are coalesced into
batches (`SendBatcher`).

Outcomes: a SendResult (SEND_OK, or FLUSH_DISK_TIMEOUT / FLUSH_SLAVE_TIMEOUT /
SLAVE_NOT_AVAILABLE, all of which mean the master stored the message), or an exception:
  * InvalidMessageError: bad input, nothing was sent;
  * RemoteError: the broker refused (determinate);
  * TransportError: nobody could be reached (determinate);
  * RequestTimeoutError (`indeterminate`), or its subclass OutcomeUnknownError: a request
    may have been stored (a deadline, a reset or cancelled call, or an earlier such attempt).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, TypeVar

from nodes.client.instance import (
    CLIENT_MANAGER,
    ROLE_PRODUCER,
    SYNC_WAIT_SLACK_S,
    make_client_id,
    validate_group,
)
from nodes.client.latency_fault import LatencyFaultTable
from nodes.client.msg_id import UniqIdGenerator, default_generator, local_ipv4
from nodes.client.queue_selector import QueueSelector, select_by_hash
from nodes.client.rpc.send_wire import Outgoing, may_overflow_properties
from nodes.client.send_attempts import SendAttempts
from nodes.client.send_batcher import PendingSend, SendBatcher, WindowFullError
from nodes.client.send_future import SendFuture
from nodes.common import constants as c
from nodes.common.clock import SYSTEM_CLOCK, Clock, Deadline
from nodes.common.config import Timing
from nodes.common.errors import (
    ClientStateError,
    InvalidArgumentError,
    InvalidMessageError,
    MqError,
    TransportError,
)
from nodes.common.types import Message, MessageQueue, SendResult, validate_content, validate_message

log = logging.getLogger(__name__)

T = TypeVar("T")

PROPERTY_DELAY_TIME_LEVEL = "DELAY"  # MessageConst.PROPERTY_DELAY_TIME_LEVEL

def validate_batch(msgs: Sequence[Message], body_bytes_max: int = c.MESSAGE_BODY_BYTES_MAX) -> str:
    """DefaultMQProducer#batch checks; returns the batch's topic.

    Raises:
        InvalidMessageError: as `checked_batch`.
    """
    return checked_batch(msgs, body_bytes_max)[0]


def checked_batch(msgs: Sequence[Message],
                  body_bytes_max: int = c.MESSAGE_BODY_BYTES_MAX) -> tuple[str, list[dict[str, str]]]:
    """DefaultMQProducer#batch checks; returns the batch's topic and each message's properties
    as sent (what `validate_message` built while checking them).

    Raises:
        InvalidMessageError: empty batch, mixed topics, a retry topic, a delayed message, a bad
            message, or bodies adding up to more than one message may hold.
    """
    if isinstance(msgs, Message) or not isinstance(msgs, Sequence):
        raise InvalidMessageError("send_batch takes a list of Message; use send() for one message")
    if not msgs:
        raise InvalidMessageError("send_batch got an empty list; a batch needs at least one message")
    first = msgs[0]
    if not isinstance(first, Message):
        raise InvalidMessageError(f"send_batch takes Message objects, got {type(first).__name__}")
    topic = first.topic
    validate_message(first, body_bytes_max)  # the batch's one topic is checked here, once
    if topic.startswith(c.RETRY_GROUP_TOPIC_PREFIX):
        raise InvalidMessageError("retry topics are not supported for batching")
    total = 0
    properties: list[dict[str, str]] = []
    for msg in msgs:
        if not isinstance(msg, Message):
            raise InvalidMessageError(f"send_batch takes Message objects, got {type(msg).__name__}")
        if msg.topic != topic:
            raise InvalidMessageError(
                f"a batch goes to one topic; got {topic!r} and {msg.topic!r}: split it by topic")
        properties.append(validate_content(msg, body_bytes_max))
        if msg.properties and msg.properties.get(PROPERTY_DELAY_TIME_LEVEL):
            raise InvalidMessageError("delayed messages are not supported for batching")
        total += len(msg.body)
    # RocketMQ checks the encoded batch against maxMessageSize; the bodies are its bulk.
    if total > body_bytes_max:
        raise InvalidMessageError(
            f"batch bodies add up to {total} bytes, over the {body_bytes_max}-byte limit; split the batch")
    return topic, properties


def _stamp_uniq_id(msg: Message, properties: dict[str, str], uid: str) -> str:
    """Give `msg` the UNIQ_KEY `uid`, and its `properties` as sent (built before the id was set)."""
    if msg.properties is None:
        msg.properties = {}
    # As MessageClientIDSetter#setUniqID: a message keeps its id across resends.
    msg.properties[c.PROPERTY_UNIQ_KEY] = uid
    properties[c.PROPERTY_UNIQ_KEY] = uid
    return uid


class Producer:
    """A RocketMQ-style producer with a synchronous API.

    Args:
        namesrv_addr: "host:port" of the name server (several separated by ';').
        group: the producer group.
        timing: durations (route polling); default: RocketMQ's at the cluster's time scale, which
            the name server tells at start().
        send_timeout_ms: budget of one send, retries included (default timing.send_timeout_ms).
        retry_times: extra attempts of a synchronous send (retryTimesWhenSendFailed).
        retry_times_async: extra attempts of an asynchronous send (retryTimesWhenSendAsyncFailed).
        async_window: asynchronous sends in flight (submitted, not yet resolved) before
            `send_async` blocks.
        async_batch_count_max / async_batch_bytes_max: the most messages / body bytes that
            `send_async` coalesces into one batch request.
        async_batches_in_flight_max: coalesced batches in flight per topic (each to its own queue).
        dial_overrides: address -> address to dial instead (harness link proxies).
        instance_name: the client id's instance name; facades given the same one share one
            client instance (the default gives every producer its own).
        latency_fault_enable: sendLatencyFaultEnable: a broker whose attempt failed or was slow is
            left out of queue selection for a time that grows with the latency (`latency_fault`).
    """

    def __init__(self, namesrv_addr: str, group: str = c.DEFAULT_PRODUCER_GROUP, *,
                 timing: Timing | None = None, send_timeout_ms: int | None = None,
                 retry_times: int = c.SEND_RETRY_TIMES, retry_times_async: int = c.SEND_ASYNC_RETRY_TIMES,
                 async_window: int = c.SEND_ASYNC_WINDOW_MAX, dial_overrides: Mapping[str, str] | None = None,
                 default_topic_queue_nums: int = c.PRODUCER_DEFAULT_TOPIC_QUEUE_NUMS,
                 body_bytes_max: int = c.MESSAGE_BODY_BYTES_MAX, id_generator: UniqIdGenerator | None = None,
                 selector: QueueSelector | None = None, clock: Clock = SYSTEM_CLOCK,
                 async_batch_count_max: int = c.SEND_ASYNC_BATCH_COUNT_MAX,
                 async_batch_bytes_max: int = c.SEND_ASYNC_BATCH_BYTES_MAX,
                 async_batches_in_flight_max: int = c.SEND_ASYNC_BATCHES_IN_FLIGHT_MAX,
                 instance_name: str = c.CLIENT_INSTANCE_NAME_DEFAULT,
                 latency_fault_enable: bool = c.SEND_LATENCY_FAULT_ENABLE) -> None:
        validate_group(group, "producer")
        given_timing, timing = timing, timing or Timing()
        self.send_timeout_ms = timing.send_timeout_ms if send_timeout_ms is None else send_timeout_ms
        for name, value, low in (("send_timeout_ms", self.send_timeout_ms, 1), ("retry_times", retry_times, 0),
                                 ("retry_times_async", retry_times_async, 0), ("async_window", async_window, 1),
                                 ("default_topic_queue_nums", default_topic_queue_nums, 1),
                                 ("async_batch_count_max", async_batch_count_max, 1),
                                 ("async_batch_bytes_max", async_batch_bytes_max, 1),
                                 ("async_batches_in_flight_max", async_batches_in_flight_max, 1)):
            if not isinstance(value, int) or value < low:
                raise InvalidArgumentError(f"{name} must be an integer >= {low}, got {value!r}")
        self.group = group
        self.retry_times = retry_times
        self.retry_times_async = retry_times_async
        self.default_topic_queue_nums = default_topic_queue_nums
        self.body_bytes_max = body_bytes_max
        if not isinstance(instance_name, str) or not instance_name:
            raise InvalidArgumentError(f"instance_name must be a non-empty string, got {instance_name!r}")
        self.client_id = make_client_id(instance_name)
        self._instance = CLIENT_MANAGER.instance(self.client_id, namesrv_addr, name=f"producer-{group}", timing=given_timing,
                                                 dial_overrides=dial_overrides,
                                                 producer_default_queue_nums=default_topic_queue_nums)
        self._attached = False
        self._ids = id_generator
        self._selector = selector or QueueSelector()
        self._clock = clock
        self.latency_faults = LatencyFaultTable(timing.send_not_available_max_ms) if latency_fault_enable else None
        self._batcher = SendBatcher(
            send_batch=self._send_coalesced, publish_queues=self._instance.routes.publish_info,
            pick_queue=self._selector.select, wake=self._wake_batcher, window=async_window,
            batch_count_max=async_batch_count_max, batch_bytes_max=min(async_batch_bytes_max, body_bytes_max),
            batches_in_flight_max=async_batches_in_flight_max)
        self._born_host = ""

    # --- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        if self._ids is None:
            self._ids = default_generator()
        self._born_host = f"{local_ipv4()}:0"
        self._instance.attach(ROLE_PRODUCER, self.group)
        self._attached = True
        if self.latency_faults is not None and not self._instance.timing_given:  # the cluster's time scale
            self.latency_faults = LatencyFaultTable(self._instance.timing.send_not_available_max_ms)

    @property
    def timing(self) -> Timing:
        """The timers this producer runs with: the given ones, or from start() on the cluster's."""
        return self._instance.timing

    def shutdown(self) -> None:
        """Wait (boundedly) for asynchronous sends in flight, then close everything.

        Messages still waiting for their batch after that resolve with ClientStateError
        (never sent); batches cut off in flight with OutcomeUnknownError.
        """
        if (self._attached and self._instance.running and not self._instance.in_loop_thread()
                and not self._batcher.wait_idle(self.send_timeout_ms / 1000 + SYNC_WAIT_SLACK_S)):
            closing = ClientStateError("send_async: the producer shut down before the message was sent")
            try:
                self._instance.run(self._fail_waiting(closing), SYNC_WAIT_SLACK_S, "shutdown")
            except MqError as err:
                log.warning("shutdown: could not fail the waiting async sends: %s", err)
        if self._attached:
            self._attached = False
            self._instance.detach(ROLE_PRODUCER, self.group)

    def __enter__(self) -> Producer:
        if not self._attached:
            self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    # --- public sends ----------------------------------------------------------------
    def send(self, msg: Message) -> SendResult:
        """Send one message; retried on another broker when the failure allows it."""
        out, uid = self._prepare(msg)
        return self._send_sync(msg.topic, [out], [uid], f"send to {msg.topic}")

    def send_orderly(self, msg: Message, sharding_key: object) -> SendResult:
        """Send to the queue `abs(hashCode(str(sharding_key)) % len(publish list))`: one attempt.

        The publish list holds only brokers with a live master, so losing a master moves keys
        to other queues, exactly as in RocketMQ.
        """
        out, uid = self._prepare(msg)
        return self._run(self._send_orderly(msg.topic, out, uid, sharding_key), f"send_orderly to {msg.topic}")

    def send_batch(self, msgs: Sequence[Message]) -> SendResult:
        """Send messages of one topic as one request to one queue, all or nothing."""
        topic, properties = checked_batch(msgs, self.body_bytes_max)
        outs, uids = self._prepare_batch(msgs, properties)
        return self._send_sync(topic, outs, uids, f"send_batch of {len(outs)} to {topic}")

    def send_async(self, msg: Message) -> concurrent.futures.Future[SendResult]:
        """Start a send and return its future; blocks while `async_window` sends are in flight.

        Messages submitted while a batch to their topic is in flight leave together as the
        next batch (one request, to one queue, all or nothing; RocketMQ sends each on its own,
        see the README's differences); a message with no batch ahead of it leaves at once. Each future resolves with the message's own SendResult (its own
        msg_id, queue and queue offset) or with its batch's exception. Messages reach a queue
        in submission order. Bad input raises InvalidMessageError here, before anything is
        queued. Retries follow RocketMQ's async path: only failures to get an answer are
        retried, within one send timeout counted from this call.
        """
        out, uid = self._prepare(msg)
        if not self._attached or not self._instance.running:
            raise ClientStateError(f"send_async to {msg.topic}: the producer is not running; call start() first")
        # A Future whose Condition is made only if somebody blocks on it (most never do).
        fut: concurrent.futures.Future[SendResult] = SendFuture()
        # RocketMQ refuses delayed messages and retry topics in a batch: they leave alone, as
        # does a message the broker might refuse for its properties' size (it fails alone).
        solo = (bool(out.properties.get(PROPERTY_DELAY_TIME_LEVEL)) or msg.topic.startswith(c.RETRY_GROUP_TOPIC_PREFIX)
                or may_overflow_properties(out.properties))
        pending = PendingSend(msg.topic, out, uid, len(msg.body), fut,
                              Deadline.after(self._clock, self.send_timeout_ms), solo)
        try:
            # Blocking the loop thread on the window would deadlock the sends that free it.
            self._batcher.submit(pending, block=not self._instance.in_loop_thread())
        except WindowFullError:
            raise ClientStateError("send_async window is full and the caller is the client's loop thread") from None
        return fut

    def _wake_batcher(self) -> None:
        self._instance.submit(self._drain_batcher(), "send_async")

    async def _drain_batcher(self) -> None:
        self._batcher.drain()

    async def _fail_waiting(self, exc: BaseException) -> None:
        self._batcher.fail_waiting(exc)

    async def _send_coalesced(self, topic: str, outs: list[Outgoing], uids: list[str],
                              queue: MessageQueue | None, deadline: Deadline) -> SendResult:
        return await self._send_default(topic, outs, uids, self.retry_times_async, asynchronous=True,
                                        first_queue=queue, deadline=deadline)

    # --- preparation (caller thread) ---------------------------------------------------
    def _prepare(self, msg: Message, checked_properties: dict[str, str] | None = None) -> tuple[Outgoing, str]:
        """Validate (unless `checked_properties`, what `validate_message` returned for it, are
        given), stamp UNIQ_KEY (kept if the message already has one) and encode."""
        if not isinstance(msg, Message):
            raise InvalidMessageError(f"expected a Message, got {type(msg).__name__}")
        properties = (checked_properties if checked_properties is not None
                      else validate_message(msg, self.body_bytes_max))
        # `_prepare_batch((msg,), [properties])` without its lists: every send_async comes here
        ids = self._started_ids()
        uid = msg.properties.get(c.PROPERTY_UNIQ_KEY, "") if msg.properties else ""
        if not uid:
            uid = _stamp_uniq_id(msg, properties, ids.next_id())
        return Outgoing(msg.body, msg.flag, properties, self._clock.wall_ms()), uid

    def _prepare_batch(self, msgs: Sequence[Message], properties: list[dict[str, str]]
                       ) -> tuple[list[Outgoing], list[str]]:
        """Stamp UNIQ_KEY on checked messages (kept if a message already has one) and encode them
        with their checked `properties`: the ids they lack are taken in one go, and one born
        time stamps them all (the broker keeps one for a batch body anyway)."""
        ids = self._started_ids()
        uniq_key = c.PROPERTY_UNIQ_KEY
        uids = [msg.properties.get(uniq_key, "") if msg.properties else "" for msg in msgs]
        missing = [i for i, uid in enumerate(uids) if not uid]
        if missing:
            for i, uid in zip(missing, ids.next_ids(len(missing)), strict=True):
                uids[i] = _stamp_uniq_id(msgs[i], properties[i], uid)
        born_ms = self._clock.wall_ms()
        return [Outgoing(msg.body, msg.flag, props, born_ms) for msg, props in zip(msgs, properties, strict=True)], uids

    def _started_ids(self) -> UniqIdGenerator:
        if self._ids is None:
            raise ClientStateError("the producer is not started; call start() first")
        return self._ids

    def _run(self, coro: Any, what: str) -> SendResult:
        if not self._attached:
            coro.close()
            raise ClientStateError(f"{what}: the producer is not running; call start() first")
        return self._instance.run(coro, self.send_timeout_ms / 1000 + SYNC_WAIT_SLACK_S, what)

    # --- the synchronous send path (caller thread, then the loop) ------------------------
    def _send_sync(self, topic: str, outs: list[Outgoing], uids: list[str], what: str) -> SendResult:
        """`_send_default` for a caller that waits: its first attempt made in the caller's thread
        over `ClientApi.blocking_sends` once the topic's publish list and the broker's address are
        cached, and whatever follows (a retry, a route fetch) on the loop, from where that left off.

        Why: through the loop a one-message send paid the hand-offs to the loop and back and
        gRPC's hop to the loop thread (docs/benchmark.md, "One message at a time").
        """
        if not self._attached or self._instance.in_loop_thread():  # the loop path says why not
            return self._run(self._send_default(topic, outs, uids, self.retry_times), what)
        deadline = Deadline.after(self._clock, self.send_timeout_ms)
        attempts = self._attempts(topic, uids, 1 + self.retry_times, deadline)
        routes = self._instance.routes
        queues = routes.cached_publish_info(topic)
        mq = attempts.next_queue(queues) if queues else None
        addr = routes.find_broker_address_in_publish(mq.broker_name) if mq is not None else None
        if mq is None or addr is None:  # the loop fetches the route or address, then sends there
            return self._run(self._send_default(topic, outs, uids, self.retry_times, first_queue=mq,
                                                deadline=deadline), what)
        try:
            result = self._instance.api.send_blocking(
                addr, mq, outs, uids, group=self.group, default_topic_queue_nums=self.default_topic_queue_nums,
                born_host=self._born_host, timeout_ms=max(1, deadline.remaining_ms()),
                what=f"{attempts.what} at {mq.broker_name}/{addr}")
        except MqError as err:
            attempts.failed(err)  # raises unless it is tried again
            return self._run(self._send_default(topic, outs, uids, self.retry_times, attempts=attempts,
                                                queues=queues), what)
        attempts.succeeded()
        return result

    def _attempts(self, topic: str, uids: list[str], tries: int, deadline: Deadline, *,
                  first_queue: MessageQueue | None = None, asynchronous: bool = False) -> SendAttempts:
        return SendAttempts(f"send {uids[0]}{'+' if len(uids) > 1 else ''} to {topic}", tries, deadline,
                            self._selector, self._clock, first_queue=first_queue, asynchronous=asynchronous,
                            latency_faults=self.latency_faults)

    # --- the send path (loop) ----------------------------------------------------------
    async def _before(self, aw: Awaitable[T], deadline: Deadline, what: str) -> T:
        """Await a step that precedes sending (route lookup) within the send deadline."""
        try:
            async with asyncio.timeout(deadline.remaining_s()):
                return await aw
        except TimeoutError:
            raise TransportError(f"{what}: the {self.send_timeout_ms} ms send timeout passed before "
                                 "the request was sent; nothing was stored") from None

    async def _send_default(self, topic: str, outs: list[Outgoing], uids: list[str],
                            retry_times: int, *, asynchronous: bool = False, first_queue: MessageQueue | None = None,
                            deadline: Deadline | None = None, attempts: SendAttempts | None = None,
                            queues: list[MessageQueue] | None = None) -> SendResult:
        """sendDefaultImpl: up to 1 + retry_times attempts within one send timeout.

        Which failures are retried: `retries_send`. `first_queue` is where the first attempt goes (default: the selector's next queue);
        `deadline` the end of the send timeout (default: one send timeout from now). `attempts`
        (with the publish list they were made from, `queues`) goes on with a send whose first
        attempts were made elsewhere and failed (`_send_sync`).
        """
        if attempts is None:
            if deadline is None:
                deadline = Deadline.after(self._clock, self.send_timeout_ms)
            attempts = self._attempts(topic, uids, 1 + retry_times, deadline, first_queue=first_queue,
                                      asynchronous=asynchronous)
            queues = await self._before(self._instance.routes.publish_info(topic), attempts.deadline, attempts.what)
        else:
            assert queues is not None
            queues = await self._after_failure(topic, queues, attempts)
        while (mq := attempts.next_queue(queues)) is not None:
            try:
                result = await self._send_kernel(mq, outs, uids, attempts.deadline, attempts.what)
            except MqError as err:
                attempts.failed(err)  # raises unless it is tried again
                queues = await self._after_failure(topic, queues, attempts)
                continue
            attempts.succeeded()
            return result
        attempts.raise_exhausted(self.send_timeout_ms)

    async def _after_failure(self, topic: str, queues: list[MessageQueue], attempts: SendAttempts) -> list[MessageQueue]:
        """The publish list for the attempt after a failed one: refreshed if the failure asks for it."""
        last_error = attempts.last_error
        if last_error is not None and last_error.refresh_route and not attempts.deadline.expired():
            return await self._refreshed_queues(topic, queues, attempts.deadline, attempts.what)
        return queues

    async def _refreshed_queues(self, topic: str, queues: list[MessageQueue], deadline: Deadline,
                                what: str) -> list[MessageQueue]:
        """The publish list after a route refresh; the old list if the refresh fails."""
        try:
            await self._before(self._instance.routes.update_topic(topic), deadline, what)
            return await self._before(self._instance.routes.publish_info(topic), deadline, what)
        except MqError as err:
            log.info("%s: route refresh failed (%s); keeping %d queues", what, err, len(queues))
            return queues

    async def _send_orderly(self, topic: str, out: Outgoing, uid: str,
                            sharding_key: object) -> SendResult:
        """sendSelectImpl with SelectMessageQueueByHash: the publish list, one attempt."""
        what = f"send_orderly {uid} to {topic}"
        deadline = Deadline.after(self._clock, self.send_timeout_ms)
        queues = await self._before(self._instance.routes.publish_info(topic), deadline, what)
        return await self._send_kernel(select_by_hash(queues, sharding_key), [out], [uid], deadline, what)

    async def _send_kernel(self, mq: MessageQueue, outs: list[Outgoing], uids: list[str],
                           deadline: Deadline, what: str) -> SendResult:
        """sendKernelImpl: one request to the master of `mq`'s broker."""
        routes = self._instance.routes
        addr = routes.find_broker_address_in_publish(mq.broker_name)
        if addr is None:
            addr = await self._before(routes.publish_address(mq.topic, mq.broker_name), deadline, what)
        remaining_ms = deadline.remaining_ms()
        if remaining_ms <= 0:
            raise TransportError(f"{what}: the send timeout passed before the request was sent")
        return await self._instance.api.send(
            addr, mq, outs, uids, group=self.group, default_topic_queue_nums=self.default_topic_queue_nums,
            born_host=self._born_host, timeout_ms=remaining_ms, what=f"{what} at {mq.broker_name}/{addr}")
