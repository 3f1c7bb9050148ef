"""Orderly consumption: one listener call at a time per queue, in queue order, under the queue's lock.

Owns RocketMQ's `ConsumeMessageOrderlyService`: the consume request of a queue
(it drains the ProcessQueue itself: take a batch, call the listener, act on the answer, again),
the per-queue lock that keeps a second request of the same queue waiting, the per-ProcessQueue
consume lock that rebalance waits on before giving a queue up, the lock checks between batches
(CLUSTERING: locked and not expired, else re-lock later), the continuous-consume cap, the
answers SUCCESS / COMMIT / ROLLBACK / SUSPEND_CURRENT_QUEUE_A_MOMENT with auto-commit on and
off, suspending a queue (clamped delay) and consuming the same messages again first, the
reconsume limit (unbounded by default) and the dead-letter send through the internal producer,
and the committed offset (`ProcessQueue.commit`, stored with increase_only=False).

Threads: the listener runs on a pool (`thread_count` threads); everything else, ProcessQueue
and the offset store included, runs on the client's event loop. A queue's consume request is
an asyncio task holding that queue's lock while it awaits each listener call, so at most one
thread ever runs the listener for a queue.

Does not pull, lock on the broker (`lock_one` is handed in) or know how a dead letter travels
(`send_back` is handed in).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodes.client.consume_concurrently import reset_retry_topic
from nodes.client.consumer_state import ConsumerState
from nodes.client.offset_store import OffsetStore
from nodes.client.process_queue import ProcessQueue
from nodes.common import constants as c
from nodes.common.config import Timing
from nodes.common.types import ConsumeOrderlyStatus, Message, MessageExt, MessageModel, MessageQueue

log = logging.getLogger(__name__)

SUSPEND_DEFAULT = -1  # ConsumeOrderlyContext: use the consumer's suspend time
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"  # MessageConst: cleared on a dead-letter send

OrderlyListener = Callable[[list[MessageExt], "ConsumeOrderlyContext"], Any]
LockOne = Callable[[MessageQueue], Awaitable[bool]]
SendBackOrderly = Callable[[MessageExt], Awaitable[bool]]
OnExpired = Callable[[MessageQueue, ProcessQueue], None]

SUSPEND = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT


@dataclass(slots=True)
class ConsumeOrderlyContext:
    """What an orderly listener may read and set (RocketMQ ConsumeOrderlyContext).

    Attributes:
        message_queue: the queue the messages come from.
        auto_commit: True: SUCCESS commits; False: only COMMIT does (SUCCESS leaves the messages
            in flight), and ROLLBACK puts every in-flight message back.
        suspend_current_queue_time_ms: how long SUSPEND / ROLLBACK pause the queue; -1 = the
            consumer's default. Clamped to the consumer's [min, max].
        consume_start_mono_ms: when this listener call started (CLOCK_MONOTONIC ms; beyond RocketMQ).
    """

    message_queue: MessageQueue
    auto_commit: bool = True
    suspend_current_queue_time_ms: int = SUSPEND_DEFAULT
    consume_start_mono_ms: int = 0


@dataclass
class OrderlyStats:
    calls: int = 0
    ok: int = 0  # messages committed (or succeeded without auto-commit)
    suspended: int = 0  # listener calls answered (or turned into) SUSPEND
    exceptions: int = 0
    rollbacks: int = 0
    dead_lettered: int = 0
    dead_letter_failed: int = 0
    lock_retries: int = 0  # consume requests that found their queue unlocked or its lock expired
    time_capped: int = 0  # consume requests that yielded after the continuous-consume cap
    by_status: dict[str, int] = field(default_factory=dict)


def clamp_suspend_ms(requested_ms: int, *, default_ms: int, min_ms: int, max_ms: int) -> int:
    """submitConsumeRequestLater's delay: -1 means the default; then clamped to [min_ms, max_ms]."""
    ms = default_ms if requested_ms == SUSPEND_DEFAULT else requested_ms
    return min(max(ms, min_ms), max_ms)


