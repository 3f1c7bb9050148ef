"""The commitlog's write path: a batch of messages encoded into records in one pass, pure.

Owns `encode_batch` (every record of a put in one buffer, topic and hosts encoded once),
`scan_batch_body` + `encode_scanned` (a producer's batch body written as those records
straight from its bytes, without a dict or a `MessageToStore` per message) and `place_batch`
(writing each record's position into it once the commitlog knows where the batch goes). The
bytes are exactly `record.encode_record`'s, message by message; `record` stays the one
description of the layout, this module only makes writing it cheap.

`scan_batch_body`, `encode_scanned` and `place_batch` run their compiled twins
(`nodes.store._batch_body` and `nodes.store._record_encode`, built by the install when a C
compiler is there) and otherwise the Python loops `scan_batch_body_python`,
`encode_scanned_python` and `place_batch_python`, which are the reference: both give the same
results, and the unit tests run both. `MQLAB_PURE_PYTHON_ENCODE=1` in the environment
(read at import) forces the Python loops.
"""

from __future__ import annotations

import importlib
import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from nodes.common import constants as c
from nodes.common.compiled_twin import load_twin
from nodes.store.message_batch import ENTRY_BYTES_MIN, ENTRY_HEAD, PURE_PYTHON_ENV
from nodes.store.record import (
    HEADER,
    PHYS_OFFSET_FIELD,
    PHYS_OFFSET_POS,
    PROPS_LEN,
    RECORD_CRC_PREFIX,
    RECORD_CRC_PROPERTY_BYTES,
    SYS_FLAG_BORN_HOST_V6,
    SYS_FLAG_STORE_HOST_V6,
    TOPIC_LEN,
    USER_PROPERTIES_BYTES_MAX,
    MessageToStore,
    PropertiesTooLargeError,
    ipv4_bytes,
    offset_msg_id,
    properties_bytes,
    tag_hash,
)

_IPV4_BY_HOST: dict[str, bytes] = {}  # dotted host -> packed IPv4; a store sees few distinct hosts


def _ipv4_cached(host: str) -> bytes:
    packed = _IPV4_BY_HOST.get(host)
    if packed is None:
        packed = ipv4_bytes(host)  # raises ValueError for anything but IPv4
        if len(_IPV4_BY_HOST) > 4096:
            _IPV4_BY_HOST.clear()
        _IPV4_BY_HOST[host] = packed
    return packed


def encode_batch(msgs: Sequence[MessageToStore], *, first_queue_offset: int,
                 store_timestamp_ms: int) -> tuple[bytearray, list[int]]:
    """The records of `msgs` back to back, as queue offsets `first_queue_offset`, ... with every
    PHYSICALOFFSET field zero, and the size of each record.

    The write path of the commitlog: one pass, one buffer. Once `place_batch` has written each
    record's position into its PHYSICALOFFSET field, the bytes are exactly those of
    `encode_record` for each message (the record CRC reads that field as zeros anyway).

    Raises:
        PropertiesTooLargeError, ValueError: as `encode_record`, for the first message refused.
    """
    pack_header = HEADER.pack
    crc32 = zlib.crc32
    magic = c.RECORD_MAGIC
    parts: list[bytes] = []
    sizes: list[int] = []
    topic_text: str | None = None
    topic_part = b""
    queue_offset = first_queue_offset
    for msg in msgs:
        if msg.topic != topic_text:  # one topic per batch in practice: encode and check it once
            topic = msg.topic.encode()
            if not 0 < len(topic) <= c.TOPIC_NAME_BYTES_MAX:
                raise ValueError(f"topic must be 1..{c.TOPIC_NAME_BYTES_MAX} bytes, got {len(topic)}")
            topic_text, topic_part = msg.topic, TOPIC_LEN.pack(len(topic)) + topic
        if msg.sys_flag & (SYS_FLAG_BORN_HOST_V6 | SYS_FLAG_STORE_HOST_V6):
            raise ValueError("IPv6 hosts are not supported (sys_flag has an IPv6 bit set)")
        props = properties_bytes(msg.properties)
        if len(props) > USER_PROPERTIES_BYTES_MAX:
            raise PropertiesTooLargeError(
                f"properties are {len(props)} bytes, over the {USER_PROPERTIES_BYTES_MAX}-byte limit")
        body = msg.body
        body_len = len(body)
        props_len = len(props) + RECORD_CRC_PROPERTY_BYTES
        total_size = HEADER.size + body_len + len(topic_part) + PROPS_LEN.size + props_len
        born_host, store_host = msg.born_host, msg.store_host
        header = pack_header(
            total_size, magic, crc32(body), msg.queue_id, msg.flag, queue_offset, 0, msg.sys_flag,
            msg.born_timestamp_ms, _ipv4_cached(born_host[0]), born_host[1], store_timestamp_ms,
            _ipv4_cached(store_host[0]), store_host[1], msg.reconsume_times, msg.prepared_transaction_offset,
            body_len)
        tail = b"".join((topic_part, PROPS_LEN.pack(props_len), props, RECORD_CRC_PREFIX))
        parts += (header, body, tail, b"%08X\x02" % crc32(tail, crc32(body, crc32(header))))
        sizes.append(total_size)
        queue_offset += 1
    return bytearray().join(parts), sizes


