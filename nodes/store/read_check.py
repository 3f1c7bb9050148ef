"""How a pull trusts a record without decoding it: the in-place check of its framing and CRC
(`record_checks`), the memory of commitlog ranges that already passed it (`CheckedExtents`), and
the cheap re-check of such a record (`body_checks`).

Both serve the read path's scan loop (read_path.py), which runs them on the mapped segment
bytes, so neither copies a record; the scan inlines `body_checks`' test (with `BODY_FIELDS`)
rather than calling it per record, and a unit test keeps the two catching the same damage.
"""

from __future__ import annotations

import bisect
import struct
import zlib

from nodes.common import constants as c
from nodes.store import record


class CheckedExtents:
    """Commitlog byte ranges whose records passed the read check since the store opened.

    The commitlog is append-only and a running store never reuses an offset (truncation only
    happens in recovery, at open), so checked bytes change only through an outside write to
    the files (a failing disk, a stray writer); re-reads run only `body_checks`. Holds sorted,
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


def record_checks(buf: memoryview, pos: int, size: int, phys_offset: int) -> bool:
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


# Re-check of a record that passed `record_checks` before: total size, magic, BODYCRC,
# PHYSICALOFFSET, BODYLEN in one unpack (the layout is nodes.store.record's), then the body CRC.
_BODY_FIELDS = struct.Struct(">iII16xq48xi")
assert _BODY_FIELDS.size == record.HEADER.size
BODY_FIELDS = _BODY_FIELDS  # the scan loop inlines body_checks with it (read_path._scan)


def body_checks(buf: memoryview, pos: int, size: int, phys_offset: int) -> bool:
    """Whether the record at `buf[pos]` still has its size, magic, own phys offset and a body
    matching its body CRC: one unpack and one `zlib.crc32` over the body, no copy. A tenth of
    `record_checks`' cost; it catches damage to the body (the bulk of a record) and to the
    framing, not to the other header fields or the properties."""
    total_size, magic, body_crc, record_phys_offset, body_len = _BODY_FIELDS.unpack_from(buf, pos)
    body_start = pos + _BODY_FIELDS.size
    return (total_size == size and magic == c.RECORD_MAGIC and record_phys_offset == phys_offset
            and 0 <= body_len <= size - _BODY_FIELDS.size
            and zlib.crc32(buf[body_start:body_start + body_len]) == body_crc)