def orderly_send_back_message(msg: MessageExt, group: str, max_reconsume_times: int) -> Message:
    """The copy an orderly consumer sends to `%RETRY%<group>` once a message is out of retries.

    RECONSUME_TIME = reconsume_times (not + 1: the broker's handleRetryAndDLQ sees it at the
    limit and dead-letters it), MAX_RECONSUME_TIMES, RETRY_TOPIC, ORIGIN_MESSAGE_ID (kept if set),
    the transaction flag cleared, delay level 3 + reconsume_times (dropped with the dead letter).
    """
    props = dict(msg.properties)
    if not props.get(c.PROPERTY_ORIGIN_MESSAGE_ID):
        props[c.PROPERTY_ORIGIN_MESSAGE_ID] = msg.msg_id
    props[c.PROPERTY_RETRY_TOPIC] = msg.topic
    props[c.PROPERTY_RECONSUME_TIME] = str(msg.reconsume_times)
    props[c.PROPERTY_MAX_RECONSUME_TIMES] = str(max_reconsume_times)
    props.pop(PROPERTY_TRANSACTION_PREPARED, None)
    props[c.PROPERTY_DELAY] = str(c.RETRY_DELAY_LEVEL_BASE + msg.reconsume_times)
    return Message(c.RETRY_GROUP_TOPIC_PREFIX + group, bytes(msg.body), properties=props, flag=msg.flag)


