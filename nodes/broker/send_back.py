"""Retry and dead-letter routing on the broker (RocketMQ SendMessageProcessor
#asyncConsumerSendMsgBack and #handleRetryAndDLQ).

Owns: the consumer send-back rules (group check, retry queues, `%RETRY%<group>` and
`%DLQ%<group>` creation, reading the original from this broker's commitlog, the retry
properties, DLQ-or-retry with its delay level) and the producer-side rule that turns a send
to `%RETRY%<group>` past its maximum reconsume times into a DLQ send. Does not own the delay
itself: a retry is stored with a `DELAY` level and the store parks it in the schedule topic.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from nodes.broker import validation
from nodes.broker.topics import SubscriptionGroupConfig, SubscriptionGroupManager, TopicConfigManager
from nodes.common import constants as c
from nodes.common.clock import Clock
from nodes.common.codes import ResponseCode
from nodes.common.config import BrokerConfig
from nodes.common.types import TopicConfig
from nodes.store.message_store import MessageStore, PutStatus
from nodes.store.record import MessageToStore

log = logging.getLogger(__name__)

_QUEUE_PICK_RANGE = 99_999_999  # RocketMQ picks random(0..99999998) % queue count


def retry_topic(group: str) -> str:
    return c.RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return c.DLQ_GROUP_TOPIC_PREFIX + group


def create_topic_in_send_back(topics: TopicConfigManager, topic: str, queue_nums: int, perm: int,
                              now_ms: int) -> TopicConfig:
    """createTopicInSendMessageBackMethod: an existing topic is returned unchanged; otherwise it
    is created (whatever auto_create_topic_enable says)."""
    existing = topics.get(topic)
    if existing is not None:
        return existing
    config = TopicConfig(topic, queue_nums, queue_nums, perm)
    topics.put(config, now_ms)
    log.info("created %s with %d queue(s), perm %d", topic, queue_nums, perm)
    return config


def ensure_retry_topic(topics: TopicConfigManager, group: SubscriptionGroupConfig, now_ms: int
                       ) -> TopicConfig | None:
    """On heartbeat: `%RETRY%<group>` with the group's retry_queue_nums, perm RW (none when 0)."""
    if group.retry_queue_nums <= 0:
        return None
    return create_topic_in_send_back(topics, retry_topic(group.group_name), group.retry_queue_nums,
                                     c.PERM_DEFAULT, now_ms)


def max_reconsume_times_of(group: SubscriptionGroupConfig, requested: int) -> int:
    """The group's retry_max_times, overridden by the client's value. A proto3 request cannot
    tell 0 from unset, so 0 (or less) means "the group's" (RocketMQ would dead-letter at once)."""
    return requested if requested > 0 else group.retry_max_times


# The producer moves these out of a %RETRY% message's properties into its request header
# (DefaultMQProducerImpl#sendKernelImpl); our SendMessageRequest carries reconsume_times only,
# so the broker does the move: it reads them and they are not stored.
RETRY_HEADER_PROPERTIES = (c.PROPERTY_RECONSUME_TIME, c.PROPERTY_MAX_RECONSUME_TIMES)


def _int_property(properties: Mapping[str, str], name: str) -> int | None:
    try:
        return int(properties[name])
    except (KeyError, ValueError):
        return None


def retry_send_header(reconsume_times: int, properties: Mapping[str, str]) -> tuple[int, int]:
    """(reconsume times, max reconsume times; 0 = the group's) of a send to a %RETRY% topic:
    the RECONSUME_TIME / MAX_RECONSUME_TIMES properties when set, else the request field."""
    from_property = _int_property(properties, c.PROPERTY_RECONSUME_TIME)
    max_times = _int_property(properties, c.PROPERTY_MAX_RECONSUME_TIMES)
    return (from_property if from_property is not None else reconsume_times), (max_times or 0)


@dataclass(frozen=True, slots=True)
class RetrySendRoute:
    """Where a producer send to a `%RETRY%` topic goes (handleRetryAndDLQ)."""

    code: ResponseCode
    remark: str = ""
    topic: str = ""
    queue_id: int = 0
    dead_letter: bool = False


def route_retry_send(*, groups: SubscriptionGroupManager, topics: TopicConfigManager, topic: str, queue_id: int,
                     reconsume_times: int, max_reconsume_times: int, now_ms: int,
                     rng: random.Random) -> RetrySendRoute:
    """handleRetryAndDLQ for a send to `topic` (the caller checked it starts with %RETRY%).

    `reconsume_times` and `max_reconsume_times` are the header values (`retry_send_header`);
    a maximum of 0 means the group's retry_max_times.
    """
    group_name = topic[len(c.RETRY_GROUP_TOPIC_PREFIX):]
    group = groups.find(group_name)
    if group is None:
        return RetrySendRoute(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                              f"subscription group {group_name!r} does not exist; create it first")
    max_times = max_reconsume_times_of(group, max_reconsume_times)
    if reconsume_times < max_times:
        return RetrySendRoute(ResponseCode.SUCCESS, topic=topic, queue_id=queue_id)
    dead = dlq_topic(group_name)
    config = create_topic_in_send_back(topics, dead, c.DLQ_NUMS_PER_GROUP, c.PERM_DEFAULT, now_ms)
    if not config.writable:
        return RetrySendRoute(ResponseCode.NO_PERMISSION, f"the dead-letter topic {dead} is not writable")
    log.info("send to %s with reconsume times %d >= %d goes to %s", topic, reconsume_times, max_times, dead)
    return RetrySendRoute(ResponseCode.SUCCESS, topic=dead, queue_id=rng.randrange(_QUEUE_PICK_RANGE) % c.DLQ_NUMS_PER_GROUP,
                          dead_letter=True)


