"""Concurrent consumption: a thread pool runs the listener, the loop acts on what it answered.

Owns RocketMQ's `ConsumeMessageConcurrentlyService`: splitting pulled messages
into listener calls of `consume_message_batch_max_size`, the retry-topic rename and the
CONSUME_START_TIME stamp, the ack index, sending failed messages back (CLUSTERING; dropped in
BROADCASTING), re-consuming locally after a failed send-back, the committed offset (the
lowest unfinished offset, via `ProcessQueue.remove_messages`), and cleaning messages that
have been consuming too long. Does not pull, route or know how a send-back travels
(`SendBack` is handed in by the facade).

Threads: the listener runs on the pool (`ListenerPool`, `consume_thread_min` threads; an
unbounded queue in front, as RocketMQ's, so the pool never grows). Everything else, `ProcessQueue` and the
offset store included, stays on the client's event loop: a finished listener call is posted
back to the loop, so the queue caches need no lock.

Per pulled batch, not per message: the listener is still called once per
`consume_message_batch_max_size` messages (1 by default, as RocketMQ), but the batch's calls
reach the pool in one hand-off, and the answers that pile up while the loop is busy are
settled by one drain: per queue one `remove_messages` and one offset update.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodes.client.listener_pool import ListenerPool
from nodes.client.offset_store import OffsetStore
from nodes.client.process_queue import (
    CLEAN_EXPIRED_DELAY_LEVEL,
    PROPERTY_CONSUME_START_TIMESTAMP,
    ProcessQueue,
)
from nodes.common import constants as c
from nodes.common.clock import Clock
from nodes.common.service import CrashHandler, Service
from nodes.common.types import ConsumeConcurrentlyStatus, MessageExt, MessageModel, MessageQueue

log = logging.getLogger(__name__)

ACK_INDEX_ALL = 2**31 - 1  # Integer.MAX_VALUE: "every message of the call succeeded"

# send_back(msg, delay_level, broker_name) -> whether the message is safely on its way back
SendBack = Callable[[MessageExt, int, str], Awaitable[bool]]
Listener = Callable[[list[MessageExt], "ConsumeConcurrentlyContext"], Any]


@dataclass(slots=True)
class ConsumeConcurrentlyContext:
    """What a listener may read and set (RocketMQ ConsumeConcurrentlyContext).

    Attributes:
        message_queue: the queue the messages were pulled from (`%RETRY%<group>` for retries).
        ack_index: with CONSUME_SUCCESS, messages after this index count as failed.
        delay_level_when_next_consume: the send-back delay level; 0 lets the broker pick 3 + times.
    """

    message_queue: MessageQueue
    ack_index: int = ACK_INDEX_ALL
    delay_level_when_next_consume: int = 0


def resolve_ack_index(status: ConsumeConcurrentlyStatus, ack_index: int, size: int) -> int:
    """processConsumeResult: the index of the last acknowledged message (-1: none)."""
    if status is ConsumeConcurrentlyStatus.CONSUME_SUCCESS:
        return min(max(ack_index, -1), size - 1)
    return -1


@dataclass(slots=True)
class ConsumeRequest:
    """One listener call's messages and queue; once answered, the answer too (posted as is)."""

    msgs: list[MessageExt]
    pq: ProcessQueue
    mq: MessageQueue
    status: ConsumeConcurrentlyStatus | None = None
    ctx: ConsumeConcurrentlyContext | None = None


@dataclass
class ConsumeStats:
    calls: int = 0
    ok: int = 0  # messages acknowledged
    failed: int = 0  # messages the listener failed (sent back or, broadcasting, dropped)
    exceptions: int = 0
    sent_back: int = 0
    send_back_failed: int = 0
    discarded: int = 0  # results of calls whose queue was dropped meanwhile
    expired_cleaned: int = 0
    by_status: dict[str, int] = field(default_factory=dict)


def reset_retry_topic(msgs: Sequence[MessageExt], group: str) -> None:
    """resetRetryAndNamespace: a retry delivers under its original topic."""
    _reset_retry_topic(msgs, c.RETRY_GROUP_TOPIC_PREFIX + group)


def _reset_retry_topic(msgs: Sequence[MessageExt], retry_topic: str) -> None:
    for msg in msgs:
        if msg.topic == retry_topic:  # only a retry can carry the original topic
            original = msg.properties.get(c.PROPERTY_RETRY_TOPIC)
            if original:
                msg.topic = original


