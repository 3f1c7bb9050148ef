"""The compiled record decoder against the Python loop it mirrors (nodes/client/pull_decode.py).

The Python loop is the reference: for any input, valid or not, the compiled decoder must give
the same messages (every field, properties in the same order) or raise the same exception
with the same message. A crash in C would take the test process down with it.
"""

from __future__ import annotations

import dataclasses
import struct
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.decoders import compiled_decode
from support.examples import examples
from support.leaks import assert_no_leaks
from support.twins import COMPILED_MISSING_HINT, run_switched

from nodes.client import pull_decode
from nodes.common import constants as c
from nodes.common.errors import CorruptRecordError
from nodes.store import record
from nodes.store.record import MessageToStore, encode_record

PY = pull_decode.decode_messages_python
KW = {"broker_name": "broker-a", "min_offset": 0, "max_offset": 99, "tags": None}
CRC_PROPERTY = f"{c.PROPERTY_RECORD_CRC}\x0100000000\x02".encode()  # the pull decoders do not check its value
INT32 = st.integers(-2**31, 2**31 - 1)
INT64 = st.integers(-2**63, 2**63 - 1)


@pytest.fixture(scope="module")
def compiled():
    return compiled_decode()


def snapshot(msg):
    """Every field, and the properties' order (dict equality ignores it)."""
    return tuple(getattr(msg, f.name) for f in dataclasses.fields(msg)), list(msg.properties.items())


def outcome(decode, records, **kw):
    """What a decoder makes of `records`: ("ok", snapshots) or (exception name, message)."""
    try:
        return "ok", [snapshot(m) for m in decode(records, **{**KW, **kw})]
    except (CorruptRecordError, UnicodeDecodeError) as exc:
        return type(exc).__name__, str(exc)


def assert_same(compiled, records, **kw):
    expected = outcome(PY, records, **kw)
    assert outcome(compiled, records, **kw) == expected
    return expected


def raw_record(*, body=b"body", topic=b"T", props=b"", topic_len=None, total_size=None, magic=c.RECORD_MAGIC,
               body_len=None, phys_offset=4096, store_ip=b"\x0a\x00\x00\x02", store_port=10911):
    """Record bytes built field by field, so the properties and lengths can be anything."""
    props = props + CRC_PROPERTY
    tail = bytes([len(topic) if topic_len is None else topic_len]) + topic + struct.pack(">h", len(props)) + props
    size = record.HEADER.size + len(body) + len(tail)
    header = record.HEADER.pack(
        size if total_size is None else total_size, magic, 0, 3, 7, 11, phys_offset, 0, 1234, b"\x0a\x00\x00\x01",
        5, 5678, store_ip, store_port, 2, 0, len(body) if body_len is None else body_len)
    return header + body + tail


def encoded_batch(n=4, tags=("a", None, "b", "ü")):
    out, phys = [], 4096
    for i in range(n):
        props = {c.PROPERTY_UNIQ_KEY: f"{i:032X}", "k": "välue", "empty": ""}
        if tags[i % len(tags)] is not None:
            props[c.PROPERTY_TAGS] = tags[i % len(tags)]
        rec = encode_record(MessageToStore(topic="Tö", queue_id=1, body=bytes([i]) * i, flag=i, properties=props,
                                           born_timestamp_ms=10 + i, store_host=("10.0.0.2", 10911),
                                           reconsume_times=i),
                            queue_offset=100 + i, phys_offset=phys, store_timestamp_ms=20 + i)
        out.append(rec)
        phys += len(rec)
    return b"".join(out)


# --- the switch ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("env", "expected"), [(None, "compiled"), ("1", "python (MQLAB_PURE_PYTHON_DECODE=1)")])
def test_decode_messages_runs_the_compiled_decoder_unless_switched_off(env, expected):
    code = ("from nodes.client import pull_decode as p; print(p.DECODER); "
            "print(p.decode_messages(bytes.fromhex(input()), broker_name='b', min_offset=0, max_offset=1, "
            "tags=None)[0].body)")
    decoder, body = run_switched(pull_decode.PURE_PYTHON_ENV, env, code, raw_record(body=b"hi").hex())
    assert decoder == expected, f"{decoder} ({COMPILED_MISSING_HINT})"
    assert body == "b'hi'"


