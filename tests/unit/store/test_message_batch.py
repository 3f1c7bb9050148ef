"""RocketMQ's batch body: encoding and decoding a producer's batch, and refusing bad framing."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodes.store.message_batch import ENTRY_HEAD, MalformedBatchError, decode, encode_entry

_text = st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=10)
_entries = st.lists(st.tuples(st.binary(max_size=300), st.integers(-(2**31), 2**31 - 1),
                              st.dictionaries(_text, _text, max_size=4)), max_size=8)


@given(_entries)
def test_a_batch_body_round_trips(entries):
    blob = b"".join(encode_entry(body, flag, properties) for body, flag, properties in entries)
    assert decode(blob) == [(body, flag, properties) for body, flag, properties in entries]


def test_the_layout_is_rocketmqs_encode_message():
    entry = encode_entry(b"hello", 7, {"TAGS": "a", "UNIQ_KEY": "ID"})
    props = b"TAGS\x01a\x02UNIQ_KEY\x01ID\x02"
    # total size, magic 0, body CRC 0, flag, body length, body, properties length, properties
    assert entry == struct.pack(">iiiii", len(entry), 0, 0, 7, 5) + b"hello" + struct.pack(">h", len(props)) + props


def test_a_property_with_a_separator_is_refused():
    with pytest.raises(ValueError):
        encode_entry(b"x", 0, {"a": "b\x01"})


@pytest.mark.parametrize("blob", [
    b"\x00" * 5,  # fewer bytes than a message head
    encode_entry(b"body", 0, {})[:-1],  # torn
    ENTRY_HEAD.pack(100, 0, 0, 0, 4) + b"body" + b"\x00\x00",  # total size past the end
    ENTRY_HEAD.pack(24, 0, 0, 0, -1) + b"\x00" * 4,  # negative body length
    ENTRY_HEAD.pack(26, 0, 0, 0, 4) + b"body" + b"\x00\x09",  # properties overrun the message
    ENTRY_HEAD.pack(28, 0, 0, 0, 4) + b"body" + b"\x00\x02\xff\xfe",  # properties not UTF-8
])
def test_bad_framing_is_refused(blob):
    with pytest.raises(MalformedBatchError):
        decode(encode_entry(b"ok", 0, {}) + blob)


def test_encode_checked_writes_the_bytes_of_encode_entry_for_checked_properties():
    import pytest

    from nodes.common import constants as c
    from nodes.store import message_batch

    entries = [(b"one", 0, {}), (b"two", -5, {"TAGS": "t", "UNIQ_KEY": "U1"}), (b"x" * 300, 7, {"k": "välue", "": ""})]
    assert message_batch.encode_checked(entries) == b"".join(message_batch.encode_entry(*e) for e in entries)
    assert message_batch.decode(message_batch.encode_checked(entries)) == [(b, f, dict(p)) for b, f, p in entries]
    with pytest.raises(ValueError, match="over the"):
        message_batch.encode_checked([(b"b", 0, {"k": "v" * c.PROPERTIES_BYTES_MAX})])