def place_batch_python(blob: bytearray, sizes: Sequence[int], phys_offset: int) -> list[int]:
    """`place_batch` in Python: the reference the compiled placing is tested against."""
    pack_into = PHYS_OFFSET_FIELD.pack_into
    positions = []
    position = 0
    for size in sizes:
        pack_into(blob, position + PHYS_OFFSET_POS, phys_offset + position)
        positions.append(phys_offset + position)
        position += size
    return positions


def offset_msg_id_prefix(host: str, port: int) -> str:
    """The first 16 hex characters of every offset message id of one store host."""
    return offset_msg_id(host, port, 0)[:16]


# --- a producer's batch body written as records without decoding it ------------------------------

# translate() deletes every byte but the two separators, leaving the pattern of a properties text
_NOT_SEPARATORS = bytes(b for b in range(256) if b not in (1, 2))
_TAGS_FIRST = f"{c.PROPERTY_TAGS}\x01".encode()
_RESERVED = c.PROPERTY_RECORD_CRC.encode()
# put_scanned converts no delayed message into the schedule topic: such an entry needs the put
_DELAY_NAME = f"{c.PROPERTY_DELAY}\x01".encode()
_KEYS_FIRST = f"{c.PROPERTY_KEYS}\x01".encode()
_UNIQ_FIRST = f"{c.PROPERTY_UNIQ_KEY}\x01".encode()


@dataclass(frozen=True, slots=True)
class ScannedBatch:
    """A batch body (RocketMQ's, `message_batch`) whose every entry can become a record straight
    from its bytes: `entries` = (body start, body length, flag, properties start, properties
    length, tag code) in `blob`; `properties` = every entry's properties text, back to back (a
    name searched for in it is in some entry's properties: each text ends with a separator, and
    a name holds none)."""

    blob: bytes
    entries: list[tuple[int, int, int, int, int, int]]
    properties: bytes = b""

    def index_keys(self) -> list[tuple[str | None, str | None]]:
        """(KEYS, UNIQ_KEY) of every entry, each None when absent: what the message index needs,
        found in place without decoding the properties (`_last_value`, inlined: once per message
        on the send path)."""
        if _KEYS_FIRST not in self.properties and _UNIQ_FIRST not in self.properties:
            return [(None, None)] * len(self.entries)
        blob = self.blob
        found: list[tuple[str | None, str | None]] = []
        append = found.append
        keys_later, uniq_later = b"\x02" + _KEYS_FIRST, b"\x02" + _UNIQ_FIRST
        keys_skip, uniq_skip = len(keys_later), len(uniq_later)
        for _body_start, _body_len, _flag, start, size, _code in self.entries:
            end = start + size
            at = blob.rfind(keys_later, start, end)
            at = at + keys_skip if at >= 0 else (start + keys_skip - 1 if blob.startswith(_KEYS_FIRST, start) else -1)
            keys = blob[at:blob.index(b"\x02", at, end)].decode("ascii") if at >= 0 else None
            at = blob.rfind(uniq_later, start, end)
            at = at + uniq_skip if at >= 0 else (start + uniq_skip - 1 if blob.startswith(_UNIQ_FIRST, start) else -1)
            append((keys, blob[at:blob.index(b"\x02", at, end)].decode("ascii") if at >= 0 else None))
        return found


