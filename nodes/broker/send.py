"""The broker send path (RocketMQ SendMessageProcessor#sendMessage / sendBatchMessage).

Owns: request checks (permission, topic name, topic existence and auto-creation, queue
id), turning the request (its messages, or RocketMQ's batch body) into store records,
mapping put statuses to answer codes, and what follows a stored put: waking the slaves'
streams, registering an auto-created topic before answering, the SYNC_FLUSH wait for the
commitlog fsync (FLUSH_DISK_TIMEOUT past store.sync_flush_timeout_ms) and the SYNC_MASTER wait
for a slave's ack. Does not own queue offset assignment or durability (the store does), nor
any wire format: requests and answers are the plain values below.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from nodes.broker import validation
from nodes.broker.ha_master import ReplicationState
from nodes.broker.send_back import (
    RETRY_HEADER_PROPERTIES,
    create_topic_in_send_back,
    retry_send_header,
    route_retry_send,
)
from nodes.broker.topics import SubscriptionGroupManager, TopicConfigManager
from nodes.broker.transaction import is_transactional, to_half
from nodes.common import constants as c
from nodes.common.clock import Clock
from nodes.common.codes import ResponseCode
from nodes.common.config import BrokerConfig
from nodes.common.errors import StoreError
from nodes.store import message_batch
from nodes.store.commitlog import AppendedRun
from nodes.store.message_batch import MalformedBatchError
from nodes.store.message_store import MessageStore, PutStatus
from nodes.store.record import MessageToStore
from nodes.store.record_batch import scan_batch_body

log = logging.getLogger(__name__)

_CODE_BY_PUT_STATUS = {
    PutStatus.PUT_OK: ResponseCode.SUCCESS,
    PutStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutStatus.CREATE_MAPPED_FILE_FAILED: ResponseCode.SYSTEM_ERROR,
    PutStatus.UNKNOWN_ERROR: ResponseCode.SYSTEM_ERROR,
}

# (body, flag, properties, born_timestamp_ms) of one message of a request. A tuple, not a
# dataclass: the adapter builds one per message and the store input is made from it directly.
IncomingMessage = tuple[bytes, int, dict[str, str], int]


@dataclass(frozen=True, slots=True)
class SendRequest:
    """SEND_MESSAGE / SEND_BATCH_MESSAGE: `messages`, or RocketMQ's batch body (one born time)."""

    topic: str
    queue_id: int
    messages: Sequence[IncomingMessage] = ()
    batch_body: bytes = b""
    born_timestamp_ms: int = 0  # of every message in batch_body
    default_topic_queue_nums: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    sys_flag: int = 0
    reconsume_times: int = 0


@dataclass(frozen=True, slots=True)
class SendResponse:
    """The answer. `appended` holds the store's results, one per message, in request order;
    `compact` asks for RocketMQ's batch answer (first queue offset, phys offsets and the offset
    msg id prefix) instead of one entry per message."""

    code: ResponseCode
    remark: str = ""
    queue_id: int = 0
    appended: AppendedRun = field(default_factory=AppendedRun.empty)
    compact: bool = False

    @property
    def phys_offsets(self) -> list[int]:
        return self.appended.phys_offsets

    @property
    def offset_msg_id_prefix(self) -> str:
        return self.appended[0].offset_msg_id[:_OFFSET_MSG_ID_PREFIX_CHARS] if self.appended else ""


