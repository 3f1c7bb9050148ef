"""Memory-mapped segment files: `MappedFile` (one fixed-size file) and `MappedFileQueue`
(a directory of them named by their 20-digit start offset).

Owns: creating files at full size, allocating their blocks ahead of every write through the
map, write and flush positions, syncing to disk, zeroing a torn tail, rolling to a new segment,
deleting segments.

No write dies of SIGBUS: a file is created sparse (a 1 GiB segment costs no disk until it is
written) but no byte is written through the map before `posix_fallocate` gave its blocks, in
steps of SEGMENT_ALLOCATE_STEP_BYTES ahead of the write position. A page the filesystem cannot
back would otherwise kill the process with SIGBUS at the write (Python cannot catch it: a
handler never runs, the write faults again forever); allocated first, a full filesystem is
ENOSPC from the allocation, raised as DiskFullError before anything is written.

Does not know what the bytes mean; the commitlog and the consume queues give them meaning.

Offsets named `*_offset` here are byte offsets in the logical stream the queue of files
holds (the commitlog's phys offsets, or a consume queue's `queue_offset * 20`); positions
(`*_position`) are byte positions inside one file.

Threading: appends happen on one thread; `flush` may run on another. A flush reads
`wrote_position` once and syncs up to it, which is safe against a concurrent append (the
append's bytes are flushed now or by the next flush).
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
from pathlib import Path

from nodes.common import constants as c
from nodes.common.errors import DataDirError, DiskFullError, StoreError

log = logging.getLogger(__name__)

_SCAN_CHUNK_BYTES = 1024 * 1024


def segment_name(start_offset: int) -> str:
    return f"{start_offset:0{c.SEGMENT_NAME_DIGITS}d}"


def _fallocate(fd: int, path: Path, offset: int, length: int) -> None:
    """Allocate the blocks of [offset, offset + length) of an open file.

    Raises:
        DiskFullError: ENOSPC or EDQUOT. Blocks ext4 allocated before it gave up stay with the
            file; they lie where its next writes go, so nothing is wasted.
    """
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFullError(f"no room for {length} bytes at {offset} of {path}: {exc.strerror}") from exc
        raise


def allocate_ahead(fd: int, path: Path, backed: int, end_position: int, size_bytes: int) -> int:
    """Allocate the blocks of [backed, end_position) of a file of `size_bytes`: a step ahead when the
    disk has room, exactly what is asked when it has only that. Returns the new allocated end.

    Raises:
        DiskFullError: not even [backed, end_position) fits.
    """
    ahead = min(size_bytes, max(end_position, backed + c.SEGMENT_ALLOCATE_STEP_BYTES))
    try:
        _fallocate(fd, path, backed, ahead - backed)
    except DiskFullError:
        if ahead == end_position:
            raise
        _fallocate(fd, path, backed, end_position - backed)
        return end_position
    return ahead


class MappedFile:
    """One segment file mapped whole; bytes [0, wrote_position) hold data."""

    def __init__(self, path: Path, start_offset: int, size_bytes: int, *, preallocate: bool = True) -> None:
        """Open `path`, creating it at `size_bytes` (sparse) if it does not exist. Writes
        allocate their blocks first unless `preallocate` is False (the sparse-segments fault
        switch only).

        Raises:
            DataDirError: the file exists with another size, or cannot be opened.
        """
        self.path = path
        self.start_offset = start_offset
        self.size_bytes = size_bytes
        # FAULT SWITCH sparse-segments (preallocate False): breaks "no write dies of SIGBUS":
        # writes go into pages nothing allocated, and a full filesystem kills the process.
        self.preallocate = preallocate
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise DataDirError(f"cannot open segment {path}: {exc}") from exc
        try:
            actual = os.fstat(fd).st_size
            if actual == 0:
                os.ftruncate(fd, size_bytes)
            elif actual != size_bytes:
                raise DataDirError(
                    f"segment {path} is {actual} bytes but the configured segment size is {size_bytes}: "
                    "restore the store's original size setting or move this data dir aside")
            self._mm = mmap.mmap(fd, size_bytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd  # kept for fdatasync (see flush)
        self.wrote_position = 0
        self.flushed_position = 0
        # Every page below max(this, wrote_position) has its blocks: allocated here, or written.
        self.allocated_position = 0

    def reserve(self, end_position: int) -> None:
        """Make sure the blocks up to `end_position` are allocated before anything writes there:
        a step ahead when the disk has room, exactly what is asked when it has only that.

        Raises:
            DiskFullError: not even [write position, end_position) fits; nothing was written.
        """
        backed = max(self.allocated_position, self.wrote_position)
        if end_position <= backed or not self.preallocate:
            return
        self.allocated_position = allocate_ahead(self._fd, self.path, backed, end_position, self.size_bytes)

    @property
    def buffer(self) -> mmap.mmap:
        """The whole mapping, for decoding in place. Do not keep memoryviews of it."""
        return self._mm

    @property
    def end_offset(self) -> int:
        return self.start_offset + self.size_bytes

    @property
    def wrote_offset(self) -> int:
        return self.start_offset + self.wrote_position

    @property
    def remaining_bytes(self) -> int:
        return self.size_bytes - self.wrote_position

    @property
    def is_full(self) -> bool:
        return self.wrote_position >= self.size_bytes

    def append(self, data: bytes | bytearray) -> int:
        """Write `data` at the write position; returns the position it was written at."""
        position = self.wrote_position
        end = position + len(data)
        if end > self.size_bytes:
            raise StoreError(f"{self.path.name}: {len(data)} bytes do not fit at {position}")
        self.reserve(end)  # DiskFullError before a byte is written
        self._mm[position:end] = data
        self.wrote_position = end
        return position

    def mark_full(self) -> None:
        """Count the rest of the file as written (after an end-of-segment blank marker)."""
        self.wrote_position = self.size_bytes

    def read(self, position: int, size: int) -> bytes:
        return self._mm[position:position + size]

    def flush(self) -> int:
        """Make [0, wrote) durable; returns the new flushed position.

        fdatasync rather than mmap.flush: CPython's mmap.flush holds the GIL through msync,
        stalling every other thread (the broker's event loop) for the whole disk write, while
        os.fdatasync releases it. On Linux both write back the pages dirtied through the map.
        """
        wrote = self.wrote_position
        if wrote > self.flushed_position and not self._mm.closed:  # closed: deleted by retention
            os.fdatasync(self._fd)
            self.flushed_position = wrote
        return self.flushed_position

    def find(self, sub: bytes, start: int, end: int) -> int:
        """First position >= start of `sub` ending by `end`, or -1; skips file holes."""
        for extent_start, extent_end in self._data_extents(start, end):
            found = self._mm.find(sub, extent_start, min(end, extent_end + len(sub) - 1))
            if found >= 0:
                return found
        return -1

    def data_end(self, start: int = 0) -> int:
        """The position just after the last non-zero byte at or after `start` (or `start`)."""
        for extent_start, extent_end in reversed(self._data_extents(start, self.size_bytes)):
            hi = extent_end
            while hi > extent_start:
                lo = max(extent_start, hi - _SCAN_CHUNK_BYTES)
                stripped = len(self._mm[lo:hi].rstrip(b"\0"))
                if stripped:
                    return lo + stripped
                hi = lo
        return start

    def _zero(self, start: int, end: int) -> None:
        """Write zeros over [start, end), chunk by chunk, skipping chunks already zero.

        Raises:
            DiskFullError: a chunk to zero spans pages with no blocks and the disk has none to give.
        """
        if self.preallocate and end > start:
            _fallocate(self._fd, self.path, start, end - start)  # a chunk may span a hole
        position = start
        while position < end:
            stop = min(end, position + _SCAN_CHUNK_BYTES)
            if self._mm[position:stop].count(0) != stop - position:
                self._mm[position:stop] = bytes(stop - position)
            position = stop

    def truncate_to(self, position: int) -> int:
        """Drop everything from `position` on: zero it and move the write position back.

        Returns how many bytes of (possibly garbage) data were discarded.
        """
        end = self.data_end(position)
        self._zero(position, end)
        self.wrote_position = position
        self.flushed_position = min(self.flushed_position, position)
        return end - position

    def _data_extents(self, start: int, end: int) -> list[tuple[int, int]]:
        """The data (non-hole) ranges of the file within [start, end).

        Uses SEEK_DATA/SEEK_HOLE so scans skip the unallocated tail of a sparse segment;
        where the filesystem lacks them the kernel reports the whole file as data.
        """
        extents: list[tuple[int, int]] = []
        position = start
        try:
            while position < end:
                try:
                    data_start = os.lseek(self._fd, position, os.SEEK_DATA)
                except OSError as exc:
                    if exc.errno == errno.ENXIO:  # no data after position
                        break
                    raise
                if data_start >= end:
                    break
                data_stop = os.lseek(self._fd, data_start, os.SEEK_HOLE)
                extents.append((data_start, min(end, data_stop)))
                position = data_stop
        except OSError:  # SEEK_DATA unsupported: scan everything
            return [(start, end)]
        return extents

    def close(self) -> None:
        if not self._mm.closed:
            self._mm.close()
            os.close(self._fd)

    def destroy(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


class MappedFileQueue:
    """The segments of one directory, ordered by start offset, each `file_size_bytes` long.

    `allow_gaps`: a missing file between two others is tolerated (consume queues: a read
    there reports OFFSET_FOUND_NULL) instead of refusing to load (commitlog).
    """

    def __init__(self, directory: Path, file_size_bytes: int, *, allow_gaps: bool = False,
                 preallocate: bool = True) -> None:
        self.directory = directory
        self.file_size_bytes = file_size_bytes
        self.allow_gaps = allow_gaps
        self.preallocate = preallocate
        self.files: list[MappedFile] = []

    def load(self) -> None:
        """Map every segment in the directory; all files count as full until recovery says otherwise.

        Raises:
            DataDirError: a file name is not a valid offset, or (without allow_gaps) a segment is missing.
        """
        if not self.directory.is_dir():
            return
        starts = []
        for path in self.directory.iterdir():
            if path.name.endswith(".tmp"):
                continue
            if len(path.name) != c.SEGMENT_NAME_DIGITS or not path.name.isdigit():
                raise DataDirError(f"unexpected file {path} in a segment directory: move it elsewhere")
            start = int(path.name)
            if start % self.file_size_bytes:
                raise DataDirError(f"segment {path} does not start at a multiple of {self.file_size_bytes} "
                                   "bytes: the segment size setting changed; restore it")
            starts.append(start)
        for start in sorted(starts):
            if self.files and start != self.files[-1].end_offset:
                message = (f"{self.directory}: segments between {self.files[-1].end_offset} and {start} "
                           "are missing")
                if not self.allow_gaps:
                    raise DataDirError(message + ": restore them or move the data dir aside")
                log.warning("%s; reads there find nothing", message)
            mapped = MappedFile(self.directory / segment_name(start), start, self.file_size_bytes)
            mapped.wrote_position = mapped.flushed_position = self.file_size_bytes
            self.files.append(mapped)

    @property
    def min_offset(self) -> int:
        return self.files[0].start_offset if self.files else 0

    @property
    def max_offset(self) -> int:
        """The end of the written data (exclusive)."""
        return self.files[-1].wrote_offset if self.files else 0

    def last(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    def find(self, offset: int) -> MappedFile | None:
        """The segment holding byte `offset`, or None if no segment covers it."""
        files = self.files
        if not files or offset < files[0].start_offset:
            return None
        index = (offset - files[0].start_offset) // self.file_size_bytes
        if index < len(files) and files[index].start_offset <= offset < files[index].end_offset:
            return files[index]
        # Only consume queues with a gap get here: fall back to a search.
        for mapped in files:
            if mapped.start_offset <= offset < mapped.end_offset:
                return mapped
        return None

    def create(self, start_offset: int) -> MappedFile:
        """Add a new empty segment at `start_offset` (which must follow the last one)."""
        if start_offset % self.file_size_bytes:
            raise StoreError(f"segment start {start_offset} is not a multiple of {self.file_size_bytes}")
        if self.files and start_offset < self.files[-1].end_offset:
            raise StoreError(f"segment start {start_offset} overlaps {self.files[-1].path.name}")
        self.directory.mkdir(parents=True, exist_ok=True)
        mapped = MappedFile(self.directory / segment_name(start_offset), start_offset, self.file_size_bytes,
                            preallocate=self.preallocate)
        self.files.append(mapped)
        return mapped

    def ensure_room(self, size_bytes: int) -> None:
        """Create the segments an append of `size_bytes` at the end will need and allocate the
        blocks it will write, before any byte is written, so a full disk fails the append whole
        (DiskFullError) instead of half-way through it. Segments created here are removed again
        when the room cannot be had."""
        last = self.last()
        remaining = size_bytes
        next_start = last.end_offset if last is not None else 0
        created: list[MappedFile] = []
        try:
            if last is not None and not last.is_full:
                take = min(remaining, last.remaining_bytes)
                last.reserve(last.wrote_position + take)
                remaining -= take
            while remaining > 0:
                mapped = self.create(next_start)
                created.append(mapped)
                take = min(remaining, mapped.size_bytes)
                mapped.reserve(take)
                remaining -= take
                next_start += self.file_size_bytes
        except DiskFullError:
            for mapped in created:
                self.drop(mapped)
            raise

    def drop(self, mapped: MappedFile) -> None:
        """Remove a segment created for a write that could not be made (it holds nothing)."""
        self.files.remove(mapped)
        mapped.destroy()

    def delete_first(self) -> MappedFile | None:
        """Unmap and delete the oldest segment (retention); None, keeping it, when a reader
        still holds a view into its map (mmap refuses to close then: tried again next pass)."""
        if len(self.files) < 2:
            return None
        mapped = self.files[0]
        try:
            mapped.destroy()
        except BufferError:
            log.warning("segment %s is still being read; deleting it on a later pass", mapped.path)
            return None
        del self.files[0]
        return mapped

    def writable_file(self) -> MappedFile:
        """The last segment if it has room, else a new one after it (the first at offset 0)."""
        last = self.last()
        if last is None:
            return self.create(0)
        if last.is_full:
            return self.create(last.end_offset)
        return last

    def truncate_after(self, offset: int) -> int:
        """Discard everything from `offset` on; returns the bytes of data discarded."""
        discarded = 0
        while self.files and self.files[-1].start_offset > offset:
            mapped = self.files.pop()
            discarded += mapped.data_end()
            mapped.destroy()
            log.warning("deleted segment %s beyond offset %d", mapped.path, offset)
        last = self.last()
        if last is not None and offset < last.end_offset:
            discarded += last.truncate_to(offset - last.start_offset)
        return discarded

    def flush(self) -> None:
        for mapped in list(self.files):
            if mapped.wrote_position > mapped.flushed_position:
                mapped.flush()

    def close(self) -> None:
        for mapped in self.files:
            mapped.close()