def test_the_compiled_decoder_takes_only_bytes():
    with pytest.raises(TypeError, match="bytes"):
        pull_decode.compiled_decoder()(bytearray(encoded_batch()), "b", 0, 1, None)


def test_init_refuses_another_record_layout_and_keeps_its_state(compiled):
    from nodes.client import _record_decode

    with pytest.raises(ValueError, match="not the layout compiled in"):
        _record_decode.init(object, CorruptRecordError, ">iI", 8, record.RECORD_BYTES_MIN, c.RECORD_MAGIC,
                            "TAGS", "UNIQ_KEY", c.PROPERTY_RECORD_CRC, "MIN_OFFSET", "MAX_OFFSET", None)
    assert_same(compiled, encoded_batch())


def test_init_again_during_a_decode_leaves_that_decode_intact(compiled):
    """A decode keeps what init() gave it when it started, even if a message's construction
    calls init() again (the old state is released under it)."""
    from nodes.client import _record_decode

    def build(*fields):
        pull_decode.compiled_decoder()  # init again: MessageExt back in place
        return fields

    _record_decode.init(build, CorruptRecordError, record.HEADER.format, record.HEADER.size,
                        record.RECORD_BYTES_MIN, c.RECORD_MAGIC, c.PROPERTY_TAGS, c.PROPERTY_UNIQ_KEY,
                        c.PROPERTY_RECORD_CRC, c.PROPERTY_MIN_OFFSET, c.PROPERTY_MAX_OFFSET, None)
    built = _record_decode.decode_messages(encoded_batch(3), "b", 0, 1, None)
    assert [type(fields) for fields in built] == [tuple] * 3
    assert [fields[6] for fields in built] == [100, 101, 102]  # queue offsets
    assert_same(compiled, encoded_batch(3))


def init_with(message_ext, slot_fields):
    from nodes.client import _record_decode

    _record_decode.init(message_ext, CorruptRecordError, record.HEADER.format, record.HEADER.size,
                        record.RECORD_BYTES_MIN, c.RECORD_MAGIC, c.PROPERTY_TAGS, c.PROPERTY_UNIQ_KEY,
                        c.PROPERTY_RECORD_CRC, c.PROPERTY_MIN_OFFSET, c.PROPERTY_MAX_OFFSET, slot_fields)
    return _record_decode.decode_messages


# --- messages built by filling their slots -----------------------------------------------------------
def test_messages_are_built_by_filling_their_slots_and_equal_the_called_ones(compiled):
    """MessageExt is built without its __init__ (the slots filled in place), with every field and
    property as the Python loop sets them; a class whose __init__ would be skipped is called."""
    assert pull_decode.slot_fields(pull_decode.MessageExt) == tuple(
        f.name for f in dataclasses.fields(pull_decode.MessageExt))
    calls = []

    @dataclasses.dataclass(slots=True)
    class Counted(pull_decode.MessageExt):
        def __post_init__(self):
            calls.append(self.queue_offset)

    assert pull_decode.slot_fields(Counted) is None  # __post_init__ must run: the class is called
    try:
        called = init_with(Counted, None)(encoded_batch(3), "b", 0, 1, None)
        assert calls == [100, 101, 102]
    finally:
        pull_decode.compiled_decoder()
    assert_same(compiled, encoded_batch(8))
    filled = compiled(encoded_batch(3), broker_name="b", min_offset=0, max_offset=1, tags=None)
    assert [type(m) for m in filled] == [pull_decode.MessageExt] * 3
    assert [snapshot(m) for m in filled] == [snapshot(m) for m in called]


