"""The push consumer's pull loops: one task per owned queue, on the client's event loop.

Owns RocketMQ's `DefaultMQPushConsumerImpl#pullMessage` and its `PullCallback`: the
checks before a pull (dropped, pull timestamp, state, flow control,
subscription), the long-polled pull itself with the piggy-backed commit offset (CLUSTERING
only), and what each outcome does: FOUND caches the messages and hands them to the consume
service; NO_NEW_MSG / NO_MATCHED_MSG move the offset (and correct the stored one when nothing
is cached); OFFSET_ILLEGAL drops the queue and fixes its offset after a delay; a failure backs
off. Does not choose queues (rebalance), consume, or route pulls (`PullApi`).

A loop ends when its queue is dropped; rebalance starts a new one for a re-added queue.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from nodes.client.consumer_state import ConsumerState
from nodes.client.flow_control import FlowThresholds, decide_pull
from nodes.client.offset_store import OffsetStore
from nodes.client.process_queue import ProcessQueue
from nodes.client.pull_api import PullApi
from nodes.common.clock import Clock
from nodes.common.config import Timing
from nodes.common.errors import MqError
from nodes.common.types import MessageExt, MessageModel, MessageQueue, PullResult, PullStatus

log = logging.getLogger(__name__)

FLOW_CONTROL_LOG_EVERY = 1_000  # RocketMQ logs one flow-control line per this many throttled pulls

SubmitConsume = Callable[[Sequence[MessageExt], ProcessQueue, MessageQueue], None]
# orderly: (pq, mq, dispatch) where dispatch is put_messages' answer (no consume request queued yet)
SubmitOrderly = Callable[[ProcessQueue, MessageQueue, bool], None]


@dataclass(slots=True)
class PullRequest:
    """One owned queue's pull state: where to pull next, and its cache."""

    mq: MessageQueue
    pq: ProcessQueue
    next_offset: int
    previously_locked: bool = False  # orderly: the start offset was re-read after the queue was locked
    # orderly, a regained queue: this client's own consumed position; the start re-read after the
    # lock never goes below it (what this client consumed itself is not consumed again)
    resume_floor: int | None = None


@dataclass
class PullStats:
    pulls: int = 0
    found: int = 0
    messages: int = 0
    no_new: int = 0
    offset_illegal: int = 0
    errors: int = 0
    flow_controlled: int = 0
    not_locked: int = 0  # orderly pulls put off because the queue is not locked


