"""Long polling (RocketMQ PullRequestHoldService + NotifyMessageArrivingListener).

Owns: the pulls held per queue, the arrival notices the store's listener posts, and the one
task that wakes held pulls: on a notice for their queue (new offset past theirs and a
matching tag) or, on its periodic scan (checkHoldRequest), once their hold time is over.
A writer only posts a notice; it never runs a held pull on its own call stack, so a send
answers without doing the readers' work. Does not own what a pull answers (pull.py).

Every put runs on the broker's event loop today (send, send-back, the schedule service, the
offset-moved event), but the store's put takes its own lock and may be called from another
thread, so a notice may come from any thread; everything else is confined to the loop.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nodes.common.clock import Clock
from nodes.common.service import CrashHandler, Service
from nodes.store.message_store import MessageStore

if TYPE_CHECKING:
    from nodes.broker.pull_values import PullAnswer, PullRequest

# (topic, queue_id, max_queue_offset, tag_hash or None for "any")
ArrivalNotice = tuple[str, int, int, int | None]


@dataclass(slots=True)
class HeldPull:
    request: PullRequest
    tag_hashes: frozenset[int] | None
    suspended_at_ms: int
    timeout_ms: int
    respond: Callable[[PullAnswer], None]
    stream_id: int


@dataclass
class HoldTable:
    by_queue: dict[tuple[str, int], list[HeldPull]] = field(default_factory=dict)

    def add(self, held: HeldPull) -> None:
        self.by_queue.setdefault((held.request.topic, held.request.queue_id), []).append(held)

    def take(self, topic: str, queue_id: int) -> list[HeldPull]:
        return self.by_queue.pop((topic, queue_id), [])

    def drop_stream(self, stream_id: int) -> int:
        dropped = 0
        for key, held in list(self.by_queue.items()):
            kept = [h for h in held if h.stream_id != stream_id]
            dropped += len(held) - len(kept)
            if kept:
                self.by_queue[key] = kept
            else:
                del self.by_queue[key]
        return dropped

    def count_stream(self, stream_id: int) -> int:
        return sum(1 for held in self.by_queue.values() for h in held if h.stream_id == stream_id)

    def count(self) -> int:
        return sum(len(v) for v in self.by_queue.values())


# Re-runs a held pull without suspending it again; returns its answer.
Reexecute = Callable[[HeldPull], "PullAnswer"]


class PullRequestHoldService(Service):
    """The hold table and its task: woken by arrival notices, and every `scan_interval_ms`
    to release pulls whose hold time is over (checkHoldRequest)."""

    name = "pull-hold"

    def __init__(self, store: MessageStore, clock: Clock, scan_interval_ms: int, *,
                 on_crash: CrashHandler | None = None) -> None:
        super().__init__(scan_interval_ms, on_crash=on_crash, initial_delay_ms=0)
        self._store = store
        self._clock = clock
        self.holds = HoldTable()
        self._notices: collections.deque[ArrivalNotice] = collections.deque()
        self._reexecute: Reexecute | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread_id = 0
        self._next_scan_ms = 0
        self.woken = 0
        self.notices_posted = 0  # arrivals that found a held pull on their queue

    def bind(self, reexecute: Reexecute) -> None:
        """The pull handler's re-execution (the two refer to each other)."""
        self._reexecute = reexecute

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread_id = threading.get_ident()
        self._next_scan_ms = self._clock.monotonic_ms() + self.interval_ms
        super().start()

    def hold(self, held: HeldPull) -> None:
        self.holds.add(held)

    # --- MessageArrivingListener ----------------------------------------------------------------

    def notify_arrival(self, topic: str, queue_id: int, max_queue_offset: int, tag_hash: int | None,
                       *_: object) -> None:
        """The store's arrival listener: post a notice and wake the task; never wakes a pull here."""
        on_loop = self._loop is None or threading.get_ident() == self._loop_thread_id
        if on_loop and (topic, queue_id) not in self.holds.by_queue:
            # Nothing held for this queue: holds are added on this same thread after the pull's
            # own read, so a pull held later reads past this arrival itself. Waking the task
            # for nothing cost every send a few loop turns (RocketMQ's notifyMessageArriving
            # likewise looks its table up and returns).
            return
        self._notices.append((topic, queue_id, max_queue_offset, tag_hash))
        self.notices_posted += 1
        if on_loop:
            self.wakeup()
        else:
            self._loop.call_soon_threadsafe(self.wakeup)

    # --- the task -------------------------------------------------------------------------------

    async def tick(self) -> None:
        self.process_notices()
        now_ms = self._clock.monotonic_ms()
        if now_ms >= self._next_scan_ms:
            self.scan()
            self._next_scan_ms = now_ms + self.interval_ms

    async def _wait(self, ms: int) -> None:
        # Until the next scan is due, or a notice arrives, whichever is first.
        if self._notices:
            return
        await super()._wait(max(0, min(ms, self._next_scan_ms - self._clock.monotonic_ms())))

    def process_notices(self) -> None:
        notices = self._notices
        while notices:
            topic, queue_id, max_queue_offset, tag_hash = notices.popleft()
            self._check_queue(topic, queue_id, max_queue_offset, tag_hash)

    def scan(self) -> None:
        """checkHoldRequest: visit every held queue with its current max offset."""
        for topic, queue_id in list(self.holds.by_queue):
            self._check_queue(topic, queue_id, self._store.max_queue_offset(topic, queue_id), None)

    def _check_queue(self, topic: str, queue_id: int, max_queue_offset: int, arrived_tag_hash: int | None) -> None:
        """Wake held pulls of this queue whose offset is now behind the max (and whose tags match)."""
        held_list = self.holds.take(topic, queue_id)
        if not held_list:
            return
        now_ms = self._clock.monotonic_ms()
        kept: list[HeldPull] = []
        for held in held_list:
            newest = max_queue_offset
            if newest <= held.request.queue_offset:
                newest = self._store.max_queue_offset(topic, queue_id)
            tags_match = (arrived_tag_hash is None or held.tag_hashes is None
                          or arrived_tag_hash in held.tag_hashes)
            if newest > held.request.queue_offset and tags_match:
                self._wake(held)
            elif now_ms >= held.suspended_at_ms + held.timeout_ms:
                self._wake(held)  # timed out: re-executed without suspend, answers PULL_NOT_FOUND
            else:
                kept.append(held)
        for held in kept:
            self.holds.add(held)

    def _wake(self, held: HeldPull) -> None:
        assert self._reexecute is not None, "bind() the pull handler before holding pulls"
        self.woken += 1
        held.respond(self._reexecute(held))
