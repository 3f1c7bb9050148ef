"""The compiled chunk check against the Python walk it mirrors (nodes/broker/ha_check.py).

The Python walk is the reference: for any chunk, valid or damaged, the compiled check must
give the same valid bytes, bad phys offset, reason text, needed bytes and checked records
(every field, same types). The chunks are built with the store's own encoders (records,
blank markers where a segment ends) and then damaged the ways a log or a wire can be. A crash
in C would take the test process down with it.
"""

from __future__ import annotations

import array
import mmap
import struct
import sys
import zlib
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.chunk_checks import compiled_check
from support.examples import examples
from support.leaks import assert_no_leaks
from support.twins import COMPILED_MISSING_HINT, require_compiled, run_switched

from nodes.broker import ha_check
from nodes.common import constants as c
from nodes.store import record
from nodes.store.record import MessageToStore, blank_marker, encode_record

PY = ha_check.check_chunk_python
SEGMENT_SIZES = (4096, 16 * 1024, 64 * 1024, 256 * 1024)  # 256 KiB: the broker unit tests' SMALL store
INT32 = st.integers(-2**31, 2**31 - 1)
INT64 = st.integers(-2**63, 2**63 - 1)
POS_PHYS_OFFSET, POS_SYS_FLAG, POS_BODY_LEN = 28, 36, 84


@pytest.fixture(scope="module")
def compiled():
    return compiled_check()


def outcome(check, data, phys_offset, segment_bytes):
    """Everything a check says (ChunkCheck's equality leaves the records out), with types."""
    result = check(data, phys_offset, segment_bytes)
    records = [tuple((type(value).__name__, value) for value in fields) for fields in result.records]
    assert all(type(fields) is tuple for fields in result.records)
    return result.valid_bytes, result.bad_phys_offset, result.reason, result.needed_bytes, records


def assert_same(compiled, data, phys_offset, segment_bytes):
    expected = outcome(PY, data, phys_offset, segment_bytes)
    assert outcome(compiled, data, phys_offset, segment_bytes) == expected
    return expected


# --- logs built as the commitlog lays them out ------------------------------------------------------
@dataclass
class Log:
    """Commitlog bytes from `phys_offset`: records, and a blank marker (then zeros) wherever
    the next record would not leave room for one in its segment, as CommitLog.append does."""

    data: bytearray
    phys_offset: int
    segment_bytes: int
    record_positions: list[int]  # into data
    blank_positions: list[int]

    def segment_left(self, pos: int) -> int:
        at = self.phys_offset + pos
        return self.segment_bytes - at % self.segment_bytes


def build_log(messages: list[MessageToStore], phys_offset: int, segment_bytes: int) -> Log:
    log = Log(bytearray(), phys_offset, segment_bytes, [], [])
    for queue_offset, msg in enumerate(messages):
        rec = encode_record(msg, queue_offset=queue_offset, phys_offset=phys_offset + len(log.data),
                            store_timestamp_ms=1_700_000_000_000 + queue_offset)
        left = log.segment_left(len(log.data))
        if len(rec) + c.END_FILE_MIN_BLANK_BYTES > left:
            log.blank_positions.append(len(log.data))
            log.data += blank_marker(left) + bytes(left - c.END_FILE_MIN_BLANK_BYTES)
            rec = encode_record(msg, queue_offset=queue_offset, phys_offset=phys_offset + len(log.data),
                                store_timestamp_ms=1_700_000_000_000 + queue_offset)
        log.record_positions.append(len(log.data))
        log.data += rec
    return log


def reseal(buf: bytearray, pos: int) -> None:
    """Write the record CRC the record at `pos` should have (its size field says where it ends),
    so the damage under it is for the other checks to find."""
    (size,) = struct.unpack_from(">i", buf, pos)
    if size < record.RECORD_BYTES_MIN or pos + size > len(buf):
        return
    end = pos + size
    value_start = end - 9
    crc = zlib.crc32(bytes(buf[pos:pos + POS_PHYS_OFFSET]))
    crc = zlib.crc32(bytes(8), crc)
    crc = zlib.crc32(bytes(buf[pos + POS_PHYS_OFFSET + 8:value_start]), crc)
    buf[value_start:end - 1] = b"%08X" % crc


