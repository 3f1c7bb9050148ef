"""The compiled batch-body scan and scanned-batch encoder against the Python loops they mirror
(nodes/store/record_batch.py).

The Python loops are the reference: for any scanned batch the compiled encoder must give the
same record bytes and sizes, and those records must decode (record CRC checked) to the fields
put in, which shows the CRC is right and not merely equal to Python's; for any bytes the
compiled scan must give the same ScannedBatch, or None where Python refuses. Arguments the
wrapper does not check raise in C, never crash: a crash would take the test process down with it.
"""

from __future__ import annotations

import array
import struct
import sys
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.leaks import assert_no_leaks
from support.twins import COMPILED_MISSING_HINT, require_compiled, run_switched

from nodes.common import constants as c
from nodes.store import message_batch, record, record_batch
from nodes.store.record_batch import (
    ScannedBatch,
    encode_scanned_python,
    place_batch_python,
    scan_batch_body_python,
)

INT32 = st.integers(-2**31, 2**31 - 1)
INT64 = st.integers(-2**63, 2**63 - 1)
INT64_EDGES = st.sampled_from([-2**63, -1, 0, 1, 2**63 - 1]) | INT64
BODY_BYTES_MAX = 1 << 20  # the scan's limit here: large enough for every generated batch
HOSTS = {"born_host": ("10.1.2.3", 5555), "store_host": ("127.0.0.1", 10911)}
FIELDS = {"topic": "T", "queue_id": 1, "first_queue_offset": 0, "store_timestamp_ms": 2, "born_timestamp_ms": 3,
          **HOSTS}


@pytest.fixture(scope="module")
def compiled():
    """encode_scanned's keywords onto the compiled encoder; fails (never skips) when it is not built."""
    encoder = require_compiled(record_batch.compiled_encoder, "record encoder nodes.store._record_encode")

    def encode(scanned, *, topic, queue_id, first_queue_offset, store_timestamp_ms, born_timestamp_ms, born_host,
               store_host, sys_flag=0, reconsume_times=0):
        topic_part, born_ip, store_ip = record_batch._record_constants(topic, sys_flag, born_host, store_host)
        return encoder(scanned.blob, scanned.entries, topic_part, queue_id, first_queue_offset, store_timestamp_ms,
                       born_timestamp_ms, born_ip, born_host[1], store_ip, store_host[1], sys_flag, reconsume_times)

    return encode


@pytest.fixture(scope="module")
def raw():
    """The compiled encoder itself, positional arguments and all."""
    return require_compiled(record_batch.compiled_encoder, "record encoder nodes.store._record_encode")


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


# --- the switch ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("env", "expected"), [(None, "compiled"), ("1", "python (MQLAB_PURE_PYTHON_ENCODE=1)")])
def test_encode_scanned_runs_the_compiled_encoder_unless_switched_off(env, expected):
    code = ("from nodes.store import record_batch as b; print(b.ENCODER); print(b.SCANNER); print(b.PLACER); "
            "s = b.scan_batch_body(bytes.fromhex(input()), 1024); "
            "print(b.encode_scanned(s, topic='T', queue_id=0, first_queue_offset=5, store_timestamp_ms=1, "
            "born_timestamp_ms=2, born_host=('10.0.0.1', 1), store_host=('10.0.0.2', 2))[0].hex())")
    blob = message_batch.encode_checked([(b"hi", 0, {"TAGS": "t"})])
    encoder, scanner, placer, records = run_switched(record_batch.PURE_PYTHON_ENV, env, code, blob.hex())
    assert encoder == scanner == placer == expected, f"{encoder}, {scanner}, {placer} ({COMPILED_MISSING_HINT})"
    expected_records, _sizes = encode_scanned_python(
        scan_batch_body_python(blob, 1024), topic="T", queue_id=0, first_queue_offset=5, store_timestamp_ms=1,
        born_timestamp_ms=2, born_host=("10.0.0.1", 1), store_host=("10.0.0.2", 2))
    assert bytes.fromhex(records) == expected_records