def test_a_filled_message_is_off_the_cycle_collector_and_stays_a_normal_object(compiled):
    """Its fields (str, bytes, int, a dict of str) cannot lead back to it, so the collector never
    walks it; it is still read, written, compared and freed like any message."""
    import gc

    (msg,) = compiled(raw_record(body=b"x", props=b"k\x01v\x02"), **KW)
    assert not gc.is_tracked(msg)
    assert not gc.is_tracked(msg.properties)
    msg.reconsume_times += 1
    msg.properties["more"] = "v2"
    assert (msg.reconsume_times, msg.properties["more"], msg.body) == (3, "v2", b"x")
    assert msg == dataclasses.replace(msg)
    assert gc.is_tracked(pull_decode.MessageExt(**{f.name: getattr(msg, f.name) for f in dataclasses.fields(msg)}))


@pytest.mark.parametrize("cls", [
    dataclasses.make_dataclass("NoSlots", [(f.name, object) for f in dataclasses.fields(pull_decode.MessageExt)]),
    dataclasses.make_dataclass("NoInit", [(f.name, object) for f in dataclasses.fields(pull_decode.MessageExt)],
                               slots=True, init=False),
    dataclasses.make_dataclass("SkipsOne", [(f.name, object) for f in dataclasses.fields(pull_decode.MessageExt)]
                               + [("extra", object, dataclasses.field(init=False, default=None))], slots=True),
    dataclasses.dataclass(slots=True)(type("OwnInit", (pull_decode.MessageExt,), {"__init__": lambda self, *a: None})),
    int,
])
def test_only_a_slots_dataclass_whose_init_only_assigns_is_filled(cls):
    assert pull_decode.slot_fields(cls) is None


def test_init_refuses_slots_that_are_not_there_and_keeps_its_state(compiled):
    names = pull_decode.slot_fields(pull_decode.MessageExt)
    no_slots = dataclasses.make_dataclass("NoSlots", [(n, object) for n in names])
    read_only = type("ReadOnly", (), {"__slots__": (), **{n: property(lambda self: 0) for n in names}})
    with pytest.raises(TypeError, match="no writable slot"):
        init_with(no_slots, names)
    with pytest.raises(TypeError, match="no writable slot"):
        init_with(read_only, names)
    with pytest.raises(TypeError, match="tuple of the 14 field names"):
        init_with(pull_decode.MessageExt, names[:-1])
    with pytest.raises(TypeError, match="a class"):
        init_with(lambda *fields: fields, names)
    assert_same(compiled, encoded_batch())


# --- valid batches -----------------------------------------------------------------------------------
def test_properties_parse_like_record_decode_properties(compiled):
    text = "a\x01b\x02\x02\x01lone\x02c\x01d\x01e\x02noval\x02a\x01again\x02TAGS\x01t\x02é\x01ü\x02"
    (msg,) = compiled(raw_record(props=text.encode()), **KW)
    expected = record.decode_properties(text)
    expected.update({c.PROPERTY_MIN_OFFSET: "0", c.PROPERTY_MAX_OFFSET: "99"})
    assert list(msg.properties.items()) == list(expected.items())
    assert c.PROPERTY_RECORD_CRC not in msg.properties
    assert_same(compiled, raw_record(props=text.encode()), tags=frozenset({"t"}))


@pytest.mark.parametrize("phys_offset", [0, 1, 2**63 - 1, -1, -2**63, -0xABC])
def test_offset_msg_id_formats_like_python_for_any_phys_offset(compiled, phys_offset):
    buf = raw_record(phys_offset=phys_offset, store_ip=b"\xff\x00\x10\x01", store_port=-2)
    assert_same(compiled, buf)
    (msg,) = compiled(buf, **KW)
    assert msg.offset_msg_id == msg.msg_id == f"FF001001FFFFFFFE{phys_offset:016X}"