class SendProcessor:
    """The store-facing half of a send: checks, records, put (synchronous, no waiting)."""

    def __init__(self, config: BrokerConfig, store: MessageStore, topics: TopicConfigManager, clock: Clock,
                 groups: SubscriptionGroupManager | None = None, rng: random.Random | None = None) -> None:
        self._config = config
        self._groups = groups  # for sends to %RETRY% topics (handleRetryAndDLQ)
        self._rng = rng or random.Random()
        self._store = self.store = store
        self.topics = topics
        self._clock = self.clock = clock
        self._store_host = (_ipv4_of(config.listen_host), config.port)
        self.config = config
        self.sync_master = config.is_sync_master
        self.sync_flush = config.store.sync_flush
        self.flush_ack_early = c.FAULT_SYNC_FLUSH_ACK_EARLY in config.fault_switches
        self.last_put_end_offset = 0  # the commitlog end after the last successful put
        # told of every half message stored: [(half queue offset, phys offset, real topic, UNIQ_KEY)]
        self.on_half: Callable[[list[tuple[int, int, str, str]]], None] | None = None

    def bind_port(self, port: int) -> None:
        self._store_host = (_ipv4_of(self._config.listen_host), port)

    def process(self, req: SendRequest) -> SendResponse:
        if not self._config.is_master:
            return _reply(ResponseCode.SERVICE_NOT_AVAILABLE,
                          f"{self._config.node_id} is a slave; send to the master of {self._config.broker_name}")
        if not self._config.broker_perm & c.PERM_WRITE:
            return _reply(ResponseCode.NO_PERMISSION, f"broker {self._config.broker_name} is not writable")
        if refusal := validation.send_refusal(req.topic, len(req.messages), req.batch_body):
            return _reply(*refusal)
        body_bytes_max = self._config.store.message_body_bytes_max
        # A plain batch body (the common batch) is written as records straight from its bytes;
        # anything else (a retry or schedule topic, a delay level or REAL_* property to check,
        # odd properties, a bad entry) is decoded into messages, which also finds what to
        # answer about it.
        scanned = None
        if (req.batch_body and not req.topic.startswith(c.RETRY_GROUP_TOPIC_PREFIX)
                and req.topic != c.SCHEDULE_TOPIC):
            scanned = scan_batch_body(req.batch_body, body_bytes_max)
            if scanned is not None and validation.scanned_needs_property_checks(scanned):
                scanned = None
        messages: Sequence[IncomingMessage] = ()
        if scanned is None:
            try:
                messages = _messages_of(req)
            except MalformedBatchError as exc:
                return _reply(ResponseCode.MESSAGE_ILLEGAL, str(exc))
            if not messages:
                return _reply(ResponseCode.MESSAGE_ILLEGAL, "the request carries no message")
            if refusal := validation.properties_refusal(messages, batch=bool(req.batch_body)):
                return _reply(*refusal)
            for i, (body, _flag, _properties, _born_ms) in enumerate(messages):
                if not body:
                    return _reply(ResponseCode.MESSAGE_ILLEGAL, f"message {i} has an empty body")
                if len(body) > body_bytes_max:
                    return _reply(ResponseCode.MESSAGE_ILLEGAL,
                                  f"message {i} body is {len(body)} bytes, over the {body_bytes_max}-byte limit")

        topic = self.topics.get(req.topic)
        if topic is None:
            try:
                topic = self.topics.create_in_send(req.topic, req.default_topic_queue_nums, self._clock.wall_ms())
                if topic is None and req.topic.startswith(c.RETRY_GROUP_TOPIC_PREFIX):
                    # msgCheck creates a retry topic even when auto-creation is off
                    topic = create_topic_in_send_back(self.topics, req.topic, 1, c.PERM_DEFAULT,
                                                      self._clock.wall_ms())
            except StoreError as exc:  # the topic table could not be written (a full disk)
                return _reply(ResponseCode.SYSTEM_ERROR, f"cannot create topic {req.topic!r}: {exc}")
            if topic is None:
                return _reply(ResponseCode.TOPIC_NOT_EXIST,
                              f"topic {req.topic!r} does not exist on {self._config.broker_name} and "
                              "auto-creation is off; create it first")
        if not topic.writable:
            return _reply(ResponseCode.NO_PERMISSION, f"topic {req.topic} is not writable")
        if not 0 <= req.queue_id < topic.write_queue_nums:
            return _reply(ResponseCode.SYSTEM_ERROR,
                          f"queue id {req.queue_id} is outside [0, {topic.write_queue_nums}) of {req.topic}")

        records: list[MessageToStore] = []
        if scanned is not None:
            result = self._store.put_scanned(scanned, topic=req.topic, queue_id=req.queue_id,
                                             born_timestamp_ms=req.born_timestamp_ms, born_host=req.born_host,
                                             store_host=self._store_host, sys_flag=req.sys_flag,
                                             reconsume_times=req.reconsume_times)
        else:
            built = self._records(req, messages)
            if isinstance(built, SendResponse):
                return built  # the retry route refused it
            records = built
            result = self._store.put_messages(records)
        code = _CODE_BY_PUT_STATUS[result.status]
        if code != ResponseCode.SUCCESS:
            return _reply(code, result.remark or result.status.name)
        appended = result.appended
        if records and records[0].topic == c.TRANS_HALF_TOPIC and self.on_half is not None:
            self.on_half([(a.queue_offset, a.phys_offset, m.properties.get(c.PROPERTY_REAL_TOPIC, ""),
                           m.properties.get(c.PROPERTY_UNIQ_KEY, "")) for a, m in zip(appended, records, strict=True)])
        last = appended[-1]
        self.last_put_end_offset = last.phys_offset + last.size
        return SendResponse(code, queue_id=req.queue_id, appended=appended, compact=bool(req.batch_body))

    def _records(self, req: SendRequest, messages: Sequence[IncomingMessage]) -> list[MessageToStore] | SendResponse:
        """The store input for decoded messages (a retry topic routed as handleRetryAndDLQ does)."""
        store_topic, store_queue_id, reconsume_times = req.topic, req.queue_id, req.reconsume_times
        dropped: tuple[str, ...] = ()  # properties not stored
        if self._groups is not None and req.topic.startswith(c.RETRY_GROUP_TOPIC_PREFIX):
            reconsume_times, max_times = retry_send_header(req.reconsume_times, messages[0][2])
            route = route_retry_send(groups=self._groups, topics=self.topics, topic=req.topic,
                                     queue_id=req.queue_id, reconsume_times=reconsume_times,
                                     max_reconsume_times=max_times, now_ms=self._clock.wall_ms(), rng=self._rng)
            if route.code != ResponseCode.SUCCESS:
                return _reply(route.code, route.remark)
            store_topic, store_queue_id = route.topic, route.queue_id
            # a dead letter is stored at once, whatever delay level it asked for
            dropped = RETRY_HEADER_PROPERTIES + ((c.PROPERTY_DELAY,) if route.dead_letter else ())
        born_host, store_host, sys_flag = req.born_host, self._store_host, req.sys_flag
        records = [MessageToStore(topic=store_topic, queue_id=store_queue_id, body=body, flag=flag,
                                  properties=_without(properties, dropped), born_timestamp_ms=born_ms,
                                  born_host=born_host, store_host=store_host, reconsume_times=reconsume_times,
                                  sys_flag=sys_flag)
                   for body, flag, properties, born_ms in messages]
        # a transactional send is stored as half messages (SendMessageProcessor -> prepareMessage)
        return [to_half(r) if is_transactional(r.properties) else r for r in records]


