"""The threads a concurrent push consumer runs its listener on (RocketMQ's consumeExecutor).

Owns a fixed-size set of threads taking calls from one shared queue, started as calls arrive
(up to `threads`), the count of calls not finished yet, and stopping: calls still queued are
dropped, running ones may finish. What ThreadPoolExecutor does for the listener, without a
Future, a work item and a done-callback per call.

Hand-off: `submit_many` queues a whole pulled batch with one lock round and wakes at most one
thread; a thread that takes a call while more are queued wakes one more helper first (never
more than one woken and not yet running at a time). A listener that blocks (I/O, sleep) so
lets the other threads start one after the other and the calls run side by side, up to
`threads`; a listener that returns at once is run back to back by the thread already
awake, so a batch of 32 calls costs one or two thread wake-ups instead of 32.
"""

from __future__ import annotations

import collections
import itertools
import logging
import operator
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

log = logging.getLogger(__name__)

# One submission: the callable and an iterator over its arguments. Threads take calls from the
# head entry with next() (atomic in CPython), so a batch needs no per-call queue item.
Entry = tuple[Callable[[Any], None], Iterator[Any]]
_DONE = object()  # next()'s default: the entry has no call left


class _Worker:
    """One pool thread: its wake-up lock (held while the thread works, released to wake it)
    and its count of finished calls (written by its own thread only)."""

    __slots__ = ("finished", "thread", "wake")

    def __init__(self) -> None:
        self.finished = 0
        self.wake = threading.Lock()
        self.wake.acquire()
        self.thread: threading.Thread | None = None


class ListenerPool:
    """Calls `fn(arg)` on one of `threads` threads named `<name>_<n>`. Thread-safe."""

    def __init__(self, threads: int, name: str) -> None:
        self._threads_max = threads
        self._name = name
        self._pending: collections.deque[Entry] = collections.deque()
        self._lock = threading.Lock()
        self._idle_changed = threading.Condition(self._lock)  # a thread went idle or exited
        self._workers: list[_Worker] = []
        self._idle: list[_Worker] = []  # parked threads, each blocked on its `wake` lock
        self._waking = False  # a thread was woken or started and has not taken a call yet
        self._submitted = 0
        self._dropped = 0
        self._closed = False
        self._finish_waiters = 0  # threads in wait_finished (parking threads notify only then)
        self._numbers = itertools.count(1)

    @property
    def unfinished(self) -> int:
        """Calls submitted and not finished (queued or running)."""
        return self._submitted - self._dropped - sum(w.finished for w in self._workers)

    def submit(self, fn: Callable[[Any], None], arg: Any) -> bool:
        """Queue one call; False once the pool is shut down."""
        return self.submit_many(fn, (arg,))

    def submit_many(self, fn: Callable[[Any], None], args: Sequence[Any]) -> bool:
        """Queue one call of `fn` per argument, in order; False once the pool is shut down."""
        if not args:
            return not self._closed
        with self._lock:
            if self._closed:
                return False
            self._submitted += len(args)
            self._pending.append((fn, iter(args)))
            if not self._waking:
                # one more thread, in case every awake one is in a long call (a parked one, or a
                # new one below the limit); the woken thread wakes the next if calls remain
                self._wake_one_locked()
        return True

    def _wake_one_locked(self) -> None:
        """Wake a parked thread, or start a new one if none is parked (call with the lock held)."""
        if self._idle:
            self._waking = True
            self._idle.pop().wake.release()
        elif len(self._workers) < self._threads_max:
            self._waking = True
            worker = _Worker()
            worker.thread = threading.Thread(target=self._work, args=(worker,),
                                             name=f"{self._name}_{next(self._numbers)}", daemon=True)
            self._workers.append(worker)
            try:
                worker.thread.start()
            except RuntimeError:  # no thread to be had: the threads already there take the calls
                self._workers.remove(worker)
                self._waking = False
                if not self._workers:
                    raise
                log.warning("%s: could not start another thread; going on with %d", self._name, len(self._workers))

    def _help_wanted(self) -> None:
        """More calls are queued than this thread is about to run: wake one helper (at most one
        woken-and-not-yet-running at a time, so a fast listener does not wake the whole pool)."""
        with self._lock:
            if not self._waking and not self._closed:
                self._wake_one_locked()

    def _work(self, me: _Worker) -> None:
        pending, lock = self._pending, self._lock
        self._waking = False
        while True:
            try:
                entry = pending[0]
            except IndexError:
                with lock:
                    if self._closed:
                        if self._finish_waiters:
                            self._idle_changed.notify_all()
                        return
                    if pending:
                        continue  # queued between the look and the lock
                    self._idle.append(me)
                    if self._finish_waiters:
                        self._idle_changed.notify_all()
                me.wake.acquire()  # parked until `_wake_one_locked` or shutdown releases it
                self._waking = False
                continue
            fn, calls = entry
            arg = next(calls, _DONE)
            if arg is _DONE:
                with lock:  # once per submission: another thread may have removed it already
                    if pending and pending[0] is entry:
                        pending.popleft()
                continue
            if (not self._waking and (self._idle or len(self._workers) < self._threads_max)
                    and (len(pending) > 1 or operator.length_hint(calls))):
                self._help_wanted()
            try:
                fn(arg)
            except Exception:  # the callable's own failure must not cost the pool a thread
                log.exception("%s: a call raised", self._name)
            finally:
                me.finished += 1

    def shutdown(self) -> int:
        """Stop taking calls; drop the queued ones (returns how many); running calls go on."""
        with self._lock:
            if self._closed:
                return 0
            self._closed = True
            dropped = sum(len(list(calls)) for _, calls in self._pending)
            self._pending.clear()
            self._dropped += dropped
            for worker in self._idle:
                worker.wake.release()
            self._idle.clear()
            self._idle_changed.notify_all()
        return dropped

    def wait_finished(self, timeout_s: float) -> bool:
        """Block until every call taken has finished (or `timeout_s`); True if they all did."""
        with self._lock:
            self._finish_waiters += 1
            try:
                return self._idle_changed.wait_for(lambda: self.unfinished <= 0, timeout_s)
            finally:
                self._finish_waiters -= 1
