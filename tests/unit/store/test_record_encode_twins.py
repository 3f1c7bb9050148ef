"""The compiled scanned-batch encoder against the Python loop it mirrors (nodes/store/record_batch.py).

The Python loop is the reference: for any scanned batch the compiled encoder must give the
same record bytes and sizes, and those records must decode (record CRC checked) to the fields
put in, which shows the CRC is right and not merely equal to Python's. Arguments the wrapper
does not check raise in C, never crash: a crash would take the test process down with it. The
scan and the placing have their own files (test_batch_scan_twins, test_batch_place_twins).
"""

from __future__ import annotations

import struct
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.examples import examples
from support.leaks import assert_no_leaks
from support.twins import COMPILED_MISSING_HINT, require_compiled, run_switched

from nodes.common import constants as c
from nodes.store import message_batch, record, record_batch
from nodes.store.record_batch import ScannedBatch, encode_scanned_python, scan_batch_body_python

from .batch_twins import (
    FIELDS,
    HOST_PAIRS,
    INT32,
    INT64,
    INT64_EDGES,
    PROPERTIES,
    assert_decodes_to,
    body_bytes,
    framed_entries,
    keyword_encoder,
    scanned_of,
)


@pytest.fixture(scope="module")
def compiled():
    """encode_scanned's keywords onto the compiled encoder; fails (never skips) when it is not built."""
    return keyword_encoder()


@pytest.fixture(scope="module")
def raw():
    """The compiled encoder itself, positional arguments and all."""
    return require_compiled(record_batch.compiled_encoder, "record encoder nodes.store._record_encode")


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

@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(messages=st.lists(st.tuples(body_bytes(), INT32, PROPERTIES), min_size=1, max_size=8),
       topic=st.sampled_from(["T", "Tópico", "t" * c.TOPIC_NAME_BYTES_MAX]), queue_id=INT32,
       first_queue_offset=st.integers(-2**63, 2**63 - 9), store_timestamp_ms=INT64_EDGES,
       born_timestamp_ms=INT64_EDGES, born_host=HOST_PAIRS, store_host=HOST_PAIRS,
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


@settings(max_examples=examples(400), deadline=None)
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
