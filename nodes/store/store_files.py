"""The files of one store directory and their life: open (with recovery), flush, close.

Owns: the directory layout, the abort file, loading the consume queues and creating them on
demand, the metadata environment, the lock the write path appends under, and whether the store
is running. The write path (write_path.py) and the read path (read_path.py) share one
`StoreFiles`; the recovery policy itself is recovery.py's.

Layout under `root`:
    commitlog/<20-digit phys offset>                 the messages (commitlog.py)
    consumequeue/<topic>/<queue_id>/<20-digit byte>  the per-queue indexes (consume_queue.py)
    index/<yyyyMMddHHmmssSSS>                        the message index by key (index_service.py)
    checkpoint                                       flush timestamps (checkpoint.py)
    flushed.json                                     the positions the last fsync covered
    abort                                            exists while open: its presence at open
                                                     means the last stop was not clean
    metadata/                                        LMDB (metadata.py)

Threading: everything but `flush` runs on one thread (the broker's event loop); `flush` may
run on a worker thread at the same time. `lock` serialises appends and dispatch against the
flusher's snapshot; the disk syncs run outside it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path

from nodes.common import constants as c
from nodes.common.config import StoreConfig
from nodes.common.errors import DataDirError, DiskFullError, StoreError
from nodes.store.checkpoint import Checkpoint, read_checkpoint, write_checkpoint
from nodes.store.commitlog import CommitLog
from nodes.store.consume_queue import ConsumeQueue
from nodes.store.delay import schedule_tag_code_of
from nodes.store.disk_guard import DiskGuard
from nodes.store.dispatch import ArrivalListener, Dispatcher
from nodes.store.group_commit import GroupCommitService
from nodes.store.index_service import IndexLoadReport, IndexService
from nodes.store.metadata import MetadataStore
from nodes.store.recovery import RecoveryReport, recover
from nodes.store.store_events import BadRecordReporter, Reporter, recovery_events, safe_report

log = logging.getLogger(__name__)


def is_path_safe(topic: str) -> bool:
    """A topic names a directory: it must be one plain path component."""
    return bool(topic) and topic not in (".", "..") and "/" not in topic and "\0" not in topic


class StoreFiles:
    def __init__(self, root: Path, config: StoreConfig, delay_levels_ms: Sequence[int], *, is_slave: bool,
                 wall_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.root = root
        self.config = config
        # A slave's commitlog is written only by replication (append_commitlog), never by put.
        self.is_slave = is_slave
        self.commitlog = CommitLog(root / "commitlog", config.commitlog_segment_bytes,
                                   preallocate=not config.sparse_segments)
        self.disk = DiskGuard(root, config)
        self.consume_queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.dispatcher = Dispatcher(self.commitlog, self.consume_queue_for,
                                     tag_code=lambda topic, properties, store_timestamp_ms: schedule_tag_code_of(
                                         topic, properties, store_timestamp_ms, delay_levels_ms))
        # the message index follows dispatch through its `on_dispatched` hook (subscribed at open)
        self.index = IndexService(root / c.INDEX_DIR, self.commitlog, config, wall_ms)
        self.index_load = IndexLoadReport()
        self.metadata: MetadataStore
        self.lock = threading.Lock()
        self.running = False
        self._consume_queue_root = root / "consumequeue"
        self.flush_lock = threading.Lock()  # held through a flush's syncs (a retention pass skips while it is)
        self._opened = False
        # Bad records found by reads and dispatch, each reported once (store_events.py).
        self.bad_records = BadRecordReporter(config.commitlog_segment_bytes)
        self.reporter: Reporter | None = None
        # What the fsyncs so far made durable, as written to flushed.json (guarded by _flushed_lock).
        self._flushed_lock = threading.Lock()
        self._flushed_commitlog = 0
        self._flushed_queues: dict[str, int] = {}
        self._group_commit: GroupCommitService | None = None

    def open(self, on_arrival: ArrivalListener) -> RecoveryReport:
        """Create or recover the store under `root`; from then on every newly indexed record is
        reported to `on_arrival` (recovery's own re-dispatch is not).

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
            self.commitlog.load()
            self._load_consume_queues()
            try:
                report = recover(self.commitlog, self.consume_queues, self.dispatcher,
                                 clean_shutdown=clean_shutdown, checkpoint=checkpoint,
                                 trust_checkpoint=self.config.recovery_trust_checkpoint,
                                 keep_torn_tail=self.config.recovery_keep_torn_tail)
            except DiskFullError as exc:
                raise DataDirError(f"recovery of the store at {self.root} needs a new file and the disk is full "
                                   f"({exc}): free space on that filesystem and start again") from exc
            self.index_load = self.index.load(self.commitlog.max_phys_offset)
            self.index.on_disk_full = self.note_disk_full
            self.index.follow(self.dispatcher)  # after recovery's dispatch, which it walks itself
            self.metadata = MetadataStore(self.root / "metadata")
            self._carry_flushed_over()
        except OSError as exc:
            raise DataDirError(f"cannot open the store at {self.root}: {exc}; check that it is a writable "
                               "directory, or move it aside") from exc
        for event in recovery_events(report, self.config.commitlog_segment_bytes):
            safe_report(self.reporter, event)
        self.bad_records.reporter = self.reporter
        self.dispatcher.on_damaged = self._report_damaged
        self.dispatcher.on_arrival = on_arrival
        if self.config.sync_flush:
            self._group_commit = GroupCommitService(self.flush_commitlog, f"group-commit {self.root.name}")
            self._group_commit.start(self._flushed_commitlog)
        self.running = True
        return report

    def _report_damaged(self, start_phys_offset: int, end_phys_offset: int) -> None:
        """Dispatch stepped over bytes that fail their checks (after recovery: a bad record)."""
        self.bad_records.report(start_phys_offset, end_phys_offset - start_phys_offset,
                                "dispatch found bytes that fail their checks and stepped over them to the next "
                                "valid record")

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
                                     self.config.cq_units_per_file, preallocate=not self.config.sparse_segments)
                queue.load()
                self.consume_queues[(topic_dir.name, int(queue_dir.name))] = queue

    def consume_queue_for(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The queue dispatch indexes a record into, created on first use; None for a name that
        cannot be a directory."""
        key = (topic, queue_id)
        queue = self.consume_queues.get(key)
        if queue is None:
            if not is_path_safe(topic) or queue_id < 0:
                log.error("not indexing a record of topic %r queue %d: not a valid queue name", topic, queue_id)
                return None
            queue = ConsumeQueue(self._consume_queue_root, topic, queue_id, self.config.cq_units_per_file,
                                 preallocate=not self.config.sparse_segments)
            self.consume_queues[key] = queue
        return queue

    # --- full disks ------------------------------------------------------------------------------

    def note_disk_full(self, exc: DiskFullError) -> None:
        """A file could not be allocated: the guard marks the disk full at once."""
        event = self.disk.note_enospc(str(exc))
        if event is not None:
            safe_report(self.reporter, event)

    def dispatch_failed(self, exc: DiskFullError) -> None:
        """A consume-queue file could not be allocated: the records stay in the commitlog, not yet
        indexed; puts wait (logic-queue error) until `retry_dispatch` indexed them."""
        if not self.disk.logic_queue_error:
            log.error("dispatch stopped at phys offset %d: %s; indexing resumes once there is room",
                      self.dispatcher.reput_from_phys_offset, exc)
        self.disk.logic_queue_error = True
        self.note_disk_full(exc)

    def retry_dispatch(self) -> bool:
        """Index what a failed consume-queue write left behind (call under `lock`); whether
        dispatch is caught up now."""
        if not self.disk.logic_queue_error:
            return True
        try:
            self.dispatcher.dispatch_until(self.commitlog.max_phys_offset)
        except DiskFullError:
            return False
        self.disk.logic_queue_error = False
        log.warning("dispatch caught up at phys offset %d after a full disk", self.dispatcher.reput_from_phys_offset)
        return True

    def check_disk(self) -> None:
        """The periodic disk check: measure, flip the disk-full flag, retry a stopped dispatch."""
        event = self.disk.check()
        if event is not None:
            safe_report(self.reporter, event)
        if self.disk.logic_queue_error and self.running:
            with self.lock:
                self.retry_dispatch()
        if self.index.stalled and self.running and not self.disk.full:
            with self.lock:
                self.index.retry()

    def check_open(self) -> None:
        if not self.running:
            raise StoreError(f"the store at {self.root} is not open")

    def close(self) -> None:
        """Flush everything, write the checkpoint, close the files and remove the abort file."""
        with self.flush_lock:
            if not self.running:
                return
            with self.lock:
                self.running = False
            if self._group_commit is not None:
                self._group_commit.stop()  # answers the sends still waiting with a last fsync
                self._group_commit = None
            self._flush_files()
            self.commitlog.close()
            for queue in self.consume_queues.values():
                queue.close()
            self.index.close()
            self.metadata.close()
            (self.root / "abort").unlink(missing_ok=True)

    def flush(self) -> None:
        """Sync the commitlog and consume queues to disk, then write the checkpoint (any thread)."""
        with self.flush_lock:
            if self.running:
                self._flush_files()

    def _flush_files(self) -> None:
        with self.lock:
            store_timestamp_ms = self.dispatcher.last_store_timestamp_ms
            queues = list(self.consume_queues.values())
            commitlog_end = self.commitlog.max_phys_offset
            queue_ends = {f"{queue.topic}/{queue.queue_id}": queue.max_queue_offset for queue in queues}
        # Everything dispatched by now is appended, so after these syncs the checkpoint's
        # timestamp is a lower bound for both the commitlog and the consume queues.
        self.commitlog.flush()
        for queue in queues:
            queue.flush()
        self.index.flush()
        if store_timestamp_ms:
            try:
                write_checkpoint(self.root / "checkpoint", Checkpoint(store_timestamp_ms, store_timestamp_ms, 0))
            except OSError as exc:  # a full disk: the old checkpoint stays, older but still a lower bound
                log.error("could not write the checkpoint (%s); keeping the previous one, trying again at the next "
                          "flush", exc)
        self._note_flushed(commitlog_end, queue_ends)

    def flush_commitlog(self) -> int:
        """Fsync the commitlog alone (SYNC_FLUSH's group commit); returns the phys offset it covers."""
        with self.lock:
            commitlog_end = self.commitlog.max_phys_offset
        self.commitlog.flush()
        self._note_flushed(commitlog_end, {})
        return commitlog_end

    def wait_flushed(self, end_phys_offset: int) -> Future[None]:
        """SYNC_FLUSH: a future completed once the commitlog is fsync'd through `end_phys_offset`.

        Raises:
            StoreError: the store does not flush synchronously, or is not open.
        """
        group_commit = self._group_commit
        if group_commit is None:
            raise StoreError(f"the store at {self.root} is not open with flush_disk_type SYNC_FLUSH")
        return group_commit.request(end_phys_offset)

    def _carry_flushed_over(self) -> None:
        """Start flushed.json from what the last run's fsyncs covered and recovery kept: no
        position past the recovered ends (recovery cut what lay beyond them), none past what an
        fsync of the last run covered (recovered bytes after it are in the page cache only).
        No fsync here, so a restart waits for no disk write."""
        path = self.root / c.FLUSHED_POSITIONS_FILE
        try:
            before = json.loads(path.read_text())
        except (OSError, ValueError):
            before = {}
        previous_queues = before.get("consume_queues", {}) if isinstance(before, dict) else {}
        commitlog = min(int(before.get("commitlog", 0)) if isinstance(before, dict) else 0,
                        self.commitlog.max_phys_offset)
        queues = {}
        for queue in self.consume_queues.values():
            key = f"{queue.topic}/{queue.queue_id}"
            queues[key] = min(int(previous_queues.get(key, 0)), queue.max_queue_offset)
        with self._flushed_lock:
            self._flushed_commitlog, self._flushed_queues = 0, {}
        self._note_flushed(commitlog, queues)

    def _note_flushed(self, commitlog_end: int, queue_ends: dict[str, int]) -> None:
        """Record positions an fsync that returned made durable in flushed.json (temp file and
        rename, no fsync of its own: the page cache survives a process kill, and a power-loss
        simulation reads it before it rewrites anything)."""
        with self._flushed_lock:
            self._flushed_commitlog = max(self._flushed_commitlog, commitlog_end)
            flushed_queues = self._flushed_queues
            for key, queue_offset in queue_ends.items():
                if queue_offset > flushed_queues.get(key, -1):
                    flushed_queues[key] = queue_offset
            path = self.root / c.FLUSHED_POSITIONS_FILE
            tmp = path.with_name(path.name + ".tmp")
            try:
                tmp.write_text(json.dumps({"commitlog": self._flushed_commitlog, "consume_queues": flushed_queues},
                                          sort_keys=True, separators=(",", ":")))
                os.replace(tmp, path)
            except OSError as exc:  # a full disk: the old file understates what is durable, never overstates
                tmp.unlink(missing_ok=True)
                log.error("could not write %s (%s); keeping the previous one, trying again at the next flush",
                          path, exc)
