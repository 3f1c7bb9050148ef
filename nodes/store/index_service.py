"""The message index (RocketMQ's IndexService): every record's keys -> its phys offset, in index
files under `<store>/index/`, so a message is found by key or client message id without a scan.

Owns: which keys a record has (each of its KEYS, space-separated, and its UNIQ_KEY, each as
"topic#key"), indexing the records dispatch places, the walk that catches up with dispatch
(after a restart, after a full disk), rolling to a new file when one is full, loading the files
after a restart (dropping what it cannot prove), lookups that check every record they return,
and deleting files whose records retention removed. Index files are named by the wall-clock
time they were created at (yyyyMMddHHmmssSSS, as RocketMQ's).

The index subscribes to dispatch (`follow`): dispatch hands it each record it places, with the
topic, store timestamp and properties it already read, on the same thread and under the same
lock, on a master and on a slave alike (a slave dispatches its replicated commitlog, so it
builds its own index); one put's keys go into a file with one header write. `position` is
where the index has got: everything before it is indexed. Only when it lags dispatch (at open,
after a full disk, or when dispatch stepped over bytes) does it walk the commitlog itself, with
dispatch's own record check (`index_fields`).

What the index provably holds after a restart: the files up to the first whose header is not
one this code writes (that one and every later file are deleted), and in the newest file the
entries up to the last one whose record is in the recovered commitlog and has that key. The
entries after it (a torn write, or records recovery cut) are dropped, the slots that pointed
at them are led back along their chains, and the walk starts again at that entry's record, so
everything after it is indexed again from the commitlog. A stale entry that survives inside a
file (a power loss that kept a later page and lost an earlier one) is harmless: every lookup
reads the record an entry points at and returns it only when it is valid and really has that
topic and key.

A file that cannot get blocks on a full disk stops the index where it is (`stalled`): it then
ignores what dispatch hands it, the next disk check walks from where it stopped, and nothing
else is refused for it.
"""

from __future__ import annotations

import datetime as dt
import logging
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from nodes.common import constants as c
from nodes.common.config import StoreConfig
from nodes.common.errors import DataDirError, DiskFullError
from nodes.store.commitlog import CommitLog
from nodes.store.dispatch import DispatchedRecord, Dispatcher, Step, scan_step
from nodes.store.index_file import IndexFile
from nodes.store.record import Record, decode_properties, index_fields

log = logging.getLogger(__name__)

KEY_KIND = "key"  # a lookup by one of the KEYS
UNIQ_KIND = "uniq"  # a lookup by the client's message id (UNIQ_KEY)


def key_hash(topic: str, key: str) -> int:
    """The non-negative hash an entry stores for `topic#key` (CRC-32, 31 bits: C speed on the send
    path, where RocketMQ's Java String.hashCode would cost a Python loop per character)."""
    return zlib.crc32(f"{topic}{c.INDEX_KEY_SEPARATOR}{key}".encode()) & 0x7FFFFFFF


def record_keys(properties: Mapping[str, str]) -> list[str]:
    """The keys a record is indexed under: each of its KEYS, then its UNIQ_KEY."""
    keys = [k for k in properties.get(c.PROPERTY_KEYS, "").split(c.KEY_SEPARATOR) if k]
    uniq = properties.get(c.PROPERTY_UNIQ_KEY)
    if uniq:
        keys.append(uniq)
    return keys


def matches(record: Record, topic: str, key: str, kind: str) -> bool:
    """Whether `record` really is one a lookup of (topic, key, kind) asked for."""
    if record.topic != topic:
        return False
    if kind == UNIQ_KIND:
        return record.properties.get(c.PROPERTY_UNIQ_KEY) == key
    return key in (record.properties.get(c.PROPERTY_KEYS) or "").split(c.KEY_SEPARATOR)


@dataclass
class IndexLoadReport:
    files: int = 0
    files_dropped: int = 0  # torn or unreadable files deleted at load
    entries_dropped: int = 0  # tail entries of the newest file no record proves
    resume_phys_offset: int = 0  # where the walk starts indexing again


