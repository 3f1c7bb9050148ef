"""The client half of a pull (RocketMQ `PullAPIWrapper` + `processPullResponse`).

Owns: choosing the broker address for a queue (the per-queue memory of the broker's
`suggest_which_broker_id`), sending the pull on the broker's `PullStream`, mapping the
response code to a `PullStatus` (reference §2.2), decoding the raw records to `MessageExt`,
the client-side exact tag filter and the MIN_OFFSET / MAX_OFFSET stamps (§2.4).
Does not own pull scheduling, flow control or offsets (consumer facades do).

The response-to-result part is pure (`process_pull_response`, `decode_messages`), so it is
tested without a broker.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

from nodes.common import constants as c
from nodes.common.errors import CorruptRecordError, for_code
from nodes.common.types import MessageExt, MessageQueue, PullResult, PullStatus
from nodes.common.wire import code_name
from nodes.store import record  # the one store module the client may read
from proto import broker_pb2, common_pb2

if TYPE_CHECKING:
    from nodes.client.instance import ClientInstance

# processPullResponse: every other code is an exception (MQBrokerException)
PULL_STATUS_BY_CODE: dict[int, PullStatus] = {
    common_pb2.SUCCESS: PullStatus.FOUND,
    common_pb2.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    common_pb2.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    common_pb2.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


def pull_status_for_code(code: int, remark: str = "") -> PullStatus:
    """The PullStatus of a response code; any other code raises its RemoteError."""
    status = PULL_STATUS_BY_CODE.get(code)
    if status is None:
        raise for_code(code_name(code), remark)
    return status


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


def decode_messages(records: bytes, *, broker_name: str, min_offset: int, max_offset: int,
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


def process_pull_response(resp: broker_pb2.PullResponse, mq: MessageQueue,
                          tags: frozenset[str] | None, *, lazy: bool = False) -> PullResult:
    """processPullResponse + processPullResult: status, decoded and filtered messages.

    With `lazy` (and no tag filter), `messages` is a MessageBatch decoded on first use.

    Raises:
        RemoteError: the code is not one of the four pull outcomes (reference §2.2).
    """
    status = pull_status_for_code(resp.code, resp.remark)
    messages: list[MessageExt] | MessageBatch = []
    if status is PullStatus.FOUND and resp.records:
        records, broker_name, min_offset, max_offset = resp.records, mq.broker_name, resp.min_offset, resp.max_offset
        if lazy and tags is None and resp.record_count > 0:
            messages = MessageBatch(resp.record_count, lambda: decode_messages(
                records, broker_name=broker_name, min_offset=min_offset, max_offset=max_offset, tags=None))
        else:
            messages = decode_messages(records, broker_name=broker_name, min_offset=min_offset,
                                       max_offset=max_offset, tags=tags)
    return PullResult(status=status, next_begin_offset=resp.next_begin_offset, min_offset=resp.min_offset,
                      max_offset=resp.max_offset, messages=messages,
                      suggest_which_broker_id=resp.suggest_which_broker_id, store_status=resp.remark)


class PullApi:
    """PullAPIWrapper: routes a pull to the suggested broker and interprets the answer.

    Loop-confined (runs on the `ClientInstance` loop).
    """

    def __init__(self, instance: ClientInstance, group: str,
                 on_routing_event: Callable[[dict[str, Any]], None] | None = None, *, client_id: str = "",
                 ignore_pull_suggestion: bool = False) -> None:
        self._instance = instance
        self.group = group
        self.client_id = client_id  # names the puller in routing events ("" for a bare PullConsumer)
        # Test-only fault switch `ignore-pull-suggestion` (constants.FAULT_IGNORE_PULL_SUGGESTION).
        self.ignore_pull_suggestion = ignore_pull_suggestion
        self._pull_from_which_node: dict[MessageQueue, int] = {}
        # Every routing decision (asked-for broker, answering broker, suggestion) for the checker.
        self.on_routing_event = on_routing_event
        # Beyond RocketMQ: pull every queue from this broker id, ignoring the suggestions (the
        # benchmark reads a slave this way); None follows them as RocketMQ does.
        self.pinned_broker_id: int | None = None

    def recalculate_pull_from_which_node(self, mq: MessageQueue) -> int:
        if self.pinned_broker_id is not None:
            return self.pinned_broker_id
        if self.ignore_pull_suggestion:
            # FAULT SWITCH ignore-pull-suggestion: breaks the cold-read redirect (reference §1.2,
            # rule R2): the broker's suggest_which_broker_id is dropped and every pull asks the master.
            return c.MASTER_ID
        return self._pull_from_which_node.get(mq, c.MASTER_ID)

    def next_commit_seq(self) -> int:
        return self._instance.next_commit_seq()

    def update_pull_from_which_node(self, mq: MessageQueue, broker_id: int) -> None:
        self._pull_from_which_node[mq] = broker_id

    async def pull_kernel(self, mq: MessageQueue, expression: str, queue_offset: int, max_nums: int, *,
                          suspend: bool, suspend_timeout_ms: int, timeout_ms: int,
                          commit_offset_value: int | None = None, commit_seq: int = 0,
                          post_subscription: bool = True,
                          sub_version: int = 0, lazy: bool = False) -> PullResult:
        """pullKernelImpl + processPullResult for one queue (`lazy`: see process_pull_response).

        Raises:
            RouteNotFoundError: the topic has no route.
            BrokerNotFoundError: no address for the queue's broker, even after a route refresh.
            TransportError / RequestTimeoutError: the pull got no answer.
            RemoteError: the broker answered with a code that is not a pull outcome.
        """
        routes = self._instance.routes
        if routes.route(mq.topic) is None:
            await routes.ensure_route(mq.topic)
        requested_id = self.recalculate_pull_from_which_node(mq)
        found = await routes.subscribe_address(mq.topic, mq.broker_name, requested_id, False)
        # FLAG_COMMIT_OFFSET is set iff the value is > 0, and cleared when pulling from a slave.
        commit = commit_offset_value is not None and commit_offset_value > 0 and not found.slave
        fields = {
            "consumer_group": self.group,
            "topic": mq.topic,
            "queue_id": mq.queue_id,
            "queue_offset": queue_offset,
            "max_msg_nums": max_nums,
            "suspend": suspend,
            "suspend_timeout_ms": suspend_timeout_ms,
            "commit_offset": commit,
            "commit_offset_value": commit_offset_value if commit else 0,
            "client_id": self.client_id if commit else "",
            "commit_seq": commit_seq if commit else 0,
            # A pull consumer always posts its subscription; a push consumer only with
            # postSubscriptionWhenPull (the broker then uses the group's registered one).
            "has_subscription": post_subscription,
            "subscription_expression": expression if post_subscription else "",
            "sub_version": sub_version,  # the broker answers SUBSCRIPTION_NOT_LATEST if its copy is older
        }
        sent_mono_ms = time.monotonic_ns() // 1_000_000  # the events' clock (CLOCK_MONOTONIC)
        resp = await self._instance.pull_stream(found.addr).pull(fields, timeout_ms)
        result = process_pull_response(resp, mq, parse_subscription(expression), lazy=lazy)
        result.requested_broker_id = requested_id
        result.broker_id = found.broker_id
        self.update_pull_from_which_node(mq, result.suggest_which_broker_id)
        if self.on_routing_event is not None:
            self.on_routing_event({
                "event": "pull-route", "group": self.group, "client_id": self.client_id or None,
                "topic": mq.topic, "broker_name": mq.broker_name,
                "queue_id": mq.queue_id, "queue_offset": queue_offset, "requested_broker_id": requested_id,
                "broker_id": found.broker_id, "addr": found.addr, "commit_flag": commit,
                "status": result.status.value, "suggest_which_broker_id": result.suggest_which_broker_id,
                "next_begin_offset": result.next_begin_offset, "sent_mono_ms": sent_mono_ms})
        return result

