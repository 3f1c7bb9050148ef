"""RocketMQ 4.x remoting frames: `RemotingCommand`, its codec and the request codes.

A frame on the wire (RocketMQ's `RemotingCommand#encode` / `NettyDecoder`):

    int32 BE  frame length = 4 + header length + body length   (the 4 of this field not counted)
    int32 BE  (serialize type << 24) | header length            type 0 = JSON, 1 = ROCKETMQ binary
    header    JSON {"code","language","version","opaque","flag","remark","extFields":{...}}
    body      the rest

Requests are read in either header form; every answer and every server-initiated request is
written as JSON with string extFields, because neither real 4.x client reads a binary header
and the C++ client reads a numeric extField as 0. Request extFields arrive as strings, numbers
or booleans depending on the client, so readers take them through `ext_int` / `ext_bool`, which
accept all three. Pure: no sockets here (the listener is `nodes.remoting.server`).
"""

from __future__ import annotations

import enum
import json
import struct
from dataclasses import dataclass, field
from typing import Any

from nodes.common import constants as c

SERIALIZE_JSON = 0
SERIALIZE_ROCKETMQ = 1
FLAG_RESPONSE = 1
FLAG_ONEWAY = 2

_INT = struct.Struct(">i")
# one encoder for every header: json.dumps with non-default settings builds a new one per call
_HEADER_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_BINARY_FIXED = struct.Struct(">hBhii")  # code, language, version, opaque, flag
# RocketMQ's LanguageCode ordinals, for binary headers
_LANGUAGES = ("JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP", "OMS")


class RequestCode(enum.IntEnum):
    """RocketMQ 4.9's RequestCode numbers for what the two supported clients send or receive."""

    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ROUTEINFO_BY_TOPIC = 105
    # operator requests (mqadmin's)
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    GET_CONSUME_STATS = 208
    DELETE_TOPIC_IN_BROKER = 215
    RESET_CONSUMER_CLIENT_OFFSET = 220
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    SEND_MESSAGE_V2 = 310
    SEND_BATCH_MESSAGE = 320


class FrameError(ValueError):
    """The bytes are not a frame this codec can read; the connection cannot be trusted after it."""


class HeaderFieldError(ValueError):
    """A request's extField is missing or of the wrong type: answered with an error, connection kept."""


@dataclass(slots=True)
class RemotingCommand:
    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    language: str = "JAVA"
    version: int = c.REMOTING_VERSION
    serialize_type: int = SERIALIZE_JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def answer(self, code: int, remark: str | None = None, ext: dict[str, Any] | None = None,
               body: bytes = b"") -> RemotingCommand:
        """The response to this request: same opaque, the response flag set, extFields as strings."""
        return RemotingCommand(code=int(code), opaque=self.opaque, flag=FLAG_RESPONSE, remark=remark,
                               ext=_string_fields(ext), body=body)

    def ext_str(self, name: str, default: str | None = None) -> str:
        value = self.ext.get(name)
        if value is None:
            if default is None:
                raise HeaderFieldError(f"extField {name!r} is required by request code {self.code}")
            return default
        return value

    def ext_int(self, name: str, default: int | None = None) -> int:
        value = self.ext.get(name)
        if value is None or value == "":
            if default is None:
                raise HeaderFieldError(f"extField {name!r} is required by request code {self.code}")
            return default
        try:
            return int(value)
        except ValueError:
            raise HeaderFieldError(f"extField {name!r} must be an integer, got {value!r}") from None

    def ext_bool(self, name: str, default: bool = False) -> bool:
        """Java's fields are booleans; the C++ client writes "1"/"0" (its batch flag), so take both."""
        value = self.ext.get(name)
        if value is None or value == "":
            return default
        lowered = value.lower()
        if lowered in ("true", "1"):
            return True
        if lowered in ("false", "0"):
            return False
        raise HeaderFieldError(f"extField {name!r} must be a boolean, got {value!r}")


