"""The broker send path (RocketMQ SendMessageProcessor#sendMessage / sendBatchMessage).

Owns: request checks (permission, topic name, topic existence and auto-creation, queue
id), turning the request (its `messages`, or RocketMQ's batch body) into store records, and
mapping put statuses to response codes (compact for a batch body).
Does not own queue offset assignment or durability (the store does).
"""

from __future__ import annotations

import logging
import random
import socket

from nodes.broker.send_back import (
    RETRY_HEADER_PROPERTIES,
    create_topic_in_send_back,
    retry_send_header,
    route_retry_send,
)
from nodes.broker.topics import SubscriptionGroupManager, TopicConfigManager
from nodes.common import constants as c
from nodes.common.clock import Clock
from nodes.common.config import BrokerConfig
from nodes.common.errors import InvalidMessageError
from nodes.common.types import validate_topic
from nodes.common.wire import parse_host_port
from nodes.store import message_batch
from nodes.store.message_batch import MalformedBatchError
from nodes.store.message_store import MessageStore, PutStatus
from nodes.store.record import MessageToStore
from proto import broker_pb2, common_pb2

log = logging.getLogger(__name__)

_CODE_BY_PUT_STATUS = {
    PutStatus.PUT_OK: common_pb2.SUCCESS,
    PutStatus.MESSAGE_ILLEGAL: common_pb2.MESSAGE_ILLEGAL,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: common_pb2.MESSAGE_ILLEGAL,
    PutStatus.SERVICE_NOT_AVAILABLE: common_pb2.SERVICE_NOT_AVAILABLE,
    PutStatus.UNKNOWN_ERROR: common_pb2.SYSTEM_ERROR,
}


