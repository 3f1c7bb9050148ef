"""SyncCall: run one coroutine on the client's loop for a caller thread that only waits for it.

`asyncio.run_coroutine_threadsafe` hands back a `concurrent.futures.Future`: a Condition, a
callback chain in both directions, and on completion `notify_all` under the Condition's lock
(plus a fresh waiter lock per wait, and the Condition taken again by the woken caller). A
synchronous call needs none of that: nobody adds callbacks, nobody else waits. Here the
caller blocks on one pre-acquired lock that the loop releases once the task is done. The
outcome is written before the release and read after it, so it needs no lock of its own.

Owns only the hand-off; what a timeout means to the caller is `ClientInstance.run`'s business.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class SyncCall(Generic[T]):
    """One coroutine scheduled on `loop` from another thread; `wait` blocks until it ends."""

    __slots__ = ("_cancelled", "_done", "_error", "_loop", "_result", "_task")

    def __init__(self, loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> None:
        self._loop = loop
        self._done = threading.Lock()
        self._done.acquire()  # released by the loop once the outcome is set
        self._task: asyncio.Task[T] | None = None
        self._result: T | None = None
        self._error: BaseException | None = None
        self._cancelled = False
        try:
            loop.call_soon_threadsafe(self._start, coro)
        except BaseException:  # e.g. the loop is closed: the coroutine never runs
            coro.close()
            raise

    # --- loop thread ----------------------------------------------------------------------
    def _start(self, coro: Coroutine[Any, Any, T]) -> None:
        # Always runs before `_cancel` (both go through the loop's FIFO of thread-safe callbacks),
        # so a cancel that comes first finds the task; cancelled before its first step, the
        # coroutine never runs.
        task = self._loop.create_task(coro)
        self._task = task
        task.add_done_callback(self._finish)

    def _finish(self, task: asyncio.Task[T]) -> None:
        if task.cancelled():
            self._cancelled = True
        else:
            error = task.exception()
            if error is None:
                self._result = task.result()
            else:
                self._error = error
        self._done.release()

    def _cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    # --- caller thread ----------------------------------------------------------------------
    def cancel(self) -> None:
        """Ask the loop to cancel the coroutine (from any thread but the loop's); the outcome
        is whatever the coroutine makes of the cancellation, and nobody waits for it."""
        try:
            self._loop.call_soon_threadsafe(self._cancel)
        except RuntimeError:  # the loop is closed: the coroutine is gone already
            pass

    def wait(self, timeout_s: float) -> bool:
        """Block until the coroutine has ended, at most `timeout_s`; whether it has.

        On False the coroutine is left running (see `cancel`)."""
        if not self._done.acquire(timeout=max(timeout_s, 0)):
            return False
        self._done.release()  # a later `wait` answers at once
        return True

    def result(self) -> T:
        """The ended coroutine's result, or its exception raised here (call after `wait` said True).

        Raises:
            concurrent.futures.CancelledError: the coroutine was cancelled on the loop (as
                `concurrent.futures.Future.result` would raise).
        """
        if self._cancelled:
            raise concurrent.futures.CancelledError()
        error = self._error
        if error is not None:
            raise error
        return self._result  # type: ignore[return-value]