_name = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"), max_size=10)
_topic = st.sampled_from(["T", "BenchSend", "Tøpic", "话题"]) | _name.filter(
    lambda t: 0 < len(t.encode()) <= c.TOPIC_NAME_BYTES_MAX)
# bodies up to ~1.5 KiB, so records cross 4 KiB segments often; built, not drawn byte by byte
_body = st.tuples(st.integers(0, 1500), st.integers(0, 255)).map(lambda n_b: bytes([n_b[1]]) * n_b[0])


@st.composite
def _message(draw):
    properties = {c.PROPERTY_UNIQ_KEY: draw(st.sampled_from(["", "7F0000010001"]) | _name)}
    properties |= draw(st.dictionaries(_name.filter(lambda k: k and k != c.PROPERTY_RECORD_CRC), _name,
                                       max_size=3))
    return MessageToStore(topic=draw(_topic), queue_id=draw(INT32), body=draw(_body), flag=draw(INT32),
                          properties=properties, born_timestamp_ms=draw(INT64), reconsume_times=draw(INT32),
                          prepared_transaction_offset=draw(INT64))


@st.composite
def logs(draw, max_messages=8):
    segment_bytes = draw(st.sampled_from(SEGMENT_SIZES))
    # anywhere in a segment that leaves room for a blank marker, in any of the first 2^20 segments
    phys_offset = (draw(st.integers(0, 2**20)) * segment_bytes
                   + draw(st.integers(0, segment_bytes - c.END_FILE_MIN_BLANK_BYTES)))
    return build_log(draw(st.lists(_message(), max_size=max_messages)), phys_offset, segment_bytes)


# --- damage -----------------------------------------------------------------------------------------
DAMAGES = ("flip", "flip_resealed", "truncate", "start_inside", "phys_offset", "magic", "size",
           "size_at_segment_end", "blank_here", "blank_size", "body_len", "topic_len", "props_len", "ipv6",
           "topic_not_utf8", "props_not_utf8", "crc_text", "crc_prefix")
def _int32(b: int) -> int:
    """`b` as a signed 32-bit field holds it (small draws stay small and positive)."""
    return (b + 2**31) % 2**32 - 2**31


def _int16(b: int) -> int:
    return (b + 2**15) % 2**16 - 2**15


_NOT_UTF8 = (b"\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80")


def damage(log: Log, kind: str, a: int, b: int) -> None:
    """Damage `log` in place the `kind` way; `a` picks where, `b` what. A damage that does not
    apply (an earlier one cut the record it would hit, or made its fields point outside the
    bytes) does what it got to, or nothing."""
    try:
        _damage_at(log, kind, a, b)
    except (struct.error, IndexError, ZeroDivisionError):
        pass


