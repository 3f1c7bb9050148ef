"""The test-only switch pull-flip-body-byte: a slave's pull answer carries altered bodies the client decodes."""

from __future__ import annotations

import zlib

from nodes.broker.pull import flip_body_bytes
from nodes.client.pull_decode import decode_messages
from nodes.store.record import MessageToStore, encode_record


def _records(*bodies: bytes) -> bytes:
    out, phys_offset = [], 0
    for i, body in enumerate(bodies):
        rec = encode_record(MessageToStore("T", 0, body, properties={"UNIQ_KEY": f"id{i}"}), queue_offset=i,
                            phys_offset=phys_offset, store_timestamp_ms=1)
        out.append(rec)
        phys_offset += len(rec)
    return b"".join(out)


def test_every_body_gets_its_first_byte_inverted_and_the_framing_stays_valid():
    bodies = (b"hello", b"", b"world!")
    flipped = decode_messages(flip_body_bytes(_records(*bodies)), broker_name="b", min_offset=0, max_offset=3,
                              tags=None)
    assert [m.msg_id for m in flipped] == ["id0", "id1", "id2"]
    assert [bytes(m.body) for m in flipped] == [b"\x97ello", b"", b"\x88orld!"]
    assert zlib.crc32(flipped[0].body) != zlib.crc32(bodies[0])  # what the integrity check compares


def test_nothing_to_flip_in_an_empty_answer():
    assert flip_body_bytes(b"") == b""
