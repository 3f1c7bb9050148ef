"""Topic admin requests (RocketMQ AdminBrokerProcessor#updateAndCreateTopic and #deleteTopic).

Owns: the checks on a topic an operator creates, updates or deletes (a slave refuses them all:
its table is the master's copy), storing or dropping its config,
and registering the new table with the name servers before answering (a name server drops
the routes of topics a master no longer lists). Does not own the topic table (topics.py).

A deleted topic's consume queues and messages stay in the store until retention removes their
segments (the store cannot drop one topic's queues cleanly while dispatch and recovery may
index into them); its committed offsets stay too, so a topic created again under the same
name continues where its consumers were. The answer's remark says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from nodes.broker.topics import TopicConfigManager
from nodes.common import constants as c
from nodes.common.clock import Clock
from nodes.common.codes import ResponseCode
from nodes.common.errors import InvalidMessageError
from nodes.common.names import is_send_forbidden
from nodes.common.types import TopicConfig, validate_topic

# The most read or write queues an operator may give a topic.
QUEUE_COUNT_MAX = c.QUEUE_NUMS_MAX


PERM_KEEP = c.TOPIC_PERM_KEEP
# The permission bits an operator may set (read, write, inherit, priority)
PERM_ALL = c.PERM_PRIORITY | c.PERM_READ | c.PERM_WRITE | c.PERM_INHERIT


@dataclass(frozen=True, slots=True)
class CreateTopicRequest:
    """UPDATE_AND_CREATE_TOPIC. With `update` the topic must exist, and queue counts 0, perm
    PERM_KEEP and an empty message type keep its stored values (order and sys flag are kept)."""

    config: TopicConfig
    update: bool = False


@dataclass(frozen=True, slots=True)
class CreateTopicResponse:
    code: ResponseCode
    remark: str = ""


@dataclass(frozen=True, slots=True)
class DeleteTopicRequest:
    topic: str


@dataclass(frozen=True, slots=True)
class DeleteTopicResponse:
    code: ResponseCode
    remark: str = ""


DELETE_KEEPS_DATA_REMARK = ("topic config deleted and the name servers told; its messages, consume queues and "
                            "committed offsets stay in the store until retention removes them")


def delete_refusal(topic: str) -> str | None:
    """Why an operator may not delete `topic`: the broker's own topics (system topics, the
    auto-create template) and a group's retry and dead-letter topics, which the broker
    recreates on the group's next heartbeat or send-back."""
    if topic == c.AUTO_CREATE_TOPIC_KEY:
        return f"{topic} is the auto-create template; turn auto_create_topic_enable off instead"
    if is_send_forbidden(topic):
        return f"{topic} is a system topic the broker writes; it cannot be deleted"
    if topic.startswith((c.RETRY_GROUP_TOPIC_PREFIX, c.DLQ_GROUP_TOPIC_PREFIX)):
        return f"{topic} is a consumer group's retry or dead-letter topic; it cannot be deleted"
    return None


