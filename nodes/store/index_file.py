"""One message index file (RocketMQ's IndexFile): a hash table of key -> commitlog phys offsets
in one memory-mapped file.

Owns the file's layout, adding an entry, walking a key's chain, checking a header read back
from disk, and cutting entries off the tail. Does not know what a key is nor read the
commitlog (index_service.py does both), so every phys offset it returns is a candidate only.

Layout (all integers big-endian):

    header   40 bytes
      0  8  begin_timestamp_ms   store time of the first entry's record
      8  8  end_timestamp_ms     store time of the last entry's record
     16  8  begin_phys_offset    of the first entry's record
     24  8  end_phys_offset      of the last entry's record
     32  4  hash_slot_count      slots in use
     36  4  index_count          entries + 1 (entry 0 is never used: 0 means "none")
    slots    hash_slots x 4 bytes: the number of the newest entry of the slot, 0 when empty
    entries  entries_per_file x 20 bytes
      0  4  key_hash             of "topic#key", non-negative
      4  8  phys_offset          of the record
     12  4  time_diff_s          store time - begin_timestamp_ms, in seconds
     16  4  prev_index           the slot's previous entry, 0 at the end of the chain

An entry is written before the slot that points at it, and the slot before the header counts
it (a put's entries, then their slots, then the header once), so a process killed between two
writes leaves uncounted entries that slots may already point at, never a slot pointing at
bytes not yet written: `repair` follows such a slot back along its chain to a counted entry.

The file is created sparse; the header and slots get their blocks at creation, the entries as
they fill (one allocation step ahead), so no write through the map lands on a page the
filesystem cannot back (that would be SIGBUS, not an exception).
"""

from __future__ import annotations

import array
import mmap
import os
import struct
import sys
from collections.abc import Sequence
from pathlib import Path

from nodes.common import constants as c
from nodes.common.errors import DataDirError, DiskFullError
from nodes.store.mapped_file import allocate_ahead

HEADER = struct.Struct(">qqqqii")
SLOT = struct.Struct(">i")
ENTRY = struct.Struct(">iqii")
assert HEADER.size == c.INDEX_HEADER_BYTES and ENTRY.size == c.INDEX_ENTRY_BYTES and SLOT.size == c.INDEX_SLOT_BYTES


def file_size_bytes(hash_slots: int, entries: int) -> int:
    return c.INDEX_HEADER_BYTES + hash_slots * c.INDEX_SLOT_BYTES + entries * c.INDEX_ENTRY_BYTES


