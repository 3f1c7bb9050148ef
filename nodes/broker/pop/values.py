"""What the POP engine answers: plain values a transport adapter converts once."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class PopCode(enum.Enum):
    """The engine's outcomes; the RocketMQ 5 name a transport maps each to is in the comment."""

    OK = "OK"
    NOT_FOUND = "NOT_FOUND"  # nothing to hand out within the poll time (MESSAGE_NOT_FOUND)
    INVALID_RECEIPT_HANDLE = "INVALID_RECEIPT_HANDLE"  # expired, superseded or revived (INVALID_RECEIPT_HANDLE)
    ILLEGAL_ARGUMENT = "ILLEGAL_ARGUMENT"  # a malformed handle, batch size, invisible time or name (BAD_REQUEST)
    TOPIC_NOT_EXIST = "TOPIC_NOT_EXIST"  # (TOPIC_NOT_FOUND)
    GROUP_NOT_EXIST = "GROUP_NOT_EXIST"  # (CONSUMER_GROUP_NOT_FOUND)
    NO_PERMISSION = "NO_PERMISSION"  # the topic or the broker is not readable (FORBIDDEN)
    NOT_MASTER = "NOT_MASTER"  # a slave keeps no pop state; pop from the master (FORBIDDEN)
    UNAVAILABLE = "UNAVAILABLE"  # writes are held (a master restoring its tail) or the disk refused (INTERNAL)


@dataclass(frozen=True, slots=True)
class PopRequest:
    """POP_MESSAGE as the request table carries it (PopEngine.pop's arguments)."""

    group: str
    topic: str
    max_nums: int
    invisible_ms: int
    poll_timeout_ms: int = 0
    fifo: bool | None = None
    attempt_id: str = ""
    tag_expression: str = "*"
    client_id: str = ""


@dataclass(frozen=True, slots=True)
class PopAckRequest:
    """POP_ACK and POP_FORWARD_TO_DLQ."""

    group: str
    topic: str
    receipt_handle: str


@dataclass(frozen=True, slots=True)
class ChangeInvisibleRequest:
    group: str
    topic: str
    receipt_handle: str
    invisible_ms: int


@dataclass(frozen=True, slots=True)
class PoppedMessage:
    """One message handed out, with everything a RocketMQ 5 answer carries."""

    topic: str  # the topic the client asked for (a retry message is handed out under it)
    queue_topic: str  # the queue it was read from: `topic`, or the group's pop retry topic
    broker_name: str
    queue_id: int
    queue_offset: int
    phys_offset: int
    body: bytes
    properties: dict[str, str]
    tags: str | None
    keys: str | None
    msg_id: str
    born_timestamp_ms: int
    born_host: tuple[str, int]
    store_timestamp_ms: int
    store_host: tuple[str, int]
    reconsume_times: int
    delivery_attempt: int
    receipt_handle: str
    invisible_deadline_wall_ms: int  # when the message becomes visible again unless acked


@dataclass(frozen=True, slots=True)
class PopResult:
    code: PopCode
    messages: list[PoppedMessage] = field(default_factory=list)
    remark: str = ""


@dataclass(frozen=True, slots=True)
class AckResult:
    """Of ack and forward_to_dlq."""

    code: PopCode
    remark: str = ""


@dataclass(frozen=True, slots=True)
class ChangeInvisibleResult:
    code: PopCode
    receipt_handle: str = ""  # the new handle; the old one is stale from now on
    invisible_deadline_wall_ms: int = 0
    remark: str = ""
