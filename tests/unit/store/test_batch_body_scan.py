"""A producer's batch body written as records straight from its bytes (`scan_batch_body`,
`encode_scanned`, `MessageStore.put_scanned`), checked against decoding it into messages and
putting those: the same record bytes, offsets, tag codes; anything not plain is left to that path."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples

from nodes.common import constants as c
from nodes.store import message_batch
from nodes.store.record import USER_PROPERTIES_BYTES_MAX, MessageToStore, tag_hash
from nodes.store.record_batch import encode_batch, encode_scanned, scan_batch_body

BODY_MAX = 16 * 1024
HOSTS = {"born_host": ("10.1.2.3", 5555), "store_host": ("127.0.0.1", 10911)}
_ascii = st.text(alphabet=st.characters(min_codepoint=3, max_codepoint=127), max_size=12)
_props = st.dictionaries(_ascii.filter(lambda k: k not in (c.PROPERTY_RECORD_CRC, c.PROPERTY_DELAY)), _ascii,
                         max_size=4)
_entries = st.lists(st.tuples(st.binary(min_size=1, max_size=300), st.integers(-(2**31), 2**31 - 1), _props),
                    min_size=1, max_size=6)


def _body(entries) -> bytes:
    return b"".join(message_batch.encode_entry(body, flag, props) for body, flag, props in entries)


def _decoded_records(blob: bytes, **fields) -> tuple[bytearray, list[int]]:
    """What the general path writes: decode, build MessageToStore, encode."""
    msgs = [MessageToStore(topic=fields["topic"], queue_id=fields["queue_id"], body=body, flag=flag, properties=props,
                           born_timestamp_ms=fields["born_timestamp_ms"], reconsume_times=fields["reconsume_times"],
                           sys_flag=fields["sys_flag"], **HOSTS)
            for body, flag, props in message_batch.decode(blob)]
    return encode_batch(msgs, first_queue_offset=fields["first_queue_offset"],
                        store_timestamp_ms=fields["store_timestamp_ms"])


@settings(max_examples=examples(150), deadline=None)  # a loaded machine is no failure
@given(entries=_entries, first_queue_offset=st.integers(0, 2**40), reconsume_times=st.integers(0, 16),
       sys_flag=st.sampled_from([0, 0x4]))
def test_scanned_batch_encodes_to_the_bytes_of_its_decoded_messages(entries, first_queue_offset, reconsume_times,
                                                                     sys_flag):
    blob = _body(entries)
    scanned = scan_batch_body(blob, BODY_MAX)
    assert scanned is not None
    fields = {"topic": "Tópico", "queue_id": 3, "first_queue_offset": first_queue_offset, "store_timestamp_ms": 77,
              "born_timestamp_ms": 55, "reconsume_times": reconsume_times, "sys_flag": sys_flag}
    got = encode_scanned(scanned, **fields, **HOSTS)
    assert got == _decoded_records(blob, **fields)
    assert [entry[5] for entry in scanned.entries] == [tag_hash(props.get(c.PROPERTY_TAGS)) for _, _, props in entries]


@pytest.mark.parametrize("properties", [
    {c.PROPERTY_DELAY: "3"},  # a delay level: the put converts it
    {"k": "välue"},  # not ASCII: decoding checks the UTF-8
    {"k": "x" * (USER_PROPERTIES_BYTES_MAX + 1)},  # too large: the put says so
])
def test_entries_that_need_the_general_path_are_not_scanned(properties):
    assert scan_batch_body(_body([(b"body", 0, {"a": "1"}), (b"body", 0, properties)]), BODY_MAX) is None


def _raw_entry(body: bytes, props: bytes) -> bytes:
    head = message_batch.ENTRY_HEAD.pack(message_batch.ENTRY_BYTES_MIN + len(body) + len(props), 0, 0, 0, len(body))
    return head + body + message_batch.PROPS_LEN.pack(len(props)) + props


@pytest.mark.parametrize("blob", [
    _raw_entry(b"b", b"__RECORD_CRC32\x010\x02"),  # reserved for the store: the put refuses it
    _raw_entry(b"b", b"a\x02"),  # a pair without a name separator
    _raw_entry(b"b", b"a\x01b"),  # no pair separator at the end
    _raw_entry(b"b", b"a\x01b\x01c\x02\x02"),  # two name separators in a pair
    _raw_entry(b"", b""),  # an empty body
    _raw_entry(b"x" * (BODY_MAX + 1), b""),  # a body over the limit
    _raw_entry(b"x" * 9000, b"") + _raw_entry(b"x" * 9000, b""),  # bodies together over the limit
    _raw_entry(b"b", b"")[:-1],  # cut short
    b"",  # no message
])
def test_bodies_that_are_not_plain_are_left_to_decoding(blob):
    assert scan_batch_body(blob, BODY_MAX) is None


def test_the_last_tags_value_gives_the_tag_code_as_decoding_keeps_the_last():
    scanned = scan_batch_body(_raw_entry(b"b", b"TAGS\x01a\x02k\x01v\x02TAGS\x01b\x02"), BODY_MAX)
    assert scanned is not None and scanned.entries[0][5] == tag_hash("b")


def test_put_scanned_stores_what_put_messages_stores(open_store, tmp_path):
    entries = [(b"one", 0, {"TAGS": "red", "UNIQ_KEY": "A1"}), (b"two", 7, {}), (b"three", 0, {"KEYS": "k"})]
    blob = _body(entries)
    fast, plain = open_store(tmp_path / "fast"), open_store(tmp_path / "plain")
    for store in (fast, plain):
        store.put_messages([MessageToStore(topic="T", queue_id=1, body=b"first", **HOSTS)])
    fast_result = fast.put_scanned(scan_batch_body(blob, BODY_MAX), topic="T", queue_id=1, born_timestamp_ms=9,
                                   **HOSTS)
    plain_result = plain.put_messages([MessageToStore(topic="T", queue_id=1, body=b, flag=f, properties=p,
                                                      born_timestamp_ms=9, **HOSTS)
                                       for b, f, p in message_batch.decode(blob)])
    assert fast_result.status.name == plain_result.status.name == "PUT_OK"
    assert [(a.phys_offset, a.size, a.queue_offset, a.offset_msg_id) for a in fast_result.appended] == [
        (a.phys_offset, a.size, a.queue_offset, a.offset_msg_id) for a in plain_result.appended]
    assert [a.queue_offset for a in fast_result.appended] == [1, 2, 3]
    for queue_offset in range(4):
        assert fast.queue_unit("T", 1, queue_offset) == plain.queue_unit("T", 1, queue_offset)
    for fast_append, plain_append in zip(fast_result.appended, plain_result.appended, strict=True):
        assert fast.lookup_message(fast_append.phys_offset, fast_append.size) == plain.lookup_message(
            plain_append.phys_offset, plain_append.size)
    assert fast.lookup_message(fast_result.appended[0].phys_offset, fast_result.appended[0].size).properties == {
        "TAGS": "red", "UNIQ_KEY": "A1"}


def test_the_joined_properties_hold_every_entry_and_a_checked_name_only_where_it_is_a_property():
    from nodes.broker.validation import scanned_needs_property_checks

    plain = [(b"DELAY\x01REAL_TOPIC\x01", 0, {"a": "1"}), (b"b", 0, {}), (b"c", 0, {"k": "v", "TAGS": "t"})]
    scanned = scan_batch_body(_body(plain), BODY_MAX)
    assert scanned is not None and scanned.properties == b"a\x011\x02k\x01v\x02TAGS\x01t\x02"
    assert [entry[5] for entry in scanned.entries] == [0, 0, tag_hash("t")]
    assert not scanned_needs_property_checks(scanned)  # the names stand in a body only
    real = scan_batch_body(_body([*plain, (b"d", 0, {c.PROPERTY_REAL_TOPIC: "X"})]), BODY_MAX)
    assert real is not None and scanned_needs_property_checks(real)
    reserved_later = _body(plain) + _raw_entry(b"e", b"__RECORD_CRC32\x010\x02")
    assert scan_batch_body(reserved_later, BODY_MAX) is None


def test_the_results_of_a_scanned_put_are_built_when_read_and_match_eager_ones(open_store, tmp_path):
    store = open_store(tmp_path / "lazy")
    entries = [(b"x" * n, 0, {"UNIQ_KEY": f"U{n}"}) for n in (5, 50, 500)]
    result = store.put_scanned(scan_batch_body(_body(entries), BODY_MAX), topic="T", queue_id=0,
                               born_timestamp_ms=1, **HOSTS)
    appended = result.appended
    eager = list(appended)
    assert len(appended) == len(eager) == 3 and appended[-1] == eager[2] and appended[1:] == eager[1:]
    assert [a.queue_offset for a in eager] == [0, 1, 2]
    assert [a.phys_offset for a in eager] == appended.phys_offsets
    assert all(a.phys_offset + a.size == b.phys_offset for a, b in itertools.pairwise(eager))
    assert eager[0].offset_msg_id.endswith(f"{eager[0].phys_offset:016X}")
    with pytest.raises(IndexError):
        appended[3]