class ConsumeMessageConcurrentlyService:
    """The listener pool and the result processing of a concurrent push consumer.

    Caller: the pull service (`submit_consume_request`, loop thread); the pool threads
    (`_consume`); the loop (`_process_consume_result`, `clean_expired_messages`).
    Affects: the ProcessQueue caches, the offset store's memory table.
    """

    def __init__(self, *, group: str, listener: Listener, message_model: MessageModel, offset_store: OffsetStore,
                 send_back: SendBack, clock: Clock, thread_count: int, batch_max_size: int,
                 resubmit_delay_ms: int, consume_timeout_ms: int, redeliver_times: int = 0,
                 skip_every_requests: int = 0) -> None:
        self.group = group
        # FAULT SWITCH redeliver-consumed-batch: a successful batch goes to the listener this many times more
        self.redeliver_times = redeliver_times
        # test-only switch ack-unhanded-request: every this many requests one is acknowledged unseen
        self.skip_every_requests = skip_every_requests
        self._requests_seen = 0
        self.listener = listener
        self.message_model = message_model
        self.offset_store = offset_store
        self.send_back = send_back
        self.clock = clock
        self.batch_max_size = batch_max_size
        self.resubmit_delay_ms = resubmit_delay_ms
        self.consume_timeout_ms = consume_timeout_ms
        self.stats = ConsumeStats()
        self._pool = ListenerPool(thread_count, f"ConsumeMessageThread_{group}")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._result_tasks: set[asyncio.Task[None]] = set()
        self._later: set[asyncio.TimerHandle] = set()
        self._shutdown = False
        self._retry_topic = c.RETRY_GROUP_TOPIC_PREFIX + group
        self._start_stamp = (-1, "")
        # Listener answers posted by the pool, drained on the loop by one callback: a burst of
        # answers costs one loop wake-up (one self-pipe write), not one per listener call. The
        # deque's append and popleft are atomic; the flag is cleared before a drain empties it,
        # so an answer appended meanwhile is either drained now or schedules the next drain.
        self._answers: collections.deque[ConsumeRequest] = collections.deque()
        self._answers_lock = threading.Lock()  # the test-only request counter
        self._drain_scheduled = False

    def start(self) -> None:
        """Bind to the running loop (call on the client's loop)."""
        self._loop = asyncio.get_running_loop()

    # --- submitting (loop) ---------------------------------------------------------------
    def submit_consume_request(self, msgs: Sequence[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        """One listener call per `batch_max_size` consecutive messages."""
        if self._shutdown:
            return
        batch = self.batch_max_size
        if batch == 1:  # RocketMQ's default: one listener call per message
            calls = [[msg] for msg in msgs]
        else:
            calls = [list(msgs[start:start + batch]) for start in range(0, len(msgs), batch)]
        # one hand-off for the whole pulled batch; the queue rides on the callable, not on each call
        self._pool.submit_many(functools.partial(self._consume, pq, mq), calls)

    def submit_consume_request_later(self, msgs: Sequence[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        """Consume `msgs` again after `resubmit_delay_ms` (their send-back failed)."""
        assert self._loop is not None
        handle: asyncio.TimerHandle

        def fire() -> None:
            self._later.discard(handle)
            self.submit_consume_request(msgs, pq, mq)

        handle = self._loop.call_later(self.resubmit_delay_ms / 1000, fire)
        self._later.add(handle)

    # --- the listener call (pool thread) ---------------------------------------------------
    def _consume(self, pq: ProcessQueue, mq: MessageQueue, msgs: list[MessageExt]) -> None:
        """ConsumeRequest#run up to the listener's answer; the rest is posted to the loop."""
        if pq.dropped:
            return
        now_ms = self.clock.wall_ms()
        stamp = self._start_stamp  # (ms, its text): calls starting within one ms share the text
        if stamp[0] != now_ms:
            stamp = self._start_stamp = (now_ms, str(now_ms))
        start, retry_topic = stamp[1], self._retry_topic
        for msg in msgs:
            if msg.topic == retry_topic:  # resetRetryAndNamespace
                _reset_retry_topic((msg,), retry_topic)
            msg.properties[PROPERTY_CONSUME_START_TIMESTAMP] = start
        ctx = ConsumeConcurrentlyContext(mq)
        status: ConsumeConcurrentlyStatus | None
        if self.skip_every_requests:
            with self._answers_lock:
                self._requests_seen += 1
                skip = self._requests_seen % self.skip_every_requests == 0
            if skip:  # the bug: the request is acknowledged without the listener ever seeing it
                self._post_answer(ConsumeRequest(msgs, pq, mq), ConsumeConcurrentlyStatus.CONSUME_SUCCESS, ctx)
                return
        try:
            status = self.listener(list(msgs), ctx)
        except Exception:
            log.warning("listener of %s raised on %d messages of %s; reconsuming later", self.group,
                        len(msgs), mq, exc_info=True)
            self.stats.exceptions += 1
            status = None
        if status is ConsumeConcurrentlyStatus.CONSUME_SUCCESS:
            if self.redeliver_times:
                for _ in range(self.redeliver_times):  # the bug: the acknowledged batch is handed over again
                    with contextlib.suppress(Exception):
                        self.listener(list(msgs), ConsumeConcurrentlyContext(mq))
        elif not isinstance(status, ConsumeConcurrentlyStatus):
            if status is not None:
                log.warning("listener of %s returned %r, not a ConsumeConcurrentlyStatus; reconsuming later",
                            self.group, status)
            status = ConsumeConcurrentlyStatus.RECONSUME_LATER
        self._post_answer(ConsumeRequest(msgs, pq, mq), status, ctx)

    def _post_answer(self, request: ConsumeRequest, status: ConsumeConcurrentlyStatus,
                     ctx: ConsumeConcurrentlyContext) -> None:
        """Hand a listener's answer to the loop (pool thread); one drain callback per burst."""
        request.status, request.ctx = status, ctx
        self._answers.append(request)
        if not self._drain_scheduled:
            self._schedule_drain()

    def _schedule_drain(self) -> None:
        self._drain_scheduled = True
        loop = self._loop
        if loop is None or loop.is_closed():
            return  # the client closed while the listener ran (shutdown without waiting): dropped
        try:
            loop.call_soon_threadsafe(self._drain_answers)
        except RuntimeError:  # closed between the check and the call
            log.debug("listener answers dropped: client closed")

    def _drain_answers(self) -> None:
        """Settle every posted answer (loop). Fully acknowledged calls of one queue are removed
        from its cache together and commit once; the others go through `_on_listener_done`."""
        self._drain_scheduled = False
        answers = self._answers
        acked: dict[int, tuple[ProcessQueue, MessageQueue, list[MessageExt]]] = {}
        calls = 0
        success = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        while answers:
            request = answers.popleft()
            msgs, status, ctx = request.msgs, request.status, request.ctx
            assert status is not None and ctx is not None
            if status is not success or ctx.ack_index < len(msgs) - 1:
                self._on_listener_done(request, status, ctx)
                continue
            calls += 1
            pq = request.pq
            entry = acked.get(id(pq))
            if entry is None:
                acked[id(pq)] = (pq, request.mq, list(msgs))
            else:
                entry[2].extend(msgs)
        if not calls:
            return
        stats = self.stats
        stats.calls += calls
        stats.by_status[success.value] = stats.by_status.get(success.value, 0) + calls
        for pq, mq, msgs in acked.values():
            if pq.dropped:
                stats.discarded += len(msgs)
                continue  # the queue changed hands: no offset
            stats.ok += len(msgs)
            self._commit(pq, mq, msgs)

    def _on_listener_done(self, request: ConsumeRequest, status: ConsumeConcurrentlyStatus,
                          ctx: ConsumeConcurrentlyContext) -> None:
        if resolve_ack_index(status, ctx.ack_index, len(request.msgs)) == len(request.msgs) - 1:
            # Every message acknowledged: nothing to send back, so nothing to await; settled
            # here rather than in a task of its own (the common case, once per listener call).
            self._count_answer(status)
            self._settle_all_acked(request)
            return
        task = asyncio.create_task(self._process_consume_result(request, status, ctx),
                                   name=f"consume-result-{request.mq.queue_id}")
        self._result_tasks.add(task)
        task.add_done_callback(self._result_done)

    def _result_done(self, task: asyncio.Task[None]) -> None:
        self._result_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("processing a consume result failed", exc_info=task.exception())

    # --- acting on the answer (loop) ---------------------------------------------------------
    def _count_answer(self, status: ConsumeConcurrentlyStatus) -> None:
        self.stats.calls += 1
        self.stats.by_status[status.value] = self.stats.by_status.get(status.value, 0) + 1

    def _settle_all_acked(self, request: ConsumeRequest) -> None:
        """processConsumeResult when every message was acknowledged (nothing to send back)."""
        pq, msgs = request.pq, request.msgs
        if pq.dropped:
            self.stats.discarded += len(msgs)
            return  # the queue changed hands: no offset
        self.stats.ok += len(msgs)
        self._commit(pq, request.mq, msgs)

    def _commit(self, pq: ProcessQueue, mq: MessageQueue, done: list[MessageExt]) -> None:
        """Forget `done` from the process queue; commit the lowest unfinished offset."""
        offset = pq.remove_messages(done, now_ms=self.clock.monotonic_ms())
        if offset >= 0 and not pq.dropped:
            self.offset_store.update_offset(mq, offset, increase_only=True)

    async def _process_consume_result(self, request: ConsumeRequest, status: ConsumeConcurrentlyStatus,
                                      ctx: ConsumeConcurrentlyContext) -> None:
        """processConsumeResult: send back the failed part, commit the lowest unfinished offset."""
        self._count_answer(status)
        pq, mq, msgs = request.pq, request.mq, request.msgs
        if pq.dropped:
            self.stats.discarded += len(msgs)
            return  # the queue changed hands: no send-back, no offset
        ack_index = resolve_ack_index(status, ctx.ack_index, len(msgs))
        self.stats.ok += ack_index + 1
        failed = msgs[ack_index + 1:]
        self.stats.failed += len(failed)
        back_failed: list[MessageExt] = []
        if failed and self.message_model is MessageModel.BROADCASTING:
            for msg in failed:
                log.warning("BROADCASTING: consume of %s failed; dropped (no retry in broadcasting)", msg.msg_id)
        elif failed:
            for msg in failed:
                if await self.send_back(msg, ctx.delay_level_when_next_consume, mq.broker_name):
                    self.stats.sent_back += 1
                else:
                    self.stats.send_back_failed += 1
                    msg.reconsume_times += 1
                    back_failed.append(msg)
        done = [m for m in msgs if all(m is not f for f in back_failed)]
        if back_failed:
            self.submit_consume_request_later(back_failed, pq, mq)
        self._commit(pq, mq, done)

    async def clean_expired_messages(self, process_queues: Mapping[MessageQueue, ProcessQueue]) -> None:
        """cleanExpireMsg: send back heads that have been consuming too long, then forget them."""
        for mq, pq in list(process_queues.items()):
            if pq.dropped:
                continue
            for msg in pq.expired_messages(self.clock.wall_ms(), consume_timeout_ms=self.consume_timeout_ms):
                log.warning("%s: message %s of %s has been consuming for over %d ms; sending it back",
                            self.group, msg.msg_id, mq, self.consume_timeout_ms)
                if not await self.send_back(msg, CLEAN_EXPIRED_DELAY_LEVEL, mq.broker_name):
                    break
                self.stats.expired_cleaned += 1
                pq.remove_if_head(msg, now_ms=self.clock.monotonic_ms())

    # --- shutdown (loop) ---------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        return self._pool.unfinished

    async def shutdown(self, await_termination_ms: int) -> None:
        """Stop taking work; let running listener calls finish for up to `await_termination_ms`.

        Queued calls that have not started are cancelled (their messages stay uncommitted).
        Results that arrive in time are processed as usual.
        """
        self._shutdown = True
        for handle in list(self._later):
            handle.cancel()
        self._later.clear()
        self._pool.shutdown()
        if (self._pool.unfinished > 0 and await_termination_ms > 0
                and not await asyncio.to_thread(self._pool.wait_finished, await_termination_ms / 1000)):
            log.warning("%s: %d listener calls still running after %d ms; their results are dropped",
                        self.group, self._pool.unfinished, await_termination_ms)
        await asyncio.sleep(0)  # let results posted by finished calls start their processing
        if self._result_tasks:
            await asyncio.gather(*list(self._result_tasks), return_exceptions=True)


class CleanExpiredService(Service):
    """Runs `clean_expired_messages` every `consume_timeout_ms` (the first run after one period)."""

    name = "clean-expired-messages"

    def __init__(self, consume: ConsumeMessageConcurrentlyService,
                 process_queues: Callable[[], Mapping[MessageQueue, ProcessQueue]], interval_ms: int, *,
                 on_crash: CrashHandler | None = None) -> None:
        super().__init__(interval_ms, on_crash=on_crash)
        self._consume = consume
        self._process_queues = process_queues

    async def tick(self) -> None:
        await self._consume.clean_expired_messages(self._process_queues())
