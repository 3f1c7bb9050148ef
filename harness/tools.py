"""The work behind `mqlab produce`, `mqlab consume` and `mqlab demo`, without any UI.

Owns generating verifiable message bodies, driving a producer and a pull consumer, and
checking what came back; progress is reported through callbacks so the CLI can draw bars
and tests can pass fakes for the client objects (anything with the `nodes.client` shapes).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from nodes.common.types import Message, MessageExt, MessageQueue, PullStatus, SendResult, SendStatus

log = logging.getLogger(__name__)

BODY_SEPARATOR = b":"
PULL_ERROR_BACKOFF_S = 0.1  # after a failed pull, before the next try on that queue
STOP_POLL_S = 0.05  # how often the consume loop checks its stop conditions
JOIN_BUDGET_S = 2.0  # pull threads still blocked in a long poll are left to the consumer's shutdown

ProgressFn = Callable[[int], None]


# ---- bodies --------------------------------------------------------------------------

def make_body(tag: str, seq: int, body_bytes: int) -> bytes:
    """`<tag>:<seq>:` padded to `body_bytes` with filler derived from seq (so it is checkable).

    The body is never shorter than its header; `body_bytes` smaller than that is rounded up.
    """
    head = f"{tag}:{seq:010d}:".encode()
    pad = body_bytes - len(head)
    if pad <= 0:
        return head
    unit = f"{seq:x}.".encode()
    return head + (unit * (pad // len(unit) + 1))[:pad]


def body_id(body: bytes) -> tuple[str, int] | None:
    """(tag, seq) from a `make_body` body, None if it is not one."""
    parts = bytes(body).split(BODY_SEPARATOR, 2)
    if len(parts) < 3 or not parts[1].isdigit():
        return None
    return parts[0].decode("utf-8", "replace"), int(parts[1])


# ---- producing -----------------------------------------------------------------------

@dataclass
class ProduceStats:
    attempted: int = 0
    ok: int = 0  # SEND_OK
    not_ok: Counter[str] = field(default_factory=Counter)  # stored, but a slave/flush status
    failed: int = 0  # raised: not stored, or unknown (see errors)
    errors: Counter[str] = field(default_factory=Counter)
    bytes_ok: int = 0
    elapsed_s: float = 0.0
    acked: set[int] = field(default_factory=set)  # seqs answered SEND_OK

    @property
    def msgs_per_s(self) -> float:
        return self.ok / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes_ok / self.elapsed_s / 1e6 if self.elapsed_s > 0 else 0.0


def produce(producer: Any, topic: str, count: int, *, body_bytes: int = 1024, tags: str | None = None,
            keys: str | None = None, batch: int = 1, inflight: int = 1, tag: str = "mqlab",
            on_progress: ProgressFn | None = None) -> ProduceStats:
    """Send `count` messages with bodies `make_body(tag, seq, body_bytes)`, seq = 0..count-1.

    Args:
        producer: a started `nodes.client.Producer` (or anything with its shape).
        keys: every message's KEYS, with "{n}" replaced by its seq (so each can be looked up).
        batch: > 1 sends `send_batch` lists of this many messages (one queue per batch).
        inflight: > 1 keeps this many `send_async` calls outstanding (ignored with batch > 1).
        on_progress: called with the number of messages just finished (ok or not).
    """
    stats = ProduceStats()
    progress = on_progress or (lambda n: None)
    start = time.monotonic()

    def settle(seqs: Sequence[int], result: SendResult | None, error: BaseException | None) -> None:
        if error is not None:
            stats.failed += len(seqs)
            stats.errors[_error_text(error)] += len(seqs)
        else:
            assert result is not None
            if result.status is SendStatus.SEND_OK:
                stats.ok += len(seqs)
                stats.acked.update(seqs)
                stats.bytes_ok += sum(len(make_body(tag, s, body_bytes)) for s in seqs)
            else:
                stats.not_ok[result.status.value] += len(seqs)
        progress(len(seqs))

    def message(seq: int) -> Message:
        return Message(topic, make_body(tag, seq, body_bytes), tags=tags,
                       keys=keys.replace("{n}", str(seq)) if keys else None)

    if batch > 1:
        for first in range(0, count, batch):
            seqs = list(range(first, min(count, first + batch)))
            stats.attempted += len(seqs)
            _call(lambda seqs=seqs: producer.send_batch([message(s) for s in seqs]), seqs, settle)
    elif inflight > 1:
        pending: deque[tuple[list[int], Future[SendResult]]] = deque()
        for seq in range(count):
            while len(pending) >= inflight:
                _settle_future(*pending.popleft(), settle)
            stats.attempted += 1
            try:
                pending.append(([seq], producer.send_async(message(seq))))
            except Exception as exc:  # counted and reported, never hidden
                settle([seq], None, exc)
        while pending:
            _settle_future(*pending.popleft(), settle)
    else:
        for seq in range(count):
            stats.attempted += 1
            _call(lambda seq=seq: producer.send(message(seq)), [seq], settle)
    stats.elapsed_s = time.monotonic() - start
    return stats


def _call(fn: Callable[[], SendResult], seqs: Sequence[int],
          settle: Callable[[Sequence[int], SendResult | None, BaseException | None], None]) -> None:
    try:
        result = fn()
    except Exception as exc:  # counted and reported, never hidden
        settle(seqs, None, exc)
    else:
        settle(seqs, result, None)


def _settle_future(seqs: list[int], fut: Future[SendResult],
                   settle: Callable[[Sequence[int], SendResult | None, BaseException | None], None]) -> None:
    try:
        result = fut.result()
    except Exception as exc:  # counted and reported, never hidden
        settle(seqs, None, exc)
    else:
        settle(seqs, result, None)


def _error_text(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"[:160]


# ---- consuming -----------------------------------------------------------------------

@dataclass
class QueueStats:
    start_offset: int
    offset: int  # next offset to pull (= committed offset)
    received: int = 0
    target: int | None = None  # stop at this offset (the demo: max offset after producing)
    errors: int = 0


@dataclass
class ConsumeStats:
    received: int = 0
    bytes: int = 0
    elapsed_s: float = 0.0
    queues: dict[MessageQueue, QueueStats] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    stopped_by: str = ""

    @property
    def msgs_per_s(self) -> float:
        return self.received / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.elapsed_s / 1e6 if self.elapsed_s > 0 else 0.0


def start_offsets(consumer: Any, queues: Iterable[MessageQueue], from_offset: str) -> dict[MessageQueue, int]:
    """`first`: each queue's min offset; `committed`: the group's committed offset, or min if none."""
    if from_offset not in ("first", "committed"):
        raise ValueError(f"from_offset must be 'first' or 'committed', got {from_offset!r}")
    offsets = {}
    for mq in queues:
        offset = consumer.query_offset(mq) if from_offset == "committed" else -1
        offsets[mq] = offset if offset is not None and offset >= 0 else consumer.min_offset(mq)
    return offsets


def consume(consumer: Any, queues: Sequence[MessageQueue], offsets: dict[MessageQueue, int], *,
            count: int | None = None, batch: int = 32, idle_timeout_s: float = 5.0,
            targets: dict[MessageQueue, int] | None = None, commit: bool = True,
            on_message: Callable[[MessageExt], None] | None = None,
            on_progress: ProgressFn | None = None) -> ConsumeStats:
    """Pull every queue on its own thread (long polling) until a stop condition holds.

    Stops when `count` messages arrived, when every queue reached its `targets` offset, or
    after `idle_timeout_s` without a message. Each delivered batch's next offset is committed
    with `update_offset` (if `commit`); a batch pulled after the stop is dropped uncommitted,
    so committed offsets always match what was delivered.
    """
    stats = ConsumeStats(queues={mq: QueueStats(offsets[mq], offsets[mq],
                                                target=(targets or {}).get(mq)) for mq in queues})
    stop = threading.Event()
    lock = threading.Lock()
    last_delivery = [time.monotonic()]
    deliver = on_message or (lambda m: None)
    progress = on_progress or (lambda n: None)
    start = time.monotonic()

    def caught_up(q: QueueStats) -> bool:
        return q.target is not None and q.offset >= q.target

    def worker(mq: MessageQueue) -> None:
        q = stats.queues[mq]
        while not stop.is_set() and not caught_up(q):
            try:
                result = consumer.pull_block_if_not_found(mq, q.offset, max_nums=batch)
            except Exception as exc:  # reported in the summary; pulls go on
                if stop.is_set():
                    return
                with lock:
                    q.errors += 1
                    stats.errors[_error_text(exc)] += 1
                stop.wait(PULL_ERROR_BACKOFF_S)
                continue
            with lock:
                if stop.is_set():
                    return
                _take(result, q, stats, count, deliver, progress)
                if count is not None and stats.received >= count:
                    stop.set()
                if result.status is PullStatus.FOUND:
                    last_delivery[0] = time.monotonic()
                new_offset = q.offset
            if commit and result.status is PullStatus.FOUND:
                consumer.update_offset(mq, new_offset)

    threads = [threading.Thread(target=worker, args=(mq,), name=f"pull-{mq.queue_id}", daemon=True)
               for mq in queues]
    for t in threads:
        t.start()
    try:
        while True:
            if stop.wait(STOP_POLL_S):
                stats.stopped_by = "count"
                break
            if all(not t.is_alive() for t in threads):
                stats.stopped_by = "caught up" if targets else "done"
                break
            if time.monotonic() - last_delivery[0] >= idle_timeout_s:
                stats.stopped_by = f"idle {idle_timeout_s:g} s"
                break
    finally:
        stop.set()
        stats.elapsed_s = time.monotonic() - start
        deadline = time.monotonic() + JOIN_BUDGET_S
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
    return stats


def _take(result: Any, q: QueueStats, stats: ConsumeStats, count: int | None,
          deliver: Callable[[MessageExt], None], progress: ProgressFn) -> None:
    """Apply one pull result to a queue's offset (caller holds the lock)."""
    if result.status is not PullStatus.FOUND:
        # NO_NEW_MSG / NO_MATCHED_MSG / OFFSET_ILLEGAL: the broker says where to go on from.
        if result.status is PullStatus.OFFSET_ILLEGAL:
            log.warning("offset %d illegal; moving to %d", q.offset, result.next_begin_offset)
        q.offset = result.next_begin_offset
        return
    taken = 0
    for msg in result.messages:
        if count is not None and stats.received >= count:
            q.offset = msg.queue_offset
            break
        deliver(msg)
        stats.received += 1
        stats.bytes += len(msg.body)
        q.received += 1
        taken += 1
    else:
        q.offset = result.next_begin_offset
    if taken:
        progress(taken)


