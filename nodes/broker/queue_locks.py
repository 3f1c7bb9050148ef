"""Queue locks for orderly consumers (RocketMQ RebalanceLockManager).

Owns the master's lock table `group -> queue -> (holder client id, lease end)`: lock and
unlock in batches, the lease (`broker_lock_lease_ms`, 60 s unscaled) renewed by any lock call
from the holder, takeover of an expired lease by whoever asks first, unlock only by the
holder, and one `lock` event per grant, renewal, denial, expiry and release (with the lease
end as the real CLOCK_MONOTONIC of the event lines reads it: a broker under clock control, or
measuring leases on the wall clock, converts its own deadline, so the chaos checker can line it
up with the clients').

In memory only: a restarted master starts with no locks and the first client to ask wins.
There is no link to consumer liveness: a dead client's lock lives until its
lease ends. Slaves hold no locks and refuse lock calls (`QueueLockHandler` with no manager).

Pure apart from the event log: every time is a `now_ms` argument, read from the broker's
lease clock (`monotonic_ms` of its `Clock`: a node with clock control runs it at its rate, so
leases last lease / rate real ms). Loop-confined (the broker's request handlers run on one
event loop), so no mutex is needed.

Fault switch lease-wall-clock (constants.FAULT_LEASE_WALL_CLOCK): the controller hands the
wall clock instead, as RocketMQ's RebalanceLockManager measures leases, and `lease_to_mono`
translates lease ends into the monotonic clock for the events at the moment each is recorded,
so a wall step between a grant and its expiry shows as a lease end that moved.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from nodes.broker import validation
from nodes.common import constants as c
from nodes.common.clock import Clock, real_mono_converter
from nodes.common.codes import ResponseCode
from nodes.common.events import EventLog
from nodes.common.service import CrashHandler, Service
from nodes.common.types import MessageQueue

log = logging.getLogger(__name__)

GRANTED = "granted"
RENEWED = "renewed"
DENIED = "denied"
EXPIRED = "expired"
RELEASED = "released"


@dataclass(slots=True)
class LockEntry:
    """One queue's lock: its holder and when it was last granted or renewed."""

    client_id: str
    last_update_ms: int

    def lease_end_ms(self, lease_ms: int) -> int:
        return self.last_update_ms + lease_ms

    def expired(self, now_ms: int, lease_ms: int) -> bool:
        """LockEntry#isExpired: strictly more than the lease since the last grant or renewal."""
        return now_ms - self.last_update_ms > lease_ms


