import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples

from nodes.common import constants as c
from nodes.common.errors import CorruptRecordError
from nodes.store.record import (
    HEADER,
    PHYS_OFFSET_POS,
    USER_PROPERTIES_BYTES_MAX,
    MessageToStore,
    RecordKind,
    blank_marker,
    check_at,
    decode_properties,
    decode_record,
    encode_properties,
    encode_record,
    iter_records,
    offset_msg_id,
    parse_offset_msg_id,
    tag_hash,
)


def java_string_hash(s: str) -> int:
    """Java's String.hashCode, written out independently: s[0]*31^(n-1) + ... over UTF-16 units."""
    units = [int.from_bytes(s.encode("utf-16-be")[i:i + 2], "big") for i in range(0, len(s.encode("utf-16-be")), 2)]
    n = len(units)
    value = sum(u * pow(31, n - 1 - i, 2**32) for i, u in enumerate(units)) % 2**32
    return value - 2**32 if value >= 2**31 else value


def test_tag_hash_matches_java_string_hash_code():
    assert tag_hash("a") == 97
    assert tag_hash("ab") == 3105
    assert tag_hash("hello") == 99162322
    assert tag_hash("TagA") == 2598919  # 84*31^3 + 97*31^2 + 103*31 + 65
    assert tag_hash("Hello World") == -862545276  # overflows into a negative int, as in Java
    assert tag_hash("\U0001F600") == 0xD83D * 31 + 0xDE00  # two UTF-16 surrogates


def test_tag_hash_is_zero_without_tags():
    assert tag_hash(None) == 0
    assert tag_hash("") == 0


@given(st.text(max_size=40))
def test_tag_hash_agrees_with_the_polynomial_definition(tags):
    assert tag_hash(tags) == (java_string_hash(tags) if tags else 0)
    assert -(2**31) <= tag_hash(tags) < 2**31


_prop_text = st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                     max_size=20)
_topics = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40).filter(
    lambda t: len(t.encode()) <= c.TOPIC_NAME_BYTES_MAX)


@settings(max_examples=examples(200))
@given(topic=_topics, body=st.binary(max_size=2000), properties=st.dictionaries(_prop_text.filter(lambda k: k != c.PROPERTY_RECORD_CRC), _prop_text, max_size=6),
       queue_id=st.integers(0, 2**31 - 1), queue_offset=st.integers(0, 2**63 - 1),
       phys_offset=st.integers(0, 2**63 - 1), store_ts=st.integers(0, 2**62), flag=st.integers(-(2**31), 2**31 - 1),
       port=st.integers(0, 65535), reconsume=st.integers(0, 100))
