"""AckWaiters: a SYNC_MASTER's sends woken by the acks that cover them, give-ups swept out, and
the work of n give-ups linear in n (it was quadratic, and held a master's loop for minutes)."""

from __future__ import annotations

import asyncio
import math

from nodes.broker import ack_waiters
from nodes.broker.ack_waiters import AckWaiters


def test_an_ack_wakes_exactly_the_waiters_it_covers():
    async def main() -> tuple[list[bool], int]:
        waiters = AckWaiters()
        tasks = [asyncio.create_task(waiters.wait(offset, 5)) for offset in (300, 100, 200, 400)]
        await asyncio.sleep(0)
        waiters.acked(250)
        await asyncio.wait(tasks, timeout=0.2)  # the two covered finish within a few loop turns
        woken = [t.done() for t in tasks]
        waiters.acked(400)
        results = await asyncio.gather(*tasks)
        assert results == [True] * 4
        return woken, len(waiters)

    woken, left = asyncio.run(main())
    assert woken == [False, True, True, False]
    assert left == 0


def test_a_waiter_not_covered_in_time_gives_up_and_a_later_ack_skips_it():
    async def main() -> None:
        waiters = AckWaiters()
        late = asyncio.create_task(waiters.wait(500, 0.01))
        kept = asyncio.create_task(waiters.wait(600, 5))
        assert await late is False
        assert waiters.live == 1 and len(waiters) == 2  # the give-up waits for a sweep or an ack
        waiters.acked(600)
        assert await kept is True
        assert len(waiters) == 0 and waiters.live == 0

    asyncio.run(main())


def test_a_cancelled_send_counts_as_a_give_up():
    async def main() -> None:
        waiters = AckWaiters()
        task = asyncio.create_task(waiters.wait(100, 5))
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert waiters.live == 0
        waiters.acked(100)
        assert len(waiters) == 0 and waiters.live == 0

    asyncio.run(main())


def test_many_give_ups_at_once_cost_linear_work_and_leave_little_behind(monkeypatch):
    """20,000 sends time out together (a burst to a SYNC_MASTER whose slave fell behind): the
    heap is rebuilt about log2(n) times, visiting about 2n entries in all, and what is left is
    under the sweep's threshold. The list this replaced was rebuilt on every give-up."""
    visited = []
    sweep = AckWaiters._sweep

    def counting_sweep(self: AckWaiters) -> None:
        visited.append(len(self))
        sweep(self)

    monkeypatch.setattr(AckWaiters, "_sweep", counting_sweep)
    n = 20_000

    async def main() -> tuple[list[bool], AckWaiters]:
        waiters = AckWaiters()
        results = await asyncio.gather(*(waiters.wait(1_000 + i, 0.05) for i in range(n)))
        return results, waiters

    results, waiters = asyncio.run(main())
    assert not any(results)
    assert waiters.live == 0 and len(waiters) < 2 * ack_waiters.DEAD_ENTRIES_MIN
    assert len(visited) <= math.log2(n) + 2
    assert sum(visited) <= 2 * n + ack_waiters.DEAD_ENTRIES_MIN * len(visited)
