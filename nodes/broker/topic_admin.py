"""Topic admin requests (RocketMQ AdminBrokerProcessor#updateAndCreateTopic).

Owns: the checks on a topic an operator creates, storing it, and registering the new table
with the name servers before answering. Does not own the topic table (topics.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from nodes.broker.topics import TopicConfigManager
from nodes.common import constants as c
from nodes.common.clock import Clock
from nodes.common.codes import ResponseCode
from nodes.common.errors import InvalidMessageError
from nodes.common.types import TopicConfig, validate_topic

# The most read or write queues an operator may give a topic.
QUEUE_COUNT_MAX = c.QUEUE_NUMS_MAX


@dataclass(frozen=True, slots=True)
class CreateTopicRequest:
    config: TopicConfig


@dataclass(frozen=True, slots=True)
class CreateTopicResponse:
    code: ResponseCode
    remark: str = ""


class TopicAdminHandler:
    def __init__(self, topics: TopicConfigManager, clock: Clock, on_topics_changed: Callable[[], Awaitable[None]],
                 queue_count_max: int = QUEUE_COUNT_MAX) -> None:
        self._topics = topics
        self._clock = clock
        self._on_topics_changed = on_topics_changed
        self._queue_count_max = queue_count_max

    async def create_topic(self, req: CreateTopicRequest) -> CreateTopicResponse:
        cfg = req.config
        try:
            validate_topic(cfg.topic)
        except InvalidMessageError as exc:
            return CreateTopicResponse(ResponseCode.INVALID_ARGUMENT, str(exc))
        if cfg.topic == c.AUTO_CREATE_TOPIC_KEY:
            return CreateTopicResponse(ResponseCode.INVALID_ARGUMENT, f"{cfg.topic} is reserved for auto-creation")
        if not (0 < cfg.read_queue_nums <= self._queue_count_max and 0 < cfg.write_queue_nums <= self._queue_count_max):
            return CreateTopicResponse(ResponseCode.INVALID_ARGUMENT,
                                       f"queue counts must be in 1..{self._queue_count_max}")
        perm = cfg.perm or c.PERM_DEFAULT
        self._topics.put(TopicConfig(cfg.topic, cfg.read_queue_nums, cfg.write_queue_nums, perm,
                                     cfg.topic_sys_flag, cfg.order), self._clock.wall_ms())
        await self._on_topics_changed()
        return CreateTopicResponse(ResponseCode.SUCCESS)
