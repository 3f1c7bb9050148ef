"""The compiled batch-body encoder against the Python loop it mirrors (nodes/store/message_batch.py).

The Python loop is the reference: for any entries the compiled encoder must give the same
bytes, or raise the same kind of error (the properties limit with the same text). Arguments
of the wrong shape raise in C, never crash: a crash would take the test process down with it.
"""

from __future__ import annotations

import array
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.examples import examples
from support.leaks import assert_no_leaks
from support.twins import COMPILED_MISSING_HINT, require_compiled, run_switched

from nodes.common import constants as c
from nodes.store import message_batch
from nodes.store.message_batch import encode_checked_python

INT32 = st.integers(-2**31, 2**31 - 1)
LIMIT = c.PROPERTIES_BYTES_MAX


@pytest.fixture(scope="module")
def compiled():
    """The compiled encoder; fails (never skips) when it is not built."""
    return require_compiled(message_batch.compiled_encoder, "batch encoder nodes.store._batch_body")


def outcome(encode, entries):
    """The bytes, or the exception's type and (for the properties limit) its text."""
    try:
        return encode(entries)
    except (TypeError, ValueError, AttributeError, struct.error) as exc:
        return type(exc), str(exc) if "limit" in str(exc) else ""


def assert_same(compiled, entries):
    expected = outcome(encode_checked_python, entries)
    got = outcome(compiled, entries)
    assert got == expected
    if isinstance(got, bytes):
        assert type(got) is bytes
    return got


# --- the switch ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("env", "expected"), [(None, "compiled"), ("1", "python (MQLAB_PURE_PYTHON_ENCODE=1)")])
def test_encode_checked_runs_the_compiled_encoder_unless_switched_off(env, expected):
    code = ("from nodes.store import message_batch as m; print(m.ENCODER); "
            "print(m.encode_checked([(b'hi', 3, {'TAGS': 't', 'k': 'välue'})]).hex())")
    encoder, body = run_switched(message_batch.PURE_PYTHON_ENV, env, code)
    assert encoder == expected, f"{encoder} ({COMPILED_MISSING_HINT})"
    assert bytes.fromhex(body) == encode_checked_python([(b"hi", 3, {"TAGS": "t", "k": "välue"})])


def test_encode_checked_is_the_compiled_encoder_here(compiled):
    assert message_batch.ENCODER == "compiled", COMPILED_MISSING_HINT
    entries = [(b"x" * 100, 3, {"TAGS": "a"}), (b"y", 0, {})]
    assert message_batch.encode_checked(entries) == encode_checked_python(entries)


def test_init_encode_refuses_another_entry_layout_and_keeps_its_state(compiled):
    from nodes.store import _batch_body

    args = [message_batch.ENTRY_HEAD.format, message_batch.ENTRY_BYTES_MIN, message_batch.PROPS_LEN.format, LIMIT,
            struct.error]
    for at, other, error in [(0, ">iiii", ValueError), (1, 23, ValueError), (2, ">H", ValueError),
                             (3, 40000, ValueError), (3, -1, ValueError), (4, object(), TypeError),
                             (0, None, TypeError)]:
        with pytest.raises(error):
            _batch_body.init_encode(*args[:at], other, *args[at + 1:])
    assert_same(compiled, [(b"x", 0, {"TAGS": "a"})])


