"""start_eagerly: a coroutine that never waits finishes on the caller's stack; one that waits
goes on as a task exactly as if it had been a task from the start."""

from __future__ import annotations

import asyncio

import pytest

from nodes.common.eager import Done, start_eagerly


async def _double(x: int) -> int:
    return 2 * x


async def _after_two_waits(x: int) -> int:
    await asyncio.sleep(0.001)
    await asyncio.sleep(0)
    return 3 * x


def test_a_coroutine_that_never_waits_is_done_without_a_task():
    async def main() -> None:
        tasks_before = len(asyncio.all_tasks())
        started = start_eagerly(_double(2))
        assert isinstance(started, Done) and started.result == 4
        assert len(asyncio.all_tasks()) == tasks_before
    asyncio.run(main())


def test_one_that_waits_becomes_a_task_with_its_result_and_its_error():
    async def fails_later() -> None:
        await asyncio.sleep(0.001)
        raise ValueError("late")

    async def main() -> None:
        started = start_eagerly(_after_two_waits(2), name="eager-test")
        assert isinstance(started, asyncio.Task) and started.get_name() == "eager-test"
        assert await started == 6
        with pytest.raises(ValueError, match="late"):
            await start_eagerly(fails_later())
    asyncio.run(main())


def test_an_error_before_the_first_wait_is_raised_to_the_caller():
    async def fails_at_once() -> None:
        raise KeyError("now")

    async def main() -> None:
        with pytest.raises(KeyError):
            start_eagerly(fails_at_once())
    asyncio.run(main())


def test_cancelling_the_task_reaches_the_coroutine_where_it_waits():
    async def waits() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            return "saw the cancel"
        return "not cancelled"

    async def main() -> None:
        started = start_eagerly(waits())
        await asyncio.sleep(0.01)
        started.cancel()
        assert await started == "saw the cancel"
        uncaught = start_eagerly(_after_two_waits(1))
        await asyncio.sleep(0)
        uncaught.cancel()
        with pytest.raises(asyncio.CancelledError):
            await uncaught
    asyncio.run(main())
