"""SyncCall: run one coroutine on the client's loop for a caller thread that only waits for it.

`asyncio.run_coroutine_threadsafe` hands back a `concurrent.futures.Future`: a Condition, a
callback chain in both directions, and on completion `notify_all` under the Condition's lock
(plus a fresh waiter lock per wait, and the Condition taken again by the woken caller). A
synchronous call needs none of that: nobody adds callbacks, nobody else waits. Here the
caller blocks on one pre-acquired lock that the loop releases once the task is done. The
outcome is written before the release and read after it, so it needs no lock of its own.

A call can also be started by a plain callback instead of a coroutine (`SyncCall.started`):
the loop runs `start(settle)` and whatever ends the work calls `settle(result, error)` -- for a
pull, the stream's reader, in the same loop turn that read the answer. No task, no future and
no done-callback turn sit between the answer and the caller's wake-up.

Owns only the hand-off; what a timeout means to the caller is `ClientInstance.run`'s business.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

T = TypeVar("T")

# settle(result, error): ends a started call; the first call counts, later ones are ignored
Settle = Callable[[Any, "BaseException | None"], None]


class SyncCall(Generic[T]):
    """One coroutine scheduled on `loop` from another thread; `wait` blocks until it ends."""

    __slots__ = ("_cancelled", "_done", "_error", "_loop", "_result", "_settled", "_task")

    def __init__(self, loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T] | None = None, *,
                 start: Callable[[Settle], None] | None = None) -> None:
        """Exactly one of `coro` (run as a task) and `start` (called on the loop with `settle`)."""
        if (coro is None) == (start is None):
            raise TypeError("SyncCall takes a coroutine or a start callback, not both or neither")
        self._loop = loop
        self._done = threading.Lock()
        self._done.acquire()  # released by the loop once the outcome is set
        self._task: asyncio.Task[T] | None = None
        self._result: T | None = None
        self._error: BaseException | None = None
        self._cancelled = False
        self._settled = False
        if start is not None:
            loop.call_soon_threadsafe(self._start_callback, start)
            return
        assert coro is not None
        try:
            loop.call_soon_threadsafe(self._start, coro)
        except BaseException:  # e.g. the loop is closed: the coroutine never runs
            coro.close()
            raise

    @classmethod
    def started(cls, loop: asyncio.AbstractEventLoop, start: Callable[[Settle], None]) -> SyncCall[Any]:
        """A call whose work `start(settle)` begins on the loop; whatever finishes it calls
        `settle(result, None)` or `settle(None, error)` once, on the loop thread. An exception
        out of `start` itself settles the call with it. `cancel` does nothing to such a call:
        its work must end on its own (a pull's own deadline does)."""
        return cls(loop, start=start)

    # --- loop thread ----------------------------------------------------------------------
    def _start(self, coro: Coroutine[Any, Any, T]) -> None:
        # Always runs before `_cancel` (both go through the loop's FIFO of thread-safe callbacks),
        # so a cancel that comes first finds the task; cancelled before its first step, the
        # coroutine never runs.
        task = self._loop.create_task(coro)
        self._task = task
        task.add_done_callback(self._finish)

    def _start_callback(self, start: Callable[[Settle], None]) -> None:
        try:
            start(self.settle)
        except BaseException as exc:  # nothing was started, or it failed before handing off
            self.settle(None, exc)

    def settle(self, result: Any, error: BaseException | None) -> None:
        """End a started call (loop thread); only the first settle counts."""
        if self._settled:
            return
        self._settled = True
        if error is None:
            self._result = result
        elif isinstance(error, asyncio.CancelledError):
            self._cancelled = True
        else:
            self._error = error
        self._done.release()

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