class IndexService:
    def __init__(self, directory: Path, commitlog: CommitLog, config: StoreConfig,
                 wall_ms: Callable[[], int]) -> None:
        self.directory = directory
        self.enabled = config.message_index_enable
        self._commitlog = commitlog
        self._hash_slots = config.index_hash_slots
        self._entries = config.index_entries_per_file
        self._wall_ms = wall_ms
        self.files: list[IndexFile] = []
        self.position = 0  # every record before this phys offset is indexed
        self._dispatcher: Dispatcher | None = None  # the dispatch it follows (`follow`)
        # (phys offset, key hashes) of a record whose keys are partly indexed already: the walk
        # resumes at it and adds only the others
        self._resume_skip: tuple[int, set[int]] | None = None
        self.stalled = False  # a full disk stopped the walk; the next disk check retries
        self.on_disk_full: Callable[[DiskFullError], None] | None = None
        self.indexed_keys = 0
        self.last_update_timestamp_ms = 0
        self.last_update_phys_offset = 0

    # --- open and close -------------------------------------------------------------------------

    def load(self, end_phys_offset: int) -> IndexLoadReport:
        """Open the index files after recovery cut the commitlog at `end_phys_offset`; keep what
        they provably hold and set the walk to start after it (module docstring)."""
        report = IndexLoadReport()
        if not self.enabled:
            self.position = end_phys_offset
            return report
        self.directory.mkdir(parents=True, exist_ok=True)
        paths = sorted(p for p in self.directory.iterdir() if p.is_file() and p.name.isdigit())
        for i, path in enumerate(paths):
            problem = ""
            try:
                index_file = IndexFile(path, self._hash_slots, self._entries)
                problem = index_file.header_problem()
            except DataDirError as exc:
                index_file, problem = None, str(exc)
            if problem:
                log.warning("index file %s cannot be trusted (%s): deleting it and %d later files; the index is "
                            "rebuilt from the commitlog", path.name, problem, len(paths) - i - 1)
                if index_file is not None:
                    index_file.destroy()
                else:
                    path.unlink(missing_ok=True)
                for later in paths[i + 1:]:
                    later.unlink(missing_ok=True)
                report.files_dropped += len(paths) - i
                break
            self.files.append(index_file)
        while self.files:
            report.entries_dropped += self._drop_unproven_tail(self.files[-1], end_phys_offset)
            if self.files[-1].index_count > 1 or len(self.files) == 1:
                break
            # nothing in the newest file is proven: the one before it may hold entries past the end too
            self.files.pop().destroy()
            report.files_dropped += 1
        self.position = self._resume_point()
        report.files = len(self.files)
        report.resume_phys_offset = self.position
        return report

    def _drop_unproven_tail(self, index_file: IndexFile, end_phys_offset: int) -> int:
        """Cut the newest file's entries after the last one its record proves; returns how many."""
        count = index_file.index_count
        keep = count
        while keep > 1:
            key_hash_value, phys_offset, _diff, _prev = index_file.entry(keep - 1)
            if phys_offset < self._commitlog.min_phys_offset:
                break  # retention took its record: nothing to check it against, and nothing to rebuild from
            if phys_offset < end_phys_offset and key_hash_value in self._hashes_at(phys_offset):
                break
            keep -= 1
        if keep != count:
            log.warning("index file %s: dropping %d entries at its tail that no record in the commitlog proves",
                        index_file.path.name, count - keep)
            index_file.truncate_to(keep)
        else:
            index_file.repair()  # a slot written for an entry the kill left uncounted
        return count - keep

    def _hashes_at(self, phys_offset: int) -> set[int]:
        """The key hashes of the valid record at `phys_offset`; empty when there is none."""
        record = self._commitlog.record_at(phys_offset, check_crc=True)
        if record is None:
            return set()
        return {key_hash(record.topic, key) for key in record_keys(record.properties)}

    def _resume_point(self) -> int:
        """Where the walk starts: at the record of the newest entry (its other keys may be missing),
        else the commitlog's first byte."""
        for index_file in reversed(self.files):
            count = index_file.index_count
            if count > 1:
                _hash, phys_offset, _diff, _prev = index_file.entry(count - 1)
                if phys_offset >= self._commitlog.min_phys_offset:
                    self._resume_skip = (phys_offset, index_file.tail_hashes_at(phys_offset))
                    return phys_offset
                break
        return self._commitlog.min_phys_offset

    def close(self) -> None:
        for index_file in self.files:
            index_file.flush()
            index_file.close()
        self.files = []

    def flush(self) -> None:
        """Sync every file written since the last flush (any thread: only syncs)."""
        for index_file in list(self.files):
            try:
                index_file.flush()
            except (OSError, ValueError) as exc:  # closed by retention meanwhile, or a disk error
                log.warning("index file %s not synced: %s", index_file.path.name, exc)

    # --- following dispatch ----------------------------------------------------------------------

    def follow(self, dispatcher: Dispatcher) -> None:
        """Catch up with `dispatcher` (after `load`) and from then on index every record it
        places, from its own pass (its `on_dispatched` hook). A disabled index does not listen."""
        self._dispatcher = dispatcher
        if not self.enabled:
            return
        self.catch_up(dispatcher.reput_from_phys_offset)
        dispatcher.on_dispatched = self.on_dispatched

    def on_dispatched(self, records: list[DispatchedRecord]) -> None:
        """Dispatch's hook: add the keys of the records it just placed (in commitlog order).
        Never raises: a full disk stalls the index, and the put that dispatched goes on."""
        if self.stalled or not records:
            return
        first_phys_offset = records[0][0]
        if first_phys_offset > self.position:
            # bytes dispatch stepped over (a blank marker, damage) or walked while the index
            # could not follow: the walk judges them, indexing any record among them
            self.catch_up(first_phys_offset)
            if self.stalled:
                return
        self._index_records(records)

    def catch_up(self, end_phys_offset: int) -> int:
        """Walk the commitlog from `position` up to `end_phys_offset` (no further than dispatch
        has got) and index every record on the way, checked as dispatch checks them; returns how
        many keys were added. Never raises for the index's own files: a full disk stalls the
        index (`retry` resumes it)."""
        if not self.enabled or self.stalled:
            return 0
        keys_before = self.indexed_keys
        commitlog = self._commitlog
        if self.position < commitlog.min_phys_offset:
            self.position = commitlog.min_phys_offset
        while self.position < end_phys_offset and not self.stalled:
            position = self.position
            mapped = commitlog.segment_for(position)
            if mapped is None:
                break
            base = mapped.start_offset
            end = min(end_phys_offset, mapped.end_offset) - base
            pos = position - base
            run: list[DispatchedRecord] = []
            view = memoryview(mapped.buffer)
            try:
                while pos < end and len(run) < c.INDEX_CATCH_UP_RUN_RECORDS:
                    fields = index_fields(view, pos, end, base + pos)
                    if fields is None:
                        break
                    size, topic, queue_id, queue_offset, store_timestamp_ms, properties_text = fields
                    properties = decode_properties(properties_text)
                    run.append((base + pos, size, topic, queue_id, queue_offset, store_timestamp_ms,
                                properties.get(c.PROPERTY_KEYS), properties.get(c.PROPERTY_UNIQ_KEY)))
                    pos += size
            finally:
                view.release()  # a mapping with exported views cannot be closed
            if run:
                self._index_records(run)
                continue
            step, value = scan_step(commitlog, position, end_phys_offset)
            if step is Step.RECORD:  # a record index_fields could not read (not UTF-8): no keys
                self.position = position + value
            elif step in (Step.ROLL, Step.DAMAGED):
                self.position = value
            else:
                break
        return self.indexed_keys - keys_before

    def retry(self) -> None:
        """The disk check: resume an index a full disk stopped, walking up to where dispatch is."""
        if self.stalled and self._dispatcher is not None:
            self.stalled = False
            self.catch_up(self._dispatcher.reput_from_phys_offset)

    def _index_records(self, records: Sequence[DispatchedRecord]) -> None:
        """Add the keys of `records` (commitlog order; those before `position` are indexed
        already and skipped) and move `position` past them. The entries go in with one header
        write per file; a record whose keys are partly indexed (`_resume_skip`) gets the others."""
        position = self.position
        skip_phys, skip = self._resume_skip if self._resume_skip is not None else (-1, set())
        entries: list[tuple[int, int, int]] = []  # (key hash, phys offset, store timestamp)
        append = entries.append
        separator = c.KEY_SEPARATOR
        crc32 = zlib.crc32
        topic_crcs: dict[str, int] = {}  # CRC-32 of "topic#": `key_hash` continues it with the key
        for phys_offset, size, topic, _queue_id, _queue_offset, store_timestamp_ms, keys, uniq in records:
            if phys_offset < position:
                continue
            position = phys_offset + size
            if not keys and not uniq:
                continue
            topic_crc = topic_crcs.get(topic)
            if topic_crc is None:
                topic_crc = topic_crcs[topic] = crc32(f"{topic}{c.INDEX_KEY_SEPARATOR}".encode())
            # `record_keys` and `key_hash` inlined: this runs once per message on the send path
            if keys and separator not in keys and keys != uniq:  # one key and the client id, or either
                hashes = [crc32(keys.encode(), topic_crc) & 0x7FFFFFFF]
                if uniq:
                    hashed = crc32(uniq.encode(), topic_crc) & 0x7FFFFFFF
                    if hashed != hashes[0]:
                        hashes.append(hashed)
            else:
                hashes = []
                for key in (*keys.split(separator), uniq) if keys else (uniq,):
                    if key:
                        hashed = crc32(key.encode(), topic_crc) & 0x7FFFFFFF
                        if hashed not in hashes:
                            hashes.append(hashed)
            if phys_offset == skip_phys:
                hashes = [hashed for hashed in hashes if hashed not in skip]
            for hashed in hashes:
                append((hashed, phys_offset, store_timestamp_ms))
        if skip_phys >= 0 and position > skip_phys:
            self._resume_skip = None
        if entries and not self._put_entries(entries, skip_phys, skip):
            return
        self.position = position

    def _put_entries(self, entries: list[tuple[int, int, int]], skip_phys: int, skip: set[int]) -> bool:
        """Write `entries` into the newest file, rolling to new ones as they fill; False when a
        file error stalled the index (`position` then at the record whose keys did not all get
        in, `_resume_skip` naming those that did)."""
        done = 0
        index_file: IndexFile | None = None
        count_before = 0
        try:
            while done < len(entries):
                index_file = None
                index_file = self._writable_file()
                count_before = index_file.index_count
                done += index_file.put_entries(entries, done)
        except (DiskFullError, OSError, DataDirError) as exc:
            if index_file is not None:
                done += index_file.index_count - count_before
            stopped_phys = entries[min(done, len(entries) - 1)][1]  # all in: its record's keys are skipped
            written = {hashed for hashed, phys_offset, _ts in entries[:done] if phys_offset == stopped_phys}
            self._resume_skip = (stopped_phys, written | (skip if skip_phys == stopped_phys else set()))
            self.position = stopped_phys
            self._note_written(entries[:done])
            self._stall(exc)
            return False
        self._note_written(entries)
        return True

    def _note_written(self, entries: list[tuple[int, int, int]]) -> None:
        if entries:
            self.indexed_keys += len(entries)
            _hash, self.last_update_phys_offset, self.last_update_timestamp_ms = entries[-1]

    def _stall(self, exc: Exception) -> None:
        self.stalled = True
        if isinstance(exc, DiskFullError):
            log.error("the message index stops at phys offset %d: %s; it resumes after a disk check finds room "
                      "(lookups miss the messages after it meanwhile)", self.position, exc)
            if self.on_disk_full is not None:
                self.on_disk_full(exc)
        else:
            log.error("the message index stops at phys offset %d: %s", self.position, exc)

    def _writable_file(self) -> IndexFile:
        if self.files and not self.files[-1].is_full:
            return self.files[-1]
        return self._new_file()

    def _new_file(self) -> IndexFile:
        """A new file named by the wall clock (a later name when that one exists: clocks step back)."""
        now_ms = self._wall_ms()
        newest = self.files[-1].path.name if self.files else ""
        while True:
            name = _time_name(now_ms)
            if name > newest and not (self.directory / name).exists():
                break
            now_ms += 1
            if name <= newest:
                now_ms = max(now_ms, _name_ms(newest) + 1)
        index_file = IndexFile(self.directory / name, self._hash_slots, self._entries)
        self.files.append(index_file)
        log.info("index file %s created (%d files)", name, len(self.files))
        return index_file

    # --- after replication cut the log, and retention ---------------------------------------------

    def truncate_after(self, phys_offset: int) -> None:
        """Drop every entry for a record at or after `phys_offset` (a replica cut its commitlog there)."""
        while self.files:
            newest = self.files[-1]
            count = newest.index_count
            keep = count
            while keep > 1 and newest.entry(keep - 1)[1] >= phys_offset:
                keep -= 1
            if keep != count:
                newest.truncate_to(keep)
            if keep > 1 or len(self.files) == 1:
                break
            self.files.pop().destroy()  # wholly after the cut
        self.position = min(self.position, phys_offset)
        self._resume_skip = None
        if self.files and self.files[-1].index_count > 1:
            last_phys = self.files[-1].entry(self.files[-1].index_count - 1)[1]
            if last_phys >= self.position:
                self._resume_skip = (last_phys, self.files[-1].tail_hashes_at(last_phys))

    def delete_expired(self, min_phys_offset: int) -> int:
        """Delete the files (never the newest) whose every record lies before the commitlog's first
        byte; returns how many."""
        deleted = 0
        while len(self.files) > 1 and self.files[0].end_phys_offset < min_phys_offset:
            self.files.pop(0).destroy()
            deleted += 1
        return deleted

    # --- lookups ---------------------------------------------------------------------------------

    def lookup(self, topic: str, key: str, kind: str, max_count: int, begin_ms: int = 0,
               end_ms: int = c.NO_END_MS) -> list[Record]:
        """Up to `max_count` records of `topic` with `key` (one of its KEYS, or its UNIQ_KEY for
        UNIQ_KIND) stored in [begin_ms, end_ms], newest first. Every record is read and checked:
        an entry whose record is gone, damaged or another message's is passed over."""
        if not self.enabled or max_count <= 0:
            return []
        hashed = key_hash(topic, key)
        found: list[Record] = []
        seen: set[int] = set()
        for index_file in reversed(self.files):
            if index_file.index_count <= 1:
                continue
            if index_file.end_timestamp_ms + 1000 < begin_ms or index_file.begin_timestamp_ms > end_ms:
                continue
            for phys_offset in index_file.lookup(hashed, begin_ms, end_ms, c.INDEX_CHAIN_STEPS_MAX):
                if phys_offset in seen:
                    continue
                seen.add(phys_offset)
                record = self.verified_record(phys_offset)
                if (record is not None and matches(record, topic, key, kind)
                        and begin_ms <= record.store_timestamp_ms <= end_ms):
                    found.append(record)
                    if len(found) >= max_count:
                        return found
        return found

    def verified_record(self, phys_offset: int) -> Record | None:
        """The record at `phys_offset` when one passes every check there (its CRC included)."""
        return self._commitlog.record_at(phys_offset, check_crc=True)

    def describe(self) -> dict[str, object]:
        return {"files": len(self.files), "position": self.position, "stalled": self.stalled,
                "indexed_keys": self.indexed_keys,
                "entries": sum(max(0, f.index_count - 1) for f in self.files)}


def _time_name(ms: int) -> str:
    stamp = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return stamp.strftime("%Y%m%d%H%M%S") + f"{ms % 1000:03d}"


def _name_ms(name: str) -> int:
    try:
        stamp = dt.datetime.strptime(name[:14], "%Y%m%d%H%M%S").replace(tzinfo=dt.UTC)
    except ValueError:
        return 0
    return int(stamp.timestamp() * 1000) + int(name[14:17] or 0)