def test_encode_scanned_is_the_compiled_encoder_here(compiled):
    assert record_batch.ENCODER == "compiled", COMPILED_MISSING_HINT
    scanned = scanned_of([(b"x" * 100, 3, {"TAGS": "a"}), (b"y", 0, {})])
    assert record_batch.encode_scanned(scanned, **FIELDS) == encode_scanned_python(scanned, **FIELDS)


def test_init_refuses_another_record_layout_and_keeps_its_state(compiled):
    from nodes.store import _record_encode

    args = [record.HEADER.format, record.HEADER.size, record.TOPIC_LEN.format, record.PROPS_LEN.format,
            c.RECORD_MAGIC, record.RECORD_CRC_PREFIX, record.RECORD_CRC_PROPERTY_BYTES, struct.error]
    for at, other, match in [(0, ">iIIiiqqiq4siq4siiqq", "not the layout compiled in"),
                             (1, 96, "not the layout compiled in"), (3, ">i", "not the layout compiled in"),
                             (5, b"__RECORD_CRC32=", "record CRC property"),
                             (6, record.RECORD_CRC_PROPERTY_BYTES + 1, "record CRC property"),
                             (4, 2**32, "record_magic")]:
        with pytest.raises(ValueError, match=match):
            _record_encode.init(*args[:at], other, *args[at + 1:])
    with pytest.raises(TypeError, match="exception class"):
        _record_encode.init(*args[:7], object())
    scanned = scanned_of([(b"body", 0, {"k": "v"})])
    assert compiled(scanned, **FIELDS) == encode_scanned_python(scanned, **FIELDS)


# --- valid batches -------------------------------------------------------------------------------------
_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"), max_size=10)
_ascii = st.text(st.characters(min_codepoint=3, max_codepoint=127), max_size=10)
_properties = st.one_of(
    st.just({}),
    st.sampled_from(["a", "Tág", "", "x" * 40]).map(lambda tags: {c.PROPERTY_TAGS: tags}),
    st.dictionaries(_ascii.filter(lambda k: k not in (c.PROPERTY_RECORD_CRC, c.PROPERTY_DELAY)), _ascii, max_size=4),
    st.dictionaries(_text.filter(lambda k: k != c.PROPERTY_RECORD_CRC), _text, max_size=4),
)


