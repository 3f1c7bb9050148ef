"""The commitlog record codec: RocketMQ 4.9's on-disk message layout, pure.

Owns: encoding a `MessageToStore` into record bytes, decoding record bytes into a `Record`
(or only the fields dispatch needs, `index_fields`), the end-of-segment blank marker, the
property string format, the tag hash stored in consume queues, and offset message ids. Does
not own files, offsets assignment or any I/O, nor the write path's one-pass batch encoder
(`record_batch`, which writes exactly these bytes).

The client imports this module to decode the raw records carried by pull responses, so it
depends on nothing but `nodes.common` and the standard library.

Record layout (all integers big-endian; IPv4 hosts only, so both host fields are 8 bytes):

    ┌──────────────┬──────────────┬──────────────┬──────────────┬──────────────┐
    │ total_size 4 │ magic 4      │ body_crc 4   │ queue_id 4   │ flag 4       │  0..20
    ├──────────────┴──────┬───────┴──────────────┴──────┬───────┴──────────────┤
    │ queue_offset 8      │ phys_offset 8               │ sys_flag 4           │ 20..40
    ├─────────────────────┼──────────────┬──────────────┼──────────────────────┤
    │ born_timestamp_ms 8 │ born_ip 4    │ born_port 4  │ store_timestamp_ms 8 │ 40..64
    ├──────────────┬──────┴───────┬──────┴──────────────┴──────┬───────────────┤
    │ store_ip 4   │ store_port 4 │ reconsume_times 4          │ prepared_tx 8 │ 64..84
    ├──────────────┼──────────────┴────────────────────────────┴───────────────┤
    │ body_len 4   │ body …  │ topic_len 1 │ topic … │ props_len 2 │ props …   │ 84..
    └──────────────┴─────────────────────────────────────────────────────────────┘

`body_crc` is the CRC-32 of the body alone, as in RocketMQ. It leaves every header field,
the topic and the properties unprotected, and a flipped bit in QUEUEOFFSET, QUEUEID or the
topic would index a "valid" record at the wrong place. So, beyond RocketMQ 4.9, every record
ends with one more property, `__RECORD_CRC32` = 8 upper-case hex digits: the CRC-32 of the
whole record up to that value, with the PHYSICALOFFSET field read as zeros (so the commitlog
can patch the offset in when it places a batch). Decoding checks it and leaves it out of
`Record.properties`; it costs user properties 25 of their 32767 bytes.
"""

from __future__ import annotations

import enum
import socket
import struct
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from nodes.common import constants as c
from nodes.common.errors import CorruptRecordError

HEADER = struct.Struct(">iIIiiqqiq4siq4siiqi")
assert HEADER.size == 88
PHYS_OFFSET_FIELD = struct.Struct(">q")
PHYS_OFFSET_POS = 28  # byte position of PHYSICALOFFSET inside a record
STORE_TIMESTAMP_FIELD = struct.Struct(">q")
STORE_TIMESTAMP_POS = 56
TOPIC_LEN = struct.Struct(">B")
PROPS_LEN = struct.Struct(">h")  # a Java short: at most PROPERTIES_BYTES_MAX

PROPERTY_RECORD_CRC = c.PROPERTY_RECORD_CRC
RECORD_CRC_PREFIX = (PROPERTY_RECORD_CRC + c.PROPERTY_NAME_SEPARATOR).encode()
_RECORD_CRC_VALUE_BYTES = 9  # 8 hex digits, then the pair separator \x02 ends the record
RECORD_CRC_PROPERTY_BYTES = len(RECORD_CRC_PREFIX) + _RECORD_CRC_VALUE_BYTES
_ZERO_PHYS_OFFSET = bytes(8)
USER_PROPERTIES_BYTES_MAX = c.PROPERTIES_BYTES_MAX - RECORD_CRC_PROPERTY_BYTES
# The smallest well-formed record: empty body, one-byte topic, only the record CRC property.
RECORD_BYTES_MIN = HEADER.size + TOPIC_LEN.size + 1 + PROPS_LEN.size + RECORD_CRC_PROPERTY_BYTES