@dataclass(frozen=True, slots=True)
class SendBackRequest:
    """CONSUMER_SEND_MSG_BACK. `delay_level` 0: 3 + reconsume times; below 0: straight to the
    DLQ. `max_reconsume_times` 0: the group's."""

    consumer_group: str
    phys_offset: int
    delay_level: int = 0
    origin_msg_id: str = ""
    origin_topic: str = ""
    max_reconsume_times: int = 0


@dataclass(frozen=True, slots=True)
class SendBackResponse:
    code: ResponseCode
    remark: str = ""


class SendBackProcessor:
    """asyncConsumerSendMsgBack, rule by rule."""

    def __init__(self, config: BrokerConfig, store: MessageStore, topics: TopicConfigManager,
                 groups: SubscriptionGroupManager, clock: Clock, *, rng: random.Random | None = None,
                 on_put: Callable[[], None] | None = None,
                 on_topics_changed: Callable[[], Awaitable[None]] | None = None) -> None:
        self._on_topics_changed = on_topics_changed
        self._config = config
        self._store = store
        self._topics = topics
        self._groups = groups
        self._clock = clock
        self._rng = rng or random.Random()
        self._on_put = on_put

    async def handle(self, req: SendBackRequest) -> SendBackResponse:
        """`process`, then registering a topic it created (a retry or dead-letter topic)."""
        version = self._topics.data_version
        response = self.process(req)
        if self._topics.data_version != version and self._on_topics_changed is not None:
            await self._on_topics_changed()
        return response

    def process(self, req: SendBackRequest) -> SendBackResponse:
        # 1. group and broker checks
        if refusal := validation.names_refusal(group=req.consumer_group):
            return _reply(*refusal)
        group = self._groups.find(req.consumer_group)
        if group is None:
            return _reply(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                          f"subscription group {req.consumer_group!r} does not exist; create it first")
        if not self._config.broker_perm & c.PERM_WRITE:
            return _reply(ResponseCode.NO_PERMISSION, f"broker {self._config.broker_name} is not writable")
        # 2. no retry queues: the message is dropped, and the consumer told it went fine
        if group.retry_queue_nums <= 0:
            log.info("group %s has no retry queues; dropping the message sent back from %d",
                     req.consumer_group, req.phys_offset)
            return _reply(ResponseCode.SUCCESS, "dropped: the group has no retry queues")
        if not self._config.is_master:
            return _reply(ResponseCode.SYSTEM_ERROR, f"{self._config.node_id} is a slave; send back to the master "
                                                   f"of {self._config.broker_name}")
        # 3. the retry topic
        now_ms = self._clock.wall_ms()
        topic = retry_topic(req.consumer_group)
        queue_id = self._rng.randrange(_QUEUE_PICK_RANGE) % group.retry_queue_nums
        retry_config = create_topic_in_send_back(self._topics, topic, group.retry_queue_nums, c.PERM_DEFAULT, now_ms)
        if not retry_config.writable:
            return _reply(ResponseCode.NO_PERMISSION, f"the retry topic {topic} is not writable")
        # 4. the original, from this broker's commitlog (so its stored reconsume times count)
        original = self._store.lookup_message(req.phys_offset) if req.phys_offset >= 0 else None
        if original is None:
            return _reply(ResponseCode.SYSTEM_ERROR,
                          f"no message at commitlog offset {req.phys_offset} on {self._config.node_id}")
        # 5. the first hop remembers where the message came from
        properties = dict(original.properties)
        properties.setdefault(c.PROPERTY_RETRY_TOPIC, original.topic)
        # 6-7. dead letter or retry
        max_times = max_reconsume_times_of(group, req.max_reconsume_times)
        if original.reconsume_times >= max_times or req.delay_level < 0:
            topic = dlq_topic(req.consumer_group)
            queue_id = self._rng.randrange(_QUEUE_PICK_RANGE) % c.DLQ_NUMS_PER_GROUP
            dlq_config = create_topic_in_send_back(self._topics, topic, c.DLQ_NUMS_PER_GROUP, c.PERM_DEFAULT, now_ms)
            if not dlq_config.writable:
                return _reply(ResponseCode.NO_PERMISSION, f"the dead-letter topic {topic} is not writable")
            properties.pop(c.PROPERTY_DELAY, None)
            log.info("message at %d of %s reconsumed %d times (max %d, level %d): to %s", req.phys_offset,
                     original.topic, original.reconsume_times, max_times, req.delay_level, topic)
        else:
            delay_level = req.delay_level or c.RETRY_DELAY_LEVEL_BASE + original.reconsume_times
            properties[c.PROPERTY_DELAY] = str(delay_level)
        # 8. the new message
        if not properties.get(c.PROPERTY_ORIGIN_MESSAGE_ID):
            properties[c.PROPERTY_ORIGIN_MESSAGE_ID] = original.msg_id
        msg = MessageToStore(topic=topic, queue_id=queue_id, body=original.body, flag=original.flag,
                             properties=properties, born_timestamp_ms=original.born_timestamp_ms,
                             born_host=original.born_host, store_host=original.store_host,
                             reconsume_times=original.reconsume_times + 1, sys_flag=original.sys_flag)
        # 9. the store's answer
        result = self._store.put_messages([msg])
        if result.status is not PutStatus.PUT_OK:
            return _reply(ResponseCode.SYSTEM_ERROR, f"storing the message for {topic} failed: "
                                                   f"{result.remark or result.status.name}")
        if self._on_put is not None:
            self._on_put()
        return _reply(ResponseCode.SUCCESS)


def _reply(code: ResponseCode, remark: str = "") -> SendBackResponse:
    return SendBackResponse(code, remark)