def _damage_at(log: Log, kind: str, a: int, b: int) -> None:
    buf = log.data
    if not buf:
        return
    records = log.record_positions
    rec = records[a % len(records)] if records else None
    if kind == "flip":
        buf[a % len(buf)] ^= b % 255 + 1
    elif kind == "flip_resealed" and rec is not None:
        size = struct.unpack_from(">i", buf, rec)[0]
        buf[rec + b % size] ^= a % 255 + 1
        reseal(buf, rec)
    elif kind == "truncate":
        del buf[a % len(buf):]
    elif kind == "start_inside":
        cut = a % len(buf)
        del buf[:cut]
        log.phys_offset += cut
        log.record_positions = [p - cut for p in records if p >= cut]
        log.blank_positions = [p - cut for p in log.blank_positions if p >= cut]
    elif rec is None:
        return
    elif kind == "phys_offset":
        (now,) = struct.unpack_from(">q", buf, rec + POS_PHYS_OFFSET)
        struct.pack_into(">q", buf, rec + POS_PHYS_OFFSET, b if b != now else now ^ 1)
    elif kind == "magic":
        struct.pack_into(">I", buf, (log.blank_positions + records)[a % (len(records) + len(log.blank_positions))] + 4,
                         b % 2**32)
    elif kind == "size":
        struct.pack_into(">i", buf, rec, _int32(b))
    elif kind == "size_at_segment_end":  # a size that ends just short of, at, or past its segment's end
        struct.pack_into(">i", buf, rec, log.segment_left(rec) + b % 5 - 2)
    elif kind == "blank_here":  # a blank marker where a record starts, claiming the segment's rest or not
        struct.pack_into(">iI", buf, rec, log.segment_left(rec) + (0 if b % 2 else b % 17 - 8), c.BLANK_MAGIC)
    elif kind == "blank_size" and log.blank_positions:
        blank = log.blank_positions[a % len(log.blank_positions)]
        struct.pack_into(">i", buf, blank, _int32(b))
    elif kind == "body_len":
        struct.pack_into(">i", buf, rec + POS_BODY_LEN, _int32(b) if a % 2 else
                         struct.unpack_from(">i", buf, rec + POS_BODY_LEN)[0] + b % 9 - 4)
        reseal(buf, rec)
    elif kind in ("topic_len", "props_len", "topic_not_utf8", "props_not_utf8"):
        (body_len,) = struct.unpack_from(">i", buf, rec + POS_BODY_LEN)
        topic_len_pos = rec + record.HEADER.size + body_len
        props_len_pos = topic_len_pos + 1 + buf[topic_len_pos]
        if kind == "topic_len":
            buf[topic_len_pos] = b % 256
        elif kind == "props_len":
            struct.pack_into(">h", buf, props_len_pos, _int16(b))
        elif kind == "topic_not_utf8":
            bad = _NOT_UTF8[b % len(_NOT_UTF8)]
            at = topic_len_pos + 1 + a % buf[topic_len_pos]
            n = min(len(bad), props_len_pos - at)  # within the topic
            buf[at:at + n] = bad[:n]
        else:
            (size,) = struct.unpack_from(">i", buf, rec)
            props_start, props_end = props_len_pos + 2, rec + size - record.RECORD_CRC_PROPERTY_BYTES
            if props_end > props_start:
                bad = _NOT_UTF8[b % len(_NOT_UTF8)]
                at = props_start + a % (props_end - props_start)
                n = min(len(bad), props_end - at)
                buf[at:at + n] = bad[:n]
        reseal(buf, rec)
    elif kind == "ipv6":
        struct.pack_into(">i", buf, rec + POS_SYS_FLAG, (record.SYS_FLAG_BORN_HOST_V6, record.SYS_FLAG_STORE_HOST_V6,
                                                         0x30)[b % 3])
        reseal(buf, rec)
    elif kind == "crc_text":
        (size,) = struct.unpack_from(">i", buf, rec)
        digit = rec + size - 9 + a % 8
        buf[digit] = b"0123456789ABCDEFabcdef\x00 -"[b % 25] if b % 3 else buf[digit] | 0x20  # lower case
    elif kind == "crc_prefix":
        (size,) = struct.unpack_from(">i", buf, rec)
        buf[rec + size - record.RECORD_CRC_PROPERTY_BYTES + a % record.RECORD_CRC_PROPERTY_BYTES] ^= b % 255 + 1


_damage = st.tuples(st.sampled_from(DAMAGES), st.integers(0, 2**31), st.integers(0, 2**64))


# --- the switch ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("env", "expected"), [(None, "compiled"), ("1", "python (MQLAB_PURE_PYTHON_CHECK=1)")])
def test_check_chunk_runs_the_compiled_check_unless_switched_off(env, expected):
    code = ("from nodes.broker import ha_check as h; print(h.CHECKER); print(h.FRAMING_WALK); "
            "data = bytes.fromhex(input()); check = h.check_chunk(data, 4096, 65536); "
            "print(check.valid_bytes, check.records[0][2], h.whole_records_bytes(data + data[:50]))")
    data = build_log([MessageToStore("Tø", 3, b"hi")], 4096, 65536).data
    checker, framing_walk, result = run_switched(ha_check.PURE_PYTHON_ENV, env, code, data.hex())
    assert checker == framing_walk == expected, f"{checker}, {framing_walk} ({COMPILED_MISSING_HINT})"
    assert result == f"{len(data)} Tø {len(data)}"