class SendProcessor:
    def __init__(self, config: BrokerConfig, store: MessageStore, topics: TopicConfigManager, clock: Clock,
                 groups: SubscriptionGroupManager | None = None, rng: random.Random | None = None) -> None:
        self._config = config
        self._groups = groups  # for sends to %RETRY% topics (handleRetryAndDLQ)
        self._rng = rng or random.Random()
        self._store = store
        self._topics = topics
        self._clock = clock
        self._store_host = (_ipv4_of(config.listen_host), config.port)
        self.config = config
        self.sync_master = config.is_sync_master
        self.last_put_end_offset = 0  # the commitlog end after the last successful put

    def bind_port(self, port: int) -> None:
        self._store_host = (_ipv4_of(self._config.listen_host), port)

    def process(self, req: broker_pb2.SendMessageRequest) -> broker_pb2.SendMessageResponse:
        if not self._config.is_master:
            return _reply(common_pb2.SERVICE_NOT_AVAILABLE,
                          f"{self._config.node_id} is a slave; send to the master of {self._config.broker_name}")
        if not self._config.broker_perm & c.PERM_WRITE:
            return _reply(common_pb2.NO_PERMISSION, f"broker {self._config.broker_name} is not writable")
        try:
            validate_topic(req.topic)
        except InvalidMessageError as exc:
            return _reply(common_pb2.MESSAGE_ILLEGAL, str(exc))
        if req.topic == c.AUTO_CREATE_TOPIC_KEY:
            return _reply(common_pb2.MESSAGE_ILLEGAL, f"{req.topic} is the auto-create template; send elsewhere")
        try:
            messages = _messages_of(req)
        except MalformedBatchError as exc:
            return _reply(common_pb2.MESSAGE_ILLEGAL, str(exc))
        if not messages:
            return _reply(common_pb2.MESSAGE_ILLEGAL, "the request carries no message")
        body_bytes_max = self._config.store.message_body_bytes_max
        for i, (body, _flag, _properties, _born_ms) in enumerate(messages):
            if not body:
                return _reply(common_pb2.MESSAGE_ILLEGAL, f"message {i} has an empty body")
            if len(body) > body_bytes_max:
                return _reply(common_pb2.MESSAGE_ILLEGAL,
                              f"message {i} body is {len(body)} bytes, over the {body_bytes_max}-byte limit")

        topic = self._topics.get(req.topic)
        if topic is None:
            topic = self._topics.create_in_send(req.topic, req.default_topic_queue_nums, self._clock.wall_ms())
            if topic is None and req.topic.startswith(c.RETRY_GROUP_TOPIC_PREFIX):
                # msgCheck creates a retry topic even when auto-creation is off
                topic = create_topic_in_send_back(self._topics, req.topic, 1, c.PERM_DEFAULT, self._clock.wall_ms())
            if topic is None:
                return _reply(common_pb2.TOPIC_NOT_EXIST,
                              f"topic {req.topic!r} does not exist on {self._config.broker_name} and "
                              "auto-creation is off; create it first")
        if not topic.writable:
            return _reply(common_pb2.NO_PERMISSION, f"topic {req.topic} is not writable")
        if not 0 <= req.queue_id < topic.write_queue_nums:
            return _reply(common_pb2.SYSTEM_ERROR,
                          f"queue id {req.queue_id} is outside [0, {topic.write_queue_nums}) of {req.topic}")

        store_topic, store_queue_id, reconsume_times = req.topic, req.queue_id, req.reconsume_times
        dropped: tuple[str, ...] = ()  # properties not stored
        if self._groups is not None and req.topic.startswith(c.RETRY_GROUP_TOPIC_PREFIX):
            reconsume_times, max_times = retry_send_header(req.reconsume_times, messages[0][2])
            route = route_retry_send(groups=self._groups, topics=self._topics, topic=req.topic,
                                     queue_id=req.queue_id, reconsume_times=reconsume_times,
                                     max_reconsume_times=max_times, now_ms=self._clock.wall_ms(), rng=self._rng)
            if route.code != common_pb2.SUCCESS:
                return _reply(route.code, route.remark)
            store_topic, store_queue_id = route.topic, route.queue_id
            # a dead letter is stored at once, whatever delay level it asked for
            dropped = RETRY_HEADER_PROPERTIES + ((c.PROPERTY_DELAY,) if route.dead_letter else ())

        born_host = parse_host_port(req.born_host) if req.born_host else ("127.0.0.1", 0)
        store_host, sys_flag = self._store_host, req.sys_flag
        records = [MessageToStore(topic=store_topic, queue_id=store_queue_id, body=body, flag=flag,
                                  properties=_without(properties, dropped), born_timestamp_ms=born_ms,
                                  born_host=born_host, store_host=store_host, reconsume_times=reconsume_times,
                                  sys_flag=sys_flag)
                   for body, flag, properties, born_ms in messages]
        result = self._store.put_messages(records)
        code = _CODE_BY_PUT_STATUS[result.status]
        if code != common_pb2.SUCCESS:
            return _reply(code, result.remark or result.status.name)
        appended = result.appended
        last = appended[-1]
        self.last_put_end_offset = last.phys_offset + last.size
        if req.batch_body:
            first = appended[0]
            return broker_pb2.SendMessageResponse(
                code=code, queue_id=req.queue_id, first_queue_offset=first.queue_offset,
                phys_offsets=[a.phys_offset for a in appended],
                offset_msg_id_prefix=first.offset_msg_id[:_OFFSET_MSG_ID_PREFIX_CHARS])
        return broker_pb2.SendMessageResponse(
            code=code, queue_id=req.queue_id,
            entries=[broker_pb2.SendEntry(offset_msg_id=a.offset_msg_id, queue_offset=a.queue_offset,
                                          phys_offset=a.phys_offset) for a in appended])


def _ipv4_of(host: str) -> str:
    """The record stores the broker's IPv4 address (offset msg ids are built from it)."""
    try:
        return socket.gethostbyname(host)
    except OSError:
        return "127.0.0.1"


_OFFSET_MSG_ID_PREFIX_CHARS = 16  # store host ip and port; the phys offset's 16 hex digits follow

# (body, flag, properties, born_timestamp_ms) of one message of a request
_Incoming = tuple[bytes, int, dict[str, str], int]


def _messages_of(req: broker_pb2.SendMessageRequest) -> list[_Incoming]:
    """The request's messages, from its batch body or its `messages`.

    Raises:
        MalformedBatchError: the batch body does not frame.
    """
    if req.batch_body:
        born_ms = req.born_timestamp_ms
        return [(body, flag, properties, born_ms) for body, flag, properties in message_batch.decode(req.batch_body)]
    return [(m.body, m.flag, dict(m.properties), m.born_timestamp_ms) for m in req.messages]


def _without(properties: dict[str, str], names: tuple[str, ...]) -> dict[str, str]:
    """`properties` (a fresh dict of this request's, so not copied) less the names."""
    if not names:
        return properties
    return {k: v for k, v in properties.items() if k not in names}


def _reply(code: int, remark: str) -> broker_pb2.SendMessageResponse:
    return broker_pb2.SendMessageResponse(code=code, remark=remark)