def _string_fields(ext: dict[str, Any] | None) -> dict[str, str]:
    if not ext:
        return {}
    out: dict[str, str] = {}
    for key, value in ext.items():
        if value is None:
            continue
        out[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


def encode(cmd: RemotingCommand) -> bytes:
    """The whole frame, length prefix included, with a JSON header."""
    header: dict[str, Any] = {"code": int(cmd.code), "language": cmd.language, "version": cmd.version,
                              "opaque": cmd.opaque, "flag": cmd.flag, "extFields": _string_fields(cmd.ext)}
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    header_bytes = _HEADER_JSON.encode(header).encode()
    return b"".join((_INT.pack(4 + len(header_bytes) + len(cmd.body)),
                     _INT.pack((SERIALIZE_JSON << 24) | len(header_bytes)), header_bytes, cmd.body))


def decode(frame: bytes | memoryview) -> RemotingCommand:
    """One frame without its length prefix (what `encode` writes after the first 4 bytes)."""
    frame = memoryview(frame)
    if len(frame) < 4:
        raise FrameError(f"a frame needs at least 4 bytes, got {len(frame)}")
    (mark,) = _INT.unpack_from(frame, 0)
    serialize_type = (mark >> 24) & 0xFF
    header_len = mark & 0xFFFFFF
    if header_len > len(frame) - 4:
        raise FrameError(f"header length {header_len} is larger than the frame ({len(frame) - 4} bytes left)")
    header = frame[4:4 + header_len]
    body = bytes(frame[4 + header_len:])
    if serialize_type == SERIALIZE_JSON:
        cmd = _decode_json_header(bytes(header))
    elif serialize_type == SERIALIZE_ROCKETMQ:
        cmd = _decode_binary_header(header)
    else:
        raise FrameError(f"unknown serialize type {serialize_type} (0 JSON and 1 ROCKETMQ are known)")
    cmd.body = body
    cmd.serialize_type = serialize_type
    return cmd


def _decode_json_header(raw: bytes) -> RemotingCommand:
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise FrameError(f"the JSON header does not parse: {exc}") from None
    if not isinstance(header, dict):
        raise FrameError("the JSON header is not an object")
    try:
        ext_raw = header.get("extFields") or {}
        if not isinstance(ext_raw, dict):
            raise TypeError("extFields is not an object")
        remark = header.get("remark")
        return RemotingCommand(
            code=json_int(header.get("code"), "code"), opaque=json_int(header.get("opaque", 0), "opaque"),
            flag=json_int(header.get("flag", 0), "flag"), remark=None if remark is None else str(remark),
            ext=_ext_fields(ext_raw),
            language=str(header.get("language", "OTHER")), version=json_int(header.get("version", 0), "version"))
    except (TypeError, ValueError) as exc:
        raise FrameError(f"the JSON header has a field of the wrong type: {exc}") from None


def json_int(value: Any, name: str) -> int:
    """An integer a client wrote as a JSON number or as a string (the clients do both); ValueError
    naming `name` for anything else (booleans included)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None


def _ext_fields(ext_raw: dict[str, Any]) -> dict[str, str]:
    # Both real clients write every value as a string: that dict is used as it is (the JSON
    # object's keys are strings already); only a number, boolean or null costs a conversion.
    for value in ext_raw.values():
        if type(value) is not str:
            return {k: _ext_value(v) for k, v in ext_raw.items() if v is not None}
    return ext_raw


def _ext_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise TypeError(f"an extField value must be a string, number or boolean, got {value!r}")


def _decode_binary_header(header: memoryview) -> RemotingCommand:
    try:
        code, language, version, opaque, flag = _BINARY_FIXED.unpack_from(header, 0)
        pos = _BINARY_FIXED.size
        (remark_len,) = _INT.unpack_from(header, pos)
        pos += 4
        remark = _utf8(header, pos, remark_len) if remark_len > 0 else None
        pos += max(remark_len, 0)
        (ext_len,) = _INT.unpack_from(header, pos)
        pos += 4
        end = pos + ext_len
        if ext_len < 0 or end > len(header):
            raise FrameError(f"extFields length {ext_len} runs past the header")
        ext: dict[str, str] = {}
        while pos < end:
            (key_len,) = struct.unpack_from(">h", header, pos)
            key = _utf8(header, pos + 2, key_len)
            pos += 2 + key_len
            (value_len,) = _INT.unpack_from(header, pos)
            ext[key] = _utf8(header, pos + 4, value_len)
            pos += 4 + value_len
        if pos != end:
            raise FrameError("extFields run past their declared length")
    except struct.error as exc:
        raise FrameError(f"the binary header is truncated: {exc}") from None
    name = _LANGUAGES[language] if language < len(_LANGUAGES) else "OTHER"
    return RemotingCommand(code=code, opaque=opaque, flag=flag, remark=remark, ext=ext, language=name,
                           version=version)


def _utf8(buf: memoryview, pos: int, length: int) -> str:
    if length < 0 or pos + length > len(buf):
        raise FrameError(f"a string of {length} bytes at {pos} runs past the header")
    try:
        return bytes(buf[pos:pos + length]).decode()
    except UnicodeDecodeError as exc:
        raise FrameError(f"a header string is not UTF-8: {exc}") from None


def frame_length_ok(length: int) -> bool:
    """Whether a frame length prefix is one to read (RocketMQ's decoder caps frames at 16 MiB)."""
    return 4 <= length <= c.REMOTING_FRAME_BYTES_MAX


def decode_properties(text: str) -> dict[str, str]:
    """RocketMQ's message properties string: `name\\x01value\\x02` pairs (MessageDecoder)."""
    props: dict[str, str] = {}
    for pair in text.split(c.PROPERTY_SEPARATOR):
        if not pair:
            continue
        name, sep, value = pair.partition(c.PROPERTY_NAME_SEPARATOR)
        if sep:
            props[name] = value
    return props


def encode_properties(props: dict[str, str]) -> str:
    return "".join(f"{k}{c.PROPERTY_NAME_SEPARATOR}{v}{c.PROPERTY_SEPARATOR}" for k, v in props.items())
