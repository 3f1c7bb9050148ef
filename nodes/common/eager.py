"""Run a coroutine at once on the caller's stack; a task only if it has to wait.

Python 3.12's `asyncio.eager_task_factory` does this for every task. On 3.11 a request that
never waits (a send to an ASYNC_FLUSH, ASYNC_MASTER broker answers right after its put)
still cost a task, its first scheduling turn and its done callback: on the broker's remoting
listener, with a stream reader too, 5.9 loop turns and 8.4 callbacks per one-message send were
counted, 1.4 and 2.4 with this and a protocol (docs/benchmark.md, "The broker's side of one
request").
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

T = TypeVar("T")


class Done:
    """A coroutine that finished on the caller's stack, with its result."""

    __slots__ = ("result",)

    def __init__(self, result: Any) -> None:
        self.result = result


def start_eagerly(coro: Coroutine[Any, Any, T], *, name: str | None = None) -> Done | asyncio.Task[T]:
    """`Done(result)` when `coro` ran to its end without waiting; otherwise a task that goes on
    from where it stopped. An exception it raised before waiting propagates here."""
    try:
        first_yield = coro.send(None)
    except StopIteration as stop:
        return Done(stop.value)
    return asyncio.get_running_loop().create_task(_resume(coro, first_yield), name=name)


@types.coroutine
def _resume(coro: Coroutine[Any, Any, T], yielded: Any) -> Generator[Any, Any, T]:
    """Hands what `coro` yielded (the future it waits on) to the task that runs this, and
    what the task sends or throws back into `coro`, as `await` would have."""
    while True:
        try:
            value = yield yielded
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:  # the task's cancellation, or the awaited future's error
            try:
                yielded = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                yielded = coro.send(value)
            except StopIteration as stop:
                return stop.value