class PullService:
    """Runs the pull loops. Loop-confined.

    Args:
        api: routes pulls (pull-from-which-node memory, commit flag cleared for slaves).
        state: the subscriptions and the lock-validity rule (read, never changed here).
        offset_store: read for the commit offset, corrected on NO_NEW_MSG / OFFSET_ILLEGAL.
        submit: hands found messages to the consume service.
        remove_process_queue: rebalance's removal, used by the OFFSET_ILLEGAL fix-up.
        thresholds: the current flow-control thresholds (rewritten after rebalances).
        orderly_submit: set for an orderly consumer: hands the dispatch flag to the orderly
            service instead of `submit`, and turns on the lock check (step 8).
        compute_pull_from_where: orderly: re-reads a queue's start offset on its first pull
            after it was locked.
        on_pulled: told (queue, next offset) after found messages are cached; only the fault
            switch commit-pulled-offset listens (the offset store's `note_pulled`).
    """

    def __init__(self, *, api: PullApi, state: ConsumerState, offset_store: OffsetStore,
                 submit: SubmitConsume, remove_process_queue: Callable[[MessageQueue], Awaitable[None]],
                 thresholds: Callable[[], FlowThresholds], message_model: MessageModel, timing: Timing,
                 clock: Clock, pull_batch_size: int, post_subscription: bool,
                 orderly_submit: SubmitOrderly | None = None,
                 compute_pull_from_where: Callable[[MessageQueue], Awaitable[int]] | None = None,
                 on_pulled: Callable[[MessageQueue, int], None] | None = None) -> None:
        self._api = api
        self._on_pulled = on_pulled
        self._orderly_submit = orderly_submit
        self._compute_pull_from_where = compute_pull_from_where
        self._state = state
        self._offset_store = offset_store
        self._submit = submit
        self._remove_process_queue = remove_process_queue
        self._thresholds = thresholds
        self._message_model = message_model
        self._timing = timing
        self._clock = clock
        self.pull_batch_size = pull_batch_size
        self.post_subscription = post_subscription
        self._tasks: set[asyncio.Task[Any]] = set()
        self._running = True
        self.stats = PullStats()
        self._suspend_ms = timing.broker_suspend_max_ms
        self._rpc_ms = max(timing.consumer_timeout_when_suspend_ms, self._suspend_ms + timing.rpc_timeout_ms)

    def execute_pull_request_immediately(self, request: PullRequest) -> None:
        """Start the pull loop of a newly owned queue."""
        if not self._running:
            return
        self._spawn(self._pull_loop(request), f"pull-{request.mq.topic}-{request.mq.broker_name}-{request.mq.queue_id}")

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("pull task %s died", task.get_name(), exc_info=task.exception())

    async def stop(self) -> None:
        """End every pull loop and pending fix-up."""
        self._running = False
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _pull_loop(self, request: PullRequest) -> None:
        while self._running:
            delay_ms = await self.pull_message(request)
            if delay_ms is None:
                return
            if delay_ms > 0:
                await self._clock.sleep_ms(delay_ms)

    async def pull_message(self, request: PullRequest) -> int | None:
        """One pass of pullMessage + PullCallback: ms to wait before the next pull, None to stop."""
        pq, mq = request.pq, request.mq
        if pq.dropped or not self._running:
            return None
        now_ms = self._clock.monotonic_ms()
        pq.last_pull_timestamp_ms = now_ms  # before flow control, so a throttled queue never looks idle
        orderly = self._orderly_submit is not None
        decision = decide_pull(pq, now_ms=now_ms, orderly=orderly, thresholds=self._thresholds(),
                               delay_ms=self._timing.pull_delay_when_flow_control_ms)
        if not decision.pull_now:
            self.stats.flow_controlled += 1
            if self.stats.flow_controlled % FLOW_CONTROL_LOG_EVERY == 1:
                log.warning("flow control on %s: %s (%d times so far)", mq, decision.detail,
                            self.stats.flow_controlled)
            return decision.delay_ms
        if orderly:
            delay_ms = await self._check_lock(request)
            if delay_ms is not None:
                return None if pq.dropped else delay_ms
        subscription = self._state.subscriptions.get(mq.topic)
        if subscription is None:
            log.warning("no subscription for %s; pulling it again later", mq)
            return self._timing.pull_delay_when_exception_ms
        commit_offset = None
        commit_seq = 0
        if self._message_model is MessageModel.CLUSTERING and (not orderly or self._state.lock_valid(pq)):
            # beyond RocketMQ: an orderly queue whose client lock ran out piggybacks no offset (a
            # resumed consumer must not rewind the new owner's offset); the clock is read again
            # here, since the start-offset query above may have spanned a pause
            commit_offset = self._offset_store.read_memory(mq)
            commit_seq = self._api.next_commit_seq()
        self.stats.pulls += 1
        try:
            result = await self._api.pull_kernel(
                mq, subscription.expression, request.next_offset, self.pull_batch_size, suspend=True,
                suspend_timeout_ms=self._suspend_ms, timeout_ms=self._rpc_ms, commit_offset_value=commit_offset,
                commit_seq=commit_seq,
                post_subscription=self.post_subscription, sub_version=subscription.sub_version)
        except MqError as err:
            self.stats.errors += 1
            log.warning("pull %s@%d failed: %s", mq, request.next_offset, err)
            return self._timing.pull_delay_when_exception_ms
        if pq.dropped or not self._running:
            return None  # the queue changed hands while the pull was out; what came back is not ours
        return self.on_pull_result(request, result)

    def on_pull_result(self, request: PullRequest, result: PullResult) -> int | None:
        """PullCallback#onSuccess. Returns the delay before the next pull, or None to stop."""
        pq, mq = request.pq, request.mq
        status = result.status
        if status is PullStatus.FOUND:
            previous = request.next_offset
            request.next_offset = result.next_begin_offset
            self.stats.found += 1
            msgs = result.messages
            if not msgs:
                return 0  # all filtered out on the client: the offset store is not touched
            if result.next_begin_offset < previous or msgs[0].queue_offset < previous:
                log.warning("[BUG] %s: pulled from %d, got next %d and first %d", mq, previous,
                            result.next_begin_offset, msgs[0].queue_offset)
            self.stats.messages += len(msgs)
            dispatch = pq.put_messages(msgs)
            if self._on_pulled is not None:
                self._on_pulled(mq, result.next_begin_offset)
            if self._orderly_submit is not None:
                self._orderly_submit(pq, mq, dispatch)
            else:
                self._submit(msgs, pq, mq)
            return 0
        if status in (PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG):
            self.stats.no_new += 1
            request.next_offset = result.next_begin_offset
            if pq.msg_count == 0:  # correctTagsOffset
                self._offset_store.update_offset(mq, request.next_offset, increase_only=True)
            return 0
        # OFFSET_ILLEGAL: drop now; store the broker's offset (even backwards) and let go later.
        self.stats.offset_illegal += 1
        log.warning("pull %s: offset illegal (%s); moving to %d in %d ms", mq, result.store_status,
                    result.next_begin_offset, self._timing.pull_offset_fix_delay_ms)
        request.next_offset = result.next_begin_offset
        pq.dropped = True
        self._spawn(self._fix_offset_later(request), f"offset-fix-{mq.topic}-{mq.broker_name}-{mq.queue_id}")
        return None

    async def _check_lock(self, request: PullRequest) -> int | None:
        """Step 8 (orderly): pull only a locked queue; on the first pull after locking, start from
        the offset the store holds now. Returns the delay before trying again, or None to pull."""
        pq, mq = request.pq, request.mq
        if not pq.locked:
            self.stats.not_locked += 1
            return self._timing.pull_delay_when_exception_ms
        if request.previously_locked:
            return None
        assert self._compute_pull_from_where is not None
        try:
            offset = await self._compute_pull_from_where(mq)
        except MqError as err:
            log.warning("pull %s: re-reading the start offset after locking failed: %s", mq, err)
            return self._timing.pull_delay_when_exception_ms
        if offset < 0:
            log.warning("pull %s: no start offset after locking (%d); trying again later", mq, offset)
            return self._timing.pull_delay_when_exception_ms
        if request.resume_floor is not None and request.resume_floor > offset:
            offset = request.resume_floor
            self._offset_store.update_offset(mq, offset, increase_only=False)
        if offset != request.next_offset:
            log.info("pull %s: locked; starting at %d instead of %d", mq, offset, request.next_offset)
        request.previously_locked = True
        request.next_offset = offset
        return None

    async def _fix_offset_later(self, request: PullRequest) -> None:
        await self._clock.sleep_ms(self._timing.pull_offset_fix_delay_ms)
        mq = request.mq
        try:
            self._offset_store.update_offset(mq, request.next_offset, increase_only=False)
            await self._offset_store.persist(mq)
            await self._remove_process_queue(mq)
        except MqError as err:
            log.warning("fixing the offset of %s failed: %s", mq, err)
        log.warning("fixed the offset of %s to %d; the queue returns at the next rebalance", mq, request.next_offset)

    @property
    def task_count(self) -> int:
        return len(self._tasks)
