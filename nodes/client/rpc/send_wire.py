"""How a producer's messages travel: one message as an `OutgoingMessage`, several as
RocketMQ's batch body (`nodes.store.message_batch`), and the SendResult read back from
either form of answer. Pure.

Owns the request shape of a send and the per-message offsets of its answer. Does not own
which queue, retries or statuses (`producer`).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from nodes.common.errors import InvalidMessageError
from nodes.store import message_batch, record
from proto import broker_pb2


class Outgoing(NamedTuple):
    """A validated message ready to send (its UNIQ_KEY already among the properties, which
    `validate_message` has checked: no separator character, no name reserved for the store)."""

    body: bytes
    flag: int
    properties: dict[str, str]
    born_timestamp_ms: int


def build_request(outs: Sequence[Outgoing], **fields: object) -> broker_pb2.SendMessageRequest:
    """The SendMessage request for `outs` plus `fields` (group, topic, queue id, ...).

    One message goes as an OutgoingMessage; several as one batch body, which costs one bytes
    field instead of one sub-message and one map per message on both ends.

    Raises:
        InvalidMessageError: a message's properties do not fit the batch body's 2-byte length.
    """
    if len(outs) == 1:
        out = outs[0]
        return broker_pb2.SendMessageRequest(
            messages=[broker_pb2.OutgoingMessage(body=bytes(out.body), flag=out.flag, properties=out.properties,
                                                 born_timestamp_ms=out.born_timestamp_ms)], **fields)
    try:  # the producer checked every message's properties (validate_message)
        batch_body = message_batch.encode_checked([(out.body, out.flag, out.properties) for out in outs])
    except ValueError as exc:
        raise InvalidMessageError(f"a message of the batch cannot be sent: {exc}") from None
    return broker_pb2.SendMessageRequest(batch_body=batch_body, born_timestamp_ms=outs[0].born_timestamp_ms,
                                         **fields)


def may_overflow_properties(properties: dict[str, str]) -> bool:
    """Whether the properties might not fit a record (USER_PROPERTIES_BYTES_MAX), judged
    from their length in characters (at most 4 UTF-8 bytes each) without encoding them.

    Such a message is sent on its own, so if the broker refuses it, it fails alone.
    """
    chars = 0
    for name, value in properties.items():
        chars += len(name) + len(value) + 2
    return chars * 4 > record.USER_PROPERTIES_BYTES_MAX


def answered_offsets(resp: broker_pb2.SendMessageResponse) -> tuple[tuple[int, ...], list[str]]:
    """(queue offsets, offset msg ids) of the messages answered, from either answer form."""
    if resp.phys_offsets:
        prefix = resp.offset_msg_id_prefix
        first = resp.first_queue_offset
        phys_offsets = resp.phys_offsets
        return (tuple(range(first, first + len(phys_offsets))),
                [f"{prefix}{phys_offset:016X}" for phys_offset in phys_offsets])
    entries = resp.entries
    return tuple(e.queue_offset for e in entries), [e.offset_msg_id for e in entries]


def request_message_count(request: broker_pb2.SendMessageRequest) -> int:
    """How many messages a send request carries, in either form (no decoding of the bodies)."""
    if not request.batch_body:
        return len(request.messages)
    blob, count, pos = request.batch_body, 0, 0
    while pos + message_batch.ENTRY_HEAD.size <= len(blob):
        (total_size,) = _TOTAL_SIZE.unpack_from(blob, pos)
        if total_size < message_batch.ENTRY_BYTES_MIN:
            break
        pos += total_size
        count += 1
    return count


_TOTAL_SIZE = struct.Struct(">i")