# ┌──────────────────────┬──────────────────┐
# │ remaining_bytes (>i) │ BLANK_MAGIC (>I) │  = 8 bytes, then zeros to the segment end
# └──────────────────────┴──────────────────┘
BLANK = struct.Struct(">iI")
assert BLANK.size == c.END_FILE_MIN_BLANK_BYTES
SIZE_AND_MAGIC = BLANK  # the first two fields of any record or blank share this shape

# RocketMQ MessageSysFlag bits this codec cares about.
SYS_FLAG_BORN_HOST_V6 = 0x10
SYS_FLAG_STORE_HOST_V6 = 0x20


class PropertiesTooLargeError(ValueError):
    """The encoded properties exceed what the record's 2-byte length can hold."""


class RecordKind(enum.Enum):
    """What `check_at` found at a position of a commitlog segment."""

    RECORD = "RECORD"  # a valid record (magic, sizes, physical offset and record CRC all check)
    BLANK = "BLANK"  # the end-of-segment marker: the next record is at the next segment
    CORRUPT = "CORRUPT"  # anything that fails a check (a torn write, flipped bits, garbage)
    EMPTY = "EMPTY"  # zero bytes: never written


@dataclass(slots=True)  # not frozen: the broker builds one per message sent, and frozen costs ~2.5x
class MessageToStore:
    """A message as the broker hands it to the store; the store assigns the offsets. Treat it
    as a value: nothing changes one after it is built (use dataclasses.replace)."""

    topic: str
    queue_id: int
    body: bytes
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    born_timestamp_ms: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    store_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    sys_flag: int = 0
    prepared_transaction_offset: int = 0


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded commitlog record: every field of the layout above."""

    total_size: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    phys_offset: int
    sys_flag: int
    born_timestamp_ms: int
    born_host: tuple[str, int]
    store_timestamp_ms: int
    store_host: tuple[str, int]
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: dict[str, str]

    @property
    def tags(self) -> str | None:
        return self.properties.get(c.PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(c.PROPERTY_KEYS)

    @property
    def offset_msg_id(self) -> str:
        return offset_msg_id(self.store_host[0], self.store_host[1], self.phys_offset)

    @property
    def msg_id(self) -> str:
        """The producer's unique id (UNIQ_KEY) when it set one, else the offset message id."""
        return self.properties.get(c.PROPERTY_UNIQ_KEY) or self.offset_msg_id


# --- properties --------------------------------------------------------------------------


def encode_properties(properties: Mapping[str, str]) -> str:
    """`name\\x01value\\x02` for every pair (RocketMQ's messageProperties2String).

    Raises:
        ValueError: a name or value contains one of the two separators.
    """
    if PROPERTY_RECORD_CRC in properties:
        raise ValueError(f"property {PROPERTY_RECORD_CRC!r} is reserved for the store")
    parts = []
    for name, value in properties.items():
        for text in (name, value):
            if c.PROPERTY_NAME_SEPARATOR in text or c.PROPERTY_SEPARATOR in text:
                raise ValueError(f"property {name!r} contains a reserved separator character")
        parts.append(f"{name}{c.PROPERTY_NAME_SEPARATOR}{value}{c.PROPERTY_SEPARATOR}")
    return "".join(parts)


def decode_properties(text: str) -> dict[str, str]:
    properties: dict[str, str] = {}
    for pair in text.split(c.PROPERTY_SEPARATOR):
        if pair:
            name, _, value = pair.partition(c.PROPERTY_NAME_SEPARATOR)
            properties[name] = value
    return properties


# --- tag hash and message ids ------------------------------------------------------------


@lru_cache(maxsize=4096)
def tag_hash(tags: str | None) -> int:
    """Java `String.hashCode()` of the TAGS property as a signed 32-bit int; 0 without tags.

    Java hashes UTF-16 code units, so characters outside the BMP count as two surrogates.
    """
    if not tags:
        return 0
    if tags.isascii():
        units: Any = tags.encode("ascii")
    else:
        raw = tags.encode("utf-16-be")
        units = struct.unpack(f">{len(raw) // 2}H", raw)
    h = 0
    for unit in units:
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