def test_empty_uniq_key_falls_back_to_the_offset_msg_id(compiled):
    (msg,) = compiled(raw_record(props=b"UNIQ_KEY\x01\x02"), **KW)
    assert msg.msg_id == msg.offset_msg_id and msg.properties[c.PROPERTY_UNIQ_KEY] == ""
    assert_same(compiled, raw_record(props=b"UNIQ_KEY\x01\x02"))


_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"), max_size=12)
_topic = _text.filter(lambda t: 0 < len(t.encode()) <= c.TOPIC_NAME_BYTES_MAX)
_tags = st.sampled_from(["a", "b", "Tág", "", " a"])


@st.composite
def _message(draw):
    props = draw(st.dictionaries(_text.filter(lambda k: k != c.PROPERTY_RECORD_CRC), _text, max_size=5))
    tags = draw(st.none() | _tags)
    if tags is not None:
        props[c.PROPERTY_TAGS] = tags
    if draw(st.booleans()):
        props[c.PROPERTY_UNIQ_KEY] = draw(st.sampled_from(["", "0A0000010000"]) | _text)
    return MessageToStore(
        topic=draw(st.sampled_from(["T", "BenchPull", "Tøpic"]) | _topic), queue_id=draw(INT32),
        body=draw(st.binary(max_size=64)), flag=draw(INT32), properties=props, born_timestamp_ms=draw(INT64),
        store_host=(draw(st.sampled_from(["10.0.0.2", "127.0.0.1", "255.255.255.255"])), draw(INT32)),
        reconsume_times=draw(INT32)), draw(INT64), draw(INT64), draw(INT64)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=st.lists(_message(), max_size=6),
       tags=st.none() | st.frozensets(_tags | _text, max_size=3),
       min_offset=INT64, max_offset=INT64)
def test_random_batches_decode_identically(compiled, messages, tags, min_offset, max_offset):
    buf = b"".join(encode_record(msg, queue_offset=queue_offset, phys_offset=phys_offset, store_timestamp_ms=store_ts)
                   for msg, queue_offset, phys_offset, store_ts in messages)
    kind, decoded = assert_same(compiled, buf, tags=tags, min_offset=min_offset, max_offset=max_offset)
    assert kind == "ok"
    expected = [msg for msg, *_ in messages if tags is None or msg.properties.get(c.PROPERTY_TAGS) in tags]
    assert [fields[1] for fields, _ in decoded] == [msg.body for msg in expected]


_props_piece = st.sampled_from([b"\x01", b"\x02", b"a", b"TAGS", b"UNIQ_KEY", b"__RECORD_CRC32", "é".encode(),
                                b"\xff", b"\xc3", b"\xe2\x82", b"MIN_OFFSET"])


@settings(max_examples=examples(300), deadline=None)
@given(props=st.lists(_props_piece, max_size=16).map(b"".join), topic=st.sampled_from([b"T", b"\xff", "é".encode()]),
       tags=st.none() | st.just(frozenset({"a", ""})))
def test_any_property_and_topic_bytes_decode_or_fail_identically(compiled, props, topic, tags):
    assert_same(compiled, raw_record(props=props, topic=topic) + raw_record(props=props), tags=tags)


# --- damaged input -------------------------------------------------------------------------------------
def test_every_truncation_raises_the_same_error_in_both(compiled):
    buf = encoded_batch(3)
    boundaries = {0}
    for rec in record.iter_records(buf):
        boundaries.add(max(boundaries) + rec.total_size)
    for cut in range(len(buf)):
        kind, detail = assert_same(compiled, buf[:cut])
        assert kind == ("ok" if cut in boundaries else "CorruptRecordError"), (cut, detail)


def _patch(buf, pos, fmt, value):
    out = bytearray(buf)
    struct.pack_into(fmt, out, pos, value)
    return bytes(out)


_GOOD = raw_record()
_TAIL_START = record.HEADER.size + 4  # the topic length byte, after the 4-byte body


