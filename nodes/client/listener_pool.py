"""The threads a concurrent push consumer runs its listener on (RocketMQ's consumeExecutor).

Owns a fixed-size set of threads taking calls from one queue, started as calls arrive (up to
`threads`), the count of calls not finished yet, and stopping: calls still queued are dropped,
running ones may finish. What ThreadPoolExecutor does for the listener, without a Future, a
work item and a done-callback per call: a listener call per message is the common case, so
that bookkeeping was most of a message's cost in the consumer.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable
from typing import Any

_STOP = None  # queue sentinel: one per thread when the pool stops


class ListenerPool:
    """Calls `fn(arg)` on one of `threads` threads named `<name>_<n>`. Thread-safe."""

    def __init__(self, threads: int, name: str) -> None:
        self._threads_max = threads
        self._name = name
        self._queue: queue.SimpleQueue[tuple[Callable[[Any], None], Any] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle_changed = threading.Condition(self._lock)
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads waiting for a call
        self._unfinished = 0  # calls submitted and not finished (queued or running)
        self._closed = False
        self._numbers = itertools.count(1)

    @property
    def unfinished(self) -> int:
        return self._unfinished

    def submit(self, fn: Callable[[Any], None], arg: Any) -> bool:
        """Queue one call; False once the pool is shut down."""
        with self._lock:
            if self._closed:
                return False
            self._unfinished += 1
            if self._idle == 0 and len(self._threads) < self._threads_max:
                thread = threading.Thread(target=self._work, name=f"{self._name}_{next(self._numbers)}", daemon=True)
                self._threads.append(thread)
                thread.start()
            else:
                self._idle -= 1 if self._idle else 0  # that thread is about to take this call
        self._queue.put((fn, arg))
        return True

    def _work(self) -> None:
        get = self._queue.get
        while True:
            item = get()
            if item is _STOP:
                return
            fn, arg = item
            try:
                fn(arg)
            finally:
                with self._lock:
                    self._unfinished -= 1
                    self._idle += 1
                    self._idle_changed.notify_all()

    def shutdown(self) -> int:
        """Stop taking calls; drop the queued ones (returns how many); running calls go on."""
        dropped = 0
        with self._lock:
            if self._closed:
                return 0
            self._closed = True
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not _STOP:
                    dropped += 1
            self._unfinished -= dropped
            self._idle_changed.notify_all()
            for _ in self._threads:
                self._queue.put(_STOP)
        return dropped

    def wait_finished(self, timeout_s: float) -> bool:
        """Block until every call taken has finished (or `timeout_s`); True if they all did."""
        with self._lock:
            return self._idle_changed.wait_for(lambda: self._unfinished <= 0, timeout_s)
