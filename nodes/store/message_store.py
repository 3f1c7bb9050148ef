"""MessageStore: the facade the broker uses (RocketMQ's DefaultMessageStore).

Owns: the store's directory layout, open (recovery) and close, put (delay conversion into
SCHEDULE_TOPIC_XXXX (delay.py), validate, assign queue offsets, append, dispatch at once so a
pull right after PUT_OK finds the message), get (the
getMessage status table and scan loop of reference §1.1), offset queries, flush and
checkpoint, the abort file, and raw commitlog access for replication. Does not own
networking, topic configs or consumer offsets (the broker does, persisting them through
`metadata`).

Layout under `root`:
    commitlog/<20-digit phys offset>                 the messages (commitlog.py)
    consumequeue/<topic>/<queue_id>/<20-digit byte>  the per-queue indexes (consume_queue.py)
    checkpoint                                       flush timestamps (checkpoint.py)
    abort                                            exists while open: its presence at open
                                                     means the last stop was not clean
    metadata/                                        LMDB (metadata.py)

Threading: put, get and the other calls run on one thread (the broker's event loop);
`flush` may run on a worker thread at the same time. `_lock` serialises appends and
dispatch against the flusher's snapshot; the disk syncs run outside it.
"""

from __future__ import annotations

import bisect
import enum
import logging
import struct
import threading
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodes.common import constants as c
from nodes.common.clock import SYSTEM_CLOCK, Clock
from nodes.common.config import StoreConfig
from nodes.common.errors import DataDirError, StoreError
from nodes.store import record
from nodes.store.checkpoint import Checkpoint, read_checkpoint, write_checkpoint
from nodes.store.commitlog import AppendResult, CommitLog
from nodes.store.consume_queue import CQ_UNIT, ConsumeQueue
from nodes.store.delay import (
    DEFAULT_DELAY_LEVELS_MS,
    schedule_tag_code_of,
    to_schedule_topic,
    wants_delay,
)
from nodes.store.dispatch import Dispatcher
from nodes.store.metadata import MetadataStore
from nodes.store.record import (
    MessageToStore,
    PropertiesTooLargeError,
    Record,
    RecordKind,
    check_at,
    decode_record,
    tag_hash,
)
from nodes.store.recovery import RecoveryReport, recover

__all__ = ["GetResult", "GetStatus", "MessageStore", "PutResult", "PutStatus", "RecoveryReport"]

log = logging.getLogger(__name__)

_UNIT = c.CQ_UNIT_SIZE_BYTES
_HOLE_SIZE = c.CQ_HOLE_SIZE_MARK
_TOTAL_SIZE = struct.Struct(">i")


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


class GetStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"  # unreachable, as in RocketMQ (see get_messages)
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass
class PutResult:
    status: PutStatus
    appended: list[AppendResult] = field(default_factory=list)
    remark: str = ""


@dataclass
class GetResult:
    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    # the found records, whole and back to back: one copy out of the mapped files
    record_data: bytes = b""
    record_sizes: list[int] = field(default_factory=list)
    suggest_pulling_from_slave: bool = False
    records_bytes: int = 0
    # commitlog bytes behind the last unit examined: the backlog the slave suggestion judges
    backlog_bytes: int = 0

    @property
    def records(self) -> list[bytes]:
        """The found records one by one (copies sliced from `record_data`)."""
        out, pos, data = [], 0, self.record_data
        for size in self.record_sizes:
            out.append(data[pos:pos + size])
            pos += size
        return out


def _is_path_safe(topic: str) -> bool:
    """A topic names a directory: it must be one plain path component."""
    return bool(topic) and topic not in (".", "..") and "/" not in topic and "\0" not in topic