class SendHandler:
    """SEND_MESSAGE end to end: the put, then what a stored message owes before its answer."""

    def __init__(self, processor: SendProcessor, replication: ReplicationState,
                 on_topics_changed: Callable[[], Awaitable[None]]) -> None:
        self.processor = processor
        self._topics = processor.topics
        self._replication = replication
        self._on_topics_changed = on_topics_changed

    async def handle(self, req: SendRequest) -> SendResponse:
        version = self._topics.data_version
        response = self.processor.process(req)
        if response.code != ResponseCode.SUCCESS:
            return response
        end_offset = self.processor.last_put_end_offset
        flushed, deadline_ms = self._request_flush(end_offset)
        self._replication.log_grew()
        if self._topics.data_version != version:
            # RocketMQ registers an auto-created topic with the name servers before it answers,
            # so a client that saw SEND_OK can already find the route.
            await self._on_topics_changed()
        code = ResponseCode.SUCCESS
        if flushed is not None:
            code = await self._wait_for_flush(flushed, deadline_ms)
        if self.processor.sync_master:
            slave_code = await self._wait_for_slave(end_offset)
            if slave_code != ResponseCode.SUCCESS:  # as RocketMQ: the replica's status wins over the flush's
                code = slave_code
        if code != ResponseCode.SUCCESS:
            return SendResponse(code, response.remark, response.queue_id, response.appended, response.compact)
        return response

    def _request_flush(self, end_offset: int) -> tuple[Future[None] | None, int]:
        """SYNC_FLUSH: ask the store's group commit to fsync through `end_offset`; (future, deadline ms)."""
        processor = self.processor
        if not processor.sync_flush or processor.flush_ack_early:
            # FAULT SWITCH sync-flush-ack-early: breaks "SYNC_FLUSH loses no acked message": the
            # answer goes out at once and only the periodic flush makes the record durable.
            return None, 0
        timeout_ms = processor.config.store.sync_flush_timeout_ms
        try:
            flushed = processor.store.wait_flushed(end_offset)
        except StoreError as exc:  # closing under this send: answered as a flush that did not happen
            flushed = Future()
            flushed.set_exception(exc)
        return flushed, processor.clock.monotonic_ms() + timeout_ms

    async def _wait_for_flush(self, flushed: Future[None], deadline_ms: int) -> ResponseCode:
        """FLUSH_DISK_TIMEOUT when the fsync has not returned by the deadline (or failed); the
        message stays stored either way."""
        timeout_s = max(0, deadline_ms - self.processor.clock.monotonic_ms()) / 1000
        try:
            # shielded: a timeout must not cancel the store's future (the group commit completes it)
            await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(flushed)), timeout_s)
        except TimeoutError:
            log.warning("SYNC_FLUSH: the commitlog fsync took longer than %d ms; answering FLUSH_DISK_TIMEOUT",
                        self.processor.config.store.sync_flush_timeout_ms)
            return ResponseCode.FLUSH_DISK_TIMEOUT
        except Exception as exc:  # the fsync failed: the client hears it as a flush timeout
            log.error("SYNC_FLUSH: the commitlog fsync failed (%s); answering FLUSH_DISK_TIMEOUT", exc)
            return ResponseCode.FLUSH_DISK_TIMEOUT
        return ResponseCode.SUCCESS

    async def _wait_for_slave(self, end_offset: int) -> ResponseCode:
        """SYNC_MASTER: any slave's ack within slave_timeout; the message is stored either way."""
        config = self.processor.config
        if not self._replication.is_slave_ok(end_offset, config.slave_fall_behind_bytes_max):
            return ResponseCode.SLAVE_NOT_AVAILABLE
        if await self._replication.wait_acked(end_offset, config.timing.slave_timeout_ms):
            return ResponseCode.SUCCESS
        return ResponseCode.FLUSH_SLAVE_TIMEOUT


def _ipv4_of(host: str) -> str:
    """The record stores the broker's IPv4 address (offset msg ids are built from it)."""
    try:
        return socket.gethostbyname(host)
    except OSError:
        return "127.0.0.1"


_OFFSET_MSG_ID_PREFIX_CHARS = 16  # store host ip and port; the phys offset's 16 hex digits follow


def _messages_of(req: SendRequest) -> Sequence[IncomingMessage]:
    """The request's messages, from its batch body or its `messages`.

    Raises:
        MalformedBatchError: the batch body does not frame.
    """
    if req.batch_body:
        born_ms = req.born_timestamp_ms
        return [(body, flag, properties, born_ms) for body, flag, properties in message_batch.decode(req.batch_body)]
    return req.messages


def _without(properties: dict[str, str], names: tuple[str, ...]) -> dict[str, str]:
    """`properties` (a fresh dict of this request's, so not copied) less the names."""
    if not names:
        return properties
    return {k: v for k, v in properties.items() if k not in names}


def _reply(code: ResponseCode, remark: str) -> SendResponse:
    return SendResponse(code, remark)