class IndexFile:
    """One index file mapped whole. Loop-confined like the store's writes; `flush` may run on
    the flusher's thread (it only syncs)."""

    def __init__(self, path: Path, hash_slots: int, entries: int) -> None:
        """Open `path`, creating it (sparse, header and slots allocated) if it does not exist.

        Raises:
            DataDirError: it exists with another size (another geometry), or cannot be opened.
            DiskFullError: a new file's header and slots have no room.
        """
        self.path = path
        self.hash_slots = hash_slots
        self.entries = entries
        self.size_bytes = file_size_bytes(hash_slots, entries)
        self._entries_start = c.INDEX_HEADER_BYTES + hash_slots * c.INDEX_SLOT_BYTES
        created = not path.exists()
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise DataDirError(f"cannot open index file {path}: {exc}") from exc
        try:
            actual = os.fstat(fd).st_size
            if actual not in (0, self.size_bytes):
                raise DataDirError(f"index file {path} is {actual} bytes, not the {self.size_bytes} of "
                                   f"{hash_slots} slots and {entries} entries")
            if actual == 0:
                os.ftruncate(fd, self.size_bytes)
            self._fd = fd
            self.allocated_position = 0
            if created or actual == 0:
                self._allocate(self._entries_start + c.INDEX_ENTRY_BYTES)
            self._mm = mmap.mmap(fd, self.size_bytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            if created:
                path.unlink(missing_ok=True)
            raise
        if created or actual == 0:
            HEADER.pack_into(self._mm, 0, 0, 0, 0, 0, 0, 1)
        self._dirty = created
        # the header as last written by this process (or read at open): a put reads no bytes back
        self._header = list(self.header())
        if not (created or actual == 0):
            # the header, the slots and the counted entries were written, so they have blocks; the
            # pages after them may not (the file is sparse): allocate before writing there
            counted = self._header[5] if 1 <= self._header[5] <= entries else 0
            self.allocated_position = min(self.size_bytes, self._entries_start + counted * c.INDEX_ENTRY_BYTES)

    # --- the header --------------------------------------------------------------------------

    def header(self) -> tuple[int, int, int, int, int, int]:
        """(begin_ts, end_ts, begin_phys, end_phys, hash_slot_count, index_count) as stored."""
        return HEADER.unpack_from(self._mm, 0)  # type: ignore[return-value]

    @property
    def index_count(self) -> int:
        return self._header[5]

    @property
    def begin_timestamp_ms(self) -> int:
        return self._header[0]

    @property
    def end_timestamp_ms(self) -> int:
        return self._header[1]

    @property
    def begin_phys_offset(self) -> int:
        return self._header[2]

    @property
    def end_phys_offset(self) -> int:
        return self._header[3]

    @property
    def is_full(self) -> bool:
        return self._header[5] >= self.entries

    def _write_header(self, *fields: int) -> None:
        HEADER.pack_into(self._mm, 0, *fields)
        self._header = list(fields)

    def header_problem(self) -> str:
        """Why the header cannot be what this code wrote (a torn or garbled file); "" when sane."""
        begin_ts, end_ts, begin_phys, end_phys, used_slots, count = self.header()
        if not 1 <= count <= self.entries:
            return f"index_count {count} outside 1..{self.entries}"
        if not 0 <= used_slots <= min(self.hash_slots, count - 1):
            return f"hash_slot_count {used_slots} outside 0..{min(self.hash_slots, count - 1)}"
        if count > 1 and not (0 <= begin_phys <= end_phys and 0 < begin_ts <= end_ts):
            return (f"begin/end phys offsets {begin_phys}/{end_phys} or timestamps {begin_ts}/{end_ts} out of "
                    "order")
        return ""

    # --- entries -----------------------------------------------------------------------------

    def entry(self, number: int) -> tuple[int, int, int, int]:
        """(key_hash, phys_offset, time_diff_s, prev_index) of entry `number` (1-based)."""
        return ENTRY.unpack_from(self._mm, self._entries_start + number * c.INDEX_ENTRY_BYTES)  # type: ignore[return-value]

    def put(self, key_hash: int, phys_offset: int, store_timestamp_ms: int) -> bool:
        """Add one entry; False (nothing written) when the file is full.

        Raises:
            DiskFullError: the entry's page has no blocks and the disk has none to give.
        """
        return self.put_keys((key_hash,), phys_offset, store_timestamp_ms) == 1

    def put_keys(self, key_hashes: tuple[int, ...] | list[int], phys_offset: int, store_timestamp_ms: int) -> int:
        """Add one entry per hash for one record (`put_entries`); returns how many fit."""
        return self.put_entries([(key_hash, phys_offset, store_timestamp_ms) for key_hash in key_hashes])

    def put_entries(self, entries: Sequence[tuple[int, int, int]], start: int = 0) -> int:
        """Add `entries[start:]`, each (key hash, phys offset, store timestamp) in commitlog order;
        returns how many fit (the rest go to the next file). A whole put's keys cost one copy of
        their entries, one write per slot they touch and one header write, in that order: a kill
        leaves no slot pointing past the entries, and no count past the slots.

        Raises:
            DiskFullError: the entries' pages have no blocks and the disk has none to give (the
                entries that fit in the blocks the file has are written and counted first).
        """
        begin_ts, end_ts, begin_phys, end_phys, used_slots, count = self._header
        stop = min(len(entries), start + self.entries - count)
        if stop <= start:
            return 0
        entry_bytes = c.INDEX_ENTRY_BYTES
        first_position = self._entries_start + count * entry_bytes
        no_room: DiskFullError | None = None
        if first_position + (stop - start) * entry_bytes > self.allocated_position:
            try:
                self._allocate(first_position + (stop - start) * entry_bytes)
            except DiskFullError as exc:
                no_room = exc
                stop = start + max(0, (self.allocated_position - first_position) // entry_bytes)
        mm = self._mm
        hash_slots, header_bytes, slot_bytes = self.hash_slots, c.INDEX_HEADER_BYTES, c.INDEX_SLOT_BYTES
        pack_entry, unpack_slot = ENTRY.pack, SLOT.unpack_from
        counted = count
        parts: list[bytes] = []
        append = parts.append
        slots: dict[int, int] = {}  # slot -> its newest entry, as this call leaves it
        for i in range(start, stop):
            key_hash, phys_offset, store_timestamp_ms = entries[i]
            if count == 1:
                begin_ts, begin_phys = store_timestamp_ms, phys_offset
            slot = key_hash % hash_slots
            prev = slots.get(slot)
            if prev is None:
                (prev,) = unpack_slot(mm, header_bytes + slot * slot_bytes)
                if not 0 < prev < counted:
                    prev = 0  # empty, or garbage a torn write left: the chain ends here
                    used_slots += 1
            time_diff_s = (store_timestamp_ms - begin_ts) // 1000
            if not 0 <= time_diff_s <= 0x7FFFFFFF:
                time_diff_s = 0 if time_diff_s < 0 else 0x7FFFFFFF
            append(pack_entry(key_hash, phys_offset, time_diff_s, prev))
            slots[slot] = count
            count += 1
            end_ts, end_phys = store_timestamp_ms, phys_offset
        if parts:
            mm[first_position:first_position + len(parts) * entry_bytes] = b"".join(parts)
            pack_slot = SLOT.pack_into
            for slot, number in slots.items():
                pack_slot(mm, header_bytes + slot * slot_bytes, number)
            self._write_header(begin_ts, end_ts, begin_phys, end_phys, used_slots, count)
            self._dirty = True
        if no_room is not None:
            raise no_room
        return len(parts)

    def lookup(self, key_hash: int, begin_ms: int, end_ms: int, limit: int) -> list[int]:
        """Up to `limit` phys offsets of entries with `key_hash` whose store time (to the second)
        may lie in [begin_ms, end_ms], newest first. Candidates: the caller checks each record."""
        begin_ts, _end_ts, _bp, _ep, _slots, count = self._header
        (number,) = SLOT.unpack_from(self._mm, c.INDEX_HEADER_BYTES + (key_hash % self.hash_slots) * c.INDEX_SLOT_BYTES)
        found: list[int] = []
        steps = 0
        while 0 < number < count and len(found) < limit and steps < c.INDEX_CHAIN_STEPS_MAX:
            entry_hash, phys_offset, time_diff_s, prev = self.entry(number)
            stored_ms = begin_ts + time_diff_s * 1000
            # time_diff is whole seconds, rounded down: the record may be up to 1 s later
            if entry_hash == key_hash and begin_ms <= stored_ms + 999 and stored_ms <= end_ms:
                found.append(phys_offset)
            if prev >= number:  # a chain only ever points back; anything else is damage
                break
            number = prev
            steps += 1
        return found

    def tail_hashes_at(self, phys_offset: int) -> set[int]:
        """The key hashes of the last entries that index the record at `phys_offset`."""
        hashes = set()
        number = self.index_count - 1
        while number > 0:
            key_hash, entry_phys, _diff, _prev = self.entry(number)
            if entry_phys != phys_offset:
                break
            hashes.add(key_hash)
            number -= 1
        return hashes

    def truncate_to(self, count: int) -> None:
        """Keep entries 1..count-1 only: the header is recomputed from entry count-1 and every slot
        that points at a dropped entry is led back along its chain (`repair`)."""
        count = max(1, min(count, self.entries))
        begin_ts, _end_ts, begin_phys, _end_phys, _used, _count = self._header
        if count == 1:
            self._write_header(0, 0, 0, 0, 0, 1)
        else:
            _hash, last_phys, time_diff_s, _prev = self.entry(count - 1)
            self._write_header(begin_ts, begin_ts + time_diff_s * 1000, begin_phys, last_phys, 0, count)
        self.repair()

    def repair(self) -> int:
        """Lead every slot that points at an uncounted entry back along its chain to a counted one
        (0 when there is none) and recount the slots in use; returns how many slots changed.

        The slots are read in one copy and scanned in C (`max`, `count`), so a file whose slots
        are all fine costs one pass over them."""
        count = self.index_count
        slots = array.array("i")
        slots.frombytes(self._mm[c.INDEX_HEADER_BYTES:self._entries_start])
        if sys.byteorder == "little":
            slots.byteswap()
        changed = 0
        if slots and (max(slots) >= count or min(slots) < 0):
            for i, number in enumerate(slots):
                if 0 <= number < count:
                    continue
                steps = 0
                while not 0 <= number < count and steps < c.INDEX_CHAIN_STEPS_MAX:
                    if not 0 < number < self.entries:
                        number = 0
                        break
                    prev = self.entry(number)[3]
                    number = prev if prev < number else 0
                    steps += 1
                slots[i] = number if 0 <= number < count else 0
                changed += 1
        used = len(slots) - slots.count(0)
        if changed:
            fixed = array.array("i", slots)
            if sys.byteorder == "little":
                fixed.byteswap()
            self._mm[c.INDEX_HEADER_BYTES:self._entries_start] = fixed.tobytes()
        header = list(self._header)
        header[4] = min(used, max(0, count - 1))
        self._write_header(*header)
        self._dirty = True
        return changed

    # --- the file ----------------------------------------------------------------------------

    def _allocate(self, end_position: int) -> None:
        """Give the blocks up to `end_position` (one step ahead when there is room) before a write."""
        if end_position <= self.allocated_position:
            return
        self.allocated_position = allocate_ahead(self._fd, self.path, self.allocated_position, end_position,
                                                 self.size_bytes)

    def flush(self) -> None:
        """fdatasync (releases the GIL, unlike mmap.flush) when anything was written since the last."""
        if self._dirty and not self._mm.closed:
            self._dirty = False
            os.fdatasync(self._fd)

    def close(self) -> None:
        if not self._mm.closed:
            self._mm.close()
            os.close(self._fd)

    def destroy(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
