"""AckWaiters: a SYNC_MASTER's sends waiting for a slave to acknowledge their end offset.

A heap by offset: an ack wakes the waiters it covers by popping them (each pop O(log n)), and a
waiter that gave up (its timeout, or its send was cancelled) stays in the heap as a dead entry
until an ack pops it or dead entries come to outnumber live ones, when the heap is rebuilt
without them (amortised O(1) per give-up).

Why: the list it replaces was rebuilt whole on every ack and on every timeout, so n sends timing
out together cost O(n^2) on the event loop. A burst of one-way sends to a SYNC_MASTER whose slave
fell behind (20,000 of them) held the master's loop for minutes, and with it its gRPC answers,
its replication and its registration. Loop-confined.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools

# Rebuild the heap once this many dead entries are in it and they are at least half of it.
DEAD_ENTRIES_MIN = 64

# An entry: [offset, sequence, future, state]; the sequence keeps futures out of the heap's comparisons.
_LIVE, _DEAD, _GONE = 0, 1, 2  # waiting; gave up, counted in `_dead`, still in the heap; taken out
_Entry = list


class AckWaiters:
    def __init__(self) -> None:
        self._heap: list[_Entry] = []
        self._sequence = itertools.count()
        self._dead = 0  # entries in the heap whose waiter gave up

    def __len__(self) -> int:
        """Entries held, dead ones included."""
        return len(self._heap)

    @property
    def live(self) -> int:
        return len(self._heap) - self._dead

    async def wait(self, offset: int, timeout_s: float) -> bool:
        """Wait until `acked(o)` is called with o >= `offset`; False when `timeout_s` passed first."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = [offset, next(self._sequence), fut, _LIVE]
        heapq.heappush(self._heap, entry)
        try:
            await asyncio.wait_for(fut, timeout_s)
            return True
        except TimeoutError:
            return False
        finally:
            if fut.cancelled() and entry[3] == _LIVE:  # gave up: it stays until popped or swept
                entry[3] = _DEAD
                self._dead += 1
                if self._dead >= DEAD_ENTRIES_MIN and 2 * self._dead >= len(self._heap):
                    self._sweep()

    def acked(self, offset: int) -> None:
        """Wake every waiter whose offset is at most `offset`."""
        heap = self._heap
        while heap and heap[0][0] <= offset:
            entry = heapq.heappop(heap)
            fut = entry[2]
            if entry[3] == _DEAD:
                self._dead -= 1
            elif fut.cancelled():  # gave up, and its waiter has not run since: nothing to count
                pass
            elif not fut.done():
                fut.set_result(None)
            entry[3] = _GONE

    def _sweep(self) -> None:
        """Take the counted dead entries out (a waiter that gave up and has not run yet stays)."""
        self._heap = [entry for entry in self._heap if entry[3] != _DEAD]
        heapq.heapify(self._heap)
        self._dead = 0