class TopicAdminHandler:
    def __init__(self, topics: TopicConfigManager, clock: Clock, on_topics_changed: Callable[[], Awaitable[None]],
                 queue_count_max: int = QUEUE_COUNT_MAX, *, is_master: bool = True, broker_name: str = "",
                 on_topic_deleted: Callable[[str], None] | None = None,
                 master_addr: Callable[[], str] | None = None) -> None:
        self._topics = topics
        self._clock = clock
        self._on_topics_changed = on_topics_changed
        self._queue_count_max = queue_count_max
        self._is_master = is_master
        self._broker_name = broker_name
        self._on_topic_deleted = on_topic_deleted
        self._master_addr = master_addr

    def _slave_refusal(self, what: str) -> str:
        master = self._master_addr() if self._master_addr is not None else ""
        return (f"{self._broker_name or 'this broker'} is a slave: {what} the topic on its master "
                f"({master or 'not known yet: see `mqlab admin cluster`'}); a slave takes its topic table from the "
                "master")

    async def create_topic(self, req: CreateTopicRequest) -> CreateTopicResponse:
        """Create or replace a topic's config, or with `req.update` change an existing one. Only a
        client's or tool's request comes here: a slave's sync from its master writes its table
        directly (slave_sync), so a slave refuses every request as it refuses a delete."""
        cfg = req.config
        try:
            validate_topic(cfg.topic)
        except InvalidMessageError as exc:
            return CreateTopicResponse(ResponseCode.INVALID_ARGUMENT, str(exc))
        if cfg.topic == c.AUTO_CREATE_TOPIC_KEY:
            return CreateTopicResponse(ResponseCode.INVALID_ARGUMENT, f"{cfg.topic} is reserved for auto-creation")
        if not self._is_master:
            return CreateTopicResponse(ResponseCode.NO_PERMISSION,
                                       self._slave_refusal("update" if req.update else "create"))
        if cfg.message_type and cfg.message_type not in c.TOPIC_MESSAGE_TYPES:
            return CreateTopicResponse(ResponseCode.INVALID_ARGUMENT,
                                       f"message type {cfg.message_type!r} is not one of "
                                       f"{', '.join(c.TOPIC_MESSAGE_TYPES)}")
        stored = self._topics.get(cfg.topic)
        if req.update:
            if stored is None:
                return CreateTopicResponse(ResponseCode.TOPIC_NOT_EXIST,
                                           f"topic {cfg.topic!r} does not exist on {self._broker_name or 'this broker'}: "
                                           f"create it (`mqlab admin topic create --topic {cfg.topic}`)")
            cfg = dataclasses.replace(
                stored, read_queue_nums=cfg.read_queue_nums or stored.read_queue_nums,
                write_queue_nums=cfg.write_queue_nums or stored.write_queue_nums,
                perm=stored.perm if cfg.perm == PERM_KEEP else cfg.perm,
                message_type=cfg.message_type or stored.message_type)
        else:
            # an unnamed type keeps the stored one: a RocketMQ 4.x tool's updateTopic knows none
            message_type = cfg.message_type or (stored.message_type if stored is not None else "")
            cfg = dataclasses.replace(cfg, perm=cfg.perm or c.PERM_DEFAULT, message_type=message_type,
                                      order=cfg.order or message_type == "FIFO")
        if not (0 < cfg.read_queue_nums <= self._queue_count_max and 0 < cfg.write_queue_nums <= self._queue_count_max):
            return CreateTopicResponse(ResponseCode.INVALID_ARGUMENT,
                                       f"queue counts must be in 1..{self._queue_count_max}")
        if not 0 <= cfg.perm <= PERM_ALL:
            return CreateTopicResponse(ResponseCode.INVALID_ARGUMENT,
                                       f"perm {cfg.perm} is not a set of RocketMQ's permission bits (0..{PERM_ALL})")
        self._topics.put(cfg, self._clock.wall_ms())
        await self._on_topics_changed()
        return CreateTopicResponse(ResponseCode.SUCCESS)

    async def delete_topic(self, req: DeleteTopicRequest) -> DeleteTopicResponse:
        try:
            validate_topic(req.topic)
        except InvalidMessageError as exc:
            return DeleteTopicResponse(ResponseCode.INVALID_ARGUMENT, str(exc))
        if not self._is_master:
            return DeleteTopicResponse(ResponseCode.NO_PERMISSION, self._slave_refusal("delete"))
        if problem := delete_refusal(req.topic):
            return DeleteTopicResponse(ResponseCode.INVALID_ARGUMENT, problem)
        if self._topics.get(req.topic) is None:
            return DeleteTopicResponse(ResponseCode.TOPIC_NOT_EXIST,
                                       f"topic {req.topic!r} does not exist on {self._broker_name or 'this broker'}")
        self._topics.remove(req.topic, self._clock.wall_ms())
        if self._on_topic_deleted is not None:
            self._on_topic_deleted(req.topic)
        await self._on_topics_changed()
        return DeleteTopicResponse(ResponseCode.SUCCESS, DELETE_KEEPS_DATA_REMARK)
