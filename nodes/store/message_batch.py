"""RocketMQ's batch body: several messages of one send request in one byte string, pure.

Owns encoding and decoding the body a producer sends for a batch (RocketMQ's
MessageDecoder#encodeMessages / decodeMessages, which the broker's batch encoder walks).
Does not own validation beyond the framing (the broker and the store check the messages)
or anything about records on disk (`record`).

Each message, back to back, all integers big-endian:

    ┌──────────────┬─────────┬────────────┬────────┬────────────┬──────┬────────────┬────────────┐
    │ total_size 4 │ magic 4 │ body_crc 4 │ flag 4 │ body_len 4 │ body │ props_len 2│ properties │
    └──────────────┴─────────┴────────────┴────────┴────────────┴──────┴────────────┴────────────┘

magic and body CRC are written as 0, as RocketMQ's producer does (the store computes the
CRC); properties are `name\\x01value\\x02` pairs, as in records.

The client imports this module (it encodes), so it depends on nothing but `nodes.common`,
`record` and the standard library.

`encode_checked` runs its compiled twin (`nodes.store._batch_body`, built by the install when a
C compiler is there) and otherwise the Python loop `encode_checked_python`, which is the
reference: both give the same bytes, and the unit tests run both. `MQLAB_PURE_PYTHON_ENCODE=1`
in the environment (read at import) forces the Python loop, as it does the store's write path
codecs (`record_batch`): one switch for every compiled encoder.
"""

from __future__ import annotations

import importlib
import struct
from collections.abc import Callable, Iterable, Mapping

from nodes.common import constants as c
from nodes.common.compiled_twin import load_twin
from nodes.store.record import decode_properties, properties_bytes

ENTRY_HEAD = struct.Struct(">iiiii")  # total_size, magic, body_crc, flag, body_len
PROPS_LEN = struct.Struct(">h")
ENTRY_BYTES_MIN = ENTRY_HEAD.size + PROPS_LEN.size


class MalformedBatchError(ValueError):
    """A batch body whose framing does not add up."""


def encode_entry(body: bytes, flag: int, properties: Mapping[str, str]) -> bytes:
    """One message of a batch body.

    Raises:
        ValueError: a property holds a separator character, or the properties do not fit
            their 2-byte length.
    """
    props = properties_bytes(properties)
    if len(props) > c.PROPERTIES_BYTES_MAX:
        raise ValueError(f"properties are {len(props)} bytes, over the {c.PROPERTIES_BYTES_MAX}-byte limit")
    total_size = ENTRY_BYTES_MIN + len(body) + len(props)
    return b"".join((ENTRY_HEAD.pack(total_size, 0, 0, flag, len(body)), body, PROPS_LEN.pack(len(props)), props))


def encode_checked_python(entries: Iterable[tuple[bytes, int, Mapping[str, str]]]) -> bytes:
    """`encode_checked` in Python: the reference the compiled encoder is tested against.

    A whole batch body of (body, flag, properties), `encode_entry` for each, in one join.

    For properties a producer has already checked (no separator character, no name reserved
    for the store: `nodes.common.types.validate_message`), so they are written without
    checking them again.

    Raises:
        ValueError: a message's properties do not fit their 2-byte length.
    """
    parts: list[bytes] = []
    pack_head, pack_props_len = ENTRY_HEAD.pack, PROPS_LEN.pack
    props_max, entry_min = c.PROPERTIES_BYTES_MAX, ENTRY_BYTES_MIN
    for body, flag, properties in entries:
        props = "".join([f"{name}\x01{value}\x02" for name, value in properties.items()]).encode() if properties else b""
        if len(props) > props_max:
            raise ValueError(f"properties are {len(props)} bytes, over the {props_max}-byte limit")
        body_len = len(body)
        parts += (pack_head(entry_min + body_len + len(props), 0, 0, flag, body_len), body, pack_props_len(len(props)),
                  props)
    return b"".join(parts)


# --- the compiled twin ----------------------------------------------------------------------------

PURE_PYTHON_ENV = "MQLAB_PURE_PYTHON_ENCODE"  # "1": encode with the Python loops even when compiled


def compiled_encoder() -> Callable[[Iterable[tuple[bytes, int, Mapping[str, str]]]], bytes]:
    """The compiled encoder, initialised with this module's entry layout and properties limit
    (whatever the environment says): `(entries)`.

    Raises:
        ImportError: the extension was not built (no C compiler when the project was installed).
        ValueError: the extension was written for another entry layout than ENTRY_HEAD.
    """
    # by its full name: a missing module then says "No module named ..."
    _batch_body = importlib.import_module("nodes.store._batch_body")
    # the C side writes the entry head at fixed positions and refuses a layout it was not written for
    _batch_body.init_encode(ENTRY_HEAD.format, ENTRY_BYTES_MIN, PROPS_LEN.format, c.PROPERTIES_BYTES_MAX,
                            struct.error)
    return _batch_body.encode_checked


encode_checked_compiled, ENCODER = load_twin(compiled_encoder, "encoder", PURE_PYTHON_ENV)


def encode_checked(entries: Iterable[tuple[bytes, int, Mapping[str, str]]]) -> bytes:
    """A whole batch body of (body, flag, properties) for properties a producer has already
    checked (`encode_checked_python`, compiled when built).

    Raises:
        ValueError: a message's properties do not fit their 2-byte length.
    """
    if encode_checked_compiled is not None:
        return encode_checked_compiled(entries)
    return encode_checked_python(entries)


def decode(blob: bytes) -> list[tuple[bytes, int, dict[str, str]]]:
    """(body, flag, properties) of every message in a batch body, in order.

    Raises:
        MalformedBatchError: a length does not fit, or properties are not UTF-8.
    """
    out = []
    view = memoryview(blob)
    end = len(blob)
    pos = 0
    unpack_head = ENTRY_HEAD.unpack_from
    while pos < end:
        if end - pos < ENTRY_BYTES_MIN:
            raise MalformedBatchError(f"batch body: {end - pos} trailing bytes at {pos} are no message")
        total_size, _magic, _crc, flag, body_len = unpack_head(blob, pos)
        body_end = pos + ENTRY_HEAD.size + body_len
        if body_len < 0 or total_size < ENTRY_BYTES_MIN + body_len or pos + total_size > end:
            raise MalformedBatchError(f"batch body: message at {pos} claims {total_size} bytes "
                                      f"with a {body_len}-byte body; {end - pos} remain")
        (props_len,) = PROPS_LEN.unpack_from(blob, body_end)
        if props_len < 0 or body_end + PROPS_LEN.size + props_len != pos + total_size:
            raise MalformedBatchError(f"batch body: message at {pos} has {props_len} property bytes "
                                      f"that do not add up to its {total_size} bytes")
        try:
            properties = decode_properties(str(view[body_end + PROPS_LEN.size:pos + total_size], "utf-8"))
        except UnicodeDecodeError:
            raise MalformedBatchError(f"batch body: the properties of the message at {pos} are not UTF-8") from None
        out.append((blob[pos + ENTRY_HEAD.size:body_end], flag, properties))
        pos += total_size
    return out