# ---- the demo's verdict --------------------------------------------------------------

@dataclass
class Verdict:
    """What came back against what was acknowledged (a small total-queue check)."""

    sent: int
    acked: int
    received: int
    lost: list[int]  # acked, never received
    duplicates: int  # deliveries beyond the first
    corrupt: list[int]  # received with a body that differs from what was sent
    unexpected: int  # received, but never sent by this run

    @property
    def ok(self) -> bool:
        return not self.lost and not self.corrupt and not self.unexpected


class DeliveryLog:
    """Counts deliveries of `make_body` messages of one tag; thread-safe."""

    def __init__(self, tag: str, body_bytes: int) -> None:
        self.tag = tag
        self.body_bytes = body_bytes
        self.seen: Counter[int] = Counter()
        self.corrupt: set[int] = set()
        self.unexpected = 0
        self.received = 0
        self._lock = threading.Lock()

    def __call__(self, msg: MessageExt) -> None:
        ident = body_id(msg.body)
        with self._lock:
            self.received += 1
            if ident is None or ident[0] != self.tag:
                self.unexpected += 1
                return
            seq = ident[1]
            self.seen[seq] += 1
            if bytes(msg.body) != make_body(self.tag, seq, self.body_bytes):
                self.corrupt.add(seq)

    def verdict(self, sent: int, acked: set[int]) -> Verdict:
        with self._lock:
            unexpected = self.unexpected + sum(n for s, n in self.seen.items() if not 0 <= s < sent)
            return Verdict(sent=sent, acked=len(acked), received=self.received,
                           lost=sorted(acked - set(self.seen)),
                           duplicates=sum(n - 1 for n in self.seen.values() if n > 1),
                           corrupt=sorted(self.corrupt), unexpected=unexpected)


def stop_quietly(client: Any) -> None:
    """Shut a client down on the way out; a failure is logged, not raised over the real error."""
    try:
        client.shutdown()
    except Exception:
        log.warning("shutting down %r failed", client, exc_info=True)
