"""The commitlog's write path: a batch of messages encoded into records in one pass, pure.

Owns `encode_batch` (every record of a put in one buffer, topic and hosts encoded once) and
`place_batch` (writing each record's position into it once the commitlog knows where the
batch goes). The bytes are exactly `record.encode_record`'s, message by message; `record`
stays the one description of the layout, this module only makes writing it cheap.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from nodes.common import constants as c
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


def place_batch(blob: bytearray, sizes: Sequence[int], phys_offset: int) -> list[int]:
    """Write each record's position into its PHYSICALOFFSET field, the batch starting at
    `phys_offset`; returns the positions."""
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
