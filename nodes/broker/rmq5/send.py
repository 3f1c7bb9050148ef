"""SendMessage: a 5.x client's messages through the broker's one send path.

Each message becomes what a 4.x send would store: UNIQ_KEY = the client's message id (so a
retried send, which repeats the id, stores copies with one UNIQ_KEY), TAGS, KEYS (space-joined),
the user properties, born time and host; a FIFO message's group as `__SHARDINGKEY`; a delayed
message as a delay level. The request names no queue: the broker picks it, by a stable hash of
the message group for FIFO (one group, one queue, in send order) and round-robin otherwise.

DELAY rounds the wanted delay UP to the broker's delay levels (`message_delay_level`, scaled by
the cluster's time knob): the message is never readable before its delivery timestamp, and may
be later by up to the gap to the next level. A delay past the longest level (or a day) is
ILLEGAL_DELIVERY_TIME; a timestamp already past is stored as due now.

A TRANSACTION message is sent as RocketMQ's producer sends one (TRAN_MSG=true, sys flag
PREPARED): the send path stores it as a half message, and the entry's `transaction_id` is the
half message's offset message id, what EndTransaction names it by (rmq5/transaction.py).

Checks follow Apache's proxy and answer its codes: an empty or oversize body, a bad tag, key,
group or property, a type that is not the topic's (MESSAGE_PROPERTY_CONFLICT_WITH_TYPE).
"""

from __future__ import annotations

import bisect
import ipaddress
import zlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from nodes.broker.rmq5.clients import CallContext, Rmq5ClientRegistry
from nodes.broker.rmq5.codes import OK, Rmq5Code, Status, status_of
from nodes.broker.rmq5.route import TopicLookup, topic_message_type
from nodes.broker.send import SendRequest, SendResponse
from nodes.common import constants as c
from nodes.common.names import send_topic_problem

SendHandler = Callable[[SendRequest], Awaitable[SendResponse]]

# Property names RocketMQ keeps for itself (MessageConst), refused as user properties: a user
# value under one of them would change how the broker or a consumer treats the message.
RESERVED_PROPERTIES = frozenset({
    c.PROPERTY_TAGS, c.PROPERTY_KEYS, c.PROPERTY_UNIQ_KEY, c.PROPERTY_DELAY, c.PROPERTY_REAL_TOPIC,
    c.PROPERTY_REAL_QUEUE_ID, c.PROPERTY_RETRY_TOPIC, c.PROPERTY_ORIGIN_MESSAGE_ID, c.PROPERTY_RECONSUME_TIME,
    c.PROPERTY_MAX_RECONSUME_TIMES, c.PROPERTY_MIN_OFFSET, c.PROPERTY_MAX_OFFSET, c.RMQ5_PROPERTY_SHARDING_KEY,
    "WAIT", "TRAN_MSG", "PGROUP", "BUYER_ID", "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG", "MSG_REGION",
    "TRACE_ON", "CONSUME_START_TIME", "TRAN_PREPARED_QUEUE_OFFSET", "TRANSACTION_CHECK_TIMES",
    "CHECK_IMMUNITY_TIME_IN_SECONDS", "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL",
    "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE", "__STARTDELIVERTIME", "TIMER_DELAY_SEC",
    "TIMER_DELIVER_MS", "TIMER_DELAY_MS", "POP_CK", c.PROPERTY_POP_FIRST_POP_TIME, c.PROPERTY_DLQ_ORIGIN_TOPIC, c.PROPERTY_DLQ_ORIGIN_MESSAGE_ID,
})


@dataclass(frozen=True, slots=True)
class Rmq5Message:
    """One message of a SendMessage as the client sent it (types by their protocol names)."""

    topic: str
    body: bytes
    message_id: str
    message_type: str = "NORMAL"
    tag: str | None = None
    keys: tuple[str, ...] = ()
    user_properties: Mapping[str, str] = field(default_factory=dict)
    born_timestamp_ms: int = 0
    born_host: str = ""
    delivery_timestamp_ms: int | None = None
    message_group: str | None = None
    body_encoding: str = "IDENTITY"


@dataclass(frozen=True, slots=True)
class SendEntry:
    status: Status
    message_id: str = ""
    queue_offset: int = 0
    transaction_id: str = ""  # TRANSACTION: what EndTransaction names the half message by


@dataclass(frozen=True, slots=True)
class SendAnswer:
    status: Status
    entries: tuple[SendEntry, ...] = ()


