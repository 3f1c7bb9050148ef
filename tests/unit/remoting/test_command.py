"""The remoting frame codec: JSON and binary headers in, JSON with string extFields out."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodes.common import constants as c
from nodes.remoting.command import (
    FLAG_RESPONSE,
    FrameError,
    HeaderFieldError,
    RemotingCommand,
    decode,
    decode_properties,
    encode,
    encode_properties,
    frame_length_ok,
)


def _json_frame(header: dict, body: bytes = b"") -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack(">i", len(raw)) + raw + body


def test_an_answer_echoes_the_opaque_sets_the_response_flag_and_writes_string_ext_fields():
    request = RemotingCommand(code=10, opaque=77, ext={"topic": "T"})
    answer = request.answer(0, ext={"queueOffset": 1, "queueId": 3, "flag": True, "skipped": None})
    frame = encode(answer)
    (length,) = struct.unpack_from(">i", frame)
    assert length == len(frame) - 4
    (mark,) = struct.unpack_from(">i", frame, 4)
    assert mark >> 24 == 0  # JSON: the only header form the real clients read
    header = json.loads(frame[8:8 + (mark & 0xFFFFFF)])
    assert header["opaque"] == 77 and header["flag"] & FLAG_RESPONSE
    assert header["extFields"] == {"queueOffset": "1", "queueId": "3", "flag": "true"}


def test_request_ext_fields_of_any_json_type_read_back_as_strings():
    cmd = decode(_json_frame({"code": 11, "opaque": 5, "flag": 0, "language": "JAVA", "version": 121,
                              "extFields": {"queueId": 3, "topic": "T", "k": False, "commitOffset": "-1"}},
                             b"BODY"))
    assert (cmd.code, cmd.opaque, cmd.language, cmd.version, cmd.body) == (11, 5, "JAVA", 121, b"BODY")
    assert cmd.ext_int("queueId") == 3 and cmd.ext_int("commitOffset") == -1
    assert cmd.ext_bool("k") is False and cmd.ext_str("topic") == "T"


def test_the_cpp_clients_batch_flag_of_one_is_true():
    cmd = RemotingCommand(code=10, ext={"batch": "1"})
    assert cmd.ext_bool("batch") is True
    assert RemotingCommand(code=10, ext={"batch": "0"}).ext_bool("batch") is False


@pytest.mark.parametrize(("ext", "read"), [
    ({}, lambda cmd: cmd.ext_int("queueId")),
    ({"queueId": "three"}, lambda cmd: cmd.ext_int("queueId")),
    ({"batch": "maybe"}, lambda cmd: cmd.ext_bool("batch")),
    ({}, lambda cmd: cmd.ext_str("topic")),
])
def test_a_missing_or_mistyped_field_is_a_header_field_error(ext, read):
    with pytest.raises(HeaderFieldError):
        read(RemotingCommand(code=11, ext=ext))


def test_a_binary_header_is_read():
    remark = b"hi"
    ext = b"".join(struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v
                   for k, v in ((b"topic", b"T"), (b"queueId", b"2")))
    header = struct.pack(">hBhii", 14, 1, 63, 9, 0) + struct.pack(">i", len(remark)) + remark
    header += struct.pack(">i", len(ext)) + ext
    frame = struct.pack(">i", (1 << 24) | len(header)) + header + b"xyz"
    cmd = decode(frame)
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.remark) == (14, "CPP", 63, 9, "hi")
    assert cmd.ext == {"topic": "T", "queueId": "2"} and cmd.body == b"xyz"


@pytest.mark.parametrize("frame", [
    b"\x00\x00",  # shorter than the header-length field
    struct.pack(">i", 100) + b"{}",  # header length past the frame
    struct.pack(">i", 2) + b"{x",  # not JSON
    struct.pack(">i", 2) + b"[]",  # JSON, not an object
    _json_frame({"code": "ten"}),  # a field of the wrong type
    _json_frame({"code": 10, "extFields": {"a": [1]}}),  # an extField that is not a scalar
    struct.pack(">i", (7 << 24) | 2) + b"{}",  # unknown serialize type
    struct.pack(">i", (1 << 24) | 3) + b"\x00\x01\x02",  # truncated binary header
])
def test_unreadable_frames_are_frame_errors(frame):
    with pytest.raises(FrameError):
        decode(frame)


@given(st.binary(max_size=300))
def test_arbitrary_bytes_decode_or_raise_frame_error(data):
    try:
        decode(data)
    except FrameError:
        pass


@given(code=st.integers(0, 32767), opaque=st.integers(-2**31, 2**31 - 1),
       ext=st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=20), max_size=5),
       body=st.binary(max_size=64))
def test_what_is_encoded_decodes_to_the_same_command(code, opaque, ext, body):
    frame = encode(RemotingCommand(code=code, opaque=opaque, ext=ext, body=body))
    cmd = decode(frame[4:])
    assert (cmd.code, cmd.opaque, cmd.ext, cmd.body) == (code, opaque, ext, body)


def test_frame_lengths_are_capped_at_sixteen_mib():
    assert frame_length_ok(4) and frame_length_ok(c.REMOTING_FRAME_BYTES_MAX)
    assert not frame_length_ok(3) and not frame_length_ok(c.REMOTING_FRAME_BYTES_MAX + 1)
    assert not frame_length_ok(-1)


def test_message_properties_round_trip_in_rocketmqs_separators():
    props = {"TAGS": "a", "KEYS": "k1 k2", "WAIT": "true"}
    text = encode_properties(props)
    assert text == "TAGS\x01a\x02KEYS\x01k1 k2\x02WAIT\x01true\x02"
    assert decode_properties(text) == props
    assert decode_properties("") == {} and decode_properties("junk\x02A\x01b") == {"A": "b"}