class QueueLockManager:
    """The lock table of one master.

    Caller: `QueueLockHandler` (LockBatchMQ / UnlockBatchMQ) and `LockExpiryScanService`.
    Affects: only this table and the event log.
    """

    def __init__(self, *, lease_ms: int, events: EventLog | None = None, no_exclusion: bool = False,
                 slow_takeover: bool = False, lease_to_mono: Callable[[int], int] | None = None) -> None:
        """`no_exclusion` and `slow_takeover` are the test-only fault switches lock-no-exclusion and
        lock-slow-takeover (constants.FAULT_LOCK_NO_EXCLUSION, FAULT_LOCK_SLOW_TAKEOVER);
        `lease_to_mono` comes with lease-wall-clock (`wall_lease_to_mono`)."""
        if lease_ms <= 0:
            raise ValueError(f"lease_ms must be positive, got {lease_ms}")
        self.lease_ms = lease_ms
        self._events = events
        self._lease_to_mono = lease_to_mono
        self.no_exclusion = no_exclusion
        # FAULT SWITCH lock-slow-takeover: another client's lapsed lease blocks a takeover for several leases
        self._takeover_after_ms = lease_ms * (c.FAULT_SLOW_TAKEOVER_LEASES if slow_takeover else 1)
        self._table: dict[str, dict[MessageQueue, LockEntry]] = {}

    # --- lock / unlock -----------------------------------------------------------------------
    def try_lock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str, now_ms: int) -> list[MessageQueue]:
        """tryLockBatch: the queues `client_id` holds after the call, in request order.

        Per queue: no entry -> granted; held by the caller -> renewed (even when its lease had
        run out, as long as nobody took it); held by another client whose lease ended -> taken
        over (the old lease is recorded as expired first); held by another live lease -> denied.
        """
        locked: list[MessageQueue] = []
        group_table = self._table.setdefault(group, {})
        for mq in dict.fromkeys(mqs):
            entry = group_table.get(mq)
            if entry is None:
                group_table[mq] = LockEntry(client_id, now_ms)
                self._record(GRANTED, group, mq, client_id, now_ms + self.lease_ms)
                locked.append(mq)
            elif entry.client_id == client_id:
                if entry.expired(now_ms, self.lease_ms):
                    # lapsed but untaken: a fresh grant to the same client (RocketMQ takes it over too)
                    self._record(EXPIRED, group, mq, client_id, entry.lease_end_ms(self.lease_ms))
                    entry.last_update_ms = now_ms
                    self._record(GRANTED, group, mq, client_id, now_ms + self.lease_ms)
                else:
                    entry.last_update_ms = now_ms
                    self._record(RENEWED, group, mq, client_id, now_ms + self.lease_ms)
                locked.append(mq)
            elif self.no_exclusion:
                # FAULT SWITCH lock-no-exclusion: breaks mutual exclusion: the lock
                # moves to the asker although another client's lease is still live; the holder is
                # not told, so two consumers each believe they own the queue.
                previous, previous_end = entry.client_id, entry.lease_end_ms(self.lease_ms)
                group_table[mq] = LockEntry(client_id, now_ms)
                self._record(GRANTED, group, mq, client_id, now_ms + self.lease_ms, previous_client_id=previous,
                             previous_lease_end_mono_ms=previous_end)
                locked.append(mq)
            elif entry.expired(now_ms, self._takeover_after_ms):
                previous, previous_end = entry.client_id, entry.lease_end_ms(self.lease_ms)
                self._record(EXPIRED, group, mq, previous, previous_end)
                group_table[mq] = LockEntry(client_id, now_ms)
                self._record(GRANTED, group, mq, client_id, now_ms + self.lease_ms, previous_client_id=previous,
                             previous_lease_end_mono_ms=previous_end)
                log.info("lock of %s for %s taken over by %s from %s (lease ended %d ms ago)", mq, group, client_id,
                         previous, now_ms - previous_end)
                locked.append(mq)
            else:
                self._record(DENIED, group, mq, client_id, None, holder=entry.client_id,
                             holder_lease_end_mono_ms=entry.lease_end_ms(self.lease_ms))
        if not group_table:
            del self._table[group]
        return locked

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str, now_ms: int) -> list[MessageQueue]:
        """unlockBatch: release the queues `client_id` holds; others' locks are left alone (logged)."""
        released: list[MessageQueue] = []
        group_table = self._table.get(group, {})
        for mq in dict.fromkeys(mqs):
            entry = group_table.get(mq)
            if entry is None:
                continue
            if entry.client_id != client_id:
                log.warning("unlock of %s for %s by %s refused: %s holds it", mq, group, client_id, entry.client_id)
                continue
            del group_table[mq]
            self._record(RELEASED, group, mq, client_id, now_ms,
                         held_until_mono_ms=entry.lease_end_ms(self.lease_ms))
            released.append(mq)
        if group in self._table and not group_table:
            del self._table[group]
        return released

    # --- expiry ------------------------------------------------------------------------------
    def scan_expired(self, now_ms: int) -> int:
        """Record and forget every lease that has ended; returns how many.

        Beyond RocketMQ (which leaves expired entries in place until someone asks): forgetting
        an expired entry changes no answer, since an expired lock is free to anyone.
        """
        count = 0
        for group, group_table in list(self._table.items()):
            for mq, entry in list(group_table.items()):
                if entry.expired(now_ms, self._takeover_after_ms):
                    del group_table[mq]
                    self._record(EXPIRED, group, mq, entry.client_id, entry.lease_end_ms(self.lease_ms))
                    count += 1
            if not group_table:
                del self._table[group]
        return count

    # --- observation ---------------------------------------------------------------------------
    def holder(self, group: str, mq: MessageQueue, now_ms: int) -> str | None:
        """The client holding a live lease on `mq` for `group`, or None."""
        entry = self._table.get(group, {}).get(mq)
        if entry is None or entry.expired(now_ms, self.lease_ms):
            return None
        return entry.client_id

    def lease(self, group: str, mq: MessageQueue, now_ms: int) -> tuple[str, int] | None:
        """(holder, ms its lease has left) while a live lease holds `mq` for `group`, else None."""
        entry = self._table.get(group, {}).get(mq)
        if entry is None or entry.expired(now_ms, self.lease_ms):
            return None
        return entry.client_id, max(0, entry.lease_end_ms(self.lease_ms) - now_ms)

    def describe(self, now_ms: int) -> dict[str, list[dict[str, Any]]]:
        return {group: [{"topic": mq.topic, "broker_name": mq.broker_name, "queue_id": mq.queue_id,
                         "client_id": e.client_id, "lease_left_ms": e.lease_end_ms(self.lease_ms) - now_ms}
                        for mq, e in sorted(table.items())]
                for group, table in sorted(self._table.items())}

    def _record(self, action: str, group: str, mq: MessageQueue, client_id: str, lease_end_ms: int | None,
                **extra: Any) -> None:
        if self._events is not None:
            if self._lease_to_mono is not None:
                if lease_end_ms is not None:
                    lease_end_ms = self._lease_to_mono(lease_end_ms)
                for key in ("previous_lease_end_mono_ms", "holder_lease_end_mono_ms", "held_until_mono_ms"):
                    if key in extra:
                        extra[key] = self._lease_to_mono(extra[key])
            self._events.record({"event": "lock", "side": "broker", "action": action, "group": group,
                                 "client_id": client_id, "topic": mq.topic, "broker_name": mq.broker_name,
                                 "queue_id": mq.queue_id, "lease_end_mono_ms": lease_end_ms, **extra})


