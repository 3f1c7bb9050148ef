"""How a pull trusts a record without decoding it: the in-place check of its framing and CRC
(`record_checks`), run by the read path's scan loop (read_path.py) on the mapped segment bytes,
so it copies nothing.
"""

from __future__ import annotations

import struct
import zlib

from nodes.common import constants as c
from nodes.store import record

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
