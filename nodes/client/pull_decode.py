"""Pulled records to messages: decoding, the client-side tag filter, the lazy batch (pure).

Owns RocketMQ's client-side `MessageDecoder` for a pull's records, the exact tag filter
(`parse_subscription` + the test in `decode_messages`) and the MIN_OFFSET / MAX_OFFSET
stamps. Reading an answer's code is the RPC layer's business.

`decode_messages` runs the compiled decoder (`nodes.client._record_decode`, built by the
install when a C compiler is there) and otherwise the Python loop `decode_messages_python`,
which is the reference: both give the same messages and raise the same errors, and the unit
tests run both. `MQLAB_PURE_PYTHON_DECODE=1` in the environment (read at import) forces the
Python loop.
"""

from __future__ import annotations

import dataclasses
import importlib
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import overload

from nodes.common import constants as c
from nodes.common.compiled_twin import load_twin
from nodes.common.errors import CorruptRecordError
from nodes.common.types import MessageExt
from nodes.store import record  # the one store module the client may read


def parse_subscription(expression: str | None) -> frozenset[str] | None:
    """A tag expression as RocketMQ's FilterAPI reads it: None means every message.

    `a || b` is split on `||` and each part trimmed; `*`, empty or None subscribe to all.
    """
    if expression is None:
        return None
    stripped = expression.strip()
    if not stripped or stripped == "*":
        return None
    tags = frozenset(part.strip() for part in stripped.split("||") if part.strip())
    return tags or None


# How record bytes are laid out is nodes.store.record's business; this loop reuses its header
# struct and property codec, and a unit test checks it against record.iter_records.
_HEADER = record.HEADER
_HEADER_BYTES = record.HEADER.size
_RECORD_BYTES_MIN = record.RECORD_BYTES_MIN
_PORT = struct.Struct(">i")


PURE_PYTHON_ENV = "MQLAB_PURE_PYTHON_DECODE"  # "1": decode with the Python loop even when compiled


def compiled_decoder() -> Callable[..., list[MessageExt]]:
    """The compiled decoder, initialised with this process's classes and constants (whatever
    the environment says): `(records: bytes, broker_name, min_offset, max_offset, tags)`.

    Raises:
        ImportError: the extension was not built (no C compiler when the project was installed).
        ValueError: the extension was written for another record layout than record.HEADER.
    """
    # by its full name: a missing module then says "No module named ..." (a from-import inside
    # the package's own import reads like a circular import)
    _record_decode = importlib.import_module("nodes.client._record_decode")
    # the C side reads the header at fixed positions and refuses a layout it was not written for
    _record_decode.init(MessageExt, CorruptRecordError, _HEADER.format, _HEADER_BYTES, _RECORD_BYTES_MIN,
                        c.RECORD_MAGIC, c.PROPERTY_TAGS, c.PROPERTY_UNIQ_KEY, c.PROPERTY_RECORD_CRC,
                        c.PROPERTY_MIN_OFFSET, c.PROPERTY_MAX_OFFSET, slot_fields(MessageExt))
    return _record_decode.decode_messages