def offset_msg_id(host: str, port: int, phys_offset: int) -> str:
    """32 upper-case hex chars: store IPv4 (4 bytes), port (4 bytes), physical offset (8 bytes)."""
    return (ipv4_bytes(host) + struct.pack(">iq", port, phys_offset)).hex().upper()


def parse_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """The inverse of `offset_msg_id`: (host, port, phys_offset). Raises ValueError if malformed."""
    if len(msg_id) != 32:
        raise ValueError(f"offset message id {msg_id!r} must be 32 hex characters (IPv4 store host)")
    raw = bytes.fromhex(msg_id)
    port, phys_offset = struct.unpack_from(">iq", raw, 4)
    return socket.inet_ntoa(raw[:4]), port, phys_offset


def ipv4_bytes(host: str) -> bytes:
    try:
        return socket.inet_pton(socket.AF_INET, host)
    except OSError:
        raise ValueError(f"host {host!r} is not an IPv4 address (only IPv4 hosts are stored)") from None


# --- encode ------------------------------------------------------------------------------


def encode_record(msg: MessageToStore, *, queue_offset: int, phys_offset: int, store_timestamp_ms: int) -> bytes:
    """The record bytes for `msg` placed at `phys_offset` as entry `queue_offset` of its queue.

    Raises:
        PropertiesTooLargeError: the properties exceed USER_PROPERTIES_BYTES_MAX.
        ValueError: a host is not IPv4, the topic is empty or longer than 127 bytes, or a
            property contains a separator character.
    """
    if msg.sys_flag & (SYS_FLAG_BORN_HOST_V6 | SYS_FLAG_STORE_HOST_V6):
        raise ValueError("IPv6 hosts are not supported (sys_flag has an IPv6 bit set)")
    topic = msg.topic.encode()
    if not 0 < len(topic) <= c.TOPIC_NAME_BYTES_MAX:
        raise ValueError(f"topic must be 1..{c.TOPIC_NAME_BYTES_MAX} bytes, got {len(topic)}")
    props = encode_properties(msg.properties).encode()
    if len(props) > USER_PROPERTIES_BYTES_MAX:
        raise PropertiesTooLargeError(
            f"properties are {len(props)} bytes, over the {USER_PROPERTIES_BYTES_MAX}-byte limit")
    body = msg.body
    props_len = len(props) + RECORD_CRC_PROPERTY_BYTES
    total_size = HEADER.size + len(body) + TOPIC_LEN.size + len(topic) + PROPS_LEN.size + props_len
    header = HEADER.pack(
        total_size, c.RECORD_MAGIC, zlib.crc32(body), msg.queue_id, msg.flag, queue_offset, phys_offset,
        msg.sys_flag, msg.born_timestamp_ms, ipv4_bytes(msg.born_host[0]), msg.born_host[1],
        store_timestamp_ms, ipv4_bytes(msg.store_host[0]), msg.store_host[1], msg.reconsume_times,
        msg.prepared_transaction_offset, len(body))
    tail = b"".join((TOPIC_LEN.pack(len(topic)), topic, PROPS_LEN.pack(props_len), props, RECORD_CRC_PREFIX))
    crc = zlib.crc32(header[:PHYS_OFFSET_POS])
    crc = zlib.crc32(_ZERO_PHYS_OFFSET, crc)
    crc = zlib.crc32(header[PHYS_OFFSET_POS + 8:], crc)
    crc = zlib.crc32(body, crc)
    crc = zlib.crc32(tail, crc)
    return b"".join((header, body, tail, b"%08X\x02" % crc))