def lease_to_real_mono(clock: Clock, *, wall_leases: bool = False) -> Callable[[int], int] | None:
    """How this broker's lease ends become the real CLOCK_MONOTONIC times its events carry: a wall
    time through the monotonic clock (lease-wall-clock), then a skewed clock's reading through its
    rate (clock control); None when the leases already run on the real monotonic clock."""
    wall = wall_lease_to_mono(clock) if wall_leases else None
    skewed = real_mono_converter(clock)
    if wall is None or skewed is None:
        return wall or skewed
    return lambda ms: skewed(wall(ms))


def wall_lease_to_mono(clock: Clock) -> Callable[[int], int]:
    """lease-wall-clock: a wall-clock time as the monotonic clock reads it now."""
    return lambda wall_ms: wall_ms - clock.wall_ms() + clock.monotonic_ms()


# --- the requests --------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class LockBatchRequest:
    """LOCK_BATCH_MQ and UNLOCK_BATCH_MQ (the same fields)."""

    consumer_group: str
    client_id: str
    queues: tuple[MessageQueue, ...] = ()


@dataclass(frozen=True, slots=True)
class LockBatchResponse:
    """`locked`: the queues the caller holds after a lock call (empty for an unlock)."""

    code: ResponseCode
    remark: str = ""
    locked: tuple[MessageQueue, ...] = ()


def _refusal(locks: QueueLockManager | None, request: LockBatchRequest, node_id: str) -> LockBatchResponse | None:
    if locks is None:
        return LockBatchResponse(ResponseCode.SERVICE_NOT_AVAILABLE,
                                 f"{node_id} is a slave; queue locks live on the master")
    if refusal := validation.names_refusal(group=request.consumer_group):
        return LockBatchResponse(*refusal)
    if refusal := validation.queues_refusal(request.queues):
        return LockBatchResponse(*refusal)
    if not request.client_id:
        return LockBatchResponse(ResponseCode.INVALID_ARGUMENT, "client_id is required")
    return None


class QueueLockHandler:
    """LockBatchMQ / UnlockBatchMQ. `locks` None on a slave: it refuses both."""

    def __init__(self, locks: QueueLockManager | None, monotonic_ms: Callable[[], int], node_id: str) -> None:
        self._locks = locks
        self._monotonic_ms = monotonic_ms
        self._node_id = node_id

    def lock_batch(self, request: LockBatchRequest) -> LockBatchResponse:
        """SUCCESS with the queues the caller now holds."""
        refusal = _refusal(self._locks, request, self._node_id)
        if refusal is not None:
            return refusal
        assert self._locks is not None
        locked = self._locks.try_lock_batch(request.consumer_group, request.queues, request.client_id,
                                            self._monotonic_ms())
        return LockBatchResponse(ResponseCode.SUCCESS, locked=tuple(locked))

    def unlock_batch(self, request: LockBatchRequest) -> LockBatchResponse:
        """Always SUCCESS on a master (locks of other clients are kept)."""
        refusal = _refusal(self._locks, request, self._node_id)
        if refusal is not None:
            return refusal
        assert self._locks is not None
        self._locks.unlock_batch(request.consumer_group, request.queues, request.client_id, self._monotonic_ms())
        return LockBatchResponse(ResponseCode.SUCCESS)


class LockExpiryScanService(Service):
    """Runs `scan_expired` every `broker_lock_expiry_scan_ms`, so expiries are recorded even when
    nobody asks for the queue again."""

    name: ClassVar[str] = "queue-lock-expiry-scan"

    def __init__(self, locks: QueueLockManager, monotonic_ms: Callable[[], int], interval_ms: int, *,
                 on_crash: CrashHandler | None = None, clock: Clock | None = None) -> None:
        super().__init__(interval_ms, on_crash=on_crash, clock=clock)
        self._locks = locks
        self._monotonic_ms = monotonic_ms

    async def tick(self) -> None:
        self._locks.scan_expired(self._monotonic_ms())