@pytest.mark.parametrize(("damaged", "message"), [
    (_patch(_GOOD, 4, ">I", c.RECORD_MAGIC ^ 1), "magic 0xdaa320a6"),
    (_patch(_GOOD, 4, ">I", c.BLANK_MAGIC), "bad record at 0"),
    (_patch(_GOOD, 0, ">i", -1), "size -1"),
    (_patch(_GOOD, 0, ">i", -2**31), "size -2147483648"),
    (_patch(_GOOD, 0, ">i", 2**31 - 1), "size 2147483647"),
    (_patch(_GOOD, 0, ">i", len(_GOOD) + 1), f"size {len(_GOOD) + 1}"),
    (_patch(_GOOD, 0, ">i", record.RECORD_BYTES_MIN - 1), "bad record at 0"),
    (_patch(_GOOD, 84, ">i", -1), "bad record at 0"),
    (_patch(_GOOD, 84, ">i", -2**31), "bad record at 0"),
    (_patch(_GOOD, 84, ">i", 2**31 - 1), "bad record at 0"),
    (_patch(_GOOD, 84, ">i", len(_GOOD)), "bad record at 0"),
    (_GOOD + b"\x00" * 87, "87 trailing bytes at"),
    (_GOOD + _patch(_GOOD, 4, ">I", 0), f"bad record at {len(_GOOD)}"),
    (b"\xff" * 200, "bad record at 0"),
])
def test_damaged_framing_raises_corrupt_record_error_in_both(compiled, damaged, message):
    kind, detail = assert_same(compiled, damaged)
    assert kind == "CorruptRecordError" and message in detail


@pytest.mark.parametrize("topic_len", [0, 2, 40, 255])
def test_a_topic_length_past_the_record_decodes_as_python_does(compiled, topic_len):
    """The Python loop slices: the topic runs on into the next record and the properties are empty."""
    assert_same(compiled, raw_record(topic_len=topic_len) + raw_record(topic=b"U" * 60))
    assert_same(compiled, raw_record(topic_len=topic_len))


@settings(max_examples=examples(400), deadline=None)
@given(flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
       tags=st.none() | st.just(frozenset({"a"})))
def test_garbled_batches_fail_or_decode_identically(compiled, flips, tags):
    buf = bytearray(encoded_batch(3))
    for pos, value in flips:
        buf[pos % len(buf)] = value
    assert_same(compiled, bytes(buf), tags=tags)


# --- references ---------------------------------------------------------------------------------------
def test_no_reference_leaks_over_many_decodes(compiled):
    buf, broker_name, tags = encoded_batch(8), "broker-leak-check", frozenset({"a", "b", "ü"})
    corrupt = buf[:-3]
    watched = [buf, broker_name, tags, corrupt, c.PROPERTY_TAGS, c.PROPERTY_MIN_OFFSET, pull_decode.MessageExt]

    def run(rounds):
        for _ in range(rounds):
            compiled(buf, broker_name=broker_name, min_offset=0, max_offset=9, tags=tags)
            compiled(buf, broker_name=broker_name, min_offset=0, max_offset=9, tags=None)
            with pytest.raises(CorruptRecordError):
                compiled(corrupt, broker_name=broker_name, min_offset=0, max_offset=9, tags=None)
            with pytest.raises(UnicodeDecodeError):
                compiled(raw_record(props=b"a\x01\xff"), broker_name=broker_name, min_offset=0, max_offset=9,
                         tags=None)

    assert_no_leaks(run, watched)


def test_each_decoded_object_is_held_only_by_its_message(compiled):
    (msg,) = compiled(raw_record(body=b"only-here" * 50, topic="Tøpic-refcount".encode(), props=b"k\x01v-unique\x02"),
                      **KW)
    held_once = object()  # one reference (this variable), as each decoded object should have (its message)
    counts = [sys.getrefcount(obj) for obj in (held_once, msg.body, msg.topic, msg.properties, msg.properties["k"],
                                               msg.offset_msg_id, msg)]
    once = counts[0]
    assert counts == [once, once, once, once, once, once + 1, once]  # offset_msg_id is also msg_id here