# --- valid batches -------------------------------------------------------------------------------------
_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_properties = st.one_of(
    st.just({}),
    st.dictionaries(st.text(st.characters(min_codepoint=0, max_codepoint=127), max_size=12),
                    st.text(st.characters(min_codepoint=0, max_codepoint=127), max_size=12), max_size=5),
    st.dictionaries(_text, _text, max_size=5),
    st.sampled_from([{"k": "v" * (LIMIT - 3)}, {"k": "v" * (LIMIT - 4)}, {"k": "é" * (LIMIT // 2)},
                     {"k": "v" * LIMIT}, {"": ""}, {"a": "1", "b": "2", "a\x01": "\x02"}]),
)


@st.composite
def _body(draw):
    """Empty to 40 KiB as bytes, bytearray or memoryview; a long one is a drawn pattern repeated."""
    size = draw(st.sampled_from([0, 1, 1024, 1024]) | st.integers(0, 40 * 1024))
    pattern = draw(st.binary(min_size=1, max_size=64))
    body = (pattern * (size // len(pattern) + 1))[:size]
    return draw(st.sampled_from([bytes, bytearray, memoryview]))(body)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(entries=st.lists(st.tuples(_body(), INT32, _properties), max_size=8))
def test_random_batches_encode_identically(compiled, entries):
    assert_same(compiled, entries)


@pytest.mark.parametrize("count", [0, 1, 32, 1024])
def test_producer_batches_encode_identically(compiled, count):
    entries = [(bytes([i % 251]) * 1024, i, {"TAGS": f"t{i % 3}", "UNIQ_KEY": f"7F00000100{i:08X}", "WAIT": "true"})
               for i in range(count)]
    assert compiled(entries) == encode_checked_python(entries) == b"".join(
        message_batch.encode_entry(*entry) for entry in entries)


def test_the_properties_limit_raises_the_same_error_at_the_same_message(compiled):
    at_limit = {"k": "v" * (LIMIT - 3)}  # k \x01 v... \x02: exactly the limit
    assert compiled([(b"b", 0, at_limit)]) == encode_checked_python([(b"b", 0, at_limit)])
    for over in ({"k": "v" * (LIMIT - 2)}, {"k": "é" * LIMIT}, {f"k{i}": "v" * 100 for i in range(400)}):
        entries = [(b"ok", 0, {"a": "b"}), (b"b", 0, over), (None, "not a flag", None)]
        for encode in (compiled, encode_checked_python):
            with pytest.raises(ValueError, match="over the 32767-byte limit") as raised:
                encode(entries)
            assert type(raised.value) is ValueError
        assert str(raised.value) == outcome(compiled, entries)[1]


def test_any_mapping_and_any_formattable_property_encode_as_f_strings_do(compiled):
    class Props(dict):
        def items(self):
            return [("z", "1"), ("a", "2")]

    class Loud(str):
        def __format__(self, spec):
            return self.upper()

    from collections import OrderedDict
    from types import MappingProxyType

    for properties in (OrderedDict(b="1", a="2"), MappingProxyType({"k": "v"}), Props(x="y"), {1: 2.5, None: True},
                       {Loud("name"): Loud("value")}, {"k": Loud("v")}, None, 0, "", [], {}):
        assert assert_same(compiled, [(b"body", 0, properties)]) is not None


def test_any_entries_iterable_and_any_entry_sequence_encode_as_unpacking_does(compiled):
    entries = [(b"a", 1, {"k": "v"}), [b"bb", 2, {}], (bytearray(b"c"), True, {"x": "y"})]
    expected = encode_checked_python(entries)
    for batch in (entries, tuple(entries), iter(entries), (e for e in entries)):
        assert compiled(batch) == expected


def test_an_index_flag_packs_as_struct_packs_it(compiled):
    class Index:
        def __index__(self):
            return -7

    assert_same(compiled, [(b"x", Index(), {})])


# --- bad arguments -------------------------------------------------------------------------------------
class NoFormat:
    def __format__(self, spec):
        raise ValueError("no format")


class BadFormat:
    def __format__(self, spec):
        return 5


@pytest.mark.parametrize("entries", [
    [(b"x", 2**31, {})], [(b"x", -2**31 - 1, {})], [(b"x", 1.0, {})], [(b"x", "1", {})], [(b"x", None, {})],
    [(None, 0, {})], [("text", 0, {})], [([1, 2], 0, {})], [(3, 0, {})],
    [(b"x", 0)], [(b"x", 0, {}, 1)], [5], [None],
    [(b"x", 0, [("a", "b")])], [(b"x", 0, {"k": "\ud800"})], [(b"x", 0, {"\udfff": "v"})],
    [(b"x", 0, {"k": NoFormat()})], [(b"x", 0, {NoFormat(): "v"})], [(b"x", 0, {"k": BadFormat()})],
    [(b"ok", 0, {}), (b"x", 0, {"k": "v"}), (b"y", 2**40, {})],
])
def test_bad_entries_raise_the_python_loops_errors(compiled, entries):
    got = assert_same(compiled, entries)
    assert not isinstance(got, bytes), got


@pytest.mark.parametrize("entries", [None, 5, b"\x00" * 3])
def test_entries_that_are_no_iterable_of_messages_raise_type_error(compiled, entries):
    for encode in (compiled, encode_checked_python):
        with pytest.raises(TypeError):
            encode(entries)


def test_a_body_whose_buffer_is_not_its_len_in_bytes_is_refused(compiled):
    """The one difference, on purpose: Python writes len() (4 items) as the length of 16 bytes."""
    body = array.array("i", [1, 2, 3, 4])
    with pytest.raises(ValueError, match="has len"):
        compiled([(body, 0, {})])
    assert compiled([(array.array("B", b"abc"), 0, {})]) == encode_checked_python([(b"abc", 0, {})])


_odd = st.sampled_from([None, 0, -1, 2**31, 2**64, 1.5, "s", "é", b"b", bytearray(b"ba"), [], [1], {}, {"k": "v"},
                        {"k": None}, {None: "v"}, ("a", "b"), (b"x", 0, {}), NoFormat(), object()])


@settings(max_examples=examples(500), deadline=None)
@given(entries=st.lists(st.one_of(st.tuples(_odd, _odd, _odd), st.tuples(st.binary(max_size=4), INT32, _odd),
                                  st.lists(_odd, max_size=4), _odd), max_size=4))
def test_any_entries_encode_identically_or_raise_alike(compiled, entries):
    assert_same(compiled, entries)


# --- Python code run mid-encode ------------------------------------------------------------------------
def test_a_format_hook_that_changes_the_entries_does_not_change_the_batch(compiled):
    entries: list = []

    class Meddles:
        def __format__(self, spec):
            entries.clear()
            return "m"

    entries += [(b"first", 0, {"a": "1", "k": Meddles(), "z": "2"}), (bytearray(b"second"), 1, {"x": "y"})]
    got = compiled(entries)
    assert message_batch.decode(got) == [(b"first", 0, {"a": "1", "k": "m", "z": "2"}), (b"second", 1, {"x": "y"})]


def test_a_format_hook_that_changes_its_properties_raises_as_iterating_them_does(compiled):
    properties: dict = {}

    class Meddles:
        def __format__(self, spec):
            properties.clear()
            return "m"

    properties.update({"a": "1", "k": Meddles(), "z": "2"})
    for encode in (compiled, encode_checked_python):
        properties.update({"a": "1", "k": Meddles(), "z": "2"})
        with pytest.raises(RuntimeError, match="changed size"):
            encode([(b"body", 0, properties)])


def test_a_len_hook_that_resizes_an_earlier_body_is_refused(compiled):
    first = bytearray(b"abc")

    class Resizes(bytes):
        def __len__(self):
            first.extend(b"more")
            return bytes.__len__(self)

    with pytest.raises(ValueError, match="has len"):
        compiled([(first, 0, {}), (Resizes(b"xy"), 0, {})])


# --- references ---------------------------------------------------------------------------------------
def test_no_reference_leaks_over_many_encodes(compiled):
    body, view = b"x" * 300, memoryview(b"y" * 20)
    properties = {"TAGS": "t", "k": "välue", "n": 1}
    good = [(body, i, properties) for i in range(8)] + [(view, 0, {})]
    too_large = [(body, 0, {"k": "v" * LIMIT})]
    bad_flag = [(body, 2**31, properties)]
    bad_body = [(body, 0, properties), ("text", 0, properties)]
    watched = [body, view, properties, *properties, *properties.values()]

    def run(rounds):
        for _ in range(rounds):
            compiled(good)
            for bad, error in ((too_large, ValueError), (bad_flag, struct.error), (bad_body, TypeError)):
                with pytest.raises(error):
                    compiled(bad)

    assert_no_leaks(run, watched)