def scan_batch_body_python(blob: bytes, body_bytes_max: int) -> ScannedBatch | None:
    """`scan_batch_body` in Python: the reference the compiled scan is tested against.

    The entries of a batch body when each one is plain: framed, a body of 1..`body_bytes_max`
    bytes, ASCII properties laid out exactly as `properties_bytes` writes them, none reserved
    for the store, no delay level, within USER_PROPERTIES_BYTES_MAX; the bodies together
    within `body_bytes_max`. None for anything else: the caller then decodes the batch the
    general way, which also says what is wrong with it. Pure; no copy of any body.

    Records written from such entries carry the same properties as decoding and re-encoding
    would give (a name given twice keeps both pairs; readers keep the last, as decoding does).
    """
    entries = []
    props_parts = []
    head_bytes, entry_min = ENTRY_HEAD.size, ENTRY_BYTES_MIN
    unpack_head = ENTRY_HEAD.unpack_from
    props_max = USER_PROPERTIES_BYTES_MAX
    view = memoryview(blob)
    pos, end, bodies = 0, len(blob), 0
    while pos < end:
        if end - pos < entry_min:
            return None
        total_size, _magic, _crc, flag, body_len = unpack_head(blob, pos)
        body_start = pos + head_bytes
        props_start = body_start + body_len + 2
        entry_end = pos + total_size
        if body_len <= 0 or body_len > body_bytes_max or total_size < entry_min + body_len or entry_end > end:
            return None
        props_len = entry_end - props_start
        if ((blob[props_start - 2] << 8) | blob[props_start - 1]) != props_len or props_len > props_max:
            return None
        if props_len:
            if blob[entry_end - 1] != 2:
                return None
            props_parts.append(view[props_start:entry_end])
        entries.append((body_start, body_len, flag, props_start, props_len, 0))
        bodies += body_len
        pos = entry_end
    if not entries or (len(entries) > 1 and bodies > body_bytes_max):
        return None
    # The properties' checks run once over all of them: every text ends with \x02 (checked
    # above), so the separators of all are an alternation of \x01 and \x02 exactly when each
    # one's are, and a name with no \x02 in it is found in the joined text exactly when some
    # entry's text holds it.
    props = b"".join(props_parts)
    if props:
        separators = props.translate(None, _NOT_SEPARATORS)
        if (not props.isascii() or separators != b"\x01\x02" * (len(separators) // 2)
                or _RESERVED in props or _DELAY_NAME in props):
            return None
        if _TAGS_FIRST in props:
            entries = [(body_at, body_len, flag, at, size, _tag_code(blob, at, at + size))
                       for body_at, body_len, flag, at, size, _none in entries]
    return ScannedBatch(blob, entries, props)


def _tag_code(blob: bytes, props_start: int, props_end: int) -> int:
    """The tag code of one entry's properties text (its last TAGS value; 0 without one)."""
    tags = _last_value(blob[props_start:props_end], _TAGS_FIRST)
    return 0 if tags is None else tag_hash(tags)


def _last_value(props: bytes, name_first: bytes) -> str | None:
    """The value of the last pair named by `name_first` (`name\x01`) in a scanned entry's ASCII
    properties text, as decoding keeps the last; None without one. A pair starts the text or
    follows a separator, and no name or value holds a separator, so a match is a pair."""
    at = props.rfind(b"\x02" + name_first)
    at = at + 1 + len(name_first) if at >= 0 else (len(name_first) if props.startswith(name_first) else -1)
    if at < 0:
        return None
    return props[at:props.index(b"\x02", at)].decode("ascii")


# --- the compiled twins ---------------------------------------------------------------------------

# PURE_PYTHON_ENV (message_batch's) = "1": scan, encode and place with the Python loops even when compiled


def _record_encode_module() -> Any:
    """nodes.store._record_encode, initialised with this process's record layout.

    Raises:
        ImportError: the extension was not built (no C compiler when the project was installed).
        ValueError: the extension was written for another record layout than record.HEADER.
    """
    # by its full name: a missing module then says "No module named ..."
    _record_encode = importlib.import_module("nodes.store._record_encode")
    # the C side writes the header at fixed positions and refuses a layout it was not written for
    _record_encode.init(HEADER.format, HEADER.size, TOPIC_LEN.format, PROPS_LEN.format, c.RECORD_MAGIC,
                        RECORD_CRC_PREFIX, RECORD_CRC_PROPERTY_BYTES, struct.error)
    return _record_encode


def compiled_encoder() -> Callable[..., tuple[bytearray, list[int]]]:
    """The compiled encoder, initialised with this process's record layout (whatever the
    environment says): `(blob, entries, topic_part, queue_id, first_queue_offset,
    store_timestamp_ms, born_timestamp_ms, born_ip, born_port, store_ip, store_port, sys_flag,
    reconsume_times)`, the topic part and the IPs packed as `encode_scanned` packs them.

    Raises:
        ImportError: the extension was not built (no C compiler when the project was installed).
        ValueError: the extension was written for another record layout than record.HEADER.
    """
    return _record_encode_module().encode_scanned


def compiled_placer() -> Callable[[bytearray, Sequence[int], int], list[int]]:
    """The compiled placing, initialised with this process's record layout (whatever the
    environment says): `(blob, sizes, phys_offset)`, sizes a list or tuple of ints. Stricter
    than the Python loop: a size that cannot hold a PHYSICALOFFSET field, or sizes that run
    past the blob, raise ValueError before anything is written.

    Raises:
        ImportError: the extension was not built.
        ValueError: the extension was written for another record layout than record.HEADER.
    """
    return _record_encode_module().place_batch


def compiled_scanner() -> Callable[[bytes, int], ScannedBatch | None]:
    """The compiled scan, initialised with this process's batch entry layout, property names and
    ScannedBatch (whatever the environment says): `(blob, body_bytes_max)`.

    Raises:
        ImportError: the extension was not built.
        ValueError: the extension was written for another batch entry layout than ENTRY_HEAD.
    """
    _batch_body = importlib.import_module("nodes.store._batch_body")
    _batch_body.init_scan(ScannedBatch, ENTRY_HEAD.format, ENTRY_BYTES_MIN, USER_PROPERTIES_BYTES_MAX, _TAGS_FIRST,
                          _RESERVED, _DELAY_NAME)
    return _batch_body.scan_batch_body


# encode_scanned_compiled(blob, entries, topic_part, queue_id, ...), scan_batch_body_compiled(blob,
# body_bytes_max) and place_batch_compiled(blob, sizes, phys_offset), or None
encode_scanned_compiled, ENCODER = load_twin(compiled_encoder, "encoder", PURE_PYTHON_ENV)
scan_batch_body_compiled, SCANNER = load_twin(compiled_scanner, "scanner", PURE_PYTHON_ENV)
place_batch_compiled, PLACER = load_twin(compiled_placer, "placing", PURE_PYTHON_ENV)


def place_batch(blob: bytearray, sizes: Sequence[int], phys_offset: int) -> list[int]:
    """Write each record's position into its PHYSICALOFFSET field, the batch starting at
    `phys_offset`; returns the positions (`place_batch_python`, compiled when built).

    Raises:
        ValueError: (compiled) a size too small for a record, or sizes that run past the blob.
    """
    if place_batch_compiled is not None:
        return place_batch_compiled(blob, sizes, phys_offset)
    return place_batch_python(blob, sizes, phys_offset)


def scan_batch_body(blob: bytes, body_bytes_max: int) -> ScannedBatch | None:
    """The entries of a batch body when each one is plain, else None (`scan_batch_body_python`,
    compiled when built)."""
    if scan_batch_body_compiled is not None:
        return scan_batch_body_compiled(blob, body_bytes_max)
    return scan_batch_body_python(blob, body_bytes_max)


def _record_constants(topic: str, sys_flag: int, born_host: tuple[str, int],
                      store_host: tuple[str, int]) -> tuple[bytes, bytes, bytes]:
    """The topic part (length byte + topic) and the packed born and store IPs of every record
    of a put, checked as `encode_batch` checks them.

    Raises:
        ValueError: topic length, IPv6 flags, a host that is not IPv4.
    """
    topic_bytes = topic.encode()
    if not 0 < len(topic_bytes) <= c.TOPIC_NAME_BYTES_MAX:
        raise ValueError(f"topic must be 1..{c.TOPIC_NAME_BYTES_MAX} bytes, got {len(topic_bytes)}")
    if sys_flag & (SYS_FLAG_BORN_HOST_V6 | SYS_FLAG_STORE_HOST_V6):
        raise ValueError("IPv6 hosts are not supported (sys_flag has an IPv6 bit set)")
    return TOPIC_LEN.pack(len(topic_bytes)) + topic_bytes, _ipv4_cached(born_host[0]), _ipv4_cached(store_host[0])


def encode_scanned(scanned: ScannedBatch, *, topic: str, queue_id: int, first_queue_offset: int,
                   store_timestamp_ms: int, born_timestamp_ms: int, born_host: tuple[str, int],
                   store_host: tuple[str, int], sys_flag: int = 0,
                   reconsume_times: int = 0) -> tuple[bytearray, list[int]]:
    """`encode_batch` for a scanned batch body: the same record bytes as encoding its decoded
    messages, with every PHYSICALOFFSET field zero, and the size of each record
    (`encode_scanned_python`, compiled when built).

    Raises:
        ValueError: as `encode_batch` (topic length, IPv6 flags, a host that is not IPv4).
    """
    if encode_scanned_compiled is None:
        return encode_scanned_python(scanned, topic=topic, queue_id=queue_id, first_queue_offset=first_queue_offset,
                                     store_timestamp_ms=store_timestamp_ms, born_timestamp_ms=born_timestamp_ms,
                                     born_host=born_host, store_host=store_host, sys_flag=sys_flag,
                                     reconsume_times=reconsume_times)
    topic_part, born_ip, store_ip = _record_constants(topic, sys_flag, born_host, store_host)
    return encode_scanned_compiled(scanned.blob, scanned.entries, topic_part, queue_id, first_queue_offset,
                                   store_timestamp_ms, born_timestamp_ms, born_ip, born_host[1], store_ip,
                                   store_host[1], sys_flag, reconsume_times)


def encode_scanned_python(scanned: ScannedBatch, *, topic: str, queue_id: int, first_queue_offset: int,
                          store_timestamp_ms: int, born_timestamp_ms: int, born_host: tuple[str, int],
                          store_host: tuple[str, int], sys_flag: int = 0,
                          reconsume_times: int = 0) -> tuple[bytearray, list[int]]:
    """`encode_scanned` in Python: the reference the compiled encoder is tested against.

    Raises:
        ValueError: as `encode_batch` (topic length, IPv6 flags, a host that is not IPv4).
    """
    topic_part, born_ip, store_ip = _record_constants(topic, sys_flag, born_host, store_host)
    born_port, store_port = born_host[1], store_host[1]
    fixed_bytes = HEADER.size + len(topic_part) + PROPS_LEN.size + RECORD_CRC_PROPERTY_BYTES
    pack_header, pack_props_len = HEADER.pack, PROPS_LEN.pack
    crc32 = zlib.crc32
    magic = c.RECORD_MAGIC
    view = memoryview(scanned.blob)
    parts: list[bytes | memoryview] = []
    sizes: list[int] = []
    queue_offset = first_queue_offset
    for body_start, body_len, flag, props_start, props_len, _tag_code in scanned.entries:
        body = view[body_start:body_start + body_len]
        total_size = fixed_bytes + body_len + props_len
        header = pack_header(
            total_size, magic, crc32(body), queue_id, flag, queue_offset, 0, sys_flag, born_timestamp_ms, born_ip,
            born_port, store_timestamp_ms, store_ip, store_port, reconsume_times, 0, body_len)
        tail = b"".join((topic_part, pack_props_len(props_len + RECORD_CRC_PROPERTY_BYTES),
                         view[props_start:props_start + props_len], RECORD_CRC_PREFIX))
        parts += (header, body, tail, b"%08X\x02" % crc32(tail, crc32(body, crc32(header))))
        sizes.append(total_size)
        queue_offset += 1
    return bytearray().join(parts), sizes