def test_check_chunk_is_the_compiled_check_in_this_process(compiled):
    assert ha_check.CHECKER == "compiled", COMPILED_MISSING_HINT
    log = build_log([MessageToStore("T", 0, b"x" * 100)] * 3, 0, 65536)
    assert outcome(ha_check.check_chunk, bytes(log.data), 0, 65536) == outcome(PY, bytes(log.data), 0, 65536)


def test_init_refuses_another_record_layout_and_keeps_its_state(compiled):
    from nodes.store import _record_check

    good = (record.HEADER.format, record.HEADER.size, record.RECORD_BYTES_MIN, c.RECORD_MAGIC, c.BLANK_MAGIC,
            c.END_FILE_MIN_BLANK_BYTES, record.PHYS_OFFSET_POS, record.PROPS_LEN.format, record.RECORD_CRC_PREFIX,
            record.RECORD_CRC_PROPERTY_BYTES, 0x30)
    for position, other in [(0, ">iI"), (1, 92), (5, 16), (6, 20), (7, ">H")]:
        with pytest.raises(ValueError, match="not the layout compiled in"):
            _record_check.init(*good[:position], other, *good[position + 1:])
    with pytest.raises(ValueError, match="record CRC property"):
        _record_check.init(*good[:9], 30, *good[10:])
    with pytest.raises(ValueError, match="out of range"):
        _record_check.init(*good[:2], 100, *good[3:])
    with pytest.raises(ValueError, match="out of range"):
        _record_check.init(*good[:4], c.RECORD_MAGIC, *good[5:])
    log = build_log([MessageToStore("T", 0, b"x")] * 3, 0, 4096)
    assert assert_same(compiled, bytes(log.data), 0, 4096)[0] == len(log.data)


# --- valid chunks -------------------------------------------------------------------------------------
@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log=logs())
def test_valid_logs_check_identically_and_every_record_passes(compiled, log):
    valid_bytes, bad_phys_offset, reason, needed_bytes, records = assert_same(
        compiled, bytes(log.data), log.phys_offset, log.segment_bytes)
    assert (valid_bytes, bad_phys_offset, reason, needed_bytes) == (len(log.data), None, "", 0)
    assert [fields[0][1] for fields in records] == [log.phys_offset + p for p in log.record_positions]


def test_a_megabyte_of_one_kib_records_checks_identically(compiled):
    """The profiled case: a replicated send_batch of 1 KiB messages, one chunk of ~1 MiB."""
    messages = [MessageToStore("BenchSend", i % 8, bytes([i % 251]) * 1024,
                               properties={c.PROPERTY_UNIQ_KEY: f"{i:032X}", c.PROPERTY_TAGS: "t"})
                for i in range(1000)]
    log = build_log(messages, 3 * 2**30 + 5000, 2**30)
    _, _, _, _, records = assert_same(compiled, bytes(log.data), log.phys_offset, log.segment_bytes)
    assert len(records) == 1000


def test_an_empty_chunk_and_a_chunk_shorter_than_a_blank_marker(compiled):
    assert assert_same(compiled, b"", 0, 4096) == (0, None, "", 0, [])
    for n in range(1, c.END_FILE_MIN_BLANK_BYTES):
        assert assert_same(compiled, b"\xff" * n, 4096, 4096) == (0, None, "", c.END_FILE_MIN_BLANK_BYTES, [])


