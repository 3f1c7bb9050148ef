"""The store's write path: put (RocketMQ's putMessage / putMessages) and the slave's raw append.

Owns: delay conversion into SCHEDULE_TOPIC_XXXX at put time (delay.py), validation, assigning
queue offsets, the append, dispatch at once so a pull right after PUT_OK finds the message (the
units' tag codes), and the arrival notices, which are handed to `on_arrival` outside the lock,
after the put, so a listener may call back into the store.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from nodes.common import constants as c
from nodes.common.clock import Clock
from nodes.common.errors import DiskFullError
from nodes.store.commitlog import AppendedRun
from nodes.store.delay import schedule_tag_code_of, to_schedule_topic, wants_delay
from nodes.store.dispatch import IndexKeys
from nodes.store.record import (
    CheckedRecord,
    MessageToStore,
    PropertiesTooLargeError,
    tag_hash,
)
from nodes.store.record_batch import ScannedBatch, encode_scanned
from nodes.store.store_files import StoreFiles, is_path_safe

log = logging.getLogger(__name__)

# (topic, queue_id, max_queue_offset, tag_hash) of a newly indexed record
Arrival = tuple[str, int, int, int]
# writes a put's records given (first_queue_offset, store_timestamp_ms); raises ValueError if refused
_Append = Callable[[int, int], AppendedRun]


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"  # ENOSPC with the disk guard off
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


@dataclass
class PutResult:
    status: PutStatus
    appended: AppendedRun = field(default_factory=AppendedRun.empty)
    remark: str = ""


class StoreWriter:
    def __init__(self, files: StoreFiles, clock: Clock, delay_levels_ms: Sequence[int]) -> None:
        self._files = files
        self._commitlog = files.commitlog
        self._dispatcher = files.dispatcher
        self._clock = clock
        self._delay_levels_ms = delay_levels_ms
        # Fired for every newly indexed record, on a slave too: the broker leaves it None there
        # to keep RocketMQ's behaviour.
        self.on_arrival: Callable[[str, int, int, int], None] | None = None
        self._arrivals: list[Arrival] = []
        # Bytes from here to the commitlog's end were all encoded by this process's own puts;
        # anything recovered from disk or appended raw lies below it (see `put_only_from`).
        self.put_only_from_phys_offset = 0

    def reset_put_only(self) -> None:
        """Every byte written so far came from elsewhere (disk, a master, a slave)."""
        self.put_only_from_phys_offset = self._commitlog.max_phys_offset

    def put_messages(self, msgs: Sequence[MessageToStore]) -> PutResult:
        """MessageStore.put_messages: refuse, convert a delayed message, validate, then under the
        lock assign offsets, append and dispatch; arrivals fire after the lock is released."""
        refused = self._refuse_unless_writable()
        if refused is not None:
            return refused
        if any(wants_delay(msg) for msg in msgs):
            if len(msgs) > 1:  # CommitLog#asyncPutMessages refuses delayed batches
                return PutResult(PutStatus.MESSAGE_ILLEGAL, remark="a batch cannot carry delayed messages")
            # Delay conversion at store time: the message waits in SCHEDULE_TOPIC_XXXX.
            msgs = [to_schedule_topic(msgs[0], len(self._delay_levels_ms))]
        rejected = self._validate(msgs)
        if rejected is not None:
            return rejected
        commitlog = self._commitlog

        def append(first_queue_offset: int, store_timestamp_ms: int) -> AppendedRun:
            return commitlog.append(msgs, first_queue_offset=first_queue_offset,
                                    store_timestamp_ms=store_timestamp_ms)

        def tag_codes(store_timestamp_ms: int) -> list[int]:
            return [self._tag_code_of(msg, store_timestamp_ms) for msg in msgs]

        def keys_of() -> IndexKeys:
            return [(msg.properties.get(c.PROPERTY_KEYS), msg.properties.get(c.PROPERTY_UNIQ_KEY)) for msg in msgs]

        return self._append_dispatch(msgs[0].topic, msgs[0].queue_id, append, tag_codes, keys_of)

    def put_scanned(self, scanned: ScannedBatch, *, topic: str, queue_id: int, born_timestamp_ms: int,
                    born_host: tuple[str, int], store_host: tuple[str, int], sys_flag: int = 0,
                    reconsume_times: int = 0) -> PutResult:
        """`put_messages` for a producer's batch body that `scan_batch_body` found plain: the
        records are written from its bytes, with the same outcome as putting its decoded messages."""
        refused = self._refuse_unless_writable() or _check_destination(topic, queue_id)
        if refused is not None:
            return refused
        commitlog = self._commitlog

        def append(first_queue_offset: int, store_timestamp_ms: int) -> AppendedRun:
            blob, sizes = encode_scanned(scanned, topic=topic, queue_id=queue_id,
                                         first_queue_offset=first_queue_offset,
                                         store_timestamp_ms=store_timestamp_ms,
                                         born_timestamp_ms=born_timestamp_ms, born_host=born_host,
                                         store_host=store_host, sys_flag=sys_flag, reconsume_times=reconsume_times)
            return commitlog.append_encoded(blob, sizes, store_host=store_host,
                                            first_queue_offset=first_queue_offset,
                                            store_timestamp_ms=store_timestamp_ms)

        def tag_codes(_store_timestamp_ms: int) -> list[int]:
            return [entry[5] for entry in scanned.entries]  # the scan derived them from the properties

        return self._append_dispatch(topic, queue_id, append, tag_codes, scanned.index_keys)

    def _refuse_unless_writable(self) -> PutResult | None:
        """RocketMQ's checkStoreStatus: not open, a slave, the disk full, or dispatch stopped by
        a consume-queue file it could not allocate (retried here first)."""
        files = self._files
        if not files.running or files.is_slave:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE,
                             remark="the store is a slave" if files.is_slave else "the store is not open")
        disk = files.disk
        if disk.full:
            return self._disk_refusal()
        if disk.logic_queue_error:
            with files.lock:
                caught_up = files.retry_dispatch()
            if not caught_up:
                return self._disk_refusal()
        return None

    def _disk_refusal(self) -> PutResult:
        disk = self._files.disk
        disk.refusals += 1
        if disk.refusals % c.DISK_FULL_REFUSAL_LOG_EVERY == 1:
            log.warning("refusing puts: the disk is full (%d refusals so far)", disk.refusals)
        return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark=disk.remark())

    def _disk_full(self, exc: DiskFullError) -> PutResult:
        """A put whose segment could not be allocated: nothing was written."""
        self._files.note_disk_full(exc)
        if not self._files.disk.enabled:  # the guard is off: RocketMQ's CREATE_MAPEDFILE_FAILED
            return PutResult(PutStatus.CREATE_MAPPED_FILE_FAILED,
                             remark=f"create mapped file failed, server is busy or broken: {exc}")
        return self._disk_refusal()

    def _append_dispatch(self, topic: str, queue_id: int, append: _Append,
                         tag_codes: Callable[[int], list[int]], keys_of: Callable[[], IndexKeys]) -> PutResult:
        """The locked tail of a put: assign queue offsets from the queue's max, `append` the
        records, dispatch them at once (fast path with their `tag_codes`, and `keys_of` for
        dispatch's listeners; else a reput), take the arrivals; they fire after the lock is
        released."""
        files = self._files
        commitlog = self._commitlog
        with files.lock:
            if not files.running:  # closed while this call was on its way in
                return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark="the store is closed")
            queue = files.consume_queues.get((topic, queue_id))
            first_queue_offset = queue.max_queue_offset if queue is not None else 0
            start_phys_offset = commitlog.max_phys_offset
            store_timestamp_ms = self._clock.wall_ms()
            try:
                appended = append(first_queue_offset, store_timestamp_ms)
            except DiskFullError as exc:
                return self._disk_full(exc)
            except PropertiesTooLargeError as exc:
                return PutResult(PutStatus.PROPERTIES_SIZE_EXCEEDED, remark=str(exc))
            except ValueError as exc:  # encoding refused it (host, topic, separators, segment size)
                return PutResult(PutStatus.MESSAGE_ILLEGAL, remark=str(exc))
            end_phys_offset = commitlog.max_phys_offset
            units = list(zip(appended.phys_offsets, appended.sizes, tag_codes(store_timestamp_ms), strict=True))
            try:
                if not self._dispatcher.dispatch_appended(start_phys_offset, end_phys_offset, topic, queue_id,
                                                          first_queue_offset, units, store_timestamp_ms,
                                                          keys_of):
                    self._dispatcher.dispatch_until(end_phys_offset)
            except DiskFullError as exc:
                # Stored in the commitlog, not yet indexed: PUT_OK (as RocketMQ, whose dispatch runs
                # after the answer anyway); later puts wait until dispatch caught up.
                files.dispatch_failed(exc)
            arrivals = self._take_arrivals()
        self._fire(arrivals)
        return PutResult(PutStatus.PUT_OK, appended)

    def _tag_code_of(self, msg: MessageToStore, store_timestamp_ms: int) -> int:
        """The consume-queue tag code dispatch would derive from the stored record of `msg`."""
        properties = msg.properties
        if msg.topic == c.SCHEDULE_TOPIC:
            code = schedule_tag_code_of(msg.topic, properties, store_timestamp_ms, self._delay_levels_ms)
            if code is not None:
                return code
        return tag_hash(properties.get(c.PROPERTY_TAGS))

    def _validate(self, msgs: Sequence[MessageToStore]) -> PutResult | None:
        if not msgs:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, remark="no message to store")
        topic, queue_id = msgs[0].topic, msgs[0].queue_id
        rejected = _check_destination(topic, queue_id)
        if rejected is not None:
            return rejected
        body_bytes_max = self._files.config.message_body_bytes_max
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

    def append_commitlog(self, phys_offset: int, data: bytes, checked: Sequence[CheckedRecord] = ()) -> None:
        """MessageStore.append_commitlog: append and dispatch under the lock, then fire arrivals."""
        files = self._files
        with files.lock:
            files.check_open()
            if files.disk.full:
                # A slave keeps the guard's headroom too: it stops appending (and so acknowledging)
                # until a check finds room; its master's sends then wait for it or time out.
                raise DiskFullError(f"not appending replicated bytes at {phys_offset}: {files.disk.remark()}")
            was_empty = not self._commitlog.segments
            try:
                self._commitlog.append_bytes(phys_offset, data)
            except DiskFullError as exc:
                files.note_disk_full(exc)
                raise
            if was_empty:
                self._dispatcher.reput_from_phys_offset = phys_offset
            try:
                if checked and not files.disk.logic_queue_error:
                    self._dispatcher.dispatch_checked(phys_offset, checked)
                self._dispatcher.dispatch_until(self._commitlog.max_phys_offset)
                files.disk.logic_queue_error = False
            except DiskFullError as exc:  # the bytes are stored (and acknowledged); indexing resumes later
                files.dispatch_failed(exc)
            self.reset_put_only()
            arrivals = self._take_arrivals()
        self._fire(arrivals)

    def note_arrival(self, topic: str, queue_id: int, max_queue_offset: int, tag_hash: int, _store_ms: int) -> None:
        """Dispatch's listener (under the lock): keeps the notice for `_fire`.

        A record of the same queue and tag hash as the one before it replaces that one's notice:
        the later notice names a higher max offset with the same tag, so it wakes every held
        pull the earlier one would have (a batch of one tag is one notice, not one per record)."""
        arrivals = self._arrivals
        if arrivals:
            last = arrivals[-1]
            if last[3] == tag_hash and last[1] == queue_id and last[0] == topic:
                arrivals[-1] = (topic, queue_id, max_queue_offset, tag_hash)
                return
        arrivals.append((topic, queue_id, max_queue_offset, tag_hash))

    def _take_arrivals(self) -> list[Arrival]:
        arrivals, self._arrivals = self._arrivals, []
        return arrivals

    def _fire(self, arrivals: list[Arrival]) -> None:
        """Call the listener outside the lock, so it may call back into the store (even put)."""
        if self.on_arrival is not None:
            for arrival in arrivals:
                self.on_arrival(*arrival)


def _check_destination(topic: str, queue_id: int) -> PutResult | None:
    """MESSAGE_ILLEGAL for a topic the store cannot name a file after, or a negative queue id."""
    if not is_path_safe(topic) or len(topic.encode()) > c.TOPIC_NAME_BYTES_MAX:
        return PutResult(PutStatus.MESSAGE_ILLEGAL, remark=f"topic {topic!r} cannot be stored")
    if queue_id < 0:
        return PutResult(PutStatus.MESSAGE_ILLEGAL, remark=f"queue id {queue_id} is negative")
    return None