@st.composite
def _body(draw):
    """1 byte to 40 KiB; a long one is a short drawn pattern repeated (drawing 40 KiB is slow)."""
    size = draw(st.sampled_from([1, 2, 1024, 1024, 4096]) | st.integers(1, 40 * 1024))
    pattern = draw(st.binary(min_size=1, max_size=64))
    return (pattern * (size // len(pattern) + 1))[:size]


_hosts = st.tuples(st.sampled_from(["10.0.0.2", "127.0.0.1", "0.0.0.0", "255.255.255.255"]), INT32)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(messages=st.lists(st.tuples(_body(), INT32, _properties), min_size=1, max_size=8),
       topic=st.sampled_from(["T", "Tópico", "t" * c.TOPIC_NAME_BYTES_MAX]), queue_id=INT32,
       first_queue_offset=st.integers(-2**63, 2**63 - 9), store_timestamp_ms=INT64_EDGES,
       born_timestamp_ms=INT64_EDGES, born_host=_hosts, store_host=_hosts,
       sys_flag=st.sampled_from([0, 0x1, 0x4, 0x8, 0x4 | 0x8]), reconsume_times=INT32)
def test_random_batches_encode_identically_and_decode_with_their_record_crc(compiled, messages, **fields):
    scanned = scanned_of(messages)
    expected = encode_scanned_python(scanned, **fields)
    got = compiled(scanned, **fields)
    assert type(got[0]) is bytearray and type(got[1]) is list
    assert got == expected
    assert_decodes_to(*got, messages, fields)


@pytest.mark.parametrize("count", [1, 32, 1024])
def test_batches_of_one_body_length_encode_identically(compiled, count):
    """A run of equal body lengths reuses one CRC combine operator; a change of length makes a new one."""
    messages = [(bytes([i % 251]) * (1024 if i % 7 else 1000), i, {"TAGS": f"t{i % 3}"}) for i in range(count)]
    scanned = scanned_of(messages)
    got = compiled(scanned, **FIELDS)
    assert got == encode_scanned_python(scanned, **FIELDS)
    assert_decodes_to(*got, messages, FIELDS)


def test_the_largest_properties_and_body_encode_identically(compiled):
    props = {"k": "v" * (record.USER_PROPERTIES_BYTES_MAX - 4)}  # k \x01 v... \x02: exactly the limit
    messages = [(b"\xff" * (1 << 20), 0, props), (b"b", 1, props)]
    scanned = scanned_of(messages)
    got = compiled(scanned, **FIELDS)
    assert got == encode_scanned_python(scanned, **FIELDS)
    assert_decodes_to(*got, messages, FIELDS)


def test_any_bytes_like_blob_encodes_as_bytes_do(compiled):
    scanned = scanned_of([(b"one", 0, {"a": "1"}), (b"two" * 99, 5, {})])
    expected = encode_scanned_python(scanned, **FIELDS)
    for blob in (bytearray(scanned.blob), memoryview(scanned.blob)):
        assert compiled(ScannedBatch(blob, scanned.entries), **FIELDS) == expected
    assert compiled(ScannedBatch(scanned.blob, tuple(scanned.entries)), **FIELDS) == expected


def test_an_empty_batch_is_no_records(compiled):
    assert compiled(ScannedBatch(b"", []), **FIELDS) == encode_scanned_python(ScannedBatch(b"", []), **FIELDS) == (
        bytearray(), [])


# --- bad arguments -------------------------------------------------------------------------------------
@pytest.mark.parametrize(("fields", "match"), [
    ({"topic": ""}, "topic must be"),
    ({"topic": "t" * (c.TOPIC_NAME_BYTES_MAX + 1)}, "topic must be"),
    ({"sys_flag": record.SYS_FLAG_BORN_HOST_V6}, "IPv6"),
    ({"sys_flag": record.SYS_FLAG_STORE_HOST_V6}, "IPv6"),
    ({"born_host": ("::1", 1)}, "not an IPv4 address"),
    ({"store_host": ("localhost", 1)}, "not an IPv4 address"),
])
def test_the_wrapper_raises_the_python_loops_value_errors(compiled, fields, match):
    scanned = scanned_of([(b"body", 0, {})])
    for encode in (record_batch.encode_scanned, encode_scanned_python):
        with pytest.raises(ValueError, match=match) as raised:
            encode(scanned, **{**FIELDS, **fields})
        assert type(raised.value) is ValueError


@pytest.mark.parametrize("fields", [
    {"queue_id": 2**31}, {"queue_id": -2**31 - 1}, {"first_queue_offset": 2**63}, {"store_timestamp_ms": -2**63 - 1},
    {"born_timestamp_ms": 2**64}, {"born_host": ("10.0.0.1", 2**31)}, {"store_host": ("10.0.0.1", -2**31 - 1)},
    {"sys_flag": 2**31}, {"reconsume_times": 2**40}, {"queue_id": 1.0}, {"reconsume_times": "1"},
    {"first_queue_offset": 2**63 - 1},  # the second record's queue offset does not fit
])
def test_a_field_the_header_cannot_hold_raises_struct_error_in_both(compiled, fields):
    scanned = scanned_of([(b"body", 0, {}), (b"body", 0, {})])
    for encode in (compiled, encode_scanned_python):
        with pytest.raises(struct.error):
            encode(scanned, **{**FIELDS, **fields})


def test_an_int_like_field_packs_as_struct_packs_it(compiled):
    class Index:
        def __index__(self):
            return 7

    scanned = scanned_of([(b"body", 0, {})])
    fields = {**FIELDS, "queue_id": Index(), "first_queue_offset": True}
    assert compiled(scanned, **fields) == encode_scanned_python(scanned, **fields)


def test_an_entry_too_large_for_its_record_raises_struct_error_in_both(compiled):
    blob = b"\x00" * (1 << 15)
    for entry in [(0, 1, 0, 0, record.USER_PROPERTIES_BYTES_MAX + 1, 0), (0, 1, 2**31, 0, 0, 0),
                  (0, 1, -2**31 - 1, 0, 0, 0)]:
        for encode in (compiled, encode_scanned_python):
            with pytest.raises(struct.error):
                encode(ScannedBatch(blob, [(0, 1, 0, 0, 0, 0), entry]), **FIELDS)


_BLOB = message_batch.encode_checked([(b"body", 0, {"k": "v"})])
_GOOD_ENTRY = framed_entries(_BLOB)[0]


def _raw_args(blob=_BLOB, entries=(_GOOD_ENTRY,), topic_part=b"\x01T", born_ip=b"\x0a\x01\x02\x03",
              store_ip=b"\x7f\x00\x00\x01"):
    """The compiled encoder's arguments for FIELDS."""
    return [blob, list(entries), topic_part, 1, 0, 2, 3, born_ip, 5555, store_ip, 10911, 0, 0]


@pytest.mark.parametrize(("args", "error", "match"), [
    (_raw_args()[:12], TypeError, "13 expected"),
    (_raw_args(blob="text"), TypeError, "bytes-like"),
    (_raw_args(blob=None), TypeError, "bytes-like"),
    ([_BLOB, iter([_GOOD_ENTRY]), *_raw_args()[2:]], TypeError, "list or tuple"),
    (_raw_args(entries=[list(_GOOD_ENTRY)]), TypeError, "entry 0 must be a tuple"),
    (_raw_args(entries=[_GOOD_ENTRY[:5]]), TypeError, "entry 0 must be a tuple"),
    (_raw_args(entries=[(*_GOOD_ENTRY, 0)]), TypeError, "entry 0 must be a tuple"),
    (_raw_args(entries=[_GOOD_ENTRY, (0.0, *_GOOD_ENTRY[1:])]), TypeError, "entry 1: body start must be an int"),
    (_raw_args(entries=[(*_GOOD_ENTRY[:4], None, 0)]), TypeError, "properties length must be an int"),
    (_raw_args(entries=[(-1, *_GOOD_ENTRY[1:])]), ValueError, "body start -1 is out of range"),
    (_raw_args(entries=[(len(_BLOB) + 1, 0, *_GOOD_ENTRY[2:])]), ValueError, "body start"),
    (_raw_args(entries=[(_GOOD_ENTRY[0], len(_BLOB), *_GOOD_ENTRY[2:])]), ValueError, "body length"),
    (_raw_args(entries=[(_GOOD_ENTRY[0], -1, *_GOOD_ENTRY[2:])]), ValueError, "body length"),
    (_raw_args(entries=[(0, 2**70, *_GOOD_ENTRY[2:])]), ValueError, "body length"),
    (_raw_args(entries=[(*_GOOD_ENTRY[:3], len(_BLOB) - 1, 2, 0)]), ValueError, "properties length"),
    (_raw_args(entries=[(*_GOOD_ENTRY[:3], -2**80, 0, 0)]), ValueError, "properties start"),
    (_raw_args(topic_part="T"), ValueError, "topic_part"),
    (_raw_args(topic_part=b"\x01"), ValueError, "topic_part"),
    (_raw_args(topic_part=b"\x02T"), ValueError, "topic_part"),
    (_raw_args(topic_part=b"\x00"), ValueError, "topic_part"),
    (_raw_args(born_ip=b"\x00" * 16), ValueError, "born_ip"),
    (_raw_args(store_ip="127.0.0.1"), ValueError, "store_ip"),
])
def test_bad_arguments_raise_in_c(raw, args, error, match):
    with pytest.raises(error, match=match):
        raw(*args)


@settings(max_examples=400, deadline=None)
@given(entries=st.lists(st.tuples(*[st.integers(-4, len(_BLOB) + 4) | INT64] * 5, st.just(0)), max_size=4))
def test_any_entries_encode_as_python_does_or_are_refused(raw, entries):
    """Entries inside the blob give Python's bytes; any other raises (Python would slice them short)."""
    args = _raw_args(entries=entries)
    scanned = ScannedBatch(_BLOB, entries)
    inside = all(0 <= body_start <= len(_BLOB) and 0 <= body_len <= len(_BLOB) - body_start
                 and 0 <= props_start <= len(_BLOB) and 0 <= props_len <= len(_BLOB) - props_start
                 for body_start, body_len, _flag, props_start, props_len, _tag in entries)
    try:
        got = raw(*args)
    except (ValueError, struct.error) as exc:
        assert not inside or isinstance(exc, struct.error), exc
        if isinstance(exc, struct.error):
            with pytest.raises(struct.error):
                encode_scanned_python(scanned, **FIELDS)
        return
    assert inside
    assert got == encode_scanned_python(scanned, **FIELDS)


def test_entries_emptied_by_an_index_hook_encode_nothing_and_do_not_crash(raw):
    entries = [_GOOD_ENTRY] * 3

    class Clears:
        def __index__(self):
            entries.clear()
            return 1

    args = _raw_args()
    args[1], args[3] = entries, Clears()
    assert raw(*args) == (bytearray(), [])


def test_an_int_subclass_whose_repr_drops_the_entries_does_not_crash(raw):
    entries = []

    class Vanishing(int):
        def __repr__(self):
            entries.clear()
            return "vanishing"

    entries.append((Vanishing(-1), *_GOOD_ENTRY[1:]))
    args = _raw_args()
    args[1] = entries
    with pytest.raises(ValueError, match="body start vanishing"):
        raw(*args)


# --- references ---------------------------------------------------------------------------------------
def test_no_reference_leaks_over_many_encodes(raw):
    blob = message_batch.encode_checked([(b"x" * 300, i, {"TAGS": "t", "k": "v"}) for i in range(8)])
    entries = framed_entries(blob)
    topic_part, born_ip, store_ip = b"\x05Topic", b"\x0a\x00\x00\x01", b"\x7f\x00\x00\x01"
    good = [blob, entries, topic_part, 1, 0, 2, 3, born_ip, 5555, store_ip, 10911, 0, 0]
    bad_entry = [blob, [*entries, (0, len(blob) + 1, 0, 0, 0, 0)], *good[2:]]
    bad_field = [*good[:3], 2**31, *good[4:]]
    watched = [blob, entries, topic_part, born_ip, store_ip, *entries]

    def run(rounds):
        for _ in range(rounds):
            raw(*good)
            with pytest.raises(ValueError):
                raw(*bad_entry)
            with pytest.raises(struct.error):
                raw(*bad_field)
            with pytest.raises(TypeError):
                raw("not a buffer", *good[1:])

    assert_no_leaks(run, watched)


def test_the_results_are_held_only_by_the_caller(raw):
    records, sizes = raw(*_raw_args())
    held_once = object()
    counts = [sys.getrefcount(obj) for obj in (held_once, records, sizes)]
    assert counts == [counts[0]] * 3


def test_init_again_during_an_encode_leaves_that_encode_consistent(raw):
    """An encode reads init()'s state once, after the fields' __index__ hooks have run: a hook
    that calls init() again with another CRC property name gives records of that name, sized
    for it."""
    from nodes.store import _record_encode

    def init(prefix):
        _record_encode.init(record.HEADER.format, record.HEADER.size, record.TOPIC_LEN.format,
                            record.PROPS_LEN.format, c.RECORD_MAGIC, prefix, len(prefix) + 9, struct.error)

    class Reinit:
        def __index__(self):
            init(b"__CRC\x01")
            return 1

    args = _raw_args(entries=[_GOOD_ENTRY] * 3)
    args[3] = Reinit()
    try:
        records, sizes = raw(*args)
    finally:
        record_batch.compiled_encoder()  # the real layout back in place
    assert sum(sizes) == len(records) and records.count(b"__CRC\x01") == 3
    assert records.endswith(b"\x02") and b"__RECORD_CRC32" not in records
    assert raw(*_raw_args()) == encode_scanned_python(ScannedBatch(_BLOB, [_GOOD_ENTRY]), **FIELDS)



# --- the scan -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def scan():
    """The compiled scan; fails (never skips) when it is not built."""
    return require_compiled(record_batch.compiled_scanner, "batch scan nodes.store._batch_body")


def assert_same_scan(scan, blob, body_bytes_max=BODY_BYTES_MAX):
    """Both scans give equal ScannedBatches holding the very blob given, or both None."""
    expected = scan_batch_body_python(blob, body_bytes_max)
    got = scan(blob, body_bytes_max)
    assert got == expected
    if got is not None:
        assert got.blob is blob and type(got.properties) is bytes
        assert all(type(entry) is tuple and all(type(v) is int for v in entry) for entry in got.entries)
    return got


def test_scan_batch_body_is_the_compiled_scan_here(scan):
    assert record_batch.SCANNER == "compiled", COMPILED_MISSING_HINT
    blob = message_batch.encode_checked([(b"x", 0, {"TAGS": "a"}), (b"yy", 1, {})])
    assert record_batch.scan_batch_body(blob, 1024) == scan_batch_body_python(blob, 1024) is not None


def test_init_scan_refuses_another_entry_layout_and_keeps_its_state(scan):
    from nodes.store import _batch_body

    args = [ScannedBatch, message_batch.ENTRY_HEAD.format, message_batch.ENTRY_BYTES_MIN,
            record.USER_PROPERTIES_BYTES_MAX, b"TAGS\x01", c.PROPERTY_RECORD_CRC.encode(), b"DELAY\x01"]
    for at, other, error in [(1, ">iiii", ValueError), (2, 23, ValueError), (3, 40000, ValueError),
                             (4, b"TAGS", ValueError), (4, b"TA\x01GS\x01", ValueError), (5, b"a\x02", ValueError),
                             (6, b"", ValueError), (6, "DELAY", TypeError), (0, None, TypeError)]:
        with pytest.raises(error):
            _batch_body.init_scan(*args[:at], other, *args[at + 1:])
    assert_same_scan(scan, message_batch.encode_checked([(b"x", 0, {"TAGS": "a"})]))


_scan_properties = st.one_of(
    _properties,
    st.sampled_from([{c.PROPERTY_DELAY: "3"}, {"xDELAY": "1"}, {"k": "DELAY\x01"}, {"__RECORD_CRC32x": "1"},
                     {"TAGS": "a", "xTAGS": "b"}, {"xTAGS": "b"}, {"k": "x" * record.USER_PROPERTIES_BYTES_MAX},
                     {"k": "x" * (record.USER_PROPERTIES_BYTES_MAX - 4)}]),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(messages=st.lists(st.tuples(_body() | st.just(b""), INT32, _scan_properties), max_size=6),
       body_bytes_max=st.sampled_from([BODY_BYTES_MAX, 1, 1024, 0, -1, 2**70, -2**70]) | st.integers(0, 80 * 1024))
def test_random_batch_bodies_scan_identically(scan, messages, body_bytes_max):
    blob = message_batch.encode_checked(messages)
    assert_same_scan(scan, blob, body_bytes_max)


_piece = st.sampled_from([b"\x01", b"\x02", b"a", b"TAGS", b"DELAY", b"__RECORD_CRC32", "é".encode(), b"\x7f",
                          b"\x80"])


@settings(max_examples=300, deadline=None)
@given(props=st.lists(_piece, max_size=12).map(b"".join), body=st.binary(max_size=8))
def test_any_properties_bytes_scan_identically(scan, props, body):
    head = message_batch.ENTRY_HEAD.pack(message_batch.ENTRY_BYTES_MIN + len(body) + len(props), 0, 0, 0, len(body))
    entry = head + body + message_batch.PROPS_LEN.pack(len(props)) + props
    plain = message_batch.encode_checked([(b"p", 0, {"TAGS": "t"})])
    for blob in (entry, plain + entry, entry + plain):
        assert_same_scan(scan, blob)


def test_every_truncation_scans_identically(scan):
    blob = message_batch.encode_checked([(b"a" * 30, 1, {"TAGS": "x", "k": "v"}), (b"b", 2, {}), (b"c" * 5, 3, {})])
    for cut in range(len(blob) + 1):
        assert_same_scan(scan, blob[:cut])


@settings(max_examples=400, deadline=None)
@given(flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4))
def test_garbled_batch_bodies_scan_identically(scan, flips):
    blob = bytearray(message_batch.encode_checked([(b"a" * 30, 1, {"TAGS": "x", "k": "v"}), (b"b", 2, {}),
                                                   (b"c" * 5, 3, {"TAGS": "y"})]))
    for pos, value in flips:
        blob[pos % len(blob)] = value
    assert_same_scan(scan, bytes(blob))


@pytest.mark.parametrize("head", [(2**31 - 1, 0, 0, 0, 1), (-2**31, 0, 0, 0, 1), (30, 0, 0, 0, -2**31),
                                  (30, 0, 0, 0, 2**31 - 1), (22, 0, 0, 0, 0), (23, 0, 0, 0, 1)])
def test_extreme_entry_lengths_scan_identically(scan, head):
    blob = message_batch.ENTRY_HEAD.pack(*head) + b"\x00" * 16
    assert_same_scan(scan, blob)
    assert_same_scan(scan, blob, 2**70)


def test_any_bytes_like_blob_scans_as_bytes_do(scan):
    blob = message_batch.encode_checked([(b"one", 0, {"TAGS": "a"}), (b"two", 5, {})])
    expected = scan_batch_body_python(blob, 1024)
    for other in (bytearray(blob), memoryview(blob)):
        got = scan(other, 1024)
        assert got.blob is other and (got.entries, got.properties) == (expected.entries, expected.properties)


@pytest.mark.parametrize(("args", "error"), [
    (("text", 10), TypeError), ((None, 10), TypeError), ((b"", 1.5), TypeError), ((b"", "10"), TypeError),
    ((b"",), TypeError), ((b"", 1, 2), TypeError),
])
def test_bad_scan_arguments_raise_in_c(scan, args, error):
    with pytest.raises(error):
        scan(*args)


def test_no_reference_leaks_over_many_scans(scan):
    blob = message_batch.encode_checked([(b"x" * 300, i, {"TAGS": "t", "k": "v"}) for i in range(8)])
    refused = blob[:-1]

    def run(rounds):
        for _ in range(rounds):
            assert scan(blob, 4096) is not None
            assert scan(refused, 4096) is None
            with pytest.raises(TypeError):
                scan(blob, "many")

    assert_no_leaks(run, [blob, refused, ScannedBatch])


# --- placing a batch ----------------------------------------------------------------------------------
PHYS_FIELD_END = record.PHYS_OFFSET_POS + record.PHYS_OFFSET_FIELD.size  # the smallest size place_batch takes


@pytest.fixture(scope="module")
def place():
    """The compiled placing; fails (never skips) when it is not built."""
    return require_compiled(record_batch.compiled_placer, "placing nodes.store._record_encode")


def assert_same_placing(place, blob: bytes, sizes, phys_offset: int) -> list[int]:
    expected_blob, got_blob = bytearray(blob), bytearray(blob)
    expected = place_batch_python(expected_blob, sizes, phys_offset)
    got = place(got_blob, sizes, phys_offset)
    assert (got, got_blob) == (expected, expected_blob)
    assert type(got) is list and all(type(position) is int for position in got)
    return got


def test_place_batch_is_the_compiled_placing_here(place):
    assert record_batch.PLACER == "compiled", COMPILED_MISSING_HINT
    blob, expected = bytearray(300), bytearray(300)
    assert record_batch.place_batch(blob, [100, 200], 7) == place_batch_python(expected, [100, 200], 7) == [7, 107]
    assert blob == expected


@settings(max_examples=300, deadline=None)
@given(sizes=st.lists(st.integers(PHYS_FIELD_END, 300), max_size=40), spare=st.integers(0, 64),
       fill=st.integers(0, 255), phys_offset=st.integers(-2**63, 2**63 - 1))
def test_random_batches_place_identically(place, sizes, spare, fill, phys_offset):
    blob = bytes([fill]) * (sum(sizes) + spare)
    if sizes and phys_offset > 2**63 - 1 - (sum(sizes) - sizes[-1]):
        for placing in (place, place_batch_python):  # a position past the 8-byte field
            with pytest.raises(struct.error):
                placing(bytearray(blob), sizes, phys_offset)
        return
    assert_same_placing(place, blob, sizes, phys_offset)


@pytest.mark.parametrize("count", [1, 32, 1024])
def test_encoded_batches_place_identically_and_decode_at_their_positions(compiled, place, count):
    messages = [(bytes([i % 251]) * 1024, i, {"TAGS": f"t{i % 3}"}) for i in range(count)]
    blob, sizes = compiled(scanned_of(messages), **FIELDS)
    phys_offset = 5 << 30
    positions = assert_same_placing(place, bytes(blob), sizes, phys_offset)
    place(blob, sizes, phys_offset)
    for position in positions:
        assert record.decode_record(blob, position - phys_offset, check_crc=True).phys_offset == position


def test_any_writable_buffer_and_a_tuple_of_sizes_place_as_a_bytearray_does(place):
    expected = bytearray(200)
    place_batch_python(expected, [50, 150], 3)
    for blob in (bytearray(200), memoryview(bytearray(200)), array.array("B", bytes(200))):
        assert place(blob, (50, 150), 3) == [3, 53]
        assert bytes(blob) == expected


@pytest.mark.parametrize(("sizes", "match"), [
    ([100, 101], "record size 101 is out of range"),  # runs past the 200-byte blob
    ([201], "record size 201"), ([PHYS_FIELD_END - 1], "record size 35"), ([0], "record size 0"),
    ([-100, 100], "record size -100"), ([100, 2**70], "record size"),
])
def test_sizes_that_do_not_fit_the_blob_raise_value_error_and_write_nothing(place, sizes, match):
    blob = bytearray(b"\xee" * 200)
    with pytest.raises(ValueError, match=match):
        place(blob, sizes, 0)
    assert blob == b"\xee" * 200


@pytest.mark.parametrize(("args", "error"), [
    ((bytearray(100), [100]), TypeError), ((bytearray(100), [100], 0, 1), TypeError),
    ((b"\x00" * 100, [100], 0), BufferError), (("text", [100], 0), TypeError), ((None, [100], 0), TypeError),
    ((bytearray(100), iter([100]), 0), TypeError), ((bytearray(100), None, 0), TypeError),
    ((bytearray(100), [100.0], 0), TypeError), ((bytearray(100), ["100"], 0), TypeError),
    ((bytearray(100), [100], 1.0), struct.error), ((bytearray(100), [100], "0"), struct.error),
    ((bytearray(100), [100], 2**63), struct.error), ((bytearray(100), [50, 50], 2**63 - 50), struct.error),
])
def test_bad_placing_arguments_raise_in_c(place, args, error):
    with pytest.raises(error):
        place(*args)


@settings(max_examples=400, deadline=None)
@given(sizes=st.lists(st.integers(-50, 150) | INT64, max_size=5), blob_bytes=st.integers(0, 300),
       phys_offset=st.sampled_from([0, -1, 2**63 - 1, -2**63]) | INT64)
def test_any_sizes_place_as_python_does_or_are_refused(place, sizes, blob_bytes, phys_offset):
    """Sizes that fit the blob give Python's bytes; any other raises ValueError, writing nothing."""
    blob = bytearray(b"\x5a" * blob_bytes)
    try:
        got = place(blob, sizes, phys_offset)
    except ValueError:
        assert blob == b"\x5a" * blob_bytes
        assert not all(size >= PHYS_FIELD_END for size in sizes) or sum(sizes) > blob_bytes
        return
    except struct.error:
        with pytest.raises(struct.error):
            place_batch_python(bytearray(blob_bytes), sizes, phys_offset)
        return
    expected_blob = bytearray(b"\x5a" * blob_bytes)
    assert got == place_batch_python(expected_blob, sizes, phys_offset) and blob == expected_blob


def test_a_phys_offset_hook_that_empties_the_sizes_places_nothing(place):
    sizes = [100, 100]

    class Clears:
        def __index__(self):
            sizes.clear()
            return 0

    blob = bytearray(200)
    assert place(blob, sizes, Clears()) == [] and blob == bytearray(200)


def test_no_reference_leaks_over_many_placings(place):
    blob, sizes = bytearray(64 * 100), [100] * 64
    past, small = [100] * 65, [10]

    def run(rounds):
        for _ in range(rounds):
            place(blob, sizes, 1 << 40)
            for bad in (past, small):
                with pytest.raises(ValueError):
                    place(blob, bad, 0)
            with pytest.raises(struct.error):
                place(blob, sizes, 2**63)

    assert_no_leaks(run, [blob, sizes, past, small])