def test_every_buffer_type_checks_as_bytes_do(compiled):
    log = build_log([MessageToStore("T", 0, b"x" * 300)] * 20, 4000, 4096)
    data = bytes(log.data)
    expected = assert_same(compiled, data, 4000, 4096)
    with mmap.mmap(-1, len(data)) as mapped:
        mapped[:] = data
        for buffer in (bytearray(data), memoryview(data), memoryview(bytearray(data)), mapped):
            assert outcome(compiled, buffer, 4000, 4096) == expected
        assert outcome(PY, mapped, 4000, 4096) == expected


@pytest.mark.parametrize("phys_offset", [-4096, -8, -4001, -2**40 - 100])
def test_a_negative_phys_offset_places_segments_as_python_does(compiled, phys_offset):
    """Python's % never goes negative; the compiled walk's floor modulo matches it."""
    log = build_log([MessageToStore("T", 0, b"x" * 500)] * 12, phys_offset, 4096)
    assert assert_same(compiled, bytes(log.data), phys_offset, 4096)[0] == len(log.data)


def test_what_the_compiled_check_refuses_instead_of_answering(compiled):
    """A segment size that is not positive has no answer (Python divides by zero), and a phys
    offset that int64 does not hold is no commitlog's."""
    for segment_bytes in (0, -4096):
        with pytest.raises(ValueError, match="segment_bytes"):
            compiled(b"\0" * 16, 0, segment_bytes)
    with pytest.raises(OverflowError):
        compiled(b"\0" * 16, 2**63 - 8, 4096)
    with pytest.raises(OverflowError):
        compiled(b"\0" * 16, 2**64, 4096)
    with pytest.raises(TypeError):
        compiled("text", 0, 4096)


# --- damaged chunks -------------------------------------------------------------------------------------
def _one_record_log(**kw):
    return build_log([MessageToStore("T", 0, b"x" * 100, **kw)] * 2, 8192, 16384)


@pytest.mark.parametrize(("patch", "reason"), [
    ((4, ">I", 0x12345678), "no record magic (0x12345678)"),
    ((4, ">I", 0), "no record magic (0x00000000)"),
    ((4, ">I", c.RECORD_MAGIC ^ 0x8000_0000), f"no record magic (0x{c.RECORD_MAGIC ^ 0x8000_0000:08x})"),
    ((0, ">i", -1), "a record size of -1 bytes does not fit its segment"),
    ((0, ">i", -2**31), "a record size of -2147483648 bytes does not fit its segment"),
    ((0, ">i", record.RECORD_BYTES_MIN - 1),
     f"a record size of {record.RECORD_BYTES_MIN - 1} bytes does not fit its segment"),
    ((0, ">i", 8193), "a record size of 8193 bytes does not fit its segment"),
    ((0, ">iI", (-5, c.BLANK_MAGIC)), "a blank marker of -5 bytes does not end its segment"),
    ((0, ">iI", (2**31 - 1, c.BLANK_MAGIC)), "a blank marker of 2147483647 bytes does not end its segment"),
    ((0, ">iI", (8191, c.BLANK_MAGIC)), "a blank marker of 8191 bytes does not end its segment"),
    ((POS_PHYS_OFFSET, ">q", 8193), "the record fails its checks (layout, own phys offset or CRC)"),
])
def test_each_reason_reads_the_same_in_both(compiled, patch, reason):
    log = _one_record_log()
    pos, fmt, value = patch
    struct.pack_into(fmt, log.data, pos, *(value if isinstance(value, tuple) else (value,)))
    assert assert_same(compiled, bytes(log.data), 8192, 16384)[:4] == (0, 8192, reason, 0)


def test_a_blank_marker_that_ends_its_segment_asks_for_the_rest(compiled):
    data = blank_marker(4096 - 96) + bytes(100)
    assert assert_same(compiled, data, 96, 4096) == (0, None, "", 4096 - 96, [])
    assert assert_same(compiled, data[:8] + bytes(4096 - 104), 96, 4096) == (4096 - 96, None, "", 0, [])


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log=logs(), damages=st.lists(_damage, min_size=1, max_size=3))
def test_damaged_logs_check_identically(compiled, log, damages):
    for kind, a, b in damages:
        damage(log, kind, a, b)
    assert_same(compiled, bytes(log.data), log.phys_offset, log.segment_bytes)


