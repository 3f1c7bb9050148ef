"""The compiled batch-body scan (nodes.store._batch_body) against record_batch's Python scan: for
any bytes the same ScannedBatch, or None where Python refuses; arguments the wrapper does not
check raise in C, never crash."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.examples import examples
from support.leaks import assert_no_leaks
from support.twins import COMPILED_MISSING_HINT, require_compiled

from nodes.common import constants as c
from nodes.store import message_batch, record, record_batch
from nodes.store.record_batch import ScannedBatch, scan_batch_body_python

from .batch_twins import BODY_BYTES_MAX, INT32, PROPERTIES, body_bytes


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
    PROPERTIES,
    st.sampled_from([{c.PROPERTY_DELAY: "3"}, {"xDELAY": "1"}, {"k": "DELAY\x01"}, {"__RECORD_CRC32x": "1"},
                     {"TAGS": "a", "xTAGS": "b"}, {"xTAGS": "b"}, {"k": "x" * record.USER_PROPERTIES_BYTES_MAX},
                     {"k": "x" * (record.USER_PROPERTIES_BYTES_MAX - 4)}]),
)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(messages=st.lists(st.tuples(body_bytes() | st.just(b""), INT32, _scan_properties), max_size=6),
       body_bytes_max=st.sampled_from([BODY_BYTES_MAX, 1, 1024, 0, -1, 2**70, -2**70]) | st.integers(0, 80 * 1024))
def test_random_batch_bodies_scan_identically(scan, messages, body_bytes_max):
    blob = message_batch.encode_checked(messages)
    assert_same_scan(scan, blob, body_bytes_max)


_piece = st.sampled_from([b"\x01", b"\x02", b"a", b"TAGS", b"DELAY", b"__RECORD_CRC32", "é".encode(), b"\x7f",
                          b"\x80"])


@settings(max_examples=examples(300), deadline=None)
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


@settings(max_examples=examples(400), deadline=None)
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
