"""The compiled PHYSICALOFFSET placing (nodes.store._record_encode's place_batch) against
record_batch's Python loop: the same bytes placed in any writable buffer, the same refusals."""

from __future__ import annotations

import array
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples
from support.leaks import assert_no_leaks
from support.twins import COMPILED_MISSING_HINT, require_compiled

from nodes.store import record, record_batch
from nodes.store.record_batch import place_batch_python

from .batch_twins import FIELDS, INT64, keyword_encoder, scanned_of


@pytest.fixture(scope="module")
def compiled():
    """encode_scanned's keywords onto the compiled encoder; fails (never skips) when it is not built."""
    return keyword_encoder()


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


@settings(max_examples=examples(300), deadline=None)
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


@settings(max_examples=examples(400), deadline=None)
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