@pytest.mark.parametrize("kind", DAMAGES)
def test_each_damage_kind_checks_identically_wherever_it_lands(compiled, kind):
    """Every kind over every record position and a spread of values, deterministically."""
    messages = [MessageToStore(topic, i, bytes([i]) * (300 * i), properties={"k": "välue", "n": str(i)})
                for i, topic in enumerate(["T", "Tøpic", "T", "BenchSend", "话题", "T"])]
    built = build_log(messages, 4096 - 700, 4096)
    for a in range(0, 40, 3):
        for b in (0, 1, 2, 7, 255, 300, 5000, 2**15 - 1, 2**15 + 3, 2**31 - 1, 2**31, 2**32 + 5, 2**63 + 11):
            log = Log(bytearray(built.data), built.phys_offset, built.segment_bytes, list(built.record_positions),
                      list(built.blank_positions))
            damage(log, kind, a, b)
            assert_same(compiled, bytes(log.data), log.phys_offset, log.segment_bytes)


@settings(max_examples=examples(150), deadline=None)
@given(head=st.binary(max_size=300), tail=st.binary(max_size=300), phys_offset=st.integers(0, 2**40),
       segment_bytes=st.sampled_from((*SEGMENT_SIZES, 1, 7, 128)))
def test_arbitrary_bytes_around_a_valid_record_check_identically(compiled, head, tail, phys_offset, segment_bytes):
    rec = encode_record(MessageToStore("T", 0, b"body"), queue_offset=0, phys_offset=phys_offset + len(head),
                        store_timestamp_ms=1)
    assert_same(compiled, head + rec + tail, phys_offset, segment_bytes)
    assert_same(compiled, rec + tail, phys_offset + len(head), max(segment_bytes, 4096))


# --- references ----------------------------------------------------------------------------------------
def test_no_reference_leaks_over_many_checks(compiled):
    from nodes.store import _record_check

    log = build_log([MessageToStore("Tøpic", i, b"x" * 200, properties={"k": str(i)}) for i in range(12)], 0, 4096)
    good = bytes(log.data)
    bad_utf8 = bytearray(good)
    damage(Log(bad_utf8, 0, 4096, log.record_positions[3:4], []), "props_not_utf8", 1, 0)
    cases = [(good, 0), (good[:-5], 0), (bytes(bad_utf8), 0), (good, 8), (b"\xff" * 100, 0)]
    watched = [good, cases[2][0], _record_check]

    def run(rounds):
        for _ in range(rounds):
            for data, phys_offset in cases:
                _record_check.check_chunk(data, phys_offset, 4096)
            with pytest.raises(ValueError):
                _record_check.check_chunk(good, 0, 0)

    assert_no_leaks(run, watched)


def test_each_checked_field_is_held_only_by_its_record(compiled):
    log = build_log([MessageToStore("Tøpic-refcount", 0, b"x", properties={"k": "v-unique"})], 2**40, 4096)
    check = compiled(bytes(log.data), 2**40, 4096)
    (fields,) = check.records
    held_once = object()
    # the phys offset, topic and properties text (small ints are shared, so not the others)
    counts = [sys.getrefcount(obj) for obj in (held_once, fields, fields[0], fields[2], fields[6])]
    once = counts[0]
    assert counts == [once, once + 1, once, once, once]  # the tuple is also in the records list


# --- the framing walk ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def framing_walk():
    """The compiled whole_records_bytes; fails (never skips) when it is not built."""
    return require_compiled(ha_check.compiled_framing_walk, "framing walk nodes.store._record_check")


def assert_same_framing(framing_walk, data) -> int:
    expected = ha_check.whole_records_bytes_python(data)
    got = framing_walk(data)
    assert type(got) is int and got == expected
    return got


