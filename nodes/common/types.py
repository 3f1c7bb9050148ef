"""Domain types shared by nodes and clients: queues, messages, results, statuses.

These are the public shapes of `nodes.client`. They hold no transport code;
`nodes.common.wire` converts them to and from protobuf.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from functools import total_ordering

from nodes.common import constants as c
from nodes.common.errors import InvalidMessageError

_TOPIC_RE = re.compile(c.TOPIC_NAME_PATTERN)


@total_ordering
@dataclass(frozen=True, slots=True)
class MessageQueue:
    """One queue of a topic on one broker name. Sorted as RocketMQ's MessageQueue#compareTo."""

    topic: str
    broker_name: str
    queue_id: int

    def __lt__(self, other: MessageQueue) -> bool:
        return (self.topic, self.broker_name, self.queue_id) < (other.topic, other.broker_name, other.queue_id)

    def __str__(self) -> str:
        # Exactly RocketMQ's toString: the consistent-hash allocation hashes this string.
        return f"MessageQueue [topic={self.topic}, brokerName={self.broker_name}, queueId={self.queue_id}]"


@dataclass(slots=True)
class Message:
    """A message to send. `tags` and `keys` are stored as the TAGS and KEYS properties."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: str | list[str] | None = None
    properties: dict[str, str] | None = None
    flag: int = 0

    def __post_init__(self) -> None:
        # A message owns its properties: the producer stamps UNIQ_KEY into them, so a dict the
        # caller reuses for several messages must not carry one message's id into the next.
        if self.properties is not None:
            self.properties = dict(self.properties)

    def all_properties(self) -> dict[str, str]:
        props = dict(self.properties or {})
        if self.tags:
            props[c.PROPERTY_TAGS] = self.tags
        if self.keys:
            props[c.PROPERTY_KEYS] = (
                self.keys if isinstance(self.keys, str) else c.KEY_SEPARATOR.join(self.keys))
        return props


@dataclass(slots=True)
class MessageExt:
    """A message as consumed: the stored record plus where it came from.

    Keep each field to its type: a message a pull decoded is off the cycle collector (its fields,
    str, bytes, int and a dict of str, cannot lead back to it), so one made to refer to itself
    through a field would never be freed."""

    topic: str
    body: bytes
    properties: dict[str, str]
    msg_id: str
    offset_msg_id: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    reconsume_times: int
    store_timestamp_ms: int
    born_timestamp_ms: int
    broker_name: str
    flag: int = 0
    store_size: int = 0

    @property
    def tags(self) -> str | None:
        return self.properties.get(c.PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(c.PROPERTY_KEYS)

    @property
    def message_queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)


class SendStatus(enum.Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@dataclass(frozen=True, slots=True)
class SendResult:
    status: SendStatus
    msg_id: str
    message_queue: MessageQueue
    queue_offset: int
    offset_msg_id: str = ""
    # a batch: one msg id and queue offset per message, in send order
    msg_ids: tuple[str, ...] = ()
    queue_offsets: tuple[int, ...] = ()


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


@dataclass(slots=True)
class PullResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt] = field(default_factory=list)
    suggest_which_broker_id: int = 0
    # the broker's store status name (e.g. OFFSET_OVERFLOW_ONE): what RocketMQ puts in the remark
    store_status: str = ""
    # which broker id the client asked for (the last suggestion) and which one answered
    requested_broker_id: int = 0
    broker_id: int = 0


class ConsumeConcurrentlyStatus(enum.Enum):
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class ConsumeOrderlyStatus(enum.Enum):
    SUCCESS = "SUCCESS"
    ROLLBACK = "ROLLBACK"
    COMMIT = "COMMIT"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


class MessageModel(enum.Enum):
    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


class ConsumeFromWhere(enum.Enum):
    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


# Topic names that passed validate_topic: a producer or a broker sees few, and checks one per
# message. Bounded; cleared when full (a set's add and clear are atomic under the GIL).
_VALID_TOPICS: set[str] = set()
_VALID_TOPICS_MAX = 1024


def validate_topic(topic: str) -> None:
    """RocketMQ's Validators#checkTopic: non-empty, [%|a-zA-Z0-9_-], at most 127 bytes."""
    if topic in _VALID_TOPICS:
        return
    if not topic or not topic.strip():
        raise InvalidMessageError("topic name is empty")
    if len(topic.encode()) > c.TOPIC_NAME_BYTES_MAX:
        raise InvalidMessageError(f"topic name is longer than {c.TOPIC_NAME_BYTES_MAX} bytes: {topic[:40]!r}...")
    if not _TOPIC_RE.match(topic):
        raise InvalidMessageError(
            f"topic name {topic!r} has characters outside [%|a-zA-Z0-9_-]; rename the topic")
    if len(_VALID_TOPICS) >= _VALID_TOPICS_MAX:
        _VALID_TOPICS.clear()
    _VALID_TOPICS.add(topic)


