"""Delivering delayed messages when they are due (RocketMQ ScheduleMessageService).

Owns: one cursor per delay level into `SCHEDULE_TOPIC_XXXX` queue `level - 1` (the next
consume-queue index to look at), the due check on each unit's tag code (the deliver
timestamp the store wrote), rebuilding the real message (`REAL_TOPIC`/`REAL_QID`, `DELAY`
dropped, reconsume times kept) and putting it into the store, and the cursors' persistence
in the metadata table `delay_offsets` (`{"<level>": next index}`; slaves copy that table).
Does not own the conversion into the schedule topic (the store does at put time). Runs on
the master only.

A level is looked at again after `schedule_poll_ms` (RocketMQ's per-level timer rescheduling
after DELAY_FOR_A_WHILE) while it has work; a level whose pass failed waits
`schedule_error_backoff_ms`. When no level has anything due, the service sleeps until the
earliest waiting deliver time, or at most the shortest level delay: a message stored after
the pass cannot be due sooner than that, so no delivery is later than with plain polling.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from nodes.broker.slave_sync import DELAY_OFFSETS_TABLE
from nodes.common import constants as c
from nodes.common.clock import Clock
from nodes.common.errors import StoreError
from nodes.common.names import is_send_forbidden, topic_problem
from nodes.common.service import CrashHandler, Service
from nodes.store.consume_queue import is_hole
from nodes.store.message_store import MessageStore, PutStatus
from nodes.store.record import MessageToStore, Record

log = logging.getLogger(__name__)

SET_ASIDE_SHOWN_MAX = 20  # the latest set-aside entries Admin.Describe lists


def corrected_deliver_ms(deliver_ms: int, now_ms: int, level_delay_ms: int) -> int:
    """correctDeliverTimestamp: a deliver time further out than one level delay (a clock step
    back, or a table that shrank) means "now"."""
    return now_ms if deliver_ms > now_ms + level_delay_ms else deliver_ms


def is_due(deliver_ms: int, now_ms: int, level_delay_ms: int) -> bool:
    return corrected_deliver_ms(deliver_ms, now_ms, level_delay_ms) <= now_ms


def undeliverable_reason(msg: MessageToStore, topics: _Topics | None) -> str | None:
    """Why the real message cannot go where it says, or None. A client cannot write such an
    entry (sends to the schedule topic are refused), but one already in the log, or a topic
    deleted since, must not stop its level."""
    problem = topic_problem(msg.topic)
    if problem is not None:
        return problem
    if is_send_forbidden(msg.topic):
        return f"its real topic {msg.topic} is a system topic"
    if topics is None:
        return None if msg.queue_id >= 0 else f"queue id {msg.queue_id} is negative"
    config = topics.get(msg.topic)
    if config is None:
        return f"its real topic {msg.topic} does not exist here"
    queue_nums = max(config.read_queue_nums, config.write_queue_nums)
    if not 0 <= msg.queue_id < queue_nums:
        return f"queue id {msg.queue_id} is outside [0, {queue_nums}) of {msg.topic}"
    return None


def real_message(record: Record) -> MessageToStore | None:
    """messageTimeup: the waiting record as the message for its real topic and queue; None when
    the record does not say where it belongs."""
    topic = record.properties.get(c.PROPERTY_REAL_TOPIC)
    try:
        queue_id = int(record.properties.get(c.PROPERTY_REAL_QUEUE_ID, ""))
    except ValueError:
        return None
    if not topic:
        return None
    properties = {k: v for k, v in record.properties.items() if k != c.PROPERTY_DELAY}
    return MessageToStore(topic=topic, queue_id=queue_id, body=record.body, flag=record.flag,
                          properties=properties, born_timestamp_ms=record.born_timestamp_ms,
                          born_host=record.born_host, store_host=record.store_host,
                          reconsume_times=record.reconsume_times, sys_flag=record.sys_flag)


class _TopicConfig(Protocol):
    read_queue_nums: int
    write_queue_nums: int


class _Topics(Protocol):
    def get(self, topic: str) -> _TopicConfig | None: ...


# A put that fails with one of these fails the same way every time: the entry is set aside.
_PERMANENT_PUT_FAILURES = (PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED)


@dataclass(slots=True)
class LevelPass:
    """What one pass over a level did."""

    delivered: int = 0
    skipped: int = 0
    waiting_for_ms: int | None = None  # the next unit is not due yet (its corrected deliver time)
    failed: bool = False  # a put failed for now: the same index is tried again later
    set_aside: int = 0  # entries that can never be delivered: logged once, counted, passed
    batch_full: bool = False


class ScheduleMessageService(Service):
    name = "schedule-message"
    expected_errors = (StoreError,)

    def __init__(self, store: MessageStore, clock: Clock, *, poll_ms: int, first_delay_ms: int,
                 error_backoff_ms: int, persist_ms: int, on_put: Callable[[], None] | None = None,
                 on_crash: CrashHandler | None = None, topics: _Topics | None = None) -> None:
        super().__init__(poll_ms, on_crash=on_crash, initial_delay_ms=first_delay_ms)
        self._poll_ms = poll_ms
        self._store = store
        self._clock = clock
        self._error_backoff_ms = error_backoff_ms
        self._persist_ms = persist_ms
        self._on_put = on_put
        self.delays_ms = store.delay_levels_ms
        self.offsets: dict[int, int] = {}
        for key, value in store.metadata.get_all(DELAY_OFFSETS_TABLE).items():
            if key.isdigit() and 1 <= int(key) <= len(self.delays_ms):
                self.offsets[int(key)] = int(value)
        self._backoff_until_ms: dict[int, int] = {}
        self._last_persist_ms = clock.monotonic_ms()
        self.delivered = 0
        self._topics = topics  # where real topics are checked before delivery; None: not checked
        self.set_aside = 0  # undeliverable entries passed over since start
        self.recent_set_aside: deque[dict[str, object]] = deque(maxlen=SET_ASIDE_SHOWN_MAX)
        self._failing_levels: set[int] = set()  # levels whose put failure was logged already

    def deliver_level(self, level: int, now_ms: int) -> LevelPass:
        """One pass over `level` from its cursor at wall time `now_ms` (pure but for the store).

        Delivers every due unit in order and stops at the first one not due, at a failed put,
        or after SCHEDULE_DELIVER_BATCH_MAX deliveries. The cursor moves past delivered units,
        holes and records that cannot be read or placed.
        """
        outcome = LevelPass()
        queue_id = level - 1
        level_delay_ms = self.delays_ms[level - 1]
        min_offset = self._store.min_queue_offset(c.SCHEDULE_TOPIC, queue_id)
        max_offset = self._store.max_queue_offset(c.SCHEDULE_TOPIC, queue_id)
        offset = min(max(self.offsets.get(level, 0), min_offset), max_offset)
        while offset < max_offset and outcome.delivered < c.SCHEDULE_DELIVER_BATCH_MAX:
            unit = self._store.queue_unit(c.SCHEDULE_TOPIC, queue_id, offset)
            if unit is None:
                break
            phys_offset, size, deliver_ms = unit
            if is_hole(phys_offset, size):
                offset += 1
                continue
            corrected_ms = corrected_deliver_ms(deliver_ms, now_ms, level_delay_ms)
            if corrected_ms > now_ms:
                outcome.waiting_for_ms = corrected_ms
                break
            if not self._deliver_unit(level, offset, phys_offset, size, outcome):
                break
            offset += 1
        else:
            outcome.batch_full = offset < max_offset
        self.offsets[level] = offset
        return outcome

    def _deliver_unit(self, level: int, offset: int, phys_offset: int, size: int, outcome: LevelPass) -> bool:
        """Deliver one due unit; False when the put failed (the unit is tried again later)."""
        record = self._store.lookup_message(phys_offset, size)
        msg = real_message(record) if record is not None else None
        if msg is None:
            log.error("level %d index %d: no deliverable message at commitlog offset %d; skipping it",
                      level, offset, phys_offset)
            outcome.skipped += 1
            return True
        if msg.topic == c.TRANS_HALF_TOPIC:
            log.warning("level %d index %d: discarding a delayed half message", level, offset)
            outcome.skipped += 1
            return True
        reason = undeliverable_reason(msg, self._topics)
        if reason is not None:
            self._set_aside(level, offset, phys_offset, msg, reason, outcome)
            return True
        result = self._store.put_messages([msg])
        if result.status in _PERMANENT_PUT_FAILURES:
            self._set_aside(level, offset, phys_offset, msg, result.remark or result.status.name, outcome)
            return True
        if result.status is not PutStatus.PUT_OK:
            if level not in self._failing_levels:  # once per failing spell, not every retry
                self._failing_levels.add(level)
                log.error("level %d index %d: delivering to %s-%d failed (%s); retrying", level, offset, msg.topic,
                          msg.queue_id, result.remark or result.status.name)
            outcome.failed = True
            return False
        self._failing_levels.discard(level)
        outcome.delivered += 1
        self.delivered += 1
        return True

    def _set_aside(self, level: int, offset: int, phys_offset: int, msg: MessageToStore, reason: str,
                   outcome: LevelPass) -> None:
        """An entry that can never be delivered: one log line, counted (Admin.Describe, `mqlab
        status`), and the level's cursor moves past it; its bytes stay in the commitlog."""
        log.error("level %d index %d (commitlog offset %d) cannot be delivered to %.80s-%d: %s; set aside",
                  level, offset, phys_offset, msg.topic, msg.queue_id, reason)
        self.set_aside += 1
        outcome.set_aside += 1
        self.recent_set_aside.append({"level": level, "queue_offset": offset, "phys_offset": phys_offset,
                                      "real_topic": msg.topic[:200], "real_queue_id": msg.queue_id,
                                      "reason": reason[:300]})

    async def tick(self) -> None:
        now_mono_ms = self._clock.monotonic_ms()
        delivered = 0
        next_pass_ms = self.delays_ms[0]  # nothing stored from now on is due sooner
        for level in range(1, len(self.delays_ms) + 1):
            backoff_until_ms = self._backoff_until_ms.get(level, 0)
            if backoff_until_ms > now_mono_ms:
                next_pass_ms = min(next_pass_ms, backoff_until_ms - now_mono_ms)
                continue
            now_ms = self._clock.wall_ms()
            try:
                outcome = self.deliver_level(level, now_ms)
            except StoreError as exc:
                log.warning("level %d: %s; trying again in %d ms", level, exc, self._error_backoff_ms)
                self._backoff_until_ms[level] = now_mono_ms + self._error_backoff_ms
                continue
            delivered += outcome.delivered
            if outcome.batch_full:
                self.wakeup()  # more are due: come back at once rather than after a poll
            elif outcome.failed:
                next_pass_ms = self._poll_ms
            elif outcome.waiting_for_ms is not None:
                next_pass_ms = min(next_pass_ms, outcome.waiting_for_ms - now_ms)
        # The base loop waits `interval_ms` after each tick (or less, on wakeup).
        self.interval_ms = max(self._poll_ms, next_pass_ms)
        if delivered and self._on_put is not None:
            self._on_put()
        if now_mono_ms - self._last_persist_ms >= self._persist_ms:
            self._last_persist_ms = now_mono_ms
            await asyncio.to_thread(self.persist, dict(self.offsets))

    def persist(self, offsets: dict[int, int] | None = None) -> None:
        """Write the cursors to `delay_offsets` (safe on a worker thread with a snapshot)."""
        snapshot = dict(self.offsets) if offsets is None else offsets
        if snapshot:
            self._store.metadata.put_many(DELAY_OFFSETS_TABLE, {str(k): v for k, v in snapshot.items()})

    async def on_stop(self) -> None:
        await asyncio.to_thread(self.persist, dict(self.offsets))

    def describe(self) -> dict[str, object]:
        return {"offsets": {str(k): v for k, v in sorted(self.offsets.items())}, "delivered": self.delivered,
                "set_aside": self.set_aside, "recent_set_aside": list(self.recent_set_aside)}
