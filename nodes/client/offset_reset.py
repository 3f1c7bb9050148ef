"""A push consumer applying an offset reset (RocketMQ MQClientInstance#resetOffset, run on a
RESET_CONSUMER_CLIENT_OFFSET from a broker).

For each queue of the reset this consumer holds: stop consuming it (its ProcessQueue is dropped
with its cache, so messages already pulled are not delivered, and a listener call still running
on it commits nothing), set the offset, store it on the broker, and start a new ProcessQueue
pulling from there. An orderly queue keeps its lock: the broker's lock was never released, and
the new ProcessQueue takes the old one's lock state, so the lock renewal carries on. Queues held
by other consumers are left to them (the broker stored the offsets before it told anyone, and
each owner gets the same notice).

RocketMQ suspends the whole consumer, drops the queues, sleeps 10 s so running listener calls
can end, then sets the offsets and lets the next rebalance re-create the queues. Here only the
reset queues stop; an orderly queue waits for its running listener call (up to
consume_lock_try_ms) instead of a fixed sleep, and a concurrent call's result on a dropped
queue is discarded whenever it comes. The offset is stored before the first pull, so an
orderly queue's start offset, which is re-read from the broker, is the reset one too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from nodes.client.process_queue import ProcessQueue
from nodes.client.rebalance import RebalanceImpl
from nodes.client.rpc.api import OffsetReset
from nodes.common.errors import MqError
from nodes.common.types import MessageQueue

log = logging.getLogger(__name__)


async def apply_offset_reset(rebalance: RebalanceImpl, reset: OffsetReset) -> list[tuple[MessageQueue, int, int]]:
    """Restart every queue of `reset` this consumer holds from its reset offset; returns
    (queue, the offset it was at, the reset offset) for each queue restarted."""
    state = rebalance.state
    store = rebalance.offset_store
    restarted = []
    for mq, offset in sorted(reset.offsets.items()):
        stale = state.process_queue_table.get(mq)
        if stale is None or stale.dropped or mq.topic != reset.topic:
            continue
        stale.dropped = True  # no more pulls or listener calls; cached messages are never delivered
        if rebalance.orderly is not None and not await rebalance.orderly.wait_consume_idle(
                stale, rebalance.consume_lock_try_ms):
            log.warning("%s: a listener call on %s is still running; the reset goes ahead and its result "
                        "is dropped", rebalance.group, mq)
        if state.process_queue_table.get(mq) is not stale:
            continue  # given up meanwhile (a rebalance) or shutting down
        before = store.read_memory(mq)
        stale.clear()
        store.update_offset(mq, offset, increase_only=False)
        pq = ProcessQueue(now_ms=rebalance.clock.monotonic_ms())
        pq.locked = stale.locked  # the broker's lock is still ours: keep holding it
        pq.last_lock_timestamp_ms = stale.last_lock_timestamp_ms
        state.process_queue_table[mq] = pq
        try:
            await store.persist(mq)
        except MqError as err:  # the next persist round stores it; the broker has it from the reset anyway
            log.warning("%s: storing the reset offset %d of %s failed: %s", rebalance.group, offset, mq, err)
        if state.process_queue_table.get(mq) is not pq or pq.dropped:
            continue
        rebalance.deps.dispatch_pull(mq, pq, offset)
        restarted.append((mq, before, offset))
        log.info("%s: %s reset from %d to %d", rebalance.group, mq, before, offset)
    return restarted


def reset_event(group: str, client_id: str, reset: OffsetReset,
                restarted: list[tuple[MessageQueue, int, int]]) -> dict[str, Any]:
    """The client's journal line of a reset it applied."""
    return {"event": "offset-reset", "side": "client", "group": group, "client_id": client_id,
            "topic": reset.topic, "reset_timestamp_ms": reset.timestamp_ms,
            "queues": [[mq.broker_name, mq.queue_id, before, offset] for mq, before, offset in restarted]}


class OffsetResets:
    """A push consumer's resets being applied, one loop task each (its heartbeat's `on_reset`);
    `close()` at shutdown cancels those still running."""

    def __init__(self, rebalance: RebalanceImpl, client_id: str, emit: Callable[[dict[str, Any]], None]) -> None:
        self._rebalance = rebalance
        self._client_id = client_id
        self._emit = emit
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    def apply(self, reset: OffsetReset) -> None:
        if self._closed:
            return
        task = asyncio.get_running_loop().create_task(self._apply(reset), name=f"reset-{reset.group}-{reset.topic}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _apply(self, reset: OffsetReset) -> None:
        restarted = await apply_offset_reset(self._rebalance, reset)
        self._emit(reset_event(self._rebalance.group, self._client_id, reset, restarted))

    async def close(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
