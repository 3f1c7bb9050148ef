"""Polling with a budget, and timeouts that explain themselves.

Owns waiting for a condition in the harness; budgets come from the caller (derive them
from `Timing`, e.g. `timing.broker_failover_budget_ms()`), never from guesses in here.
"""

from __future__ import annotations

import reprlib
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

POLL_INTERVAL_MS = 20
_repr = reprlib.Repr()
_repr.maxstring = 300
_repr.maxother = 300
_repr.maxlist = _repr.maxdict = _repr.maxset = 20


class WaitTimeout(TimeoutError):
    """A `wait_until` budget ran out. Says what was awaited and what was seen last."""

    def __init__(self, what: str, budget_ms: int, last: object, polls: int) -> None:
        self.what = what
        self.budget_ms = budget_ms
        self.last = last
        self.polls = polls
        super().__init__(f"timed out after {budget_ms} ms waiting for {what}; "
                         f"last observed ({polls} polls): {_describe(last)}")


def wait_until(observe: Callable[[], T], budget_ms: int, what: str, *,
               done: Callable[[T], bool] = bool, interval_ms: int = POLL_INTERVAL_MS,
               ignore: tuple[type[BaseException], ...] = ()) -> T:
    """Call `observe()` until `done(value)` holds; return that value.

    Args:
        observe: reads the state being waited for (called at least once, even with no budget).
        budget_ms: how long to keep trying.
        what: what is awaited, for the error ("broker-a-0 to register with namesrv-0").
        done: when the observed value counts as reached (default: truthy).
        interval_ms: pause between polls.
        ignore: exceptions from `observe` that mean "not yet" (e.g. a node still starting);
            the last one is reported as the observed value. Anything else propagates.

    Raises:
        WaitTimeout: the budget ran out first (a TimeoutError).
    """
    deadline = time.monotonic() + budget_ms / 1000
    polls = 0
    last: object = "<nothing observed>"
    while True:
        polls += 1
        try:
            value = observe()
        except ignore as exc:
            last = exc
        else:
            if done(value):
                return value
            last = value
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WaitTimeout(what, budget_ms, last, polls)
        time.sleep(min(interval_ms / 1000, remaining))


def _describe(value: object) -> str:
    if isinstance(value, BaseException):
        return f"{type(value).__name__}: {_repr.repr(str(value))[1:-1]}"
    return _repr.repr(value)
