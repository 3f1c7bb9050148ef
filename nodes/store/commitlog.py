"""The commitlog: every message of every queue, appended in arrival order to mapped segments.

Owns: placing records (never across a segment end: a record that does not fit with 8 bytes to
spare is preceded by the blank marker and goes to the next segment), reading records and raw
bytes back, raw appends for replicas, and the per-position checks recovery and dispatch use.
Does not own queue offsets (the message store assigns them), consume queues or recovery policy.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import overload

from nodes.common import constants as c
from nodes.common.errors import CorruptRecordError, DiskFullError, StoreError
from nodes.store.mapped_file import MappedFile, MappedFileQueue
from nodes.store.record import (
    RECORD_BYTES_MIN,
    MessageToStore,
    Record,
    RecordKind,
    blank_marker,
    check_at,
    decode_record,
    peek_size_and_magic,
)
from nodes.store.record_batch import encode_batch, offset_msg_id_prefix, place_batch

_RECORD_MAGIC_BYTES = struct.pack(">I", c.RECORD_MAGIC)
_BLANK_MAGIC_BYTES = struct.pack(">I", c.BLANK_MAGIC)
_MAGIC_POS = 4  # the magic follows the 4-byte total size in records and blanks alike


@dataclass(slots=True)  # not frozen: a frozen dataclass costs three times as much to build, once per message
class AppendResult:
    """Where one appended record went."""

    phys_offset: int
    size: int
    queue_offset: int
    store_timestamp_ms: int
    offset_msg_id: str


class AppendedRun(Sequence[AppendResult]):
    """The AppendResults of records appended back to back by one put, built only when asked for:
    a batch's answer and indexing need the positions and sizes, rarely each result. `prefix` is
    the offset message ids' prefix (one store host), or one prefix per record."""

    __slots__ = ("first_queue_offset", "phys_offsets", "prefix", "sizes", "store_timestamp_ms")

    def __init__(self, phys_offsets: list[int], sizes: Sequence[int], first_queue_offset: int,
                 store_timestamp_ms: int, prefix: str | Sequence[str]) -> None:
        self.phys_offsets = phys_offsets
        self.sizes = sizes
        self.first_queue_offset = first_queue_offset
        self.store_timestamp_ms = store_timestamp_ms
        self.prefix = prefix  # of the offset message ids

    @classmethod
    def empty(cls) -> AppendedRun:
        """The run of a put that appended nothing (it was refused)."""
        return cls([], (), 0, 0, "")

    def __len__(self) -> int:
        return len(self.phys_offsets)

    def __eq__(self, other: object) -> bool:
        """Equal to any sequence of the same results, as the list it stands in for."""
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # mutable-looking, like a list

    @overload
    def __getitem__(self, index: int) -> AppendResult: ...
    @overload
    def __getitem__(self, index: slice) -> list[AppendResult]: ...

    def __getitem__(self, index: int | slice) -> AppendResult | list[AppendResult]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        phys_offset = self.phys_offsets[index]  # IndexError past the end ends iteration
        prefix = self.prefix if isinstance(self.prefix, str) else self.prefix[index]
        return AppendResult(phys_offset, self.sizes[index], self.first_queue_offset + index, self.store_timestamp_ms,
                            f"{prefix}{phys_offset:016X}")


