"""Transactional messages on a master (RocketMQ's TransactionalMessageServiceImpl and
EndTransactionProcessor): half messages, their resolution, and which of them are still open.

A transactional send (property TRAN_MSG=true) is stored as a half message (`to_half`, applied
by the send path): topic TRANS_HALF_TOPIC queue 0, the real topic and queue id kept in
REAL_TOPIC/REAL_QID. No consumer can read it: the half topic has no topic config and clients
may not name it.

Ending a transaction (commit or rollback, by the producer or as its answer to a check) writes
an op record to TRANS_OP_HALF_TOPIC queue 0 (body: the half message's queue offset; tag "d";
TRAN_RESOLUTION) and, for a commit, first puts the message into its real topic and queue: same
body, UNIQ_KEY, keys and tags, the transaction properties dropped, sys flag COMMIT. A half
message already resolved is left alone: an end repeating its resolution answers success, the
opposite one an error saying what happened; neither writes anything (RocketMQ would commit a
second copy). Past the cursor only the latest TRANSACTION_RESOLUTIONS_KEPT resolutions are known
by name (none after a restart): an end of an older one answers success and changes nothing.

State. Resolutions live in the op queue, as in RocketMQ: at start the half queue and the op
queue are read from their cursors, and the half messages no op record names are open. The
cursors and the open messages' check counts are in the metadata table `transactions`:
`half_cursor` (every half message below it is resolved), `op_cursor` (every op record below it
names a half message below `half_cursor`), `checks:<half offset>` = [checks, last check wall ms].
A check count lost to a crash costs one more check, nothing else.

Checks (`due_checks`, run by transaction_check.TransactionCheckService): an open half message is
checked once it is `timeout_ms` old, then every `check_interval_ms` after its last check;
after `check_max` checks it is discarded: copied into TRANS_CHECK_MAX_TIME_TOPIC and closed by a
DISCARD op record.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nodes.common import constants as c
from nodes.common.clock import Clock
from nodes.common.codes import ResponseCode
from nodes.common.events import EventLog
from nodes.store.consume_queue import is_hole
from nodes.store.message_store import MessageStore, PutStatus
from nodes.store.record import MessageToStore, Record, parse_offset_msg_id

log = logging.getLogger(__name__)

TABLE = "transactions"
HALF_QUEUE_ID = 0
OP_QUEUE_ID = 0
COMMIT, ROLLBACK, DISCARD = "COMMIT", "ROLLBACK", "DISCARD"
SKIPPED = "SKIPPED"  # a half queue unit with no readable message behind it: nothing to resolve
SOURCE_CLIENT, SOURCE_CHECK = "client", "check"
_CHECKS_KEY = "checks:"
# what made it a half message, dropped from the committed one
_TRANSACTION_PROPERTIES = frozenset({
    c.PROPERTY_REAL_TOPIC, c.PROPERTY_REAL_QUEUE_ID, c.PROPERTY_TRANSACTION_PREPARED, c.PROPERTY_PRODUCER_GROUP,
    c.PROPERTY_TRANSACTION_CHECK_TIMES})


def is_transactional(properties: dict[str, str]) -> bool:
    return properties.get(c.PROPERTY_TRANSACTION_PREPARED) == "true"


def to_half(msg: MessageToStore) -> MessageToStore:
    """The half message of a transactional send. A delay level is dropped (RocketMQ's producer
    clears it: a half message must wait for its end, not for a timer)."""
    properties = {k: v for k, v in msg.properties.items() if k != c.PROPERTY_DELAY}
    properties[c.PROPERTY_REAL_TOPIC] = msg.topic
    properties[c.PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    return dataclasses.replace(msg, topic=c.TRANS_HALF_TOPIC, queue_id=HALF_QUEUE_ID, properties=properties,
                               sys_flag=msg.sys_flag & ~c.SYS_FLAG_TRANSACTION_MASK)


def committed_message(record: Record) -> MessageToStore | None:
    """The message a commit puts into the real topic; None when the half message does not say
    where it belongs."""
    topic = record.properties.get(c.PROPERTY_REAL_TOPIC, "")
    try:
        queue_id = int(record.properties.get(c.PROPERTY_REAL_QUEUE_ID, ""))
    except ValueError:
        return None
    if not topic or queue_id < 0:
        return None
    properties = {k: v for k, v in record.properties.items() if k not in _TRANSACTION_PROPERTIES}
    return MessageToStore(topic=topic, queue_id=queue_id, body=record.body, flag=record.flag, properties=properties,
                          born_timestamp_ms=record.born_timestamp_ms, born_host=record.born_host,
                          store_host=record.store_host, reconsume_times=record.reconsume_times,
                          sys_flag=(record.sys_flag & ~c.SYS_FLAG_TRANSACTION_MASK) | c.SYS_FLAG_TRANSACTION_COMMIT)


@dataclass(slots=True)
class OpenHalf:
    """A half message no op record names yet."""

    half_offset: int  # its queue offset in the half queue: the transaction's identity here
    phys_offset: int
    size: int
    store_ms: int  # wall
    real_topic: str
    group: str
    uniq_key: str
    checks: int = 0
    last_check_ms: int = 0  # wall

    def due_ms(self, timeout_ms: int, interval_ms: int) -> int:
        return self.store_ms + timeout_ms if self.checks == 0 else self.last_check_ms + interval_ms


@dataclass(frozen=True, slots=True)
class CheckRequest:
    """One check to send: ask a producer of `group` (or of `real_topic`) how `record` ended."""

    record: Record  # the half message as stored
    real_topic: str
    group: str
    transaction_id: str  # the half message's offset message id, what the producer ends it with
    check_times: int


@dataclass(frozen=True, slots=True)
class EndTransactionRequest:
    """END_TRANSACTION: `transaction_id` is what the send answered (the half message's offset
    message id), `message_id` its UNIQ_KEY; `source` SOURCE_CLIENT or SOURCE_CHECK."""

    transaction_id: str
    message_id: str
    commit: bool
    source: str = SOURCE_CLIENT


@dataclass(frozen=True, slots=True)
class EndOutcome:
    code: ResponseCode
    remark: str = ""


class TransactionalMessages:
    def __init__(self, store: MessageStore, clock: Clock, events: EventLog, *, timeout_ms: int,
                 check_interval_ms: int, check_max: int = c.TRANSACTION_CHECK_MAX,
                 on_put: Callable[[], None] | None = None) -> None:
        self._store = store
        self._clock = clock
        self._events = events
        self.timeout_ms = timeout_ms
        self.check_interval_ms = check_interval_ms
        self.check_max = check_max
        self._on_put = on_put
        self._open: dict[int, OpenHalf] = {}
        self._resolved: dict[int, str] = {}  # half offset >= half_cursor -> its resolution
        # the latest resolutions the cursor passed, so a late end still hears which one it was
        self._passed: OrderedDict[int, str] = OrderedDict()
        self._op_tail: deque[tuple[int, int]] = deque()  # (op queue offset, half offset) from op_cursor on
        self.half_cursor = 0
        self.op_cursor = 0
        self._half_seen = 0  # half queue offsets below this are open or resolved
        self._op_seen = 0
        self._persisted_checks: set[str] = set()
        self.counts = {"half": 0, COMMIT: 0, ROLLBACK: 0, DISCARD: 0, "checks": 0, "repeated_ends": 0}

    # ---- state ---------------------------------------------------------------------------

    def load(self) -> None:
        """Rebuild the open half messages from the queues and the persisted cursors."""
        saved = self._store.metadata.get_all(TABLE)
        store = self._store
        # A cursor past its queue's end (a log tail lost after the metadata was written) would
        # take the next half messages for resolved ones: it starts at the end instead.
        self.half_cursor = self._half_seen = _within(
            int(saved.get("half_cursor", 0)), store.min_queue_offset(c.TRANS_HALF_TOPIC, HALF_QUEUE_ID),
            store.max_queue_offset(c.TRANS_HALF_TOPIC, HALF_QUEUE_ID))
        self.op_cursor = self._op_seen = _within(
            int(saved.get("op_cursor", 0)), store.min_queue_offset(c.TRANS_OP_HALF_TOPIC, OP_QUEUE_ID),
            store.max_queue_offset(c.TRANS_OP_HALF_TOPIC, OP_QUEUE_ID))
        self.catch_up()
        for key, value in saved.items():
            if key.startswith(_CHECKS_KEY):
                self._persisted_checks.add(key)
                entry = self._open.get(int(key[len(_CHECKS_KEY):]))
                if entry is not None:
                    entry.checks, entry.last_check_ms = int(value[0]), int(value[1])
        self._advance()
        log.info("transactions: %d half messages open (half cursor %d, op cursor %d)", len(self._open),
                 self.half_cursor, self.op_cursor)

    def catch_up(self) -> None:
        """Read what the queues gained since the last look: new half messages, new op records."""
        store = self._store
        half_end = store.max_queue_offset(c.TRANS_HALF_TOPIC, HALF_QUEUE_ID)
        while self._half_seen < half_end:
            record = self._read_unit(c.TRANS_HALF_TOPIC, HALF_QUEUE_ID, self._half_seen)
            offset = self._half_seen
            if record is None:
                self._resolved.setdefault(offset, SKIPPED)
            elif offset not in self._resolved:
                self._open[offset] = OpenHalf(
                    offset, record.phys_offset, record.total_size, record.store_timestamp_ms,
                    record.properties.get(c.PROPERTY_REAL_TOPIC, ""),
                    record.properties.get(c.PROPERTY_PRODUCER_GROUP, ""),
                    record.properties.get(c.PROPERTY_UNIQ_KEY, ""))
            self._half_seen += 1
        op_end = store.max_queue_offset(c.TRANS_OP_HALF_TOPIC, OP_QUEUE_ID)
        while self._op_seen < op_end:
            record = self._read_unit(c.TRANS_OP_HALF_TOPIC, OP_QUEUE_ID, self._op_seen)
            half_offset = _op_half_offset(record)
            if record is not None and half_offset is not None:
                self._op_tail.append((self._op_seen, half_offset))
                if half_offset >= self.half_cursor:
                    self._resolved[half_offset] = record.properties.get(c.PROPERTY_TRANSACTION_RESOLUTION, COMMIT)
                    self._open.pop(half_offset, None)
            self._op_seen += 1

    def _read_unit(self, topic: str, queue_id: int, queue_offset: int) -> Record | None:
        unit = self._store.queue_unit(topic, queue_id, queue_offset)
        if unit is None or is_hole(unit[0], unit[1]):
            return None
        record = self._store.lookup_message(unit[0], unit[1])
        if record is None:
            log.error("%s-%d offset %d: no readable record at commitlog offset %d; passing it", topic, queue_id,
                      queue_offset, unit[0])
        return record

    def _advance(self) -> None:
        """Move the cursors past resolved half messages and the op records that name only those."""
        while self.half_cursor < self._half_seen and self.half_cursor not in self._open:
            resolution = self._resolved.pop(self.half_cursor, None)
            if resolution is not None:
                self._passed[self.half_cursor] = resolution
                if len(self._passed) > c.TRANSACTION_RESOLUTIONS_KEPT:
                    self._passed.popitem(last=False)
            self.half_cursor += 1
        while self._op_tail and self._op_tail[0][1] < self.half_cursor:
            self._op_tail.popleft()
        self.op_cursor = self._op_tail[0][0] if self._op_tail else self._op_seen

    def snapshot(self) -> tuple[dict[str, Any], list[str]]:
        """(puts, deletes) of the `transactions` table that make it match memory; `persist` writes them."""
        puts: dict[str, Any] = {"half_cursor": self.half_cursor, "op_cursor": self.op_cursor}
        for entry in self._open.values():
            if entry.checks:
                puts[f"{_CHECKS_KEY}{entry.half_offset}"] = [entry.checks, entry.last_check_ms]
        current = {k for k in puts if k.startswith(_CHECKS_KEY)}
        deletes = sorted(self._persisted_checks - current)
        self._persisted_checks = current
        return puts, deletes

    def persist(self, snapshot: tuple[dict[str, Any], list[str]] | None = None) -> None:
        """Write a snapshot (safe on a worker thread with one taken on the loop)."""
        puts, deletes = self.snapshot() if snapshot is None else snapshot
        self._store.metadata.write_batch({TABLE: puts}, {TABLE: deletes} if deletes else {})

    # ---- prepare and end -----------------------------------------------------------------

    def half_stored(self, record_offsets: list[tuple[int, int, str, str]]) -> None:
        """The send path stored half messages: (half queue offset, phys offset, real topic, UNIQ_KEY) each."""
        for half_offset, phys_offset, real_topic, uniq_key in record_offsets:
            self.counts["half"] += 1
            self._events.record({"event": "txn-half", "topic": real_topic, "half_offset": half_offset,
                                 "phys_offset": phys_offset, "uniq_key": uniq_key})
        self.catch_up()

    def end(self, transaction_id: str, message_id: str, commit: bool, source: str) -> EndOutcome:
        """Commit or roll back the half message `transaction_id` names (its offset message id)."""
        wanted = COMMIT if commit else ROLLBACK
        try:
            _host, _port, phys_offset = parse_offset_msg_id(transaction_id)
        except ValueError:
            return EndOutcome(ResponseCode.QUERY_NOT_FOUND,
                              f"transaction id {transaction_id[:80]!r} is not one this broker gave out; end the "
                              "transaction with the id its send answered")
        self.catch_up()
        record = self._store.lookup_message(phys_offset) if phys_offset >= 0 else None
        if (record is None or record.topic != c.TRANS_HALF_TOPIC or record.phys_offset != phys_offset
                or record.properties.get(c.PROPERTY_UNIQ_KEY) != message_id):
            return EndOutcome(ResponseCode.QUERY_NOT_FOUND,
                              f"no half message {message_id[:80]!r} under transaction id {transaction_id[:40]} on "
                              "this broker; send the end to the broker that answered the send")
        half_offset = record.queue_offset
        done = self._resolution_of(half_offset)
        if done is not None:
            self.counts["repeated_ends"] += 1
            self._journal_end(record, wanted, source, repeated_of=done)
            if done in (wanted, "resolved earlier"):
                return EndOutcome(ResponseCode.SUCCESS, f"the transaction was resolved ({done}) already")
            return EndOutcome(ResponseCode.INVALID_ARGUMENT,
                              f"the transaction was resolved as {done} already; this {wanted} changes nothing")
        if commit:
            msg = committed_message(record)
            if msg is None:
                return EndOutcome(ResponseCode.SYSTEM_ERROR, f"half message {message_id!r} names no real topic and "
                                  "queue; roll it back")
            result = self._store.put_messages([msg])
            if result.status is not PutStatus.PUT_OK:
                return EndOutcome(ResponseCode.SYSTEM_ERROR,
                                  f"committing into {msg.topic} failed ({result.remark or result.status.name}); "
                                  "end the transaction again (or let the broker's check ask)")
        failure = self._write_op(record, half_offset, wanted)
        if failure is not None:
            return failure
        self._journal_end(record, wanted, source)
        return EndOutcome(ResponseCode.SUCCESS)

    def _resolution_of(self, half_offset: int) -> str | None:
        if half_offset < self.half_cursor:
            return self._passed.get(half_offset, "resolved earlier")
        if half_offset in self._open:
            return None
        return self._resolved.get(half_offset, "resolved earlier")

    def _write_op(self, record: Record, half_offset: int, resolution: str) -> EndOutcome | None:
        op = MessageToStore(topic=c.TRANS_OP_HALF_TOPIC, queue_id=OP_QUEUE_ID, body=str(half_offset).encode(),
                            properties={c.PROPERTY_TAGS: c.TRANS_OP_REMOVE_TAG,
                                        c.PROPERTY_TRANSACTION_RESOLUTION: resolution},
                            born_timestamp_ms=self._clock.wall_ms(), store_host=record.store_host)
        result = self._store.put_messages([op])
        if self._on_put is not None:
            self._on_put()
        if result.status is not PutStatus.PUT_OK:
            log.error("op record for half offset %d (%s) not written: %s", half_offset, resolution,
                      result.remark or result.status.name)
            return EndOutcome(ResponseCode.SYSTEM_ERROR, f"recording the {resolution} failed "
                              f"({result.remark or result.status.name}); end the transaction again")
        self.counts[resolution] += 1
        self.catch_up()
        self._advance()
        return None

    def _journal_end(self, record: Record, resolution: str, source: str, repeated_of: str = "") -> None:
        event: dict[str, Any] = {"event": "txn-end", "resolution": resolution, "source": source,
                                 "topic": record.properties.get(c.PROPERTY_REAL_TOPIC, ""),
                                 "half_offset": record.queue_offset,
                                 "uniq_key": record.properties.get(c.PROPERTY_UNIQ_KEY, "")}
        if repeated_of:
            event["repeat_of"] = repeated_of
        self._events.record(event)

    # ---- checks --------------------------------------------------------------------------

    def due_checks(self, now_ms: int) -> tuple[list[CheckRequest], int | None]:
        """The checks due at wall time `now_ms` (each counted as sent) and the wall time the
        next one is due (None: nothing open). Half messages past `check_max` checks are
        discarded here."""
        self.catch_up()
        checks: list[CheckRequest] = []
        next_due: int | None = None
        for half_offset in sorted(self._open):
            entry = self._open[half_offset]
            due = entry.due_ms(self.timeout_ms, self.check_interval_ms)
            if due > now_ms or len(checks) >= c.TRANSACTION_CHECKS_PER_PASS_MAX:
                next_due = due if next_due is None else min(next_due, due)
                continue
            record = self._store.lookup_message(entry.phys_offset, entry.size)
            if record is None:
                log.error("half offset %d: no readable record at commitlog offset %d; passing it", half_offset,
                          entry.phys_offset)
                self._open.pop(half_offset)
                self._resolved[half_offset] = SKIPPED
                continue
            if entry.checks >= self.check_max:
                if not self._discard(record, entry):
                    next_due = now_ms + self.check_interval_ms if next_due is None else next_due
                continue
            entry.checks += 1
            entry.last_check_ms = now_ms
            self.counts["checks"] += 1
            checks.append(CheckRequest(record, entry.real_topic, entry.group, record.offset_msg_id, entry.checks))
            again_ms = now_ms + self.check_interval_ms
            next_due = again_ms if next_due is None else min(next_due, again_ms)
        self._advance()
        return checks, next_due

    def _discard(self, record: Record, entry: OpenHalf) -> bool:
        """TRANS_CHECK_MAX_TIME_TOPIC keeps the half message; a DISCARD op record closes it."""
        copy = MessageToStore(topic=c.TRANS_CHECK_MAX_TIME_TOPIC, queue_id=0, body=record.body, flag=record.flag,
                              properties={**record.properties, c.PROPERTY_TRANSACTION_CHECK_TIMES: str(entry.checks)},
                              born_timestamp_ms=record.born_timestamp_ms, born_host=record.born_host,
                              store_host=record.store_host, reconsume_times=record.reconsume_times)
        result = self._store.put_messages([copy])
        if result.status is not PutStatus.PUT_OK or self._write_op(record, entry.half_offset, DISCARD) is not None:
            log.error("half offset %d: discarding after %d checks failed (%s); trying again later",
                      entry.half_offset, entry.checks, result.remark or result.status.name)
            return False
        log.warning("half message %s for %s discarded after %d checks (kept in %s)", entry.uniq_key,
                    entry.real_topic, entry.checks, c.TRANS_CHECK_MAX_TIME_TOPIC)
        self._events.record({"event": "txn-discard", "topic": entry.real_topic, "half_offset": entry.half_offset,
                             "uniq_key": entry.uniq_key, "checks": entry.checks})
        return True

    def journal_check(self, check: CheckRequest, delivered: bool) -> None:
        self._events.record({"event": "txn-check", "topic": check.real_topic, "group": check.group,
                             "half_offset": check.record.queue_offset,
                             "uniq_key": check.record.properties.get(c.PROPERTY_UNIQ_KEY, ""),
                             "check_times": check.check_times, "delivered": delivered})

    def open_count(self) -> int:
        return len(self._open)

    def describe(self) -> dict[str, Any]:
        return {"open": len(self._open), "half_cursor": self.half_cursor, "op_cursor": self.op_cursor,
                **self.counts}


def _within(value: int, low: int, high: int) -> int:
    return max(low, min(value, high))


def _op_half_offset(record: Record | None) -> int | None:
    if record is None or record.properties.get(c.PROPERTY_TAGS) != c.TRANS_OP_REMOVE_TAG:
        return None
    try:
        return int(record.body.decode())
    except (UnicodeDecodeError, ValueError):
        return None


class EndTransactionHandler:
    """END_TRANSACTION on any broker: a master ends the transaction, a slave refuses."""

    def __init__(self, txns: TransactionalMessages | None, *, node_id: str, broker_name: str,
                 writable: Callable[[], bool]) -> None:
        self._txns = txns
        self._node_id = node_id
        self._broker_name = broker_name
        self._writable = writable

    async def handle(self, req: EndTransactionRequest) -> EndOutcome:
        if self._txns is None:
            return EndOutcome(ResponseCode.SERVICE_NOT_AVAILABLE, f"{self._node_id} is a slave; end the transaction "
                              f"at the master of {self._broker_name}")
        if not self._writable():
            return EndOutcome(ResponseCode.NO_PERMISSION, f"broker {self._broker_name} is not writable; end the "
                              "transaction once it is (the check asks again meanwhile)")
        return self._txns.end(req.transaction_id, req.message_id, req.commit, req.source)