class Rmq5Send:
    def __init__(self, *, topics: TopicLookup, send: SendHandler, registry: Rmq5ClientRegistry, now_ms: Callable[[], int],
                 body_bytes_max: int, delay_levels_ms: Sequence[int]) -> None:
        self._topics = topics
        self._send = send
        self._registry = registry
        self._now_ms = now_ms
        self._body_bytes_max = body_bytes_max
        self._delay_levels_ms = tuple(delay_levels_ms)
        self._round_robin: dict[str, int] = {}

    async def send(self, ctx: CallContext, messages: Sequence[Rmq5Message], peer_host: str) -> SendAnswer:
        self._registry.touch(ctx, "SendMessage")
        if not messages:
            return SendAnswer(Status(Rmq5Code.BAD_REQUEST, "the request carries no message"))
        entries = tuple([await self._send_one(m, peer_host) for m in messages])
        codes = {e.status.code for e in entries}
        top = entries[0].status if len(codes) == 1 else Status(Rmq5Code.MULTIPLE_RESULTS, "see each entry")
        return SendAnswer(top, entries)

    async def _send_one(self, msg: Rmq5Message, peer_host: str) -> SendEntry:
        body = msg.body
        if msg.body_encoding == "GZIP":
            body = _gunzip(body, self._body_bytes_max)
            if body is None:
                return SendEntry(Status(Rmq5Code.BAD_REQUEST, "the body is marked GZIP but does not inflate "
                                        f"to at most {self._body_bytes_max} bytes"), msg.message_id)
        problem = _message_problem(msg, body, self._body_bytes_max)
        if problem is not None:
            return SendEntry(problem, msg.message_id)
        topic = self._topics.get(msg.topic)
        if topic is None:
            return SendEntry(Status(Rmq5Code.TOPIC_NOT_FOUND, f"topic {msg.topic} does not exist on this broker; "
                                    f"create it first (mqlab admin topic create {msg.topic})"), msg.message_id)
        topic_type = topic_message_type(topic)
        if msg.message_type != topic_type:
            return SendEntry(Status(Rmq5Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                                    f"topic {msg.topic} takes {topic_type} messages, this one is {msg.message_type}"),
                             msg.message_id)
        properties = dict(msg.user_properties)
        properties[c.PROPERTY_UNIQ_KEY] = msg.message_id
        if msg.tag:
            properties[c.PROPERTY_TAGS] = msg.tag
        if msg.keys:
            properties[c.PROPERTY_KEYS] = " ".join(msg.keys)
        if msg.message_group is not None:
            properties[c.RMQ5_PROPERTY_SHARDING_KEY] = msg.message_group
        transactional = msg.message_type == "TRANSACTION"
        if transactional:
            properties[c.PROPERTY_TRANSACTION_PREPARED] = "true"
        if msg.delivery_timestamp_ms is not None:
            level = self._delay_level(msg.delivery_timestamp_ms)
            if isinstance(level, Status):
                return SendEntry(level, msg.message_id)
            if level:
                properties[c.PROPERTY_DELAY] = str(level)
        queue_count = max(topic.write_queue_nums, 1)
        if msg.message_group is not None:
            queue_id = zlib.crc32(msg.message_group.encode()) % queue_count  # stable across processes and restarts
        else:
            queue_id = self._round_robin.get(msg.topic, 0) % queue_count
            self._round_robin[msg.topic] = queue_id + 1
        born_ms = msg.born_timestamp_ms or self._now_ms()
        response = await self._send(SendRequest(
            topic=msg.topic, queue_id=queue_id, messages=[(body, 0, properties, born_ms)], born_timestamp_ms=born_ms,
            born_host=(_ipv4(msg.born_host) or _ipv4(peer_host) or "127.0.0.1", 0),
            sys_flag=c.SYS_FLAG_TRANSACTION_PREPARED if transactional else 0))
        status = status_of(response.code, response.remark)
        if not status.ok:
            return SendEntry(status, msg.message_id)
        first = response.appended[0] if response.appended else None
        return SendEntry(OK, msg.message_id, first.queue_offset if first else 0,
                         first.offset_msg_id if first and transactional else "")

    def _delay_level(self, due_ms: int) -> int | Status:
        """The smallest delay level at least as long as the wait until `due_ms` (0: due already)."""
        wait_ms = due_ms - self._now_ms()
        if wait_ms <= 0:
            return 0
        longest = self._delay_levels_ms[-1] if self._delay_levels_ms else 0
        if wait_ms > c.RMQ5_DELIVERY_AHEAD_MS_MAX or wait_ms > longest:
            return Status(Rmq5Code.ILLEGAL_DELIVERY_TIME,
                          f"the delivery time is {wait_ms} ms ahead; this broker delays by at most {longest} ms "
                          "(its longest delay level)")
        return bisect.bisect_left(self._delay_levels_ms, wait_ms) + 1