def validate_message(msg: Message, body_bytes_max: int = c.MESSAGE_BODY_BYTES_MAX) -> dict[str, str]:
    """RocketMQ's Validators#checkMessage, run by the producer before anything is sent.

    Returns the message's properties as sent (`all_properties`), which it had to build anyway.
    """
    validate_topic(msg.topic)
    if msg.topic == c.AUTO_CREATE_TOPIC_KEY:
        raise InvalidMessageError(f"topic {c.AUTO_CREATE_TOPIC_KEY} is reserved for auto-creation; send elsewhere")
    return validate_content(msg, body_bytes_max)


# a tuple, not `bytes | bytearray | memoryview`: that expression builds a union object per call
_BODY_TYPES = (bytes, bytearray, memoryview)


def validate_content(msg: Message, body_bytes_max: int = c.MESSAGE_BODY_BYTES_MAX) -> dict[str, str]:
    """`validate_message` without the topic checks, for the messages of a batch whose one
    topic was checked once; returns the properties as sent."""
    body = msg.body
    if not isinstance(body, _BODY_TYPES):
        raise InvalidMessageError(f"message body must be bytes, got {type(body).__name__}")
    if not body:
        raise InvalidMessageError("message body is empty; RocketMQ rejects empty bodies")
    if len(body) > body_bytes_max:
        raise InvalidMessageError(
            f"message body is {len(body)} bytes, over the {body_bytes_max}-byte limit; split it")
    properties = msg.all_properties()
    for name, value in properties.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise InvalidMessageError(f"property {name!r} must map a str to a str")
        if name == c.PROPERTY_RECORD_CRC:
            raise InvalidMessageError(f"property {name!r} is reserved for the store")
        for text in (name, value):
            if c.PROPERTY_NAME_SEPARATOR in text or c.PROPERTY_SEPARATOR in text:
                raise InvalidMessageError(f"property {name!r} contains a reserved \\x01 or \\x02 character")
    return properties


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """A topic as one broker holds it (RocketMQ TopicConfig)."""

    topic: str
    read_queue_nums: int = c.TOPIC_CONFIG_DEFAULT_QUEUE_NUMS
    write_queue_nums: int = c.TOPIC_CONFIG_DEFAULT_QUEUE_NUMS
    perm: int = c.PERM_DEFAULT
    topic_sys_flag: int = 0
    order: bool = False
    message_type: str = ""  # c.TOPIC_MESSAGE_TYPES, or "" unset (`topic_message_type` says what it reads as)

    @property
    def readable(self) -> bool:
        return bool(self.perm & c.PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & c.PERM_WRITE)


def topic_message_type(config: TopicConfig | None) -> str:
    """A topic's message type as every answer names it (the RocketMQ 5 route, which accepts only
    that type's messages, and the admin's topic list and status): the type set on it, else FIFO
    for an `order` topic, else NORMAL (so a topic a 4.x client auto-created accepts NORMAL
    messages only)."""
    if config is None:
        return c.TOPIC_MESSAGE_TYPE_DEFAULT
    if config.message_type in c.TOPIC_MESSAGE_TYPES:
        return config.message_type
    return "FIFO" if config.order else c.TOPIC_MESSAGE_TYPE_DEFAULT