def properties_bytes(properties: Mapping[str, str]) -> bytes:
    """`encode_properties(properties).encode()`, checking separators with two counts.

    Each pair contributes exactly one name separator and one pair separator, so the counts
    match the number of pairs exactly when no name or value holds a separator.
    """
    if not properties:
        return b""
    text = "".join([f"{name}\x01{value}\x02" for name, value in properties.items()])
    pairs = len(properties)
    if (text.count(c.PROPERTY_NAME_SEPARATOR) != pairs or text.count(c.PROPERTY_SEPARATOR) != pairs
            or PROPERTY_RECORD_CRC in properties):
        encode_properties(properties)  # raises the precise ValueError
    return text.encode()


assert c.PROPERTY_NAME_SEPARATOR == "\x01" and c.PROPERTY_SEPARATOR == "\x02"


def blank_marker(remaining_bytes: int) -> bytes:
    """The 8-byte end-of-segment marker for a segment with `remaining_bytes` left after it starts."""
    if remaining_bytes < c.END_FILE_MIN_BLANK_BYTES:
        raise ValueError(f"a blank marker needs {c.END_FILE_MIN_BLANK_BYTES} bytes, got {remaining_bytes}")
    return BLANK.pack(remaining_bytes, c.BLANK_MAGIC)


# --- decode ------------------------------------------------------------------------------


def _layout_error(buf: Any, pos: int) -> tuple[str | None, tuple[Any, ...] | None]:
    """Check the framing of the record at `pos` without the CRC: (reason or None, header fields)."""
    if pos < 0 or len(buf) - pos < HEADER.size:
        return "fewer bytes than a record header", None
    fields = HEADER.unpack_from(buf, pos)
    total_size, magic = fields[0], fields[1]
    if magic != c.RECORD_MAGIC:
        return f"bad magic {magic:#010x}", None
    if total_size < RECORD_BYTES_MIN or total_size > len(buf) - pos:
        return f"total size {total_size} outside [{RECORD_BYTES_MIN}, {len(buf) - pos}]", None
    body_len = fields[16]
    topic_len_pos = pos + HEADER.size + body_len
    if body_len < 0 or topic_len_pos + TOPIC_LEN.size > pos + total_size:
        return f"body length {body_len} does not fit total size {total_size}", None
    (topic_len,) = TOPIC_LEN.unpack_from(buf, topic_len_pos)
    props_len_pos = topic_len_pos + TOPIC_LEN.size + topic_len
    if topic_len == 0 or props_len_pos + PROPS_LEN.size > pos + total_size:
        return f"topic length {topic_len} does not fit total size {total_size}", None
    (props_len,) = PROPS_LEN.unpack_from(buf, props_len_pos)
    if props_len < RECORD_CRC_PROPERTY_BYTES or props_len_pos + PROPS_LEN.size + props_len != pos + total_size:
        return f"properties length {props_len} does not add up to total size {total_size}", None
    if fields[7] & (SYS_FLAG_BORN_HOST_V6 | SYS_FLAG_STORE_HOST_V6):
        return "IPv6 host flags are set (only IPv4 records are written)", None
    return None, fields


_HOSTS: dict[bytes, str] = {}  # packed IPv4 -> dotted string; a store sees few distinct hosts


def _host(packed: bytes) -> str:
    host = _HOSTS.get(packed)
    if host is None:
        if len(_HOSTS) > 4096:
            _HOSTS.clear()
        host = _HOSTS[packed] = socket.inet_ntoa(packed)
    return host


