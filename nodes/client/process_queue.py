"""ProcessQueue: the client-side cache of one message queue's pulled, not yet consumed messages.

Pure bookkeeping: owns the in-flight messages sorted by queue offset, their
count and body bytes, the offset it is safe to commit, the orderly "in transaction" subset,
and the queue's flags and timestamps. Does not pull, consume, send back, lock or commit
offsets, and reads no clock: every time is a `now_ms` argument. Not thread-safe; the caller
serialises access (RocketMQ's `treeMapLock`).

Offsets: every key here is a `queue_offset`. `remove_messages` and `commit` return the
`committed_offset` candidate: the next queue offset the group should consume.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Sequence

from nodes.common.constants import PROPERTY_MAX_OFFSET
from nodes.common.types import MessageExt

CLEAN_EXPIRED_SCAN_COUNT_MAX = 16  # cleanExpiredMsg looks at no more than this many heads per run
CLEAN_EXPIRED_DELAY_LEVEL = 3  # delay level of an expired message's send-back (10 s by default)
PROPERTY_CONSUME_START_TIMESTAMP = "CONSUME_START_TIME"  # MessageConst: stamped when a consume starts


class ProcessQueue:
    """RocketMQ's ProcessQueue without its locks and clock.

    Caller: the push consumer's pull loop (put), consume services (remove / take / commit /
    rollback), rebalance (dropped, locked, is_pull_expired), `ConsumerState.lock_valid` (locked and
    its lock timestamp). Durations come from the caller (`Timing`). Fields the caller sets directly:
    `dropped`, `keep_own_commits`, `locked`, `last_lock_timestamp_ms`, `last_pull_timestamp_ms`.
    """

    def __init__(self, *, now_ms: int) -> None:
        self._msgs: dict[int, MessageExt] = {}  # msgTreeMap, keyed by queue offset ...
        self._offsets: list[int] = []  # ... whose keys are kept sorted here
        self._taken: dict[int, MessageExt] = {}  # consumingMsgOrderlyTreeMap (orderly in-flight)
        self._msg_count = 0
        self._msg_size_bytes = 0
        self._queue_offset_max = 0
        self._consuming = False
        self._msg_acc_count = 0
        self.try_unlock_times = 0
        self.dropped = False
        # dropped because this client regained the queue: the batch still running commits all the same
        self.keep_own_commits = False
        self.locked = False
        self.last_lock_timestamp_ms = now_ms
        self.last_pull_timestamp_ms = now_ms
        self.last_consume_timestamp_ms = now_ms

    # --- read-only views ------------------------------------------------------------------
    @property
    def msg_count(self) -> int:
        """Cached messages, including orderly ones taken but not committed."""
        return self._msg_count

    @property
    def msg_size_bytes(self) -> int:
        """Sum of the body lengths counted in `msg_count`."""
        return self._msg_size_bytes

    @property
    def queue_offset_max(self) -> int:
        """Queue offset of the last newly inserted message (not necessarily the highest)."""
        return self._queue_offset_max

    @property
    def consuming(self) -> bool:
        """Orderly dispatch gate: a consume request is already running or queued."""
        return self._consuming

    @property
    def msg_acc_count(self) -> int:
        """Broker backlog behind the last pulled message (its MAX_OFFSET minus its offset)."""
        return self._msg_acc_count

    @property
    def max_span(self) -> int:
        """Highest minus lowest cached queue offset; 0 when nothing is cached."""
        return self._offsets[-1] - self._offsets[0] if self._offsets else 0

    def offsets(self) -> list[int]:
        """Cached queue offsets, ascending (orderly taken messages excluded)."""
        return list(self._offsets)

    def taken_offsets(self) -> list[int]:
        """Orderly queue offsets taken and neither committed nor rolled back, ascending."""
        return sorted(self._taken)

    def has_temp_message(self) -> bool:
        """Whether untaken messages are cached (the orderly in-flight subset is ignored)."""
        return bool(self._msgs)

    def is_pull_expired(self, now_ms: int, *, pull_max_idle_ms: int) -> bool:
        return now_ms - self.last_pull_timestamp_ms > pull_max_idle_ms

    # --- concurrent and orderly ------------------------------------------------------------
    def put_messages(self, msgs: Sequence[MessageExt]) -> bool:
        """Cache pulled messages; returns `dispatch_to_consume` (orderly: start a consume request).

        An offset already cached is replaced by the new message but not counted again (TreeMap#put).
        """
        cached, offsets = self._msgs, self._offsets
        highest = offsets[-1] if offsets else -1
        added = added_bytes = 0
        for msg in msgs:
            queue_offset = msg.queue_offset
            if queue_offset not in cached:
                if queue_offset > highest:  # the usual case: a pull continues past the cache
                    offsets.append(queue_offset)
                    highest = queue_offset
                else:
                    insort(offsets, queue_offset)
                added += 1
                added_bytes += len(msg.body)
                self._queue_offset_max = queue_offset
            cached[queue_offset] = msg
        self._msg_count += added
        self._msg_size_bytes += added_bytes
        dispatch_to_consume = bool(self._msgs) and not self._consuming
        if dispatch_to_consume:
            self._consuming = True
        if msgs:
            last = msgs[-1]
            try:
                acc = int(last.properties.get(PROPERTY_MAX_OFFSET, "")) - last.queue_offset
            except ValueError:
                acc = 0  # absent or not a number (Java would throw): keep the last known backlog
            if acc > 0:
                self._msg_acc_count = acc
        return dispatch_to_consume

    def remove_messages(self, msgs: Iterable[MessageExt], *, now_ms: int) -> int:
        """Forget consumed messages; returns the offset now safe to commit.

        That is the lowest offset still cached, or `queue_offset_max + 1` once nothing is, or -1
        when nothing was cached before the call (nothing to commit).
        """
        self.last_consume_timestamp_ms = now_ms
        cached, offsets = self._msgs, self._offsets
        if not cached:
            return -1
        removed = removed_bytes = 0
        pop = cached.pop
        for msg in msgs:
            queue_offset = msg.queue_offset
            if pop(queue_offset, None) is not None:
                if offsets[0] == queue_offset:  # the usual case: the oldest finishes first
                    del offsets[0]
                else:
                    del offsets[bisect_left(offsets, queue_offset)]
                removed += 1
                removed_bytes += len(msg.body)  # the argument's body, as RocketMQ does
        self._msg_count -= removed
        self._msg_size_bytes -= removed_bytes
        if self._msg_count == 0:
            self._msg_size_bytes = 0
        return self._offsets[0] if self._offsets else self._queue_offset_max + 1

    def clear(self) -> None:
        """Drop every cached and taken message and zero the counters."""
        self._msgs.clear()
        self._offsets.clear()
        self._taken.clear()
        self._msg_count = 0
        self._msg_size_bytes = 0
        self._queue_offset_max = 0

    # --- orderly ---------------------------------------------------------------------------
    def take_messages(self, batch: int, *, now_ms: int, newest_first: bool = False) -> list[MessageExt]:
        """Move up to `batch` lowest cached messages into the in-flight set and return them.

        Taking nothing closes the dispatch gate (`consuming = False`), so the next put dispatches.
        `newest_first` is the test-only fault switch orderly-take-newest: the highest cached offsets instead.
        """
        self.last_consume_timestamp_ms = now_ms
        n = min(max(batch, 0), len(self._offsets))
        if newest_first and n:
            taken_offsets = self._offsets[-n:]
            del self._offsets[-n:]
        else:
            taken_offsets = self._offsets[:n]
            del self._offsets[:n]
        result = []
        for queue_offset in taken_offsets:
            msg = self._msgs.pop(queue_offset)
            self._taken[queue_offset] = msg
            result.append(msg)
        if not result:
            self._consuming = False
        return result

    def commit(self) -> int:
        """Finish the in-flight messages; returns highest in-flight offset + 1, or -1 if none.

        (Java throws NoSuchElementException on an empty in-flight set; -1 means "nothing to commit".)
        """
        if not self._taken:
            return -1
        last_offset = max(self._taken)
        self._msg_count -= len(self._taken)
        self._msg_size_bytes -= sum(len(msg.body) for msg in self._taken.values())
        self._taken.clear()
        return last_offset + 1

    def rollback(self) -> None:
        """Put every in-flight message back into the cache, to be taken again."""
        self._restore(self._taken.values())
        self._taken.clear()

    def make_message_to_consume_again(self, msgs: Iterable[MessageExt]) -> None:
        """Put only `msgs` back into the cache (suspend); the rest stay in flight.

        As in RocketMQ, a listed message that was not in flight is inserted all the same.
        """
        msgs = list(msgs)
        for msg in msgs:
            self._taken.pop(msg.queue_offset, None)
        self._restore(msgs)

    def _restore(self, msgs: Iterable[MessageExt]) -> None:
        for msg in msgs:  # no accounting: taken messages were never subtracted
            if msg.queue_offset not in self._msgs:
                insort(self._offsets, msg.queue_offset)
            self._msgs[msg.queue_offset] = msg

    # --- concurrent: consume timeout -------------------------------------------------------
    def expired_messages(self, now_ms: int, *, consume_timeout_ms: int) -> list[MessageExt]:
        """The messages cleanExpiredMsg would send back (delay level 3), lowest offset first.

        The longest run of cached heads, at most 16, whose CONSUME_START_TIME is older than
        `consume_timeout_ms`; the first head without one, or not yet expired, ends the run.
        Concurrent mode only (RocketMQ skips orderly queues).

        Caller: for each message in order, send it back; on success call `remove_if_head`
        (the offset it returns is ignored; the next normal commit picks it up). A failed
        send-back leaves the message cached.
        """
        expired = []
        for queue_offset in self._offsets[:CLEAN_EXPIRED_SCAN_COUNT_MAX]:
            msg = self._msgs[queue_offset]
            try:
                start_ms = int(msg.properties.get(PROPERTY_CONSUME_START_TIMESTAMP) or "")
            except ValueError:
                break  # never started (or unreadable): RocketMQ stops at this head
            if now_ms - start_ms <= consume_timeout_ms:
                break
            expired.append(msg)
        return expired

    def remove_if_head(self, msg: MessageExt, *, now_ms: int) -> bool:
        """Remove `msg` only if it is still the lowest cached offset (after its send-back)."""
        if not self._offsets or self._offsets[0] != msg.queue_offset:
            return False
        self.remove_messages([msg], now_ms=now_ms)
        return True