class ConsumeMessageOrderlyService:
    """The consume requests of an orderly push consumer. Loop-confined, apart from the listener pool.

    Caller: the pull service (`submit_consume_request` with the dispatch flag of `put_messages`),
    rebalance (`wait_consume_idle` before giving a queue up), the facade (start / shutdown).
    Affects: the ProcessQueues (take / commit / rollback / consume again), the offset store's
    memory table, locks (through `lock_one`), dead letters (through `send_back`).
    """

    def __init__(self, *, state: ConsumerState, listener: OrderlyListener,
                 offset_store: OffsetStore, lock_one: LockOne, send_back: SendBackOrderly,
                 timing: Timing, thread_count: int, batch_max_size: int, max_reconsume_times: int,
                 suspend_ms: int | None = None, on_lock_expired: OnExpired | None = None,
                 take_newest_first: bool = False) -> None:
        self.state = state
        self.take_newest_first = take_newest_first  # FAULT SWITCH orderly-take-newest
        self.group = group = state.group
        self.listener = listener
        self.message_model = state.message_model
        self.offset_store = offset_store
        self.lock_one = lock_one
        self.send_back = send_back
        self.clock = state.clock
        self.timing = timing
        self.batch_max_size = batch_max_size
        self.max_reconsume_times = (c.ORDERLY_MAX_RECONSUME_TIMES_DEFAULT if max_reconsume_times == -1
                                    else max_reconsume_times)
        self.suspend_ms = timing.suspend_current_queue_ms if suspend_ms is None else suspend_ms
        self._on_lock_expired = on_lock_expired
        self.stats = OrderlyStats()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=thread_count, thread_name_prefix=f"ConsumeMessageThread_{group}")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._mq_locks: dict[MessageQueue, asyncio.Lock] = {}  # MessageQueueLock: never removed
        self._consume_locks: weakref.WeakKeyDictionary[ProcessQueue, asyncio.Lock] = weakref.WeakKeyDictionary()
        self._tasks: set[asyncio.Task[None]] = set()
        self._later: set[asyncio.TimerHandle] = set()
        self._stopped = False

    @property
    def clustering(self) -> bool:
        return self.message_model is MessageModel.CLUSTERING

    def start(self) -> None:
        """Bind to the running loop (call on the client's loop)."""
        self._loop = asyncio.get_running_loop()

    # --- submitting (loop) -------------------------------------------------------------------
    def submit_consume_request(self, pq: ProcessQueue, mq: MessageQueue, dispatch: bool) -> None:
        """Start a consume request of `mq` if `dispatch` (the queue had none running or queued)."""
        if dispatch and not self._stopped:
            self._spawn(self._consume_request(pq, mq), f"consume-orderly-{mq.topic}-{mq.queue_id}")

    def submit_consume_request_later(self, pq: ProcessQueue, mq: MessageQueue, delay_ms: int) -> None:
        """Come back to `mq` after `delay_ms` (-1: the suspend time), clamped to the suspend bounds."""
        t = self.timing
        ms = clamp_suspend_ms(delay_ms, default_ms=self.suspend_ms, min_ms=t.suspend_current_queue_min_ms,
                              max_ms=t.suspend_current_queue_max_ms)
        self._call_later(ms, lambda: self.submit_consume_request(pq, mq, True))

    def try_lock_later_and_reconsume(self, mq: MessageQueue, pq: ProcessQueue, delay_ms: int) -> None:
        """After `delay_ms`, lock `mq`; come back soon if that worked, much later if it did not."""
        self.stats.lock_retries += 1

        async def relock() -> None:
            if pq.dropped:  # beyond RocketMQ: a queue given up meanwhile is not locked again
                return
            locked = not self._stopped and await self.lock_one(mq)
            retry_ms = self.timing.orderly_resubmit_ms if locked else self.timing.orderly_lock_failed_retry_ms
            self.submit_consume_request_later(pq, mq, retry_ms)

        self._call_later(delay_ms, lambda: self._spawn(relock(), f"relock-{mq.topic}-{mq.queue_id}"))

    def _call_later(self, delay_ms: int, fn: Callable[[], None]) -> None:
        if self._stopped:
            return
        loop = self._loop or asyncio.get_running_loop()
        handle: asyncio.TimerHandle

        def fire() -> None:
            self._later.discard(handle)
            if not self._stopped:
                fn()

        handle = loop.call_later(delay_ms / 1000, fire)
        self._later.add(handle)

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("orderly consume task %s died", task.get_name(), exc_info=task.exception())

    # --- the consume request (loop; the listener on the pool) -----------------------------------
    def _mq_lock(self, mq: MessageQueue) -> asyncio.Lock:
        lock = self._mq_locks.get(mq)
        if lock is None:
            lock = self._mq_locks[mq] = asyncio.Lock()
        return lock

    def consume_lock(self, pq: ProcessQueue) -> asyncio.Lock:
        """pq.consumeLock: held around each listener call of the queue."""
        lock = self._consume_locks.get(pq)
        if lock is None:
            lock = self._consume_locks[pq] = asyncio.Lock()
        return lock

    def _lock_valid(self, mq: MessageQueue, pq: ProcessQueue, now_ms: int) -> bool:
        """The state's lock-validity rule, reporting a lock that ran out (locked, lease over)."""
        if self.state.lock_valid(pq, now_ms):
            return True
        if pq.locked and self._on_lock_expired is not None:
            self._on_lock_expired(mq, pq)
        return False

    async def _consume_request(self, pq: ProcessQueue, mq: MessageQueue) -> None:
        """ConsumeRequest#run."""
        if pq.dropped:
            return
        async with self._mq_lock(mq):
            if not self._lock_valid(mq, pq, self.clock.monotonic_ms()):
                self.try_lock_later_and_reconsume(mq, pq, self.timing.orderly_relock_first_ms)
                return
            begin_ms = self.clock.monotonic_ms()
            while True:
                if pq.dropped or self._stopped:
                    break
                now_ms = self.clock.monotonic_ms()
                if not self._lock_valid(mq, pq, now_ms):
                    self.try_lock_later_and_reconsume(mq, pq, self.timing.orderly_resubmit_ms)
                    break
                if now_ms - begin_ms > self.timing.orderly_consume_max_continuous_ms:
                    self.stats.time_capped += 1
                    self.submit_consume_request_later(pq, mq, self.timing.orderly_resubmit_ms)
                    break
                msgs = pq.take_messages(self.batch_max_size, now_ms=now_ms, newest_first=self.take_newest_first)
                if not msgs:
                    break  # take_messages closed the dispatch gate
                reset_retry_topic(msgs, self.group)
                ctx = ConsumeOrderlyContext(mq)
                # the lease this call must start within (the pool may make it wait for a thread)
                deadline_ms = pq.last_lock_timestamp_ms + self.timing.client_lock_lease_ms if self.clustering else None
                async with self.consume_lock(pq):
                    if pq.dropped:
                        break
                    loop = asyncio.get_running_loop()
                    status = await loop.run_in_executor(self._executor, self._call_listener, msgs, ctx, deadline_ms)
                if status is None:  # the lease ran out while the call waited for a thread: not run
                    pq.make_message_to_consume_again(msgs)
                    continue  # the lock check above sends it to re-lock
                if not await self.process_consume_result(msgs, status, ctx, pq, mq):
                    break

    def _call_listener(self, msgs: list[MessageExt], ctx: ConsumeOrderlyContext,
                       deadline_ms: int | None) -> ConsumeOrderlyStatus | None:
        """On a pool thread: the listener's answer (an exception, None or a wrong type suspends), or
        None without calling it when the client lease ended before the call could start."""
        start_ms = self.clock.monotonic_ms()
        if deadline_ms is not None and start_ms > deadline_ms:
            return None
        ctx.consume_start_mono_ms = start_ms
        try:
            status = self.listener(list(msgs), ctx)
        except Exception:
            log.warning("orderly listener of %s raised on %d messages of %s; suspending the queue", self.group,
                        len(msgs), ctx.message_queue, exc_info=True)
            self.stats.exceptions += 1
            return SUSPEND
        if not isinstance(status, ConsumeOrderlyStatus):
            log.warning("orderly listener of %s returned %r, not a ConsumeOrderlyStatus; suspending the queue",
                        self.group, status)
            return SUSPEND
        return status

    # --- acting on the answer (loop) --------------------------------------------------------------
    async def process_consume_result(self, msgs: Sequence[MessageExt], status: ConsumeOrderlyStatus,
                                     ctx: ConsumeOrderlyContext, pq: ProcessQueue, mq: MessageQueue) -> bool:
        """processConsumeResult: commit, roll back or suspend; returns whether to go on consuming."""
        self.stats.calls += 1
        self.stats.by_status[status.value] = self.stats.by_status.get(status.value, 0) + 1
        commit_offset = -1
        go_on = True
        if ctx.auto_commit:
            if status in (ConsumeOrderlyStatus.COMMIT, ConsumeOrderlyStatus.ROLLBACK):
                log.warning("%s: %s with auto-commit on counts as SUCCESS", self.group, status.value)
            if status is SUSPEND:
                self.stats.suspended += 1
                if await self.check_reconsume_times(msgs):
                    pq.make_message_to_consume_again(msgs)
                    self.submit_consume_request_later(pq, mq, ctx.suspend_current_queue_time_ms)
                    go_on = False
                else:
                    commit_offset = pq.commit()  # every message went to the dead-letter queue
            else:
                self.stats.ok += len(msgs)
                commit_offset = pq.commit()
        elif status is ConsumeOrderlyStatus.SUCCESS:
            self.stats.ok += len(msgs)  # no commit: the messages stay in flight until a COMMIT
        elif status is ConsumeOrderlyStatus.COMMIT:
            self.stats.ok += len(msgs)
            commit_offset = pq.commit()
        elif status is ConsumeOrderlyStatus.ROLLBACK:
            self.stats.rollbacks += 1
            pq.rollback()
            self.submit_consume_request_later(pq, mq, ctx.suspend_current_queue_time_ms)
            go_on = False
        else:  # SUSPEND without auto-commit
            self.stats.suspended += 1
            if await self.check_reconsume_times(msgs):
                pq.make_message_to_consume_again(msgs)
                self.submit_consume_request_later(pq, mq, ctx.suspend_current_queue_time_ms)
                go_on = False
        if commit_offset >= 0 and (not pq.dropped or pq.keep_own_commits):
            self.offset_store.update_offset(mq, commit_offset, increase_only=False)
        return go_on

    async def check_reconsume_times(self, msgs: Sequence[MessageExt]) -> bool:
        """checkReconsumeTimes: True if the queue must be suspended (some message retries locally).

        A message at the limit is dead-lettered through the internal producer; if that send
        fails it is retried locally like the others. Every retried message counts one more time.
        """
        suspend = False
        for msg in msgs:
            if msg.reconsume_times >= self.max_reconsume_times:
                msg.properties[c.PROPERTY_RECONSUME_TIME] = str(msg.reconsume_times)
                if await self.send_back(msg):
                    self.stats.dead_lettered += 1
                    continue
                self.stats.dead_letter_failed += 1
            suspend = True
            msg.reconsume_times += 1
        return suspend

    # --- rebalance and shutdown (loop) -------------------------------------------------------------
    async def wait_consume_idle(self, pq: ProcessQueue, timeout_ms: int) -> bool:
        """pq.consumeLock.tryLock(timeout): True once no listener call of `pq` is running.

        The caller has set `pq.dropped`, so no new call starts after this returns True.
        """
        lock = self.consume_lock(pq)
        try:
            await asyncio.wait_for(lock.acquire(), timeout_ms / 1000)
        except TimeoutError:
            return False
        lock.release()
        return True

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def shutdown(self, await_termination_ms: int) -> None:
        """Stop: no new consume requests; running ones end at their next batch boundary. Listener
        calls still running after `await_termination_ms` are abandoned (their results dropped)."""
        self._stopped = True
        for handle in list(self._later):
            handle.cancel()
        self._later.clear()
        tasks = list(self._tasks)
        if tasks:
            _, still = await asyncio.wait(tasks, timeout=max(await_termination_ms, 1) / 1000)
            if still:
                log.warning("%s: %d orderly consume requests still running after %d ms; abandoning them",
                            self.group, len(still), await_termination_ms)
                for task in still:
                    task.cancel()
                await asyncio.gather(*still, return_exceptions=True)
        self._executor.shutdown(wait=False, cancel_futures=True)
