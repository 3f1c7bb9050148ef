"""MessageStore: the facade the broker uses (RocketMQ's DefaultMessageStore).

One object over three parts that share the store's files (store_files.py: layout, open with
recovery, flush, close): the write path (write_path.py: put, the slave's raw append, arrival
notices) and the read path (read_path.py: get, offset queries, lookups, raw reads for
replication). Does not own networking, topic configs or consumer offsets (the broker does,
persisting them through `metadata`).

Threading: put, get and the other calls run on one thread (the broker's event loop); `flush`
may run on a worker thread at the same time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from nodes.common import constants as c
from nodes.common.clock import SYSTEM_CLOCK, Clock
from nodes.common.config import StoreConfig
from nodes.store.delay import DEFAULT_DELAY_LEVELS_MS
from nodes.store.index_service import IndexService
from nodes.store.metadata import MetadataStore
from nodes.store.read_path import GetResult, GetStatus, StoreReader
from nodes.store.record import CheckedRecord, MessageToStore, Record
from nodes.store.record_batch import ScannedBatch
from nodes.store.recovery import RecoveryReport
from nodes.store.retention import clean_pass
from nodes.store.store_events import Reporter, safe_report
from nodes.store.store_files import StoreFiles
from nodes.store.write_path import PutResult, PutStatus, StoreWriter

__all__ = ["GetResult", "GetStatus", "MessageStore", "PutResult", "PutStatus", "RecoveryReport"]


class MessageStore:
    def __init__(self, root: Path, config: StoreConfig, *, is_slave: bool = False,
                 offset_check_in_slave: bool = False, clock: Clock = SYSTEM_CLOCK,
                 delay_levels_ms: Sequence[int] = DEFAULT_DELAY_LEVELS_MS, reporter: Reporter | None = None) -> None:
        """`reporter` receives the store's `store-error` and `store-recovered` events (store_events.py)."""
        self.root = Path(root)
        # The delay of each level (level i+1 = index i): delayed puts and their tag codes.
        self.delay_levels_ms = tuple(delay_levels_ms)
        self.config = config
        self.metadata: MetadataStore
        self._recovery: RecoveryReport | None = None  # what the last open found
        self._files = StoreFiles(self.root, config, self.delay_levels_ms, is_slave=is_slave, wall_ms=clock.wall_ms)
        self._files.reporter = reporter
        self._writer = StoreWriter(self._files, clock, self.delay_levels_ms)
        self._reader = StoreReader(self._files, offset_check_in_slave=offset_check_in_slave)

    # --- settings shared by the parts ----------------------------------------------------------

    @property
    def is_slave(self) -> bool:
        return self._files.is_slave

    @is_slave.setter
    def is_slave(self, value: bool) -> None:
        self._files.is_slave = value

    @property
    def offset_check_in_slave(self) -> bool:
        return self._reader.offset_check_in_slave

    @offset_check_in_slave.setter
    def offset_check_in_slave(self, value: bool) -> None:
        self._reader.offset_check_in_slave = value

    @property
    def on_arrival(self) -> Callable[[str, int, int, int], None] | None:
        """(topic, queue_id, max_queue_offset, tag_hash) for every newly indexed record, called
        after the put or append that indexed it, outside the store's lock; on a slave too (the
        broker leaves it None there to keep RocketMQ's behaviour)."""
        return self._writer.on_arrival

    @on_arrival.setter
    def on_arrival(self, listener: Callable[[str, int, int, int], None] | None) -> None:
        self._writer.on_arrival = listener

    @property
    def corrupt_records_skipped(self) -> int:
        """Damaged records a read stepped over since the store opened."""
        return self._reader.corrupt_records_skipped

    @property
    def store_errors(self) -> int:
        """The store errors reported since the store opened: what recovery found (torn tail,
        dropped consume-queue units per queue, damaged ranges) and bad records met by reads and
        dispatch (each once)."""
        report = self._recovery
        found_in_recovery = 0 if report is None else (
            (report.torn_tail_phys_offset is not None) + len(report.cq_truncations) + len(report.damaged_ranges)
            + report.redispatched_whole_log)
        return found_in_recovery + self._files.bad_records.count

    # --- lifecycle -----------------------------------------------------------------------------

    def open(self) -> RecoveryReport:
        """Create or recover the store under `root` and start accepting calls.

        Raises:
            DataDirError: `root` is not a usable directory.
        """
        self._recovery = self._files.open(on_arrival=self._writer.note_arrival)
        self._writer.reset_put_only()
        self.metadata = self._files.metadata
        return self._recovery

    def close(self) -> None:
        """Flush, write the checkpoint, close the files and remove the abort file."""
        self._files.close()

    def flush(self) -> None:
        """Sync the files to disk and write the checkpoint; callable from any thread."""
        self._files.flush()

    # --- full disks and retention ------------------------------------------------------------

    def check_disk(self) -> None:
        """The periodic disk check (every disk_check_interval_ms): measure the filesystems, set or
        clear disk-full (a `disk-guard` event when it flips), retry a dispatch a full disk stopped."""
        self._files.check_disk()

    @property
    def disk_full(self) -> bool:
        return self._files.disk.full

    def disk_refusal(self) -> str:
        """Why puts are refused for the disk now (full, or dispatch stopped by a full disk), as
        the refusal's remark says it; "" when the disk takes writes. Measures nothing."""
        disk = self._files.disk
        return disk.remark() if disk.full or disk.logic_queue_error else ""

    def clean_files(self, now_ms: int, reserved_ms: int) -> list[dict[str, Any]]:
        """One retention pass (retention.py); its `retention-delete` events, also reported."""
        if not self._files.running:
            return []
        events = clean_pass(self._files, now_ms=now_ms, reserved_ms=reserved_ms)
        if events:
            self._files.index.delete_expired(self._files.commitlog.min_phys_offset)
        for event in events:
            safe_report(self._files.reporter, event)
        return events

    def wait_flushed(self, end_phys_offset: int) -> Future[None]:
        """SYNC_FLUSH: a future completed once the commitlog is fsync'd through `end_phys_offset`
        (group commit: sends arriving during one fsync share the next).

        Raises:
            StoreError: the store's flush_disk_type is not SYNC_FLUSH, or it is not open.
        """
        return self._files.wait_flushed(end_phys_offset)

    # --- writing -------------------------------------------------------------------------------

    def put_messages(self, msgs: Sequence[MessageToStore]) -> PutResult:
        """Store one message, or a batch for ONE topic and queue, with consecutive queue offsets.

        All or nothing: the batch is one write into one segment. Returns PUT_OK with one
        AppendResult per message, or the reason nothing was stored.
        """
        return self._writer.put_messages(msgs)

    def put_scanned(self, scanned: ScannedBatch, *, topic: str, queue_id: int, born_timestamp_ms: int,
                    born_host: tuple[str, int], store_host: tuple[str, int], sys_flag: int = 0,
                    reconsume_times: int = 0) -> PutResult:
        """`put_messages` for a batch body `record_batch.scan_batch_body` found plain, written
        straight from its bytes (the same records as its decoded messages would give)."""
        return self._writer.put_scanned(scanned, topic=topic, queue_id=queue_id, born_timestamp_ms=born_timestamp_ms,
                                        born_host=born_host, store_host=store_host, sys_flag=sys_flag,
                                        reconsume_times=reconsume_times)

    def append_commitlog(self, phys_offset: int, data: bytes, checked: Sequence[CheckedRecord] = ()) -> None:
        """Append raw bytes from a master at `phys_offset` (== max_phys_offset), then dispatch.

        `checked`: what the caller's record check read of the records `data` starts with
        (`index_fields`, each at its phys offset); dispatch indexes them from it instead of
        reading and checking the same bytes again.

        Raises:
            StoreError: the offset does not continue this commitlog, or crosses a segment end.
        """
        self._writer.append_commitlog(phys_offset, data, checked)

    @property
    def put_only_from_phys_offset(self) -> int:
        """Where the newest segment's run of records written by this process's own puts starts:
        every byte from here to `max_phys_offset` was encoded in this process from messages it
        checked, never read from disk nor received raw (those land below it: recovery, a
        replica's appends, a restored tail). Sealed segments are never in it, so bytes damaged
        on disk after they were written (a sealed segment's) stay outside. `max_phys_offset`
        when there is no such run."""
        segments = self._files.commitlog.segments
        newest_start = segments[-1].start_offset if segments else 0
        return max(self._writer.put_only_from_phys_offset, newest_start)

    # --- reading -------------------------------------------------------------------------------

    def truncate_to(self, phys_offset: int) -> tuple[int, int]:
        """Discard the commitlog from `phys_offset` on, the consume-queue units that point there,
        and move dispatch back, under the store's lock (the steps recovery takes for a torn tail,
        in the same order); then flush. Returns (commitlog bytes dropped, units dropped).

        For a running replica whose master showed both logs agree up to `phys_offset`. What the
        fsyncs made durable only ever grows, but the bytes cut are gone: the recorded flush
        positions come back to the cut, so a later power loss drops what is rewritten above it
        until the next fsync."""
        files = self._files
        with files.lock:
            files.check_open()
            dropped_bytes = files.commitlog.truncate_after(phys_offset)
            units = sum(queue.truncate_after_phys(phys_offset) for queue in list(files.consume_queues.values()))
            dispatcher = files.dispatcher
            dispatcher.reput_from_phys_offset = min(dispatcher.reput_from_phys_offset, phys_offset)
            dispatcher.damaged_ranges[:] = [(a, b) for a, b in dispatcher.damaged_ranges if b <= phys_offset]
            files.index.truncate_after(phys_offset)
            queue_ends = {f"{q.topic}/{q.queue_id}": q.max_queue_offset for q in files.consume_queues.values()}
            writer = self._writer
            writer.put_only_from_phys_offset = min(writer.put_only_from_phys_offset, phys_offset)
        with files._flushed_lock:
            files._flushed_commitlog = min(files._flushed_commitlog, phys_offset)
            for key, queue_offset in list(files._flushed_queues.items()):
                files._flushed_queues[key] = min(queue_offset, queue_ends.get(key, 0))
        files.flush()
        return dropped_bytes, units

    def report_bad_record(self, phys_offset: int, size_bytes: int, detail: str, *, queue_id: int | None = None,
                          queue_offset: int | None = None) -> None:
        """A `bad-record` store error found outside the store (replication reading or receiving
        records): written once per phys offset per process, whoever tripped over it first."""
        self._files.bad_records.report(phys_offset, size_bytes, detail, queue_id=queue_id, queue_offset=queue_offset)

    def get_messages(self, topic: str, queue_id: int, queue_offset: int, max_count: int,
                     tag_hashes: frozenset[int] | None) -> GetResult:
        """Up to `max_count` records from `queue_offset` whose tag hash is in `tag_hashes`
        (None: every record), with RocketMQ's getMessage statuses (read_path.py)."""
        return self._reader.get_messages(topic, queue_id, queue_offset, max_count, tag_hashes)

    def read_commitlog(self, phys_offset: int, max_bytes: int) -> bytes:
        """Raw commitlog bytes from `phys_offset` (never across a segment end); b"" if none yet."""
        return self._reader.read_commitlog(phys_offset, max_bytes)

    def min_queue_offset(self, topic: str, queue_id: int) -> int:
        return self._reader.min_queue_offset(topic, queue_id)

    def max_queue_offset(self, topic: str, queue_id: int) -> int:
        return self._reader.max_queue_offset(topic, queue_id)

    def search_queue_offset(self, topic: str, queue_id: int, timestamp_ms: int, *, at_or_after: bool = False) -> int:
        """The queue offset whose store time is nearest `timestamp_ms`, or with `at_or_after` the
        first stored at or after it (ConsumeQueue.search_offset)."""
        return self._reader.search_queue_offset(topic, queue_id, timestamp_ms, at_or_after=at_or_after)

    def lookup_message(self, phys_offset: int, size: int | None = None) -> Record | None:
        """The record at `phys_offset`, or None if nothing valid is there."""
        return self._reader.lookup_message(phys_offset, size)

    def queue_unit(self, topic: str, queue_id: int, queue_offset: int) -> tuple[int, int, int] | None:
        """(phys_offset, size, tag code) of one consume-queue unit, or None if it is not there;
        a hole unit is returned as is (`consume_queue.is_hole` tells it)."""
        return self._reader.queue_unit(topic, queue_id, queue_offset)

    def queue_first_phys_offset(self, topic: str, queue_id: int) -> int | None:
        return self._reader.queue_first_phys_offset(topic, queue_id)

    @property
    def index(self) -> IndexService:
        """The message index: lookups by key and client message id (index_service.py)."""
        return self._files.index

    def lookup_by_key(self, topic: str, key: str, kind: str, max_count: int, begin_ms: int = 0,
                      end_ms: int = c.NO_END_MS) -> list[Record]:
        """Records of `topic` indexed under `key` (IndexService.lookup: each one read and checked)."""
        return self._files.index.lookup(topic, key, kind, max_count, begin_ms, end_ms)

    def is_in_memory(self, phys_offset: int) -> bool:
        return self._reader.is_in_memory(phys_offset)

    @property
    def max_phys_offset(self) -> int:
        return self._files.commitlog.max_phys_offset

    @property
    def min_phys_offset(self) -> int:
        return self._files.commitlog.min_phys_offset

    def topics(self) -> list[str]:
        return self._reader.topics()

    def queue_ids(self, topic: str) -> list[int]:
        return self._reader.queue_ids(topic)

    def stats(self) -> dict[str, Any]:
        return {
            "max_phys_offset": self.max_phys_offset,
            "min_phys_offset": self.min_phys_offset,
            "reput_from_phys_offset": self._files.dispatcher.reput_from_phys_offset,
            "topics": len(self.topics()),
            "queues": len(self._files.consume_queues),
            "corrupt_records_skipped": self.corrupt_records_skipped,
            "store_errors": self.store_errors,
            "flush_disk_type": self.config.flush_disk_type,
            "damaged_ranges": [list(r) for r in self._files.dispatcher.damaged_ranges],
            "is_slave": self.is_slave,
            "disk": self._files.disk.describe(),
            "index": {**self._files.index.describe(), "files_dropped_at_open": self._files.index_load.files_dropped,
                      "entries_dropped_at_open": self._files.index_load.entries_dropped},
        }
