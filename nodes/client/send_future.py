"""SendFuture: the future `send_async` hands back, a `concurrent.futures.Future` that builds its
Condition only once somebody has to wait on it.

A plain Future builds a Condition (and its RLock) when it is made, and takes it for every
state change and every read: about a third of a `send_async` caller's CPU per message, where
most futures are done before anyone asks (the caller reads them after `wait`, or only through
a done-callback). Here, while a future has no Condition, one module-wide plain lock guards its
state; the first caller that must block (`result` or `exception` before the end, `wait`,
`as_completed`, `cancel`) makes the Condition under that lock, and from then on the base
class's code runs unchanged. A state change checks for the Condition under the same lock, so
it either finds none (and nobody can be waiting) or notifies through it.

Owns only this hand-off; what the result is, and when it is set, is the producer's business.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from concurrent.futures._base import CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED, PENDING, RUNNING
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

_DONE_STATES = (CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED)
# Guards the state of every SendFuture that has no Condition yet (held for a few attribute
# writes at a time, so one lock for all of them costs less than one Condition each).
_GUARD = threading.Lock()


class SendFuture(concurrent.futures.Future[T]):
    """A `concurrent.futures.Future` (result, exception, add_done_callback, cancel, usable with
    `concurrent.futures.wait` / `as_completed`) that is cheap while nobody waits on it."""

    def __init__(self) -> None:  # the base's fields, without its Condition
        self._cond: threading.Condition | None = None
        self._state = PENDING
        self._result: Any = None
        self._exception: BaseException | None = None
        self._waiters: list[Any] = []
        self._done_callbacks: list[Any] = []

    @property
    def _condition(self) -> threading.Condition:  # type: ignore[override]
        """The base class's Condition, made on first use (by code that may wait or be waited on)."""
        cond = self._cond
        if cond is None:
            with _GUARD:
                cond = self._cond
                if cond is None:
                    cond = self._cond = threading.Condition()
        return cond

    # --- reads: a finished future's fields never change again -----------------------------
    def done(self) -> bool:
        return self._state in _DONE_STATES

    def result(self, timeout: float | None = None) -> T:
        if self._state == FINISHED:
            if self._exception is not None:
                raise self._exception
            return self._result  # type: ignore[no-any-return]
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._state == FINISHED:
            return self._exception
        return super().exception(timeout)

    # --- state changes ----------------------------------------------------------------------
    def set_running_or_notify_cancel(self) -> bool:
        with _GUARD:
            if self._cond is None:
                if self._state == PENDING:
                    self._state = RUNNING
                    return True
                if self._state == CANCELLED:  # no Condition: nobody waits, no waiter to tell
                    self._state = CANCELLED_AND_NOTIFIED
                    return False
        return super().set_running_or_notify_cancel()

    def set_result(self, result: T) -> None:
        if not self._finish(result, None):
            super().set_result(result)

    def set_exception(self, exception: BaseException | None) -> None:
        if not self._finish(None, exception):
            super().set_exception(exception)

    def _finish(self, result: Any, exception: BaseException | None) -> bool:
        """Finish without a Condition if there is none; False leaves it to the base class."""
        with _GUARD:
            if self._cond is not None:
                return False
            state = self._state
            if state not in _DONE_STATES:
                self._result = result
                self._exception = exception
                self._state = FINISHED  # last: a reader without the lock sees the fields first
        if state in _DONE_STATES:  # (repr takes the Condition: not under the guard)
            raise concurrent.futures.InvalidStateError(f"{state}: {self!r}")
        self._invoke_callbacks()
        return True

    def add_done_callback(self, fn: Any) -> None:
        with _GUARD:
            if self._cond is not None:
                pending = None
            elif self._state not in _DONE_STATES:
                self._done_callbacks.append(fn)
                return
            else:
                pending = fn
        if pending is None:
            super().add_done_callback(fn)
            return
        try:
            pending(self)
        except Exception:  # as the base class: a callback's failure is logged, not raised
            log.exception("exception calling callback for %r", self)