def _message_problem(msg: Rmq5Message, body: bytes, body_bytes_max: int) -> Status | None:
    if problem := send_topic_problem(msg.topic):
        return Status(Rmq5Code.ILLEGAL_TOPIC, problem)
    if not msg.message_id.strip():
        return Status(Rmq5Code.ILLEGAL_MESSAGE_ID, "the message has no message_id; the client makes one per send")
    if not body:
        return Status(Rmq5Code.MESSAGE_BODY_EMPTY, "the message body is empty")
    if len(body) > body_bytes_max:
        return Status(Rmq5Code.MESSAGE_BODY_TOO_LARGE,
                      f"the body is {len(body)} bytes, over this broker's {body_bytes_max}-byte limit")
    if msg.tag is not None and ("|" in msg.tag or not msg.tag.strip() or _has_control(msg.tag)):
        return Status(Rmq5Code.ILLEGAL_MESSAGE_TAG, f"tag {msg.tag[:64]!r} is blank or holds '|' or a control character")
    for key in msg.keys:
        if not key.strip() or _has_control(key):
            return Status(Rmq5Code.ILLEGAL_MESSAGE_KEY, f"key {key[:64]!r} is blank or holds a control character")
    if msg.message_group is not None:
        group = msg.message_group
        if not group.strip() or _has_control(group) or len(group.encode()) > c.RMQ5_MESSAGE_GROUP_BYTES_MAX:
            return Status(Rmq5Code.ILLEGAL_MESSAGE_GROUP, f"message group {group[:80]!r} is blank, holds a control "
                          f"character or is over {c.RMQ5_MESSAGE_GROUP_BYTES_MAX} bytes")
    if len(msg.user_properties) > c.RMQ5_USER_PROPERTIES_MAX:
        return Status(Rmq5Code.MESSAGE_PROPERTIES_TOO_LARGE,
                      f"{len(msg.user_properties)} user properties, over {c.RMQ5_USER_PROPERTIES_MAX}")
    size = sum(len(k.encode()) + len(v.encode()) for k, v in msg.user_properties.items())
    size += len((msg.tag or "").encode()) + sum(len(k.encode()) for k in msg.keys)
    if size > c.RMQ5_PROPERTIES_BYTES_MAX:
        return Status(Rmq5Code.MESSAGE_PROPERTIES_TOO_LARGE,
                      f"properties, tag and keys take {size} bytes, over {c.RMQ5_PROPERTIES_BYTES_MAX}")
    for name, value in msg.user_properties.items():
        if name in RESERVED_PROPERTIES or not name or _has_control(name) or _has_control(value):
            return Status(Rmq5Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                          f"user property {name[:64]!r} is reserved by RocketMQ, empty or holds a control character")
    return _type_problem(msg)


def _type_problem(msg: Rmq5Message) -> Status | None:
    """The declared type must match what the message carries (group: FIFO; delivery time: DELAY)."""
    carried = "FIFO" if msg.message_group is not None else "DELAY" if msg.delivery_timestamp_ms is not None else "NORMAL"
    if msg.message_group is not None and msg.delivery_timestamp_ms is not None:
        return Status(Rmq5Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a message has a group or a delivery time, not both")
    if msg.message_type == "TRANSACTION":  # a transaction's message carries neither
        if carried != "NORMAL":
            return Status(Rmq5Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                          f"a TRANSACTION message carries a {carried} message's fields; send it without them")
        return None
    if msg.message_type != carried:
        return Status(Rmq5Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                      f"the message says {msg.message_type or 'no type'} but carries a {carried} message's fields")
    return None


def _has_control(text: str) -> bool:
    return any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in text)


def _ipv4(host: str) -> str:
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        return ""


def _gunzip(body: bytes, limit: int) -> bytes | None:
    inflater = zlib.decompressobj(wbits=zlib.MAX_WBITS | 16)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error:
        return None
    return out if inflater.eof and len(out) <= limit else None