class MessageStore:
    def __init__(self, root: Path, config: StoreConfig, *, is_slave: bool = False,
                 offset_check_in_slave: bool = False, clock: Clock = SYSTEM_CLOCK,
                 delay_levels_ms: Sequence[int] = DEFAULT_DELAY_LEVELS_MS) -> None:
        self.root = Path(root)
        # The delay of each level (level i+1 = index i): delayed puts and their tag codes.
        self.delay_levels_ms = tuple(delay_levels_ms)
        self.config = config
        self.is_slave = is_slave
        self.offset_check_in_slave = offset_check_in_slave
        self._clock = clock
        # (topic, queue_id, max_queue_offset, tag_hash). Fired for every newly indexed record,
        # on a slave too: the broker leaves it None there to keep RocketMQ's behaviour.
        self.on_arrival: Callable[[str, int, int, int], None] | None = None
        self.metadata: MetadataStore
        self._commitlog = CommitLog(self.root / "commitlog", config.commitlog_segment_bytes)
        self._consume_queue_root = self.root / "consumequeue"
        self._consume_queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._transfer_caps = TransferCaps(config.transfer_bytes_max_in_memory, config.transfer_count_max_in_memory,
                                           config.transfer_bytes_max_on_disk, config.transfer_count_max_on_disk)
        self._dispatcher = Dispatcher(self._commitlog, self._consume_queue_for,
                                      tag_code=lambda topic, properties, store_timestamp_ms: schedule_tag_code_of(
                                          topic, properties, store_timestamp_ms, self.delay_levels_ms))
        self._arrivals: list[tuple[str, int, int, int]] = []
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._opened = False
        self._running = False
        self._recovery: RecoveryReport | None = None
        self.corrupt_records_skipped = 0
        self._checked_extents = _CheckedExtents(c.CHECKED_EXTENTS_MAX)

    # --- lifecycle -----------------------------------------------------------------------------

    def open(self) -> RecoveryReport:
        """Create or recover the store under `root` and start accepting calls.

        Raises:
            DataDirError: `root` is not a usable directory.
        """
        if self._opened:
            raise StoreError(f"the store at {self.root} was opened before; make a new MessageStore")
        self._opened = True
        try:
            self._prepare_root()
            abort = self.root / "abort"
            clean_shutdown = not abort.exists()
            self._mark_in_use(abort)
            checkpoint = read_checkpoint(self.root / "checkpoint")
            self._commitlog.load()
            self._load_consume_queues()
            self._recovery = recover(self._commitlog, self._consume_queues, self._dispatcher,
                                     clean_shutdown=clean_shutdown, checkpoint=checkpoint,
                                     trust_checkpoint=self.config.recovery_trust_checkpoint)
            self.metadata = MetadataStore(self.root / "metadata")
        except OSError as exc:
            raise DataDirError(f"cannot open the store at {self.root}: {exc}; check that it is a writable "
                               "directory, or move it aside") from exc
        self._dispatcher.on_arrival = self._arrived
        self._running = True
        return self._recovery

    def _prepare_root(self) -> None:
        if self.root.exists() and not self.root.is_dir():
            raise DataDirError(f"the store path {self.root} is a file, not a directory: point the store at a "
                               "directory (created if missing) or move the file away")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DataDirError(f"cannot create the store directory {self.root}: {exc}; create it or choose "
                               "another path") from exc
        for name in ("commitlog", "consumequeue", "metadata"):
            path = self.root / name
            if path.exists() and not path.is_dir():
                raise DataDirError(f"{path} should be a directory but is a file: this is not a store "
                                   "directory; move it aside")

    def _mark_in_use(self, abort: Path) -> None:
        """Create the abort file before recovery touches anything: a crash during recovery must
        lead to another (abnormal) recovery. Also the first write, so it tells an unwritable
        directory."""
        try:
            abort.write_bytes(b"")
        except OSError as exc:
            raise DataDirError(f"the store directory {self.root} is not writable ({exc}): fix its "
                               "permissions or choose another path") from exc

    def _load_consume_queues(self) -> None:
        if not self._consume_queue_root.is_dir():
            return
        for topic_dir in sorted(self._consume_queue_root.iterdir()):
            if not topic_dir.is_dir():
                continue
            for queue_dir in sorted(topic_dir.iterdir()):
                if not queue_dir.name.isdigit():
                    log.warning("ignoring %s: not a queue id directory", queue_dir)
                    continue
                queue = ConsumeQueue(self._consume_queue_root, topic_dir.name, int(queue_dir.name),
                                     self.config.cq_units_per_file)
                queue.load()
                self._consume_queues[(topic_dir.name, int(queue_dir.name))] = queue

    def close(self) -> None:
        """Flush everything, write the checkpoint, close the files and remove the abort file."""
        with self._flush_lock:
            if not self._running:
                return
            with self._lock:
                self._running = False
            self._flush_files()
            self._commitlog.close()
            for queue in self._consume_queues.values():
                queue.close()
            self.metadata.close()
            (self.root / "abort").unlink(missing_ok=True)

    def flush(self) -> None:
        """Sync the commitlog and consume queues to disk, then write the checkpoint (any thread)."""
        with self._flush_lock:
            if self._running:
                self._flush_files()

    def _flush_files(self) -> None:
        with self._lock:
            store_timestamp_ms = self._dispatcher.last_store_timestamp_ms
            queues = list(self._consume_queues.values())
        # Everything dispatched by now is appended, so after these syncs the checkpoint's
        # timestamp is a lower bound for both the commitlog and the consume queues.
        self._commitlog.flush()
        for queue in queues:
            queue.flush()
        if store_timestamp_ms:
            write_checkpoint(self.root / "checkpoint", Checkpoint(store_timestamp_ms, store_timestamp_ms, 0))

    def _check_open(self) -> None:
        if not self._running:
            raise StoreError(f"the store at {self.root} is not open")

    # --- writing -----------------------------------------------------------------------------

    def put_messages(self, msgs: Sequence[MessageToStore]) -> PutResult:
        """Store one message, or a batch for ONE topic and queue, with consecutive queue offsets.

        All or nothing: the batch is one write into one segment. Returns PUT_OK with one
        AppendResult per message, or the reason nothing was stored.
        """
        if not self._running or self.is_slave:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE,
                             remark="the store is a slave" if self.is_slave else "the store is not open")
        if any(wants_delay(msg) for msg in msgs):
            if len(msgs) > 1:  # CommitLog#asyncPutMessages refuses delayed batches
                return PutResult(PutStatus.MESSAGE_ILLEGAL, remark="a batch cannot carry delayed messages")
            # Delay conversion at store time: the message waits in SCHEDULE_TOPIC_XXXX.
            msgs = [to_schedule_topic(msgs[0], len(self.delay_levels_ms))]
        rejected = self._validate(msgs)
        if rejected is not None:
            return rejected
        topic, queue_id = msgs[0].topic, msgs[0].queue_id
        with self._lock:
            if not self._running:  # closed while this call was on its way in
                return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark="the store is closed")
            queue = self._consume_queues.get((topic, queue_id))
            first_queue_offset = queue.max_queue_offset if queue is not None else 0
            start_phys_offset = self._commitlog.max_phys_offset
            store_timestamp_ms = self._clock.wall_ms()
            try:
                appended = self._commitlog.append(msgs, first_queue_offset=first_queue_offset,
                                                  store_timestamp_ms=store_timestamp_ms)
            except PropertiesTooLargeError as exc:
                return PutResult(PutStatus.PROPERTIES_SIZE_EXCEEDED, remark=str(exc))
            except ValueError as exc:  # encoding refused it (host, topic, separators, segment size)
                return PutResult(PutStatus.MESSAGE_ILLEGAL, remark=str(exc))
            end_phys_offset = self._commitlog.max_phys_offset
            units = [(a.phys_offset, a.size, self._tag_code_of(msg, store_timestamp_ms))
                     for msg, a in zip(msgs, appended, strict=True)]
            if not self._dispatcher.dispatch_appended(start_phys_offset, end_phys_offset, topic, queue_id,
                                                      first_queue_offset, units, store_timestamp_ms):
                self._dispatcher.dispatch_until(end_phys_offset)
            arrivals = self._take_arrivals()
        self._fire(arrivals)
        return PutResult(PutStatus.PUT_OK, appended)

    def _tag_code_of(self, msg: MessageToStore, store_timestamp_ms: int) -> int:
        """The consume-queue tag code dispatch would derive from the stored record of `msg`."""
        properties = msg.properties
        if msg.topic == c.SCHEDULE_TOPIC:
            code = schedule_tag_code_of(msg.topic, properties, store_timestamp_ms, self.delay_levels_ms)
            if code is not None:
                return code
        return tag_hash(properties.get(c.PROPERTY_TAGS))

    def _validate(self, msgs: Sequence[MessageToStore]) -> PutResult | None:
        if not msgs:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, remark="no message to store")
        topic, queue_id = msgs[0].topic, msgs[0].queue_id
        if not _is_path_safe(topic) or len(topic.encode()) > c.TOPIC_NAME_BYTES_MAX:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, remark=f"topic {topic!r} cannot be stored")
        if queue_id < 0:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, remark=f"queue id {queue_id} is negative")
        body_bytes_max = self.config.message_body_bytes_max
        for i, msg in enumerate(msgs):
            if msg.topic != topic or msg.queue_id != queue_id:
                return PutResult(PutStatus.MESSAGE_ILLEGAL, remark="a batch must be for one topic and queue")
            if len(msg.body) > body_bytes_max:
                return PutResult(PutStatus.MESSAGE_ILLEGAL, remark=(
                    f"message {i} body is {len(msg.body)} bytes, over the {body_bytes_max}-byte limit"))
        # RocketMQ checks a batch's encoded body against maxMessageSize as one message.
        batch_body_bytes = sum(len(msg.body) for msg in msgs)
        if len(msgs) > 1 and batch_body_bytes > body_bytes_max:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, remark=(
                f"the batch carries {batch_body_bytes} body bytes, over the {body_bytes_max}-byte limit"))
        return None

    def append_commitlog(self, phys_offset: int, data: bytes) -> None:
        """Append raw bytes from a master at `phys_offset` (== max_phys_offset), then dispatch.

        Raises:
            StoreError: the offset does not continue this commitlog, or crosses a segment end.
        """
        with self._lock:
            self._check_open()
            was_empty = not self._commitlog.segments
            self._commitlog.append_bytes(phys_offset, data)
            if was_empty:
                self._dispatcher.reput_from_phys_offset = phys_offset
            self._dispatcher.dispatch_until(self._commitlog.max_phys_offset)
            arrivals = self._take_arrivals()
        self._fire(arrivals)

    def read_commitlog(self, phys_offset: int, max_bytes: int) -> bytes:
        """Raw commitlog bytes from `phys_offset` (never across a segment end); b"" if none yet."""
        self._check_open()
        return self._commitlog.read_bytes(phys_offset, max_bytes)

    def _consume_queue_for(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        key = (topic, queue_id)
        queue = self._consume_queues.get(key)
        if queue is None:
            if not _is_path_safe(topic) or queue_id < 0:
                log.error("not indexing a record of topic %r queue %d: not a valid queue name", topic, queue_id)
                return None
            queue = ConsumeQueue(self._consume_queue_root, topic, queue_id, self.config.cq_units_per_file)
            self._consume_queues[key] = queue
        return queue

    def _arrived(self, topic: str, queue_id: int, max_queue_offset: int, tag_hash: int, _store_ms: int) -> None:
        self._arrivals.append((topic, queue_id, max_queue_offset, tag_hash))

    def _take_arrivals(self) -> list[tuple[str, int, int, int]]:
        arrivals, self._arrivals = self._arrivals, []
        return arrivals

    def _fire(self, arrivals: list[tuple[str, int, int, int]]) -> None:
        """Call the listener outside `_lock`, so it may call back into the store (even put)."""
        if self.on_arrival is not None:
            for arrival in arrivals:
                self.on_arrival(*arrival)

    # --- reading -----------------------------------------------------------------------------

    def get_messages(self, topic: str, queue_id: int, queue_offset: int, max_count: int,
                     tag_hashes: frozenset[int] | None) -> GetResult:
        """RocketMQ's getMessage (reference §1.1): the status table, then the scan loop.

        `tag_hashes` None takes every message; otherwise a unit passes when its tag hash is in
        the set. NO_MATCHED_LOGIC_QUEUE never happens: RocketMQ creates the queue on demand, so a
        queue nobody wrote is an empty one (NO_MESSAGE_IN_QUEUE).
        """
        self._check_open()
        queue = self._consume_queues.get((topic, queue_id))
        min_offset = queue.min_queue_offset if queue is not None else 0
        max_offset = queue.max_queue_offset if queue is not None else 0

        def result(status: GetStatus, next_offset: int) -> GetResult:
            # nextOffsetCorrection: a slave (without offset_check_in_slave) never moves a consumer.
            if self.is_slave and not self.offset_check_in_slave:
                next_offset = queue_offset
            return GetResult(status, next_offset, min_offset, max_offset)

        if queue is None or max_offset == 0:
            return result(GetStatus.NO_MESSAGE_IN_QUEUE, 0)
        if queue_offset < min_offset:
            return result(GetStatus.OFFSET_TOO_SMALL, min_offset)
        if queue_offset == max_offset:
            return result(GetStatus.OFFSET_OVERFLOW_ONE, queue_offset)
        if queue_offset > max_offset:
            return result(GetStatus.OFFSET_OVERFLOW_BADLY, max_offset)
        scan_bytes_max = max(c.PULL_FILTER_SCAN_BYTES_MIN, max_count * _UNIT)
        units = queue.read_units(queue_offset, scan_bytes_max - scan_bytes_max % _UNIT)
        if units is None:
            return result(GetStatus.OFFSET_FOUND_NULL, queue.next_file_start(queue_offset))
        return self._scan(units, queue_offset, max_count, tag_hashes, min_offset, max_offset)

    def _scan(self, units: bytes, queue_offset: int, max_count: int, tag_hashes: frozenset[int] | None,
              min_offset: int, max_offset: int) -> GetResult:
        """The scan loop of §1.1 case 6 over the units of one consume-queue file.

        Hot path of every pull: records are checked in place in the mapped segment and only
        their positions are kept (adjacent records merge into one run), so the found bytes
        are copied exactly once, by the final join. A record is checked the first time this
        store hands it out; later reads of it skip the check (`_CheckedExtents`).
        """
        status = GetStatus.NO_MATCHED_MESSAGE
        commitlog = self._commitlog
        max_phys_offset = commitlog.max_phys_offset
        memory_budget_bytes = self.config.memory_budget_bytes
        segment_bytes = self.config.commitlog_segment_bytes
        caps = self._transfer_caps
        sizes: list[int] = []
        runs: list[tuple[memoryview, int, int]] = []  # (segment view, start, end) of adjacent records
        views: dict[int, memoryview] = {}  # segment start -> a view of its mapping, released below
        records_bytes = 0
        next_segment_start = -1  # after a removed segment: skip units pointing into it
        last_phys_offset: int | None = None
        scanned_bytes = 0
        seg_start, seg_written = 0, -1  # the segment the last record came from (start, written end)
        checked_extents = self._checked_extents
        known_checked, known_lo, known_hi = False, 0, 0  # [lo, hi) is all checked, or all not
        newly_checked: list[tuple[int, int]] = []
        view: memoryview | None = None
        run_view: memoryview | None = None
        run_start = run_end = 0
        found = GetStatus.FOUND
        on_disk_below = max_phys_offset - memory_budget_bytes  # "in disk": further back than the budget
        count_max_in_memory = min(max_count, caps.count_in_memory)
        bytes_max_in_memory = caps.bytes_in_memory
        try:
            for phys_offset, size, unit_tag_hash in CQ_UNIT.iter_unpack(units):
                if size == _HOLE_SIZE and phys_offset == 0:  # = is_hole, inlined on this hot path
                    scanned_bytes += _UNIT
                    continue
                last_phys_offset = phys_offset
                if phys_offset < next_segment_start:
                    scanned_bytes += _UNIT
                    continue
                if sizes:  # = _is_batch_full, whose in-memory branch is inlined
                    if phys_offset < on_disk_below:
                        if _is_batch_full(size, len(sizes), records_bytes, max_count, True, caps):
                            break
                    elif len(sizes) >= count_max_in_memory or records_bytes + size > bytes_max_in_memory:
                        break
                scanned_bytes += _UNIT
                if tag_hashes is not None and unit_tag_hash not in tag_hashes:
                    if not sizes:
                        status = GetStatus.NO_MATCHED_MESSAGE
                    continue
                if not seg_start <= phys_offset or phys_offset + size > seg_written:
                    mapped = commitlog.segment_for(phys_offset)
                    if mapped is None or phys_offset + size > mapped.wrote_offset:
                        # = CommitLog.read answering None: the segment was deleted
                        if not sizes:
                            status = GetStatus.MESSAGE_WAS_REMOVING
                        next_segment_start = phys_offset + segment_bytes - phys_offset % segment_bytes
                        continue
                    seg_start, seg_written = mapped.start_offset, mapped.wrote_offset
                    view = views.get(seg_start)
                    if view is None:
                        view = views[seg_start] = memoryview(mapped.buffer)
                assert view is not None
                pos = phys_offset - seg_start
                end_phys_offset = phys_offset + size
                if not known_lo <= phys_offset < known_hi:
                    known_checked, known_lo, known_hi = checked_extents.around(phys_offset)
                if not (known_checked and end_phys_offset <= known_hi):
                    if not (_record_checks(view, pos, size, phys_offset)
                            or check_at(view[pos:pos + size].tobytes(), 0, base_phys_offset=phys_offset)
                            == (RecordKind.RECORD, size)):
                        # Never hand out bytes that do not check; the consumer steps over them.
                        self.corrupt_records_skipped += 1
                        log.error("skipping the damaged record at phys offset %d (queue offset %d)",
                                  phys_offset, queue_offset + scanned_bytes // _UNIT - 1)
                        continue
                    if newly_checked and newly_checked[-1][1] == phys_offset:
                        newly_checked[-1] = (newly_checked[-1][0], end_phys_offset)
                    else:
                        newly_checked.append((phys_offset, end_phys_offset))
                if view is run_view and pos == run_end:
                    run_end = pos + size
                else:
                    if run_view is not None:
                        runs.append((run_view, run_start, run_end))
                    run_view, run_start, run_end = view, pos, pos + size
                sizes.append(size)
                records_bytes += size
                status = found
                next_segment_start = -1
            if run_view is not None:
                runs.append((run_view, run_start, run_end))
            record_data = b"".join([run[start:end] for run, start, end in runs])
            for start, end in newly_checked:
                checked_extents.add(start, end)
        finally:
            runs.clear()
            run_view = view = None
            for segment_view in views.values():
                segment_view.release()  # a mapping with exported views cannot be closed
        backlog_bytes = max_phys_offset - last_phys_offset if last_phys_offset is not None else 0
        return GetResult(status, queue_offset + scanned_bytes // _UNIT, min_offset, max_offset, record_data, sizes,
                         backlog_bytes > memory_budget_bytes, records_bytes, backlog_bytes)

    def min_queue_offset(self, topic: str, queue_id: int) -> int:
        queue = self._consume_queues.get((topic, queue_id))
        return queue.min_queue_offset if queue is not None else 0

    def max_queue_offset(self, topic: str, queue_id: int) -> int:
        queue = self._consume_queues.get((topic, queue_id))
        return queue.max_queue_offset if queue is not None else 0

    def search_queue_offset(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The queue offset whose store time is nearest `timestamp_ms` (ConsumeQueue.search_offset)."""
        queue = self._consume_queues.get((topic, queue_id))
        if queue is None:
            return 0
        return queue.search_offset(timestamp_ms, self._store_timestamp_at)

    def _store_timestamp_at(self, phys_offset: int, size: int) -> int | None:
        record = self.lookup_message(phys_offset, size)
        return record.store_timestamp_ms if record is not None else None

    def lookup_message(self, phys_offset: int, size: int | None = None) -> Record | None:
        """The record at `phys_offset`, or None if nothing valid is there."""
        if size is None:
            head = self._commitlog.read(phys_offset, _TOTAL_SIZE.size)
            if head is None:
                return None
            (size,) = _TOTAL_SIZE.unpack(head)
            if size <= 0:
                return None
        data = self._commitlog.read(phys_offset, size)
        if data is None or check_at(data, 0, base_phys_offset=phys_offset) != (RecordKind.RECORD, size):
            return None
        return decode_record(data, check_crc=False)

    def queue_unit(self, topic: str, queue_id: int, queue_offset: int) -> tuple[int, int, int] | None:
        """(phys_offset, size, tag code) of one consume-queue unit, or None if it is not there;
        a hole unit is returned as is (`consume_queue.is_hole` tells it)."""
        queue = self._consume_queues.get((topic, queue_id))
        return queue.unit_at(queue_offset) if queue is not None else None

    def queue_first_phys_offset(self, topic: str, queue_id: int) -> int | None:
        queue = self._consume_queues.get((topic, queue_id))
        if queue is None:
            return None
        unit = queue.unit_at(queue.min_queue_offset)
        return unit[0] if unit is not None else None

    def is_in_memory(self, phys_offset: int) -> bool:
        return self._commitlog.max_phys_offset - phys_offset <= self.config.memory_budget_bytes

    @property
    def max_phys_offset(self) -> int:
        return self._commitlog.max_phys_offset

    @property
    def min_phys_offset(self) -> int:
        return self._commitlog.min_phys_offset

    def topics(self) -> list[str]:
        return sorted({topic for topic, _ in self._consume_queues})

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(queue_id for name, queue_id in self._consume_queues if name == topic)

    def stats(self) -> dict[str, Any]:
        return {
            "max_phys_offset": self.max_phys_offset,
            "min_phys_offset": self.min_phys_offset,
            "reput_from_phys_offset": self._dispatcher.reput_from_phys_offset,
            "topics": len(self.topics()),
            "queues": len(self._consume_queues),
            "corrupt_records_skipped": self.corrupt_records_skipped,
            "damaged_ranges": [list(r) for r in self._dispatcher.damaged_ranges],
            "is_slave": self.is_slave,
        }





class _CheckedExtents:
    """Commitlog byte ranges whose records passed the read check since the store opened.

    The commitlog is append-only and a running store never reuses an offset (truncation only
    happens in recovery, at open), so checked bytes change only through an outside write to
    the files (which RocketMQ never checks at all); re-reads skip the CRC. Holds sorted,
    disjoint, merged [start, end) ranges; past `extents_max` of them it forgets everything.
    Loop-confined, like every read.
    """

    def __init__(self, extents_max: int) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._extents_max = extents_max

    def __len__(self) -> int:
        return len(self._starts)

    def around(self, phys_offset: int) -> tuple[bool, int, int]:
        """(checked, lo, hi): every byte of [lo, hi), which holds `phys_offset`, is checked, or none is."""
        starts, ends = self._starts, self._ends
        i = bisect.bisect_right(starts, phys_offset) - 1
        if i >= 0 and phys_offset < ends[i]:
            return True, starts[i], ends[i]
        lo = ends[i] if i >= 0 else 0
        hi = starts[i + 1] if i + 1 < len(starts) else 1 << 62
        return False, lo, hi

    def add(self, start: int, end: int) -> None:
        starts, ends = self._starts, self._ends
        i = bisect.bisect_right(starts, start)
        if i > 0 and ends[i - 1] >= start:  # touches the range before it
            i -= 1
            start, end = starts[i], max(end, ends[i])
            del starts[i], ends[i]
        while i < len(starts) and starts[i] <= end:  # swallows the ranges it reaches
            end = max(end, ends[i])
            del starts[i], ends[i]
        starts.insert(i, start)
        ends.insert(i, end)
        if len(starts) > self._extents_max:
            starts.clear()
            ends.clear()


@dataclass(frozen=True, slots=True)
class TransferCaps:
    """How much one pull may carry (MessageStoreConfig maxTransfer*OnMessageIn{Memory,Disk})."""

    bytes_in_memory: int = c.TRANSFER_BYTES_MAX_IN_MEMORY
    count_in_memory: int = c.TRANSFER_COUNT_MAX_IN_MEMORY
    bytes_on_disk: int = c.TRANSFER_BYTES_MAX_ON_DISK
    count_on_disk: int = c.TRANSFER_COUNT_MAX_ON_DISK


DEFAULT_TRANSFER_CAPS = TransferCaps()


def _is_batch_full(size: int, count: int, total_bytes: int, max_count: int, in_disk: bool,
                   caps: TransferCaps = DEFAULT_TRANSFER_CAPS) -> bool:
    """RocketMQ's isTheBatchFull: never before the first message; then count and byte caps,
    tighter when the message is no longer in memory."""
    if count == 0 or total_bytes == 0:
        return False
    if count >= max_count:
        return True
    if in_disk:
        return total_bytes + size > caps.bytes_on_disk or count >= caps.count_on_disk
    return total_bytes + size > caps.bytes_in_memory or count >= caps.count_in_memory


# The framing fields a pull checks, in one unpack: total size, magic, PHYSICALOFFSET, SYSFLAG,
# BODYLEN (the layout is nodes.store.record's; the struct skips everything else).
_CHECKED_FIELDS = struct.Struct(">iI20xqi44xi")
assert _CHECKED_FIELDS.size == record.HEADER.size and record.PHYS_OFFSET_POS == 28
_PROPS_LEN = record.PROPS_LEN
_RECORD_CRC_TAIL = (c.PROPERTY_RECORD_CRC + c.PROPERTY_NAME_SEPARATOR).encode()
_RECORD_CRC_TAIL_BYTES = record.RECORD_CRC_PROPERTY_BYTES
_HOST_V6_FLAGS = record.SYS_FLAG_BORN_HOST_V6 | record.SYS_FLAG_STORE_HOST_V6
_HEAD_CRC_BYTES = record.PHYS_OFFSET_POS + 8  # the header up to and including PHYSICALOFFSET
_ZERO_PHYS_OFFSET = bytes(8)


def _record_checks(buf: memoryview, pos: int, size: int, phys_offset: int) -> bool:
    """Whether `record.check_at(buf[pos:pos + size], 0, base_phys_offset=phys_offset)` would
    answer (RECORD, size), in one pass over the mapped bytes.

    Only ever stricter than check_at, never looser: a False here is confirmed by check_at
    itself before a record is skipped (tests compare the two on damaged records).
    """
    if size < record.RECORD_BYTES_MIN:
        return False
    total_size, magic, record_phys_offset, sys_flag, body_len = _CHECKED_FIELDS.unpack_from(buf, pos)
    end = pos + size
    topic_len_pos = pos + _CHECKED_FIELDS.size + body_len
    if (total_size != size or magic != c.RECORD_MAGIC or record_phys_offset != phys_offset
            or sys_flag & _HOST_V6_FLAGS or body_len < 0 or topic_len_pos + 1 > end):
        return False
    topic_len = buf[topic_len_pos]
    props_len_pos = topic_len_pos + 1 + topic_len
    if topic_len == 0 or props_len_pos + 2 > end:
        return False
    (props_len,) = _PROPS_LEN.unpack_from(buf, props_len_pos)
    if props_len < _RECORD_CRC_TAIL_BYTES or props_len_pos + 2 + props_len != end:
        return False
    value_start = end - 9  # 8 hex digits and the pair separator end every record
    crc = zlib.crc32(_ZERO_PHYS_OFFSET, zlib.crc32(buf[pos:pos + record.PHYS_OFFSET_POS]))
    crc = zlib.crc32(buf[pos + _HEAD_CRC_BYTES:value_start], crc)
    return buf[value_start - len(_RECORD_CRC_TAIL):end] == _RECORD_CRC_TAIL + b"%08X\x02" % crc