def test_whole_records_bytes_is_the_compiled_walk_here(framing_walk):
    assert ha_check.FRAMING_WALK == "compiled", COMPILED_MISSING_HINT
    data = bytes(build_log([MessageToStore("T", 0, b"x" * 100)] * 3, 0, 65536).data)
    assert ha_check.whole_records_bytes(data[:-1]) == ha_check.whole_records_bytes_python(data[:-1]) > 0


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log=logs(max_messages=12), cut=st.integers(0, 2**20), head=st.binary(max_size=12))
def test_logs_and_their_cuts_walk_identically(framing_walk, log, cut, head):
    data = bytes(log.data)
    for chunk in (data, data[:cut % (len(data) + 1)], data[cut % (len(data) + 1):], head + data):
        assert_same_framing(framing_walk, chunk)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log=logs(), damages=st.lists(_damage, min_size=1, max_size=3))
def test_damaged_logs_walk_identically(framing_walk, log, damages):
    for kind, a, b in damages:
        damage(log, kind, a, b)
    assert_same_framing(framing_walk, bytes(log.data))


_frame = st.tuples(st.sampled_from([-2**31, -1, 0, 7, 8, record.RECORD_BYTES_MIN - 1, record.RECORD_BYTES_MIN,
                                    record.RECORD_BYTES_MIN + 1, 200, 2**31 - 1]) | INT32,
                   st.sampled_from([c.RECORD_MAGIC, c.BLANK_MAGIC, 0]) | st.integers(0, 2**32 - 1))


@settings(max_examples=examples(500), deadline=None)
@given(frames=st.lists(st.tuples(_frame, st.binary(max_size=8)), max_size=6), tail=st.binary(max_size=20))
def test_any_frames_and_garbage_walk_identically(framing_walk, frames, tail):
    """Frames whose sizes land on each other, padded to their size with garbage or cut short."""
    data = bytearray()
    for (size, magic), garbage in frames:
        frame = struct.pack(">iI", size, magic) + garbage
        data += frame + bytes(max(0, min(size, 400) - len(frame)))
    assert_same_framing(framing_walk, bytes(data + tail))


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00" * 7, b"\x00" * 8, b"\xff" * 300])
def test_short_and_garbage_data_walk_identically(framing_walk, data):
    assert assert_same_framing(framing_walk, data) == 0


def test_every_buffer_type_walks_as_bytes_do(framing_walk):
    data = bytes(build_log([MessageToStore("T", i, b"y" * 50 * i) for i in range(5)], 0, 65536).data)
    expected = ha_check.whole_records_bytes_python(data)
    with mmap.mmap(-1, len(data)) as mapped:
        mapped[:] = data
        for buffer in (bytearray(data), memoryview(data), memoryview(data)[:len(data) - 3], mapped,
                       array.array("B", data)):
            assert_same_framing(framing_walk, buffer)
        assert framing_walk(bytearray(data)) == expected == len(data)
    # an array of wider items: len() counts items, and both walks stop there
    assert_same_framing(framing_walk, array.array("i", data[:len(data) - len(data) % 4]))
    assert_same_framing(framing_walk, memoryview(data[:len(data) - len(data) % 4]).cast("I"))


@pytest.mark.parametrize(("args", "error"), [(("text" * 10,), TypeError), ((None,), TypeError), ((5,), TypeError),
                                             ((), TypeError), ((b"", b""), TypeError)])
def test_bad_framing_walk_arguments_raise_type_error(framing_walk, args, error):
    with pytest.raises(error):
        framing_walk(*args)


def test_no_reference_leaks_over_many_framing_walks(framing_walk):
    data = bytes(build_log([MessageToStore("T", i, b"z" * 300) for i in range(12)], 0, 65536).data)
    cases = [data, data[:-5], memoryview(data), b"\xff" * 100]
    watched = [data, *cases]

    def run(rounds):
        for _ in range(rounds):
            for chunk in cases:
                framing_walk(chunk)
            with pytest.raises(TypeError):
                framing_walk("text")

    assert_no_leaks(run, watched)
