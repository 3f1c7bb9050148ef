"""The client side of queue locks: lock, renew and unlock an orderly consumer's queues on their masters.

Owns RocketMQ's `RebalanceImpl#lock / lockAll / unlock / unlockAll` and the delayed unlock of
`RebalancePushImpl#unlockDelay`: LockBatchMQ / UnlockBatchMQ to the
master of each queue's broker only (never a slave: with the master gone, lock calls fail and
the client lock ages out), the `locked` flag and lock timestamp of each ProcessQueue, and one
`lock` event per queue for every request and outcome as the client sees it (requested,
granted, renewed, denied, lost, expired, released) with the lease end it believes, as the real
CLOCK_MONOTONIC of the event lines' `mono_ms` reads it (a client under clock control converts its
skewed deadline at the rate in force). A lock or unlock
call that got no answer changes nothing the client believes: it is recorded as a separate
`lock-failed` event (`call` lock or unlock), outside the `lock` actions the checker reads.

The believed lease runs `client_lock_lease_ms` from when the lock request was *sent*, not
from when the answer arrived (RocketMQ stamps the answer): a slow answer can then never make
the client believe it holds a lock the broker has already let go (docs/chaos.md).

A queue granted again after its client lock was lost or ran out is *regained*, not renewed:
while it was not ours another consumer may have owned it and moved its offset on, so the
ProcessQueue's cache and position are stale. The locker hands it to `on_regained` (rebalance
replaces the ProcessQueue and resumes from the broker's committed offset) instead of setting
the flag on the stale one (beyond RocketMQ, which resumes a re-locked queue from its in-memory
position: a partitioned owner that comes back rewinds the group, docs/chaos.md).

Does not decide which queues to lock (rebalance) or when to consume (the orderly service).
Loop-confined.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar

from nodes.client.consumer_state import ConsumerState
from nodes.client.process_queue import ProcessQueue
from nodes.common import constants as c
from nodes.common.clock import real_mono_converter
from nodes.common.errors import BrokerNotFoundError, MqError
from nodes.common.service import CrashHandler, Service
from nodes.common.types import MessageQueue

if TYPE_CHECKING:
    from nodes.client.instance import ClientInstance

log = logging.getLogger(__name__)

EventSink = Callable[[dict[str, Any]], None]
# (queue, its stale ProcessQueue, the grant's request send time in monotonic ms)
OnRegained = Callable[[MessageQueue, ProcessQueue, int], None]

REQUESTED = "requested"
GRANTED = "granted"
RENEWED = "renewed"
DENIED = "denied"
LOST = "lost"
EXPIRED = "expired"
RELEASED = "released"


class QueueLocker:
    """Locks of one orderly push consumer (CLUSTERING).

    Args:
        instance: connections and routes (the master address of a broker name).
        state: the group, the queue table (read; `locked` flags and lock timestamps are written),
            the lock lease and the lock-validity rule.
        client_id: who asks.
        on_event: receives the `lock` events (loop thread).
        on_regained: takes a queue granted again after its client lock was lost or ran out;
            without it the stale ProcessQueue is simply marked locked (RocketMQ).
    """

    def __init__(self, instance: ClientInstance, state: ConsumerState, client_id: str, *,
                 on_event: EventSink | None = None, on_regained: OnRegained | None = None,
                 timeout_ms: int = c.LOCK_BATCH_TIMEOUT_MS, renew_gives_up: bool = False) -> None:
        """`renew_gives_up`: the test-only fault switch renew-gives-up (constants.FAULT_RENEW_GIVES_UP)."""
        self._instance = instance
        self.state = state
        self.group = state.group
        self.client_id = client_id
        self._on_event = on_event
        self._on_regained = on_regained
        self.timeout_ms = timeout_ms
        self._expiry_reported: dict[MessageQueue, int] = {}  # mq -> lock timestamp whose expiry was reported
        self._tasks: set[asyncio.Task[None]] = set()
        self._later: set[asyncio.TimerHandle] = set()
        self.stats = {"lock_calls": 0, "lock_failures": 0, "unlock_calls": 0, "regained": 0}
        self.renew_gives_up = renew_gives_up
        self.renewal_abandoned: set[str] = set()  # broker names (renew-gives-up only)

    # --- addresses -----------------------------------------------------------------------------
    def master_addr(self, broker_name: str) -> str | None:
        """findBrokerAddressInSubscribe(brokerName, MASTER_ID, onlyThisBroker=true)."""
        found = self._instance.routes.find_broker_address_in_subscribe(broker_name, c.MASTER_ID, True)
        return found.addr if found is not None else None

    # --- lock ----------------------------------------------------------------------------------
    async def lock(self, mq: MessageQueue, *, reason: str) -> int | None:
        """RebalanceImpl#lock: lock one queue; returns the request's send time if it is now ours, else None.

        A queue that is in the table gets `locked` and its lock timestamp; a failure changes
        nothing (RocketMQ's lock(mq) never clears the flag).
        """
        asked = self.state.process_queue_table.get(mq)
        held_before = asked is not None and self.state.lock_valid(asked)
        locked, sent_ms = await self._lock_batch(mq.broker_name, [mq], reason=reason,
                                                 held_before=[mq] if held_before else ())
        if locked is None or mq not in locked:
            return None
        pq = self.state.process_queue_table.get(mq)
        if pq is not None:
            self._granted(mq, pq, sent_ms, held_before=held_before or pq is not asked)
        return sent_ms

    def _granted(self, mq: MessageQueue, pq: ProcessQueue, sent_ms: int, *, held_before: bool) -> None:
        """A grant of a queue in the table: renew its lock, or hand a regained one to `on_regained`.

        `held_before`: the client held the lock when the request was sent, or the ProcessQueue
        was created while the request was out (after a grant of its own): nothing stale to drop.
        """
        if not held_before and not pq.dropped and self._on_regained is not None:
            self.stats["regained"] += 1
            log.warning("%s: %s is ours again after its lock was lost; resuming it from the broker's offset",
                        self.group, mq)
            self._on_regained(mq, pq, sent_ms)
            return
        pq.locked = True
        pq.last_lock_timestamp_ms = sent_ms

    async def lock_all(self) -> None:
        """lockAll: renew every owned queue, per broker; queues the broker left out are no longer ours.

        On a failed call (the master is down) nothing changes, so the client lock ages out.
        """
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in sorted(self.state.process_queue_table):
            by_broker.setdefault(mq.broker_name, []).append(mq)
        await asyncio.gather(*(self._lock_all_of(name, mqs) for name, mqs in by_broker.items()))

    async def _lock_all_of(self, broker_name: str, mqs: list[MessageQueue]) -> None:
        if broker_name in self.renewal_abandoned:
            return
        table = self.state.process_queue_table
        asked = {mq: table.get(mq) for mq in mqs}
        held_before = {mq for mq, pq in asked.items() if pq is not None and self.state.lock_valid(pq)}
        locked, sent_ms = await self._lock_batch(broker_name, mqs, reason="renew", held_before=held_before)
        if locked is None:
            # A failed or timed-out renewal is retried at the next interval, while the client
            # lease (renewal interval < lease) still runs.
            if self.renew_gives_up:
                # FAULT SWITCH renew-gives-up: no next attempt; the client leases of this
                # broker's queues run out and are only taken again by the consume path's re-lock
                self.renewal_abandoned.add(broker_name)
                log.warning("%s: lock renewal on %s given up after one failed call (fault switch %s)",
                            self.group, broker_name, c.FAULT_RENEW_GIVES_UP)
            return
        table = self.state.process_queue_table
        for mq in mqs:
            pq = table.get(mq)
            if pq is None:
                continue
            if mq in locked:
                self._granted(mq, pq, sent_ms, held_before=mq in held_before or pq is not asked[mq])
            else:
                if mq in held_before:  # (an already expired one was reported as denied)
                    self._emit(LOST, mq, None, reason="renew")
                    log.warning("%s: lock of %s lost (the broker did not renew it)", self.group, mq)
                pq.locked = False

    async def _lock_batch(self, broker_name: str, mqs: list[MessageQueue], *, reason: str,
                          held_before: Iterable[MessageQueue] = ()) -> tuple[set[MessageQueue] | None, int]:
        """One LockBatchMQ; returns (the queues locked, or None if the call failed; the send time)."""
        sent_ms = self.state.clock.monotonic_ms()
        for mq in mqs:
            self._emit(REQUESTED, mq, None, reason=reason)
        addr = self.master_addr(broker_name)
        self.stats["lock_calls"] += 1
        try:
            if addr is None:
                raise BrokerNotFoundError(f"broker {broker_name} has no master in the route")
            locked = await self._instance.api.lock_batch(addr, self.group, self.client_id, mqs, self.timeout_ms)
        except MqError as err:
            self.stats["lock_failures"] += 1
            log.warning("%s: locking %d queues of %s failed: %s", self.group, len(mqs), broker_name, err)
            for mq in mqs:
                self._emit_failed("lock", mq, reason=reason, error=str(err))
            return None, sent_ms
        rtt_ms = self.state.clock.monotonic_ms() - sent_ms
        held = set(held_before)
        for mq in mqs:
            if mq in locked:
                self._emit(RENEWED if mq in held else GRANTED, mq, sent_ms + self.state.client_lock_lease_ms, reason=reason,
                           sent_mono_ms=sent_ms, rtt_ms=rtt_ms)
            elif mq not in held:
                self._emit(DENIED, mq, None, reason=reason, sent_mono_ms=sent_ms, rtt_ms=rtt_ms)
        return locked, sent_ms

    def note_expired(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """The consume service found `pq`'s client lock expired: record it once per lock."""
        if self._expiry_reported.get(mq) == pq.last_lock_timestamp_ms:
            return
        self._expiry_reported[mq] = pq.last_lock_timestamp_ms
        log.warning("%s: client lock of %s expired %d ms ago", self.group, mq,
                    self.state.clock.monotonic_ms() - pq.last_lock_timestamp_ms - self.state.client_lock_lease_ms)
        self._emit(EXPIRED, mq, pq.last_lock_timestamp_ms + self.state.client_lock_lease_ms)

    # --- unlock --------------------------------------------------------------------------------
    async def unlock(self, mq: MessageQueue, *, oneway: bool, reason: str) -> None:
        """RebalanceImpl#unlock (one queue): `oneway` sends it without waiting for the answer."""
        if oneway:
            self._spawn(self._unlock_batch(mq.broker_name, [mq], reason=reason), f"unlock-{mq.queue_id}")
        else:
            await self._unlock_batch(mq.broker_name, [mq], reason=reason)

    def unlock_later(self, mq: MessageQueue, delay_ms: int) -> None:
        """unlockDelay with cached messages: unlock `mq` (oneway) after `delay_ms`.

        Beyond RocketMQ: skipped if the queue is ours again by then, so a late unlock never
        releases a lock this client took back meanwhile.
        """
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle

        def fire() -> None:
            self._later.discard(handle)
            pq = self.state.process_queue_table.get(mq)
            if pq is not None and not pq.dropped:
                log.info("%s: delayed unlock of %s skipped: the queue is ours again", self.group, mq)
                return
            self._spawn(self._unlock_batch(mq.broker_name, [mq], reason="drop-delayed"), f"unlock-{mq.queue_id}")

        handle = loop.call_later(delay_ms / 1000, fire)
        self._later.add(handle)

    async def unlock_all(self) -> None:
        """unlockAll(oneway=false) at shutdown: every owned queue, per broker; flags cleared."""
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in sorted(self.state.process_queue_table):
            by_broker.setdefault(mq.broker_name, []).append(mq)
        await asyncio.gather(*(self._unlock_batch(name, mqs, reason="shutdown") for name, mqs in by_broker.items()))
        for pq in self.state.process_queue_table.values():
            pq.locked = False

    async def _unlock_batch(self, broker_name: str, mqs: list[MessageQueue], *, reason: str) -> bool:
        addr = self.master_addr(broker_name)
        self.stats["unlock_calls"] += 1
        try:
            if addr is None:
                raise BrokerNotFoundError(f"broker {broker_name} has no master in the route")
            await self._instance.api.unlock_batch(addr, self.group, self.client_id, mqs, self.timeout_ms)
        except MqError as err:
            log.warning("%s: unlocking %d queues of %s failed: %s", self.group, len(mqs), broker_name, err)
            for mq in mqs:
                self._emit_failed("unlock", mq, reason=reason, error=str(err))
            return False
        now_ms = self.state.clock.monotonic_ms()
        for mq in mqs:
            self._emit(RELEASED, mq, now_ms, reason=reason)
        return True

    # --- housekeeping --------------------------------------------------------------------------
    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Drop delayed unlocks (as RocketMQ's scheduler does at shutdown) and wait for oneway ones."""
        for handle in list(self._later):
            handle.cancel()
        self._later.clear()
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _emit(self, action: str, mq: MessageQueue, lease_end_ms: int | None, **extra: Any) -> None:
        if self._on_event is not None:
            # a skewed client's deadline, as the real monotonic clock of the event lines will read it
            to_real = real_mono_converter(self.state.clock)
            if to_real is not None:
                lease_end_ms = None if lease_end_ms is None else to_real(lease_end_ms)
                if extra.get("sent_mono_ms") is not None:
                    extra["sent_mono_ms"] = to_real(extra["sent_mono_ms"])
            self._on_event({"event": "lock", "side": "client", "action": action, "group": self.group,
                            "client_id": self.client_id, "topic": mq.topic, "broker_name": mq.broker_name,
                            "queue_id": mq.queue_id, "lease_end_mono_ms": lease_end_ms, **extra})

    def _emit_failed(self, call: str, mq: MessageQueue, *, reason: str, error: str) -> None:
        if self._on_event is not None:
            self._on_event({"event": "lock-failed", "side": "client", "call": call, "group": self.group,
                            "client_id": self.client_id, "topic": mq.topic, "broker_name": mq.broker_name,
                            "queue_id": mq.queue_id, "reason": reason, "error": error})


class LockRenewalService(Service):
    """lockMQPeriodically: `lock_all` every `lock_renew_interval_ms`, the first after `lock_renew_first_ms`."""

    name: ClassVar[str] = "lock-renewal"
    expected_errors: ClassVar[tuple[type[BaseException], ...]] = (MqError,)

    def __init__(self, locker: QueueLocker, interval_ms: int, first_ms: int, *,
                 on_crash: CrashHandler | None = None) -> None:
        # paced by the consumer's clock, as its lease is: a skewed client renews at interval / rate
        super().__init__(interval_ms, on_crash=on_crash, initial_delay_ms=first_ms, clock=locker.state.clock)
        self._locker = locker

    async def tick(self) -> None:
        await self._locker.lock_all()