def slot_fields(cls: type) -> tuple[str, ...] | None:
    """The field names the compiled decoder may fill in place in a new instance of `cls` (see
    _record_decode.c), or None when `cls.__init__` might do more than assign them: not a slots
    dataclass with a generated __init__ taking every field, or one with a __post_init__."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.init or "__slots__" not in vars(cls) or hasattr(cls, "__post_init__"):
        return None
    # dataclasses leaves an __init__ the class wrote itself in place; its own are compiled from text
    if getattr(getattr(cls.__init__, "__code__", None), "co_filename", None) != "<string>":
        return None
    fields = dataclasses.fields(cls)
    if not all(f.init for f in fields):
        return None
    return tuple(f.name for f in fields)


# decode_messages_compiled(records: bytes, broker_name, min_offset, max_offset, tags), or None
decode_messages_compiled, DECODER = load_twin(compiled_decoder, "decoder", PURE_PYTHON_ENV)


def decode_messages(records: bytes, *, broker_name: str, min_offset: int, max_offset: int,
                    tags: frozenset[str] | None) -> list[MessageExt]:
    """Decode concatenated commitlog records straight into MessageExt (see decode_messages_python).

    The compiled decoder takes `bytes` (what a pull answer carries); anything else goes to
    the Python loop.

    Raises:
        CorruptRecordError: a record's magic or lengths do not add up.
        UnicodeDecodeError: a topic or the properties are not UTF-8.
    """
    if decode_messages_compiled is not None and type(records) is bytes:
        return decode_messages_compiled(records, broker_name, min_offset, max_offset, tags)
    return decode_messages_python(records, broker_name=broker_name, min_offset=min_offset,
                                  max_offset=max_offset, tags=tags)


def decode_messages_python(records: bytes, *, broker_name: str, min_offset: int, max_offset: int,
                           tags: frozenset[str] | None) -> list[MessageExt]:
    """Decode concatenated commitlog records straight into MessageExt, in one pass.

    Tag mismatches are dropped before anything else is built: the filter is an exact string
    test on the TAGS property (records without tags never match a tag set), and removes what
    got past the broker's tag-hash filter by collision. Like RocketMQ's client-side
    MessageDecoder, it does not re-check body CRCs; it checks magic and framing.

    Raises:
        CorruptRecordError: a record's magic or lengths do not add up.
    """
    out: list[MessageExt] = []
    append = out.append
    unpack_from = _HEADER.unpack_from
    decode_properties = record.decode_properties
    tag_key, uniq_key, record_crc_key = c.PROPERTY_TAGS, c.PROPERTY_UNIQ_KEY, c.PROPERTY_RECORD_CRC
    min_key, max_key = c.PROPERTY_MIN_OFFSET, c.PROPERTY_MAX_OFFSET
    min_s, max_s = str(min_offset), str(max_offset)
    magic_ok = c.RECORD_MAGIC
    host_hex: dict[tuple[bytes, int], str] = {}
    topics: dict[bytes, str] = {}
    pos, end = 0, len(records)
    while pos < end:
        if end - pos < _HEADER_BYTES:
            raise CorruptRecordError(f"pull response: {end - pos} trailing bytes at {pos}, less than a header")
        (total_size, magic, _crc, queue_id, flag, queue_offset, phys_offset, _sys_flag, born_ts, _born_ip,
         _born_port, store_ts, store_ip, store_port, reconsume_times, _prepared_tx, body_len) = unpack_from(records, pos)
        rec_end = pos + total_size
        body_end = pos + _HEADER_BYTES + body_len
        if magic != magic_ok or total_size < _RECORD_BYTES_MIN or rec_end > end or body_len < 0 \
                or body_end + 3 > rec_end:
            raise CorruptRecordError(f"pull response: bad record at {pos} (magic {magic:#010x}, size {total_size})")
        topic_end = body_end + 1 + records[body_end]
        props = decode_properties(records[topic_end + 2:rec_end].decode())
        props.pop(record_crc_key, None)  # the store's own checksum, not a user property
        if tags is not None and props.get(tag_key) not in tags:
            pos = rec_end
            continue
        topic_raw = records[body_end + 1:topic_end]
        topic = topics.get(topic_raw)
        if topic is None:
            topic = topics[topic_raw] = topic_raw.decode()
        host = host_hex.get((store_ip, store_port))
        if host is None:
            host = host_hex[(store_ip, store_port)] = (store_ip + _PORT.pack(store_port)).hex().upper()
        offset_msg_id = f"{host}{phys_offset:016X}"  # = record.offset_msg_id(store host, phys offset)
        props[min_key] = min_s
        props[max_key] = max_s
        append(MessageExt(
            topic, records[pos + _HEADER_BYTES:body_end], props,
            props.get(uniq_key) or offset_msg_id,  # MessageClientExt#getMsgId
            offset_msg_id, queue_id, queue_offset, phys_offset, reconsume_times, store_ts, born_ts,
            broker_name, flag, total_size))
        pos = rec_end
    return out


class MessageBatch(Sequence[MessageExt]):
    """A pull's messages, decoded in one pass on first use rather than when the answer arrives.

    So decoding runs in the thread that looks at the messages, never on the client's loop,
    and a caller that only counts them (`len`) never pays for it. Compares equal to a list
    of the same messages. Only for answers without a tag filter, whose record count is
    exact; decoding errors (CorruptRecordError) come out at first use.
    """

    __slots__ = ("_count", "_decode", "_messages")

    def __init__(self, count: int, decode: Callable[[], list[MessageExt]]) -> None:
        self._count = count
        self._decode: Callable[[], list[MessageExt]] | None = decode
        self._messages: list[MessageExt] | None = None

    def _decoded(self) -> list[MessageExt]:
        messages = self._messages
        if messages is None:
            assert self._decode is not None
            messages = self._messages = self._decode()
            self._decode = None  # drops the record bytes
        return messages

    def __len__(self) -> int:
        return self._count if self._messages is None else len(self._messages)

    @overload
    def __getitem__(self, index: int) -> MessageExt: ...

    @overload
    def __getitem__(self, index: slice) -> list[MessageExt]: ...

    def __getitem__(self, index: int | slice) -> MessageExt | list[MessageExt]:
        return self._decoded()[index]

    def __iter__(self) -> Iterator[MessageExt]:
        return iter(self._decoded())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, MessageBatch):
            other = other._decoded()
        return isinstance(other, list) and self._decoded() == other

    __hash__ = None  # type: ignore[assignment]  # mutable-looking, like the list it stands for

    def __repr__(self) -> str:
        state = "decoded" if self._messages is not None else "not decoded yet"
        return f"MessageBatch({len(self)} messages, {state})"
