"""What the batch codec twin tests share (test_record_encode_twins, test_batch_scan_twins,
test_batch_place_twins): the fields of an encoded batch, hypothesis strategies for bodies and
properties, the compiled encoder behind encode_scanned's keywords, and the decoding check."""

from __future__ import annotations

import zlib
from collections.abc import Callable

from hypothesis import strategies as st
from support.twins import require_compiled

from nodes.common import constants as c
from nodes.store import message_batch, record, record_batch
from nodes.store.record_batch import ScannedBatch, scan_batch_body_python

INT32 = st.integers(-2**31, 2**31 - 1)
INT64 = st.integers(-2**63, 2**63 - 1)
INT64_EDGES = st.sampled_from([-2**63, -1, 0, 1, 2**63 - 1]) | INT64
BODY_BYTES_MAX = 1 << 20  # the scan's limit here: large enough for every generated batch
HOSTS = {"born_host": ("10.1.2.3", 5555), "store_host": ("127.0.0.1", 10911)}
FIELDS = {"topic": "T", "queue_id": 1, "first_queue_offset": 0, "store_timestamp_ms": 2, "born_timestamp_ms": 3,
          **HOSTS}

_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"), max_size=10)
_ascii = st.text(st.characters(min_codepoint=3, max_codepoint=127), max_size=10)
PROPERTIES = st.one_of(
    st.just({}),
    st.sampled_from(["a", "Tág", "", "x" * 40]).map(lambda tags: {c.PROPERTY_TAGS: tags}),
    st.dictionaries(_ascii.filter(lambda k: k not in (c.PROPERTY_RECORD_CRC, c.PROPERTY_DELAY)), _ascii, max_size=4),
    st.dictionaries(_text.filter(lambda k: k != c.PROPERTY_RECORD_CRC), _text, max_size=4),
)


@st.composite
def body_bytes(draw):
    """1 byte to 40 KiB; a long one is a short drawn pattern repeated (drawing 40 KiB is slow)."""
    size = draw(st.sampled_from([1, 2, 1024, 1024, 4096]) | st.integers(1, 40 * 1024))
    pattern = draw(st.binary(min_size=1, max_size=64))
    return (pattern * (size // len(pattern) + 1))[:size]


HOST_PAIRS = st.tuples(st.sampled_from(["10.0.0.2", "127.0.0.1", "0.0.0.0", "255.255.255.255"]), INT32)


def keyword_encoder() -> Callable[..., tuple[bytearray, list[int]]]:
    """encode_scanned's keywords onto the compiled encoder; fails (never skips) when it is not built."""
    encoder = require_compiled(record_batch.compiled_encoder, "record encoder nodes.store._record_encode")

    def encode(scanned, *, topic, queue_id, first_queue_offset, store_timestamp_ms, born_timestamp_ms, born_host,
               store_host, sys_flag=0, reconsume_times=0):
        topic_part, born_ip, store_ip = record_batch._record_constants(topic, sys_flag, born_host, store_host)
        return encoder(scanned.blob, scanned.entries, topic_part, queue_id, first_queue_offset, store_timestamp_ms,
                       born_timestamp_ms, born_ip, born_host[1], store_ip, store_host[1], sys_flag, reconsume_times)

    return encode


def framed_entries(blob: bytes) -> list[tuple[int, int, int, int, int, int]]:
    """The entries of a well-framed batch body without the scan's checks on the properties (so
    non-ASCII properties, which the scan leaves to decoding, can be encoded too)."""
    entries, pos = [], 0
    while pos < len(blob):
        total_size, _magic, _crc, flag, body_len = message_batch.ENTRY_HEAD.unpack_from(blob, pos)
        body_start = pos + message_batch.ENTRY_HEAD.size
        props_start = body_start + body_len + message_batch.PROPS_LEN.size
        entries.append((body_start, body_len, flag, props_start, pos + total_size - props_start, 0))
        pos += total_size
    return entries


def scanned_of(messages) -> ScannedBatch:
    """(body, flag, properties) through the client's encoder, then the store's scan when it takes them."""
    blob = message_batch.encode_checked(messages)
    entries = framed_entries(blob)
    scanned = scan_batch_body_python(blob, BODY_BYTES_MAX)
    if scanned is None:  # non-ASCII properties: the scan leaves them to decoding
        return ScannedBatch(blob, entries)
    assert [entry[:5] for entry in scanned.entries] == [entry[:5] for entry in entries]
    return scanned


def assert_decodes_to(blob: bytearray, sizes: list[int], messages, fields: dict) -> None:
    """Every record checks (record CRC included) and holds what was put in."""
    assert sum(sizes) == len(blob) and len(sizes) == len(messages)
    phys = 0
    for i, (size, (body, flag, properties)) in enumerate(zip(sizes, messages, strict=True)):
        rec = record.decode_record(blob, phys, check_crc=True)
        assert rec.total_size == size
        assert (rec.body, rec.body_crc, rec.flag, rec.properties) == (body, zlib.crc32(body), flag, properties)
        assert (rec.topic, rec.queue_id, rec.queue_offset, rec.phys_offset) == (
            fields["topic"], fields["queue_id"], fields["first_queue_offset"] + i, 0)
        assert (rec.born_timestamp_ms, rec.store_timestamp_ms, rec.born_host, rec.store_host) == (
            fields["born_timestamp_ms"], fields["store_timestamp_ms"], fields["born_host"], fields["store_host"])
        assert (rec.sys_flag, rec.reconsume_times, rec.prepared_transaction_offset) == (
            fields.get("sys_flag", 0), fields.get("reconsume_times", 0), 0)
        phys += size