def decode_record(buf: Any, pos: int = 0, *, check_crc: bool = True) -> Record:
    """Decode the record starting at `buf[pos]` (bytes, bytearray, memoryview or mmap).

    Raises:
        CorruptRecordError: the magic, a length or the record CRC does not check.
    """
    # Fast path: one unpack for the fixed header, two index reads for the variable lengths;
    # `_layout_error` re-derives the reason only when something is off.
    try:
        (total_size, magic, body_crc, queue_id, flag, queue_offset, phys_offset, sys_flag, born_ts, born_ip,
         born_port, store_ts, store_ip, store_port, reconsume_times, prepared_tx, body_len) = HEADER.unpack_from(
            buf, pos)
        end = pos + total_size
        body_end = pos + HEADER.size + body_len
        topic_start = body_end + 1
        topic_end = topic_start + buf[body_end]
        props_start = topic_end + PROPS_LEN.size
        props_len = (buf[topic_end] << 8) | buf[topic_end + 1]
    except (struct.error, IndexError):
        magic = None
    if (magic != c.RECORD_MAGIC or total_size < RECORD_BYTES_MIN or end > len(buf) or body_len < 0
            or topic_end == topic_start or props_start + props_len != end or props_len > c.PROPERTIES_BYTES_MAX
            or props_len < RECORD_CRC_PROPERTY_BYTES
            or sys_flag & (SYS_FLAG_BORN_HOST_V6 | SYS_FLAG_STORE_HOST_V6)):
        reason = _layout_error(buf, pos)[0] or "inconsistent lengths"
        raise CorruptRecordError(f"record at {pos}: {reason}")
    if check_crc and not _record_crc_matches(buf, pos, end):
        raise CorruptRecordError(f"record at {pos}: record CRC does not match")
    body = buf[pos + HEADER.size:body_end]
    if type(body) is not bytes:
        body = bytes(body)
    try:
        topic = str(buf[topic_start:topic_end], "utf-8")
        properties = decode_properties(str(buf[props_start:end - RECORD_CRC_PROPERTY_BYTES], "utf-8"))
    except UnicodeDecodeError as exc:
        raise CorruptRecordError(f"record at {pos}: topic or properties are not UTF-8 ({exc})") from None
    return Record(total_size, body_crc, queue_id, flag, queue_offset, phys_offset, sys_flag, born_ts,
                  (_host(born_ip), born_port), store_ts, (_host(store_ip), store_port), reconsume_times,
                  prepared_tx, body, topic, properties)


def iter_records(buf: Any) -> Iterator[Record]:
    """Decode back-to-back records (a pull response body). Raises CorruptRecordError."""
    pos = 0
    end = len(buf)
    while pos < end:
        record = decode_record(buf, pos)
        yield record
        pos += record.total_size


def check_at(buf: Any, pos: int, *, base_phys_offset: int = 0) -> tuple[RecordKind, int]:
    """Classify the bytes at `buf[pos]` cheaply: (kind, size in bytes; 0 when unknown).

    `buf` is a whole commitlog segment (or one record) whose first byte sits at
    `base_phys_offset` in the commitlog. A RECORD passes every check, including that its
    PHYSICALOFFSET field equals its own position, which tells a real record from an old or
    shifted copy of one. A BLANK must claim exactly the rest of `buf`.
    """
    remaining = len(buf) - pos
    if remaining < c.END_FILE_MIN_BLANK_BYTES:
        tail = buf[pos:]
        return (RecordKind.EMPTY, 0) if not any(tail) else (RecordKind.CORRUPT, 0)
    total_size, magic = SIZE_AND_MAGIC.unpack_from(buf, pos)
    if magic == c.BLANK_MAGIC:
        if total_size == remaining:
            return RecordKind.BLANK, total_size
        return RecordKind.CORRUPT, 0
    if magic != c.RECORD_MAGIC:
        if total_size == 0 and magic == 0:
            return RecordKind.EMPTY, 0
        return RecordKind.CORRUPT, 0
    _reason, fields = _layout_error(buf, pos)
    if fields is None or fields[6] != base_phys_offset + pos:
        return RecordKind.CORRUPT, 0
    if not _record_crc_matches(buf, pos, pos + total_size):
        return RecordKind.CORRUPT, 0
    return RecordKind.RECORD, total_size


# (phys offset, then `index_fields`: total size, topic, queue id, queue offset, store timestamp,
# properties text) of a record that passed every check
CheckedRecord = tuple[int, int, str, int, int, int, str]