class CommitLog:
    def __init__(self, directory: Path, segment_bytes: int, *, preallocate: bool = True) -> None:
        self.segment_bytes = segment_bytes
        self._files = MappedFileQueue(directory, segment_bytes, preallocate=preallocate)

    def load(self) -> None:
        """Map the existing segments (all counted as full until recovery sets the end)."""
        self._files.load()

    @property
    def segments(self) -> list[MappedFile]:
        return self._files.files

    @property
    def min_phys_offset(self) -> int:
        return self._files.min_offset

    @property
    def max_phys_offset(self) -> int:
        """The end of the written bytes: where the next record (or raw append) goes."""
        return self._files.max_offset

    def segment_for(self, phys_offset: int) -> MappedFile | None:
        return self._files.find(phys_offset)

    # --- writing -----------------------------------------------------------------------------

    def append(self, msgs: Sequence[MessageToStore], *, first_queue_offset: int,
               store_timestamp_ms: int) -> AppendedRun:
        """Append `msgs` back to back in one segment, with queue offsets from `first_queue_offset`.

        The batch is encoded in one pass and copied into the mapped segment in one write.

        Raises:
            ValueError: a message cannot be encoded, or the batch cannot fit in one segment.
        """
        blob, sizes = encode_batch(msgs, first_queue_offset=first_queue_offset,
                                   store_timestamp_ms=store_timestamp_ms)
        positions = self._place(blob, sizes)
        hosts = {msg.store_host for msg in msgs}
        prefix: str | list[str] = (offset_msg_id_prefix(*hosts.pop()) if len(hosts) == 1
                                   else [offset_msg_id_prefix(*msg.store_host) for msg in msgs])
        return AppendedRun(positions, sizes, first_queue_offset, store_timestamp_ms, prefix)

    def append_encoded(self, blob: bytearray, sizes: Sequence[int], *, store_host: tuple[str, int],
                       first_queue_offset: int, store_timestamp_ms: int) -> AppendedRun:
        """`append` for records already encoded (`record_batch.encode_scanned`), all of one
        store host.

        Raises:
            ValueError: the batch cannot fit in one segment.
        """
        positions = self._place(blob, sizes)
        return AppendedRun(positions, sizes, first_queue_offset, store_timestamp_ms, offset_msg_id_prefix(*store_host))

    def _place(self, blob: bytearray, sizes: Sequence[int]) -> list[int]:
        """Put records encoded with every PHYSICALOFFSET zero in one segment (closing the
        current one with a blank marker if they do not fit), stamp their positions in, copy
        them in with one write; returns the positions.

        Raises:
            ValueError: the batch cannot fit in one segment.
            DiskFullError: a new segment cannot be allocated; nothing was written.
        """
        total_bytes = len(blob)
        if total_bytes + c.END_FILE_MIN_BLANK_BYTES > self.segment_bytes:
            raise ValueError(f"{total_bytes} bytes of records do not fit in a {self.segment_bytes}-byte segment")
        mapped = self._files.writable_file()
        if total_bytes + c.END_FILE_MIN_BLANK_BYTES > mapped.remaining_bytes:
            # Room for the marker here and the records there before writing either: on a full
            # disk the current segment stays open, unchanged.
            mapped.reserve(mapped.wrote_position + c.END_FILE_MIN_BLANK_BYTES)
            following = self._files.create(mapped.end_offset)
            try:
                following.reserve(total_bytes)
            except DiskFullError:
                self._files.drop(following)
                raise
            # The rest of this segment is already zero, so the marker alone closes it.
            mapped.append(blank_marker(mapped.remaining_bytes))
            mapped.mark_full()
            mapped = following
        positions = place_batch(blob, sizes, mapped.wrote_offset)
        mapped.append(blob)
        return positions

    def append_bytes(self, phys_offset: int, data: bytes) -> None:
        """Append raw commitlog bytes copied from a master (a replica's write path).

        Raises:
            DiskFullError: a new segment cannot be allocated; nothing was written.
            StoreError: `phys_offset` is not the current end (or, on an empty log, not a
                segment start), or `data` crosses a segment end.
        """
        if not data:
            return
        created = not self._files.files or self._files.files[-1].is_full
        if not self._files.files:
            if phys_offset % self.segment_bytes:
                raise StoreError(f"an empty commitlog must start at a segment boundary, not {phys_offset}")
            mapped = self._files.create(phys_offset)
        else:
            if phys_offset != self.max_phys_offset:
                raise StoreError(f"raw append at {phys_offset} but the commitlog ends at {self.max_phys_offset}")
            mapped = self._files.writable_file()
        if len(data) > mapped.remaining_bytes:
            raise StoreError(f"raw append of {len(data)} bytes at {phys_offset} crosses a segment end")
        try:
            mapped.append(data)
        except DiskFullError:
            if created:  # an empty segment would move the log's start or end
                self._files.drop(mapped)
            raise

    def delete_first_segment(self) -> MappedFile | None:
        """Retention: unmap and delete the oldest segment (never the only one); None if it is
        still being read."""
        return self._files.delete_first()

    def truncate_after(self, phys_offset: int) -> int:
        """Discard every byte from `phys_offset` on; returns the bytes of data discarded."""
        return self._files.truncate_after(phys_offset)

    def flush(self) -> None:
        self._files.flush()

    def close(self) -> None:
        self._files.close()

    # --- reading -----------------------------------------------------------------------------

    def read(self, phys_offset: int, size: int) -> bytes | None:
        """The `size` bytes at `phys_offset`, or None if they are not all in a written segment."""
        mapped = self._files.find(phys_offset)
        if mapped is None or phys_offset + size > mapped.wrote_offset:
            return None
        return mapped.read(phys_offset - mapped.start_offset, size)

    def read_bytes(self, phys_offset: int, max_bytes: int) -> bytes:
        """Raw bytes from `phys_offset`, at most `max_bytes`, never past the end of its segment.

        A blank marker comes back with the zeros after it, so a replica reproduces the
        segment boundary exactly. Empty when nothing is written at `phys_offset` yet.
        """
        mapped = self._files.find(phys_offset)
        if mapped is None:
            return b""
        end = min(mapped.wrote_offset, phys_offset + max_bytes)
        if end <= phys_offset:
            return b""
        return mapped.read(phys_offset - mapped.start_offset, end - phys_offset)

    def check_at(self, phys_offset: int) -> tuple[RecordKind, int]:
        mapped = self._files.find(phys_offset)
        if mapped is None:
            return RecordKind.EMPTY, 0
        return check_at(mapped.buffer, phys_offset - mapped.start_offset, base_phys_offset=mapped.start_offset)

    def record_at(self, phys_offset: int, size: int | None = None, *, check_crc: bool = True) -> Record | None:
        """The record at `phys_offset` when a whole one lies there in written bytes, of `size`
        bytes when given, its framing sound (magic, lengths, UTF-8 topic and properties), its
        PHYSICALOFFSET field its own position (not an old or shifted copy) and, with
        `check_crc`, its record CRC matching; else None. The one lookup every reader of a single
        record by position uses (a pull's lookup, the message index's checks)."""
        mapped = self._files.find(phys_offset)
        if mapped is None:
            return None
        pos = phys_offset - mapped.start_offset
        written = mapped.wrote_offset - mapped.start_offset
        if pos < 0 or written - pos < RECORD_BYTES_MIN:
            return None
        buf = mapped.buffer
        total_size, magic = peek_size_and_magic(buf, pos)
        if magic != c.RECORD_MAGIC or (size is not None and total_size != size) or pos + total_size > written:
            return None
        try:
            record = decode_record(buf, pos, check_crc=check_crc)
        except CorruptRecordError:
            return None
        return record if record.phys_offset == phys_offset else None

    def decode_at(self, phys_offset: int, *, check_crc: bool = True) -> Record:
        """Decode the record at `phys_offset`. Raises CorruptRecordError, or StoreError if unmapped."""
        mapped = self._files.find(phys_offset)
        if mapped is None:
            raise StoreError(f"no commitlog segment holds phys offset {phys_offset}")
        return decode_record(mapped.buffer, phys_offset - mapped.start_offset, check_crc=check_crc)

    def find_valid(self, phys_offset: int, limit_phys_offset: int) -> int | None:
        """The first position in [phys_offset, limit) of phys_offset's segment holding a valid
        record (ending by the limit) or a valid blank marker; None if there is none.

        Only positions where a magic number occurs are examined, so a scan over garbage is a
        byte search plus a full check per candidate.
        """
        mapped = self._files.find(phys_offset)
        if mapped is None:
            return None
        base = mapped.start_offset
        buf = mapped.buffer
        end = min(limit_phys_offset, mapped.end_offset) - base
        start = phys_offset - base
        next_record = mapped.find(_RECORD_MAGIC_BYTES, start + _MAGIC_POS, end)
        next_blank = mapped.find(_BLANK_MAGIC_BYTES, start + _MAGIC_POS, end)
        while next_record >= 0 or next_blank >= 0:
            if next_blank < 0 or 0 <= next_record < next_blank:
                candidate = next_record - _MAGIC_POS
                next_record = mapped.find(_RECORD_MAGIC_BYTES, next_record + 1, end)
            else:
                candidate = next_blank - _MAGIC_POS
                next_blank = mapped.find(_BLANK_MAGIC_BYTES, next_blank + 1, end)
            kind, size = check_at(buf, candidate, base_phys_offset=base)
            if (kind is RecordKind.RECORD and candidate + size <= end) or kind is RecordKind.BLANK:
                return base + candidate
        return None