def test_record_round_trip(topic, body, properties, queue_id, queue_offset, phys_offset, store_ts, flag, port,
                           reconsume):
    msg = MessageToStore(topic=topic, queue_id=queue_id, body=body, flag=flag, properties=properties,
                         born_timestamp_ms=store_ts // 2, born_host=("10.1.2.3", port),
                         store_host=("192.168.0.9", 10911), reconsume_times=reconsume,
                         prepared_transaction_offset=7)
    data = encode_record(msg, queue_offset=queue_offset, phys_offset=phys_offset, store_timestamp_ms=store_ts)
    record = decode_record(data)
    assert record.total_size == len(data)
    assert (record.topic, record.queue_id, record.body, record.flag, record.properties) == (
        topic, queue_id, body, flag, properties)
    assert (record.queue_offset, record.phys_offset, record.store_timestamp_ms) == (queue_offset, phys_offset,
                                                                                    store_ts)
    assert record.born_host == ("10.1.2.3", port)
    assert record.store_host == ("192.168.0.9", 10911)
    assert (record.born_timestamp_ms, record.reconsume_times, record.prepared_transaction_offset) == (
        store_ts // 2, reconsume, 7)
    assert record.body_crc == zlib.crc32(body)
    assert decode_properties(encode_properties(properties)) == properties


def test_layout_matches_the_reference_field_order():
    msg = MessageToStore("T", 3, b"body", flag=5, properties={"TAGS": "a"}, born_timestamp_ms=11,
                         born_host=("1.2.3.4", 99), store_host=("5.6.7.8", 10911), reconsume_times=2)
    data = encode_record(msg, queue_offset=42, phys_offset=4096, store_timestamp_ms=12)
    assert HEADER.size == 88
    total, magic, crc, queue_id, flag, queue_offset, phys = struct.unpack_from(">iIIiiqq", data)
    assert (total, magic, crc, queue_id, flag, queue_offset, phys) == (
        len(data), c.RECORD_MAGIC, zlib.crc32(b"body"), 3, 5, 42, 4096)
    assert struct.unpack_from(">q", data, PHYS_OFFSET_POS)[0] == 4096
    assert data[48:56] == bytes([1, 2, 3, 4]) + struct.pack(">i", 99)  # born host: IPv4 + int port
    assert data[84:88 + 4] == struct.pack(">i", 4) + b"body"
    assert data[92:94] == b"\x01T"  # one-byte topic length
    crc_pair = b"__RECORD_CRC32\x01" + data[-9:-1] + b"\x02"
    assert data[94:96] == struct.pack(">h", len("TAGS\x01a\x02") + len(crc_pair))
    assert data[96:] == b"TAGS\x01a\x02" + crc_pair
    # the record CRC: everything before its value, with the physical offset read as zeros
    unplaced = data[:PHYS_OFFSET_POS] + bytes(8) + data[PHYS_OFFSET_POS + 8:-9]
    assert data[-9:-1] == b"%08X" % zlib.crc32(unplaced)
    assert decode_record(data).properties == {"TAGS": "a"}


@pytest.mark.parametrize("position", [12, 20, 27, 40, 60, 72, 80, 93, -12, -5])
def test_damage_outside_the_body_is_caught_by_the_record_crc(position):
    """queue id, queue offset, timestamps, hosts, topic, properties, the CRC itself"""
    data = bytearray(encode_record(MessageToStore("Topic", 3, b"body", properties={"TAGS": "a"}), queue_offset=42,
                                   phys_offset=0, store_timestamp_ms=12))
    data[position] ^= 0x04
    assert check_at(data, 0)[0] is RecordKind.CORRUPT
    with pytest.raises(CorruptRecordError, match="record CRC"):
        decode_record(bytes(data))


def test_the_record_crc_property_is_reserved():
    with pytest.raises(ValueError, match="reserved"):
        encode_properties({"__RECORD_CRC32": "0"})


def test_record_properties_and_ids():
    msg = MessageToStore("T", 0, b"x", properties={"TAGS": "TagA", "KEYS": "k1 k2"},
                         store_host=("127.0.0.1", 10911))
    record = decode_record(encode_record(msg, queue_offset=0, phys_offset=255, store_timestamp_ms=1))
    assert record.tags == "TagA" and record.keys == "k1 k2"
    assert record.offset_msg_id == "7F00000100002A9F00000000000000FF"
    assert record.msg_id == record.offset_msg_id
    with_uniq = MessageToStore("T", 0, b"x", properties={c.PROPERTY_UNIQ_KEY: "C0A8000100002A9F"})
    assert decode_record(encode_record(with_uniq, queue_offset=0, phys_offset=0,
                                       store_timestamp_ms=1)).msg_id == "C0A8000100002A9F"


@given(st.integers(0, 255), st.integers(0, 255), st.integers(0, 65535), st.integers(0, 2**63 - 1))
def test_offset_msg_id_round_trip(a, b, port, phys_offset):
    host = f"{a}.{b}.0.1"
    msg_id = offset_msg_id(host, port, phys_offset)
    assert len(msg_id) == 32 and msg_id == msg_id.upper()
    assert parse_offset_msg_id(msg_id) == (host, port, phys_offset)


def test_parse_offset_msg_id_rejects_malformed_ids():
    with pytest.raises(ValueError):
        parse_offset_msg_id("ABC")
    with pytest.raises(ValueError):
        parse_offset_msg_id("Z" * 32)


def test_encode_rejects_what_the_layout_cannot_hold():
    with pytest.raises(ValueError, match="IPv4"):
        encode_record(MessageToStore("T", 0, b"", store_host=("::1", 1)), queue_offset=0, phys_offset=0,
                      store_timestamp_ms=0)
    with pytest.raises(ValueError, match="topic"):
        encode_record(MessageToStore("x" * 128, 0, b""), queue_offset=0, phys_offset=0, store_timestamp_ms=0)
    with pytest.raises(ValueError, match="properties"):
        encode_record(MessageToStore("T", 0, b"", properties={"k": "v" * (USER_PROPERTIES_BYTES_MAX - 2)}),
                      queue_offset=0, phys_offset=0, store_timestamp_ms=0)
    encode_record(MessageToStore("T", 0, b"", properties={"k": "v" * (USER_PROPERTIES_BYTES_MAX - 3)}),
                  queue_offset=0, phys_offset=0, store_timestamp_ms=0)
    with pytest.raises(ValueError, match="separator"):
        encode_properties({"a\x01": "b"})


def _record(phys_offset=0, body=b"payload", queue_offset=0):
    return encode_record(MessageToStore("T", 0, body), queue_offset=queue_offset, phys_offset=phys_offset,
                         store_timestamp_ms=1)


def test_decode_names_the_position_and_reason_of_corruption():
    data = bytearray(_record())
    data[HEADER.size] ^= 0x01  # the first body byte
    with pytest.raises(CorruptRecordError, match="at 0: record CRC"):
        decode_record(bytes(data))
    assert decode_record(bytes(data), check_crc=False).body != b"payload"
    with pytest.raises(CorruptRecordError, match="at 4: bad magic"):
        decode_record(b"\0\0\0" + _record(), 4)
    with pytest.raises(CorruptRecordError, match="fewer bytes"):
        decode_record(_record()[:50])


def test_iter_records_walks_concatenated_records():
    first, second = _record(0, b"a", 0), _record(100, b"bb", 1)
    assert [r.body for r in iter_records(first + second)] == [b"a", b"bb"]
    with pytest.raises(CorruptRecordError):
        list(iter_records(first + second[:-1]))


def test_check_at_classifies_positions():
    segment_bytes = 1024
    buf = bytearray(segment_bytes)
    first = _record(0, b"one")
    second = _record(len(first), b"two")
    buf[:len(first)] = first
    buf[len(first):len(first) + len(second)] = second
    end = len(first) + len(second)
    assert check_at(buf, 0) == (RecordKind.RECORD, len(first))
    assert check_at(buf, len(first)) == (RecordKind.RECORD, len(second))
    assert check_at(buf, end) == (RecordKind.EMPTY, 0)
    # a record copied to the wrong place fails: its PHYSICALOFFSET names another position
    assert check_at(buf, len(first), base_phys_offset=segment_bytes)[0] is RecordKind.CORRUPT
    buf[end:end + 8] = blank_marker(segment_bytes - end)
    assert check_at(buf, end) == (RecordKind.BLANK, segment_bytes - end)
    buf[end:end + 8] = blank_marker(segment_bytes - end - 1)  # must claim exactly the rest
    assert check_at(buf, end)[0] is RecordKind.CORRUPT
    buf[HEADER.size] ^= 0xFF
    assert check_at(buf, 0)[0] is RecordKind.CORRUPT
    assert check_at(buf, segment_bytes - 4) == (RecordKind.EMPTY, 0)


def test_blank_marker_layout():
    assert blank_marker(4096) == struct.pack(">iI", 4096, c.BLANK_MAGIC)
    with pytest.raises(ValueError):
        blank_marker(7)
