"""PullConsumer: explicit queue-and-offset pulls, RocketMQ's DefaultMQPullConsumer in shape.

Owns argument checks and the synchronous facade: which queues a topic has, one pull (plain
or long-polled), and the broker-side offset and queue-offset queries. The pull itself goes
through `PullApi` on the broker's pipelined `PullStream`. Does not own any pull
loop, flow control or offset caching: the caller decides what to pull and when to commit.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Mapping
from typing import Any

from nodes.client.instance import (
    CLIENT_MANAGER,
    ROLE_CONSUMER,
    SYNC_WAIT_SLACK_S,
    make_client_id,
    validate_group,
)
from nodes.client.offset_store import offset_store_address, query_queue_offset
from nodes.client.pull_api import PullApi
from nodes.client.rpc.api import OffsetKind
from nodes.client.sync_call import Settle
from nodes.common import constants as c
from nodes.common.config import Timing
from nodes.common.errors import (
    ClientStateError,
    InvalidArgumentError,
    InvalidMessageError,
    RouteNotFoundError,
)
from nodes.common.types import MessageQueue, PullResult, validate_topic


def check_pull_args(mq: object, queue_offset: object, max_nums: object, sub_expression: object) -> str:
    """Validate a pull's arguments; returns the expression to send ("*" for None).

    Raises:
        InvalidArgumentError (a ValueError) naming the argument and what to pass instead.
    """
    if not isinstance(mq, MessageQueue):
        raise InvalidArgumentError(f"mq must be a MessageQueue (see fetch_queues), got {type(mq).__name__}")
    if not isinstance(queue_offset, int) or isinstance(queue_offset, bool) or queue_offset < 0:
        raise InvalidArgumentError(f"offset must be a queue offset >= 0, got {queue_offset!r}; "
                                   "use min_offset(mq) or query_offset(mq) to find one")
    if not isinstance(max_nums, int) or isinstance(max_nums, bool) or max_nums <= 0:
        raise InvalidArgumentError(f"max_nums must be a positive integer, got {max_nums!r}")
    if max_nums > c.PULL_BATCH_COUNT_MAX:
        raise InvalidArgumentError(
            f"max_nums {max_nums} is over the {c.PULL_BATCH_COUNT_MAX}-message limit of one pull; "
            "pull in several calls")
    if sub_expression is None:
        return "*"
    if not isinstance(sub_expression, str):
        raise InvalidArgumentError(f"sub_expression must be a tag expression like 'a || b' or '*', "
                                   f"got {type(sub_expression).__name__}")
    return sub_expression


def _check_topic(topic: object) -> str:
    if not isinstance(topic, str):
        raise InvalidArgumentError(f"topic must be a string, got {type(topic).__name__}")
    try:
        validate_topic(topic)
    except InvalidMessageError as err:
        raise InvalidArgumentError(str(err)) from None
    return topic


class PullConsumer:
    """Pull messages from explicit queues and offsets.

    Args:
        namesrv_addr: "host:port" of the name server (several separated by ';').
        group: the consumer group (offsets are kept per group on the broker).
        timing: durations (route polling, long-poll hold); default: RocketMQ's at the cluster's time
            scale, which the name server tells at start().
        dial_overrides: address -> address to dial instead (harness link proxies).
        pull_timeout_ms: deadline of a pull that does not long-poll (consumerPullTimeoutMillis).
        on_routing_event: called (on the client's loop thread) with a dict for every pull's routing
            decision: the broker id asked for, the one that answered, the suggestion.
        pull_from_broker_id: beyond RocketMQ: pull from this broker id (e.g. 1, a slave) whatever
            the brokers suggest; None (the default) follows the suggestions as RocketMQ does.
        instance_name: the client id's instance name; facades given the same one share one
            client instance (the default gives every consumer its own).

    Pulled messages come as a sequence decoded on first use (`pull_api.MessageBatch`), so
    decoding runs in the thread that reads them and `len(result.messages)` costs nothing.
    """

    def __init__(self, namesrv_addr: str, group: str, *, timing: Timing | None = None,
                 dial_overrides: Mapping[str, str] | None = None, pull_timeout_ms: int = c.CONSUMER_PULL_TIMEOUT_MS,
                 on_routing_event: Callable[[dict[str, Any]], None] | None = None,
                 pull_from_broker_id: int | None = None,
                 instance_name: str = c.CLIENT_INSTANCE_NAME_DEFAULT) -> None:
        validate_group(group, "consumer")
        if not isinstance(pull_timeout_ms, int) or pull_timeout_ms <= 0:
            raise InvalidArgumentError(f"pull_timeout_ms must be a positive integer, got {pull_timeout_ms!r}")
        if pull_from_broker_id is not None and (not isinstance(pull_from_broker_id, int)
                                                or isinstance(pull_from_broker_id, bool) or pull_from_broker_id < 0):
            raise InvalidArgumentError(f"pull_from_broker_id must be a broker id >= 0 or None, "
                                       f"got {pull_from_broker_id!r}")
        self.group = group
        self.pull_timeout_ms = pull_timeout_ms
        if not isinstance(instance_name, str) or not instance_name:
            raise InvalidArgumentError(f"instance_name must be a non-empty string, got {instance_name!r}")
        self.client_id = make_client_id(instance_name)
        self._instance = CLIENT_MANAGER.instance(self.client_id, namesrv_addr, name=f"pull-consumer-{group}",
                                                 timing=timing, dial_overrides=dial_overrides)
        self._attached = False
        self.timing = self._instance.timing
        self._api = PullApi(self._instance, group, on_routing_event)
        self._api.pinned_broker_id = pull_from_broker_id

    # --- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        self._instance.attach(ROLE_CONSUMER, self.group)
        self._attached = True
        self.timing = self._instance.timing  # the cluster's, when none was given (cluster_timing)

    def shutdown(self) -> None:
        if self._attached:
            self._attached = False
            self._instance.detach(ROLE_CONSUMER, self.group)

    def __enter__(self) -> PullConsumer:
        if not self._attached:
            self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def _run(self, coro: Any, timeout_ms: int, what: str) -> Any:
        if not self._attached:
            coro.close()
            raise ClientStateError(f"{what}: the consumer is not running; call start() first")
        return self._instance.run(coro, timeout_ms / 1000 + SYNC_WAIT_SLACK_S, what)

    def _run_pull(self, start: Callable[[Settle], None], timeout_ms: int, what: str, mq: MessageQueue,
                  offset: int) -> PullResult:
        # A waiting caller's pull is started by a loop callback and settled by the stream's reader
        # (PullApi.start_pull): no task, no future, one loop turn less than `_run`.
        if not self._attached:
            raise ClientStateError(f"{what} {mq}@{offset}: the consumer is not running; call start() first")
        return self._instance.run_started(start, timeout_ms / 1000 + SYNC_WAIT_SLACK_S, f"{what} {mq}@{offset}")

    # --- queues and pulls --------------------------------------------------------------
    def fetch_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's readable queues, sorted, fresh from the name server.

        Raises:
            RouteNotFoundError: the topic has no route, or no readable queue.
        """
        _check_topic(topic)
        queues = self._run(self._instance.routes.subscribe_info(topic, refresh=True),
                           self.timing.rpc_timeout_ms * len(self._instance.namesrv_addrs), f"fetch_queues({topic})")
        if not queues:
            raise RouteNotFoundError(f"topic {topic} has no readable queue; check its permissions")
        return queues

    def pull(self, mq: MessageQueue, offset: int, max_nums: int = 32, sub_expression: str = "*") -> PullResult:
        """Pull up to `max_nums` messages of `mq` from `offset`; answers at once.

        Made in this thread, on a gRPC stream of its own to the broker, once the queue's route is
        cached (the first pull of a topic goes through the client's loop, which fetches it).

        Raises:
            InvalidArgumentError: bad arguments (nothing is sent).
            RouteNotFoundError: unknown topic. BrokerNotFoundError: unknown broker name.
            TransportError / RequestTimeoutError: no answer. RemoteError: the broker refused.
        """
        expression = check_pull_args(mq, offset, max_nums, sub_expression)
        timeout_ms = self.pull_timeout_ms
        if not self._attached:
            raise ClientStateError(f"pull {mq}@{offset}: the consumer is not running; call start() first")
        if not self._instance.in_loop_thread():
            # In this thread, on a synchronous stream: no hand-off to the loop and back.
            result = self._api.pull_blocking(mq, expression, offset, max_nums, timeout_ms=timeout_ms)
            if result is not None:
                return result
        # The route or the broker's address is not cached yet (the loop fetches them), or the
        # caller is the loop's own thread (a listener of a push consumer on the same client).
        return self._run_pull(lambda settle: self._api.start_pull(
            settle, mq, expression, offset, max_nums, suspend=False, suspend_timeout_ms=0, timeout_ms=timeout_ms,
            lazy=True), timeout_ms, "pull", mq, offset)

    def pull_async(self, mq: MessageQueue, offset: int, max_nums: int = 32,
                   sub_expression: str = "*") -> concurrent.futures.Future[PullResult]:
        """Start `pull(mq, offset, max_nums, sub_expression)` and return its future at once.

        RocketMQ's pull with a PullCallback, as a future: any number may be in flight, and
        all of them share the broker's one pipelined stream. The future fails with what
        `pull` would raise; bad arguments raise InvalidArgumentError here. Cancelling it
        works only until the client's loop has sent the pull.
        """
        expression = check_pull_args(mq, offset, max_nums, sub_expression)
        if not self._attached:
            raise ClientStateError(f"pull_async {mq}@{offset}: the consumer is not running; call start() first")
        timeout_ms = self.pull_timeout_ms
        # settled by the stream's reader straight into the future (PullApi.start_pull): no task
        # and no loop future chained to it
        return self._instance.submit_started(lambda settle: self._api.start_pull(
            settle, mq, expression, offset, max_nums, suspend=False, suspend_timeout_ms=0, timeout_ms=timeout_ms,
            lazy=True), f"pull_async {mq}@{offset}")

    def pull_block_if_not_found(self, mq: MessageQueue, offset: int, max_nums: int = 32,
                                sub_expression: str = "*", timeout_ms: int | None = None) -> PullResult:
        """Like `pull`, but the broker holds the request until messages arrive or the hold ends.

        `timeout_ms` is the hold asked of the broker (default timing.broker_suspend_max_ms);
        the request's own deadline is set above it.
        """
        expression = check_pull_args(mq, offset, max_nums, sub_expression)
        suspend_ms = self.timing.broker_suspend_max_ms if timeout_ms is None else timeout_ms
        if not isinstance(suspend_ms, int) or isinstance(suspend_ms, bool) or suspend_ms <= 0:
            raise InvalidArgumentError(f"timeout_ms must be a positive integer of ms, got {timeout_ms!r}")
        rpc_ms = max(self.timing.consumer_timeout_when_suspend_ms, suspend_ms + self.timing.rpc_timeout_ms)
        return self._run_pull(lambda settle: self._api.start_pull(
            settle, mq, expression, offset, max_nums, suspend=True, suspend_timeout_ms=suspend_ms, timeout_ms=rpc_ms,
            lazy=True), rpc_ms, "pull_block_if_not_found", mq, offset)

    # --- consumer offsets ----------------------------------------------------------------
    def query_offset(self, mq: MessageQueue) -> int:
        """The group's committed offset of `mq` on its broker; -1 if the broker has none."""
        self._check_mq(mq)
        timeout_ms = self.timing.query_offset_timeout_ms
        return self._run(self._query_offset(mq, timeout_ms), timeout_ms * 2, f"query_offset {mq}")

    def update_offset(self, mq: MessageQueue, offset: int) -> None:
        """Commit `offset` for the group on `mq`'s broker, synchronously.

        RocketMQ's pull consumer only updates its offset store here and persists it in
        batches (every persistConsumerOffsetInterval, oneway); we send one request per call so
        the caller knows the broker has it.
        """
        self._check_mq(mq)
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise InvalidArgumentError(f"offset must be a queue offset >= 0, got {offset!r}")
        timeout_ms = self.timing.rpc_timeout_ms
        self._run(self._update_offset(mq, offset, timeout_ms), timeout_ms * 2, f"update_offset {mq}")

    async def _query_offset(self, mq: MessageQueue, timeout_ms: int) -> int:
        found = await offset_store_address(self._instance, mq)
        offset = await self._instance.api.query_consumer_offset(found.addr, self.group, mq, timeout_ms)
        return -1 if offset is None else offset

    async def _update_offset(self, mq: MessageQueue, offset: int, timeout_ms: int) -> None:
        found = await offset_store_address(self._instance, mq)
        await self._instance.api.update_consumer_offset(found.addr, self.group, mq, offset, timeout_ms)

    # --- queue offsets (MQAdminImpl: masters only) ------------------------------------------
    def min_offset(self, mq: MessageQueue) -> int:
        """The smallest queue offset still stored in `mq`."""
        return self._queue_offset(mq, OffsetKind.MIN, 0, "min_offset")

    def max_offset(self, mq: MessageQueue) -> int:
        """One past the last queue offset of `mq` (the next offset to be written)."""
        return self._queue_offset(mq, OffsetKind.MAX, 0, "max_offset")

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The queue offset of the first message stored at or after `timestamp_ms`."""
        if not isinstance(timestamp_ms, int) or isinstance(timestamp_ms, bool) or timestamp_ms < 0:
            raise InvalidArgumentError(f"timestamp_ms must be ms since the epoch, got {timestamp_ms!r}")
        return self._queue_offset(mq, OffsetKind.BY_TIMESTAMP, timestamp_ms, "search_offset")

    def _queue_offset(self, mq: MessageQueue, kind: OffsetKind, timestamp_ms: int, what: str) -> int:
        self._check_mq(mq)
        timeout_ms = self.timing.rpc_timeout_ms
        return self._run(query_queue_offset(self._instance, mq, kind, timestamp_ms=timestamp_ms, timeout_ms=timeout_ms),
                         timeout_ms * 2, f"{what} {mq}")

    @staticmethod
    def _check_mq(mq: object) -> None:
        if not isinstance(mq, MessageQueue):
            raise InvalidArgumentError(f"mq must be a MessageQueue (see fetch_queues), got {type(mq).__name__}")
