"""Coalescing of asynchronous sends: while a batch for a topic is in flight, the messages
submitted after it wait and leave together as the next batch request.

Owns: the hand-over of submitted messages from caller threads to the client's loop, the
per-topic lanes of waiting messages, cutting them into batches (a message count and a body
byte budget, one message alone when it cannot share a batch), which queue each batch goes to
(one batch in flight per queue, so messages reach a queue in submission order), the window
that bounds messages submitted and not yet resolved, and resolving every message's own
future. Does not own the send itself (the producer's retry policy, given as `send_batch`) or
routes.

Cost model: one unary call carries many messages for about the price of one, so a producer
that keeps `send_async` busy gets batch throughput without changing its code, and a lone
message still leaves at once (nothing waits for a timer).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from nodes.client.rpc.send_wire import Outgoing
from nodes.common.clock import Deadline
from nodes.common.errors import OutcomeUnknownError
from nodes.common.types import MessageQueue, SendResult

log = logging.getLogger(__name__)


class WindowFullError(Exception):
    """`submit(block=False)` found the window full."""


@dataclass(slots=True)
class PendingSend:
    """One message handed to `send_async`, waiting for its batch."""

    topic: str
    out: Outgoing
    uid: str
    body_bytes: int
    future: concurrent.futures.Future[SendResult]
    deadline: Deadline  # the send timeout runs from submission, as for a send of its own
    solo: bool = False  # cannot share a batch (a delayed message): goes as a batch of one


# send_batch(topic, outs, uids, queue, deadline) -> the batch's SendResult (per-message
# `msg_ids` / `queue_offsets`) or an exception; `queue` is where the first attempt goes.
SendBatch = Callable[[str, list[Outgoing], list[str], MessageQueue | None, Deadline],
                     Awaitable[SendResult]]
# publish_queues(topic) -> the publish list (for choosing a queue nobody is sending to).
PublishQueues = Callable[[str], Awaitable[list[MessageQueue]]]
# pick(queues) -> the next queue in round robin.
PickQueue = Callable[[Sequence[MessageQueue]], MessageQueue]


@dataclass(slots=True)
class _Lane:
    """The waiting messages of one topic and its batches in flight."""

    waiting: collections.deque[PendingSend] = field(default_factory=collections.deque)
    busy_queues: set[MessageQueue] = field(default_factory=set)
    in_flight: int = 0
    queue_count: int = 1  # of the publish list last seen; bounds the batches in flight


def split_result(batch: SendResult) -> list[SendResult]:
    """Each message's own SendResult out of its batch's, in send order: the shape `send` gives one
    message (its id and queue offset also as one-element `msg_ids` and `queue_offsets`)."""
    offset_msg_ids = batch.offset_msg_id.split(",") if batch.offset_msg_id else []
    offset_msg_ids += [""] * (len(batch.msg_ids) - len(offset_msg_ids))
    status, queue = batch.status, batch.message_queue
    return [SendResult(status, msg_id, queue, queue_offset, offset_msg_id, (msg_id,), (queue_offset,))
            for msg_id, queue_offset, offset_msg_id in zip(batch.msg_ids, batch.queue_offsets, offset_msg_ids,
                                                           strict=True)]


class SendBatcher:
    """Lanes of `send_async` messages per topic, drained on the client's loop.

    `submit` may be called from any thread; everything else runs on the loop.

    Args:
        send_batch: sends one batch with the producer's retry policy.
        publish_queues: the topic's publish list.
        pick_queue: round robin over a publish list (the producer's selector).
        wake: schedules `drain` on the loop (called from the submitting thread).
        window: messages submitted and not yet resolved before `submit` blocks.
        batch_count_max / batch_bytes_max: the most messages / body bytes in one batch.
        batches_in_flight_max: batches in flight per topic (never more than its queues).
    """

    def __init__(self, *, send_batch: SendBatch, publish_queues: PublishQueues, pick_queue: PickQueue,
                 wake: Callable[[], None], window: int, batch_count_max: int, batch_bytes_max: int,
                 batches_in_flight_max: int) -> None:
        self._send_batch = send_batch
        self._publish_queues = publish_queues
        self._pick_queue = pick_queue
        self._wake = wake
        self.window = window
        self.batch_count_max = batch_count_max
        self.batch_bytes_max = batch_bytes_max
        self.batches_in_flight_max = batches_in_flight_max
        self._inbox: collections.deque[PendingSend] = collections.deque()
        # Set by a submitter that asked for a drain, cleared by the drain before it empties the
        # inbox: a message appended after the clear either is taken by that drain or sees the
        # flag down and asks for another (an extra drain finds nothing; none is ever missed).
        self._drain_requested = False
        self._lanes: dict[str, _Lane] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # Guards `_outstanding` (submitted, not yet resolved); waited on by submitters when
        # the window is full and by `wait_idle`. One plain counter instead of a semaphore and a
        # done-callback per message.
        self._idle = threading.Condition()
        self._outstanding = 0
        self._blocked = 0  # submitters waiting for room in the window

    # --- any thread --------------------------------------------------------------------
    def submit(self, pending: PendingSend, *, block: bool = True) -> None:
        """Queue `pending` for its lane; blocks while `window` messages are outstanding.

        Raises:
            WindowFullError: the window is full and `block` is false.
            whatever `wake` raises (the loop is gone): the message was not queued.
        """
        with self._idle:
            if self._outstanding >= self.window:
                if not block:
                    raise WindowFullError(f"send_async window of {self.window} messages is full")
                self._blocked += 1
                try:
                    self._idle.wait_for(lambda: self._outstanding < self.window)
                finally:
                    self._blocked -= 1
            self._outstanding += 1
        self._inbox.append(pending)
        if not self._drain_requested:
            self._drain_requested = True
            try:
                self._wake()
            except BaseException:
                self._drain_requested = False
                try:
                    self._inbox.remove(pending)
                except ValueError:
                    pass
                else:
                    self._release(1)
                raise

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until every submitted message is resolved; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._outstanding == 0, timeout_s)

    def _release(self, count: int) -> None:
        """`count` messages are resolved: room in the window. Called once per batch, so a
        submitter blocked on a full window wakes once per batch, not once per message (every
        wake-up is a GIL hand-over between the caller's thread and the loop's)."""
        with self._idle:
            self._outstanding -= count
            if self._blocked or not self._outstanding:
                self._idle.notify_all()

    # --- loop --------------------------------------------------------------------------
    def drain(self) -> None:
        """Move the inbox into the lanes and start every batch that may start."""
        for topic, lane in self._take_inbox().items():
            self._pump(topic, lane)

    def _take_inbox(self) -> dict[str, _Lane]:
        """Append the inbox to the lanes; returns the lanes that got messages."""
        self._drain_requested = False
        inbox = self._inbox
        touched: dict[str, _Lane] = {}
        while inbox:
            pending = inbox.popleft()
            lane = self._lanes.get(pending.topic)
            if lane is None:
                lane = self._lanes[pending.topic] = _Lane()
            lane.waiting.append(pending)
            touched[pending.topic] = lane
        return touched

    def _pump(self, topic: str, lane: _Lane) -> None:
        while lane.waiting and lane.in_flight < min(self.batches_in_flight_max, lane.queue_count):
            batch = self._cut(lane.waiting)
            if not batch:  # all cancelled
                continue
            lane.in_flight += 1
            task = asyncio.get_running_loop().create_task(self._run(topic, lane, batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if not lane.waiting and not lane.in_flight:
            self._lanes.pop(topic, None)

    def _cut(self, waiting: collections.deque[PendingSend]) -> list[PendingSend]:
        """The next batch off the front of `waiting`: as many as fit, or one that goes alone.

        A message taken is marked running (its future can no longer be cancelled: it is on its
        way); one whose future was cancelled before it left is dropped (never sent)."""
        batch: list[PendingSend] = []
        total_bytes = 0
        while waiting and len(batch) < self.batch_count_max:
            nxt = waiting[0]
            if batch and (nxt.solo or batch[0].solo or total_bytes + nxt.body_bytes > self.batch_bytes_max):
                break
            waiting.popleft()
            if not nxt.future.set_running_or_notify_cancel():
                self._release(1)
                continue
            total_bytes += nxt.body_bytes
            batch.append(nxt)
        return batch

    async def _run(self, topic: str, lane: _Lane, batch: list[PendingSend]) -> None:
        queue: MessageQueue | None = None
        try:
            queue = await self._free_queue(topic, lane)
            if queue is not None:
                lane.busy_queues.add(queue)
            # The oldest message's deadline: no message waits longer than its send timeout.
            result = await self._send_batch(topic, [p.out for p in batch], [p.uid for p in batch], queue,
                                            batch[0].deadline)
        except asyncio.CancelledError:  # the client is closing under the batch
            lost = OutcomeUnknownError("send_async: the producer shut down while the batch was in flight; "
                                       "the messages may have been stored")
            for pending in batch:
                self._settle(pending, None, lost)
            raise
        except Exception as exc:  # every message of the batch gets the batch's error
            for pending in batch:
                self._settle(pending, None, exc)
        else:
            for pending, own in zip(batch, split_result(result), strict=True):
                self._settle(pending, own, None)
        finally:
            self._release(len(batch))
            if queue is not None:
                lane.busy_queues.discard(queue)
            lane.in_flight -= 1
            self._pump(topic, lane)

    async def _free_queue(self, topic: str, lane: _Lane) -> MessageQueue | None:
        """The next queue in round robin that no batch of this lane is sending to; None leaves
        the choice to the send (the route is not known yet, or every queue is busy)."""
        try:
            queues = await self._publish_queues(topic)
        except Exception:  # the send looks the route up again and reports the failure
            return None
        lane.queue_count = max(1, len(queues))
        for _ in range(len(queues)):
            queue = self._pick_queue(queues)
            if queue not in lane.busy_queues:
                return queue
        return None

    def _settle(self, pending: PendingSend, result: SendResult | None, exc: BaseException | None) -> None:
        """Resolve the future of a message that left (`_cut` marked it running); the caller
        releases its room in the window."""
        try:
            if exc is None:
                pending.future.set_result(result)  # type: ignore[arg-type]
            else:
                pending.future.set_exception(exc)
        except Exception:  # a done-callback's failure must not strand the rest of the batch
            log.exception("send_async: resolving the future of %s failed", pending.uid)

    def fail_waiting(self, exc: BaseException) -> None:
        """Resolve every message not yet sent with `exc` (the producer is closing)."""
        self._take_inbox()
        for topic, lane in list(self._lanes.items()):
            failed = 0
            while lane.waiting:
                pending = lane.waiting.popleft()
                if pending.future.set_running_or_notify_cancel():  # not cancelled by its caller
                    self._settle(pending, None, exc)
                failed += 1
            self._release(failed)
            if not lane.in_flight:
                del self._lanes[topic]