def index_fields(buf: Any, pos: int, end: int, phys_offset: int) -> tuple[int, str, int, int, int, str] | None:
    """What dispatch needs of the record at `buf[pos]`, when it passes every check of
    `check_at` (with its PHYSICALOFFSET field equal to `phys_offset`) and ends by `end`:
    (total size, topic, queue id, queue offset, store timestamp, properties text without the
    record CRC). None for anything else (a blank, a torn or damaged record, bytes not yet
    written, a topic or properties that are not UTF-8): `check_at` and `decode_record` then
    tell what it is.

    One pass over the header and the CRC, no body copy and no `Record`: a replica indexes
    every record it receives this way. `buf` may be a memoryview of a segment.
    """
    if end - pos < RECORD_BYTES_MIN:
        return None
    (total_size, magic, _body_crc, queue_id, _flag, queue_offset, record_phys_offset, sys_flag, _born_ts, _born_ip,
     _born_port, store_ts, _store_ip, _store_port, _reconsume, _prepared_tx, body_len) = HEADER.unpack_from(buf, pos)
    record_end = pos + total_size
    if (magic != c.RECORD_MAGIC or total_size < RECORD_BYTES_MIN or record_end > end or body_len < 0
            or record_phys_offset != phys_offset or sys_flag & (SYS_FLAG_BORN_HOST_V6 | SYS_FLAG_STORE_HOST_V6)):
        return None
    topic_len_pos = pos + HEADER.size + body_len
    if topic_len_pos + TOPIC_LEN.size > record_end:
        return None
    topic_start = topic_len_pos + TOPIC_LEN.size
    props_len_pos = topic_start + buf[topic_len_pos]
    if props_len_pos == topic_start or props_len_pos + PROPS_LEN.size > record_end:
        return None
    (props_len,) = PROPS_LEN.unpack_from(buf, props_len_pos)
    if props_len < RECORD_CRC_PROPERTY_BYTES or props_len_pos + PROPS_LEN.size + props_len != record_end:
        return None
    if not _record_crc_matches(buf, pos, record_end):
        return None
    try:
        topic = str(buf[topic_start:props_len_pos], "utf-8")
        properties = str(buf[props_len_pos + PROPS_LEN.size:record_end - RECORD_CRC_PROPERTY_BYTES], "utf-8")
    except UnicodeDecodeError:
        return None
    return total_size, topic, queue_id, queue_offset, store_ts, properties


def _record_crc_matches(buf: Any, pos: int, end: int) -> bool:
    """Whether the record in [pos, end) ends with its record CRC property and the CRC matches.

    The record CRC covers the body CRC field and the body, so it implies the body CRC.
    """
    value_start = end - _RECORD_CRC_VALUE_BYTES
    if buf[value_start - len(RECORD_CRC_PREFIX):value_start] != RECORD_CRC_PREFIX or buf[end - 1] != 2:
        return False
    crc = zlib.crc32(buf[pos:pos + PHYS_OFFSET_POS])
    crc = zlib.crc32(_ZERO_PHYS_OFFSET, crc)
    crc = zlib.crc32(buf[pos + PHYS_OFFSET_POS + 8:value_start], crc)
    return buf[value_start:end - 1] == b"%08X" % crc


def peek_size_and_magic(buf: Any, pos: int) -> tuple[int, int]:
    """The first two fields at `pos` (total size, magic) without any check."""
    return SIZE_AND_MAGIC.unpack_from(buf, pos)


def compiled_rules_layout() -> tuple[object, ...]:
    """What the compiled record rules (nodes/store/_record_rules.h) are initialised with: the
    header layout, the magics, the blank marker, the PHYSICALOFFSET position, the properties
    length, the record CRC property and the IPv6 flags. Every module built on them (the slave's
    record check, the read scan) takes these first and refuses a layout it was not written for."""
    return (HEADER.format, HEADER.size, RECORD_BYTES_MIN, c.RECORD_MAGIC, c.BLANK_MAGIC, c.END_FILE_MIN_BLANK_BYTES,
            PHYS_OFFSET_POS, PROPS_LEN.format, RECORD_CRC_PREFIX, RECORD_CRC_PROPERTY_BYTES,
            SYS_FLAG_BORN_HOST_V6 | SYS_FLAG_STORE_HOST_V6)
