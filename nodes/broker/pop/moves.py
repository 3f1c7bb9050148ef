"""Copies of popped messages into the group's pop retry topic or its dead-letter topic.

The pop retry topic is RocketMQ 5's (v1 name) `%RETRY%<group>_<topic>`: one per group and
topic, so a pop of topic A never meets a retry of topic B, and a 4.x push consumer of the same
group (which subscribes `%RETRY%<group>`) never takes a pop's retries. The name is ambiguous, as
RocketMQ's v1 is (group `g` with topic `X_T` and group `g_X` with topic `T` share
`%RETRY%g_X_T`; so does a 4.x group `g_X_T`): every copy therefore carries its group
(POP_RETRY_GROUP) and topic (RETRY_TOPIC), and a pop takes from a retry queue only its own copies
(each group has its own pop offset there, so skipping another's copies takes nothing from it). The dead-letter topic is
the group's usual `%DLQ%<group>`, created like a send-back creates it (send_back.py).
"""

from __future__ import annotations

import logging

from nodes.broker.send_back import create_topic_in_send_back, dlq_topic
from nodes.broker.topics import TopicConfigManager
from nodes.common import constants as c
from nodes.common.names import topic_problem
from nodes.store.commitlog import AppendResult
from nodes.store.message_store import MessageStore, PutStatus
from nodes.store.record import MessageToStore, Record

log = logging.getLogger(__name__)


class MoveFailed(Exception):
    """The copy was not stored (a full disk, an unwritable topic); the entry stays in flight."""


def pop_retry_topic(group: str, topic: str) -> str:
    return f"{c.RETRY_GROUP_TOPIC_PREFIX}{group}{c.POP_RETRY_TOPIC_SEPARATOR}{topic}"


def retry_topic_problem(group: str, topic: str) -> str | None:
    """Why the pop retry topic of (group, topic) cannot exist (its name is too long), or None."""
    return topic_problem(pop_retry_topic(group, topic))


def _copy(record: Record, topic: str, queue_id: int, reconsume_times: int, defaults: dict[str, str],
          overrides: dict[str, str]) -> MessageToStore:
    properties = {k: v for k, v in record.properties.items() if k != c.PROPERTY_DELAY}
    for name, value in defaults.items():
        properties.setdefault(name, value)
    properties.update(overrides)
    properties.setdefault(c.PROPERTY_ORIGIN_MESSAGE_ID, record.msg_id)
    return MessageToStore(topic=topic, queue_id=queue_id, body=record.body, flag=record.flag, properties=properties,
                          born_timestamp_ms=record.born_timestamp_ms, born_host=record.born_host,
                          store_host=record.store_host, reconsume_times=reconsume_times, sys_flag=record.sys_flag)


def _put(store: MessageStore, msg: MessageToStore) -> AppendResult:
    result = store.put_messages([msg])
    if result.status is not PutStatus.PUT_OK:
        raise MoveFailed(f"storing the copy for {msg.topic} failed: {result.remark or result.status.name}")
    return result.appended[0]


def to_retry(store: MessageStore, topics: TopicConfigManager, record: Record, *, group: str, topic: str,
             first_pop_wall_ms: int, now_ms: int) -> AppendResult:
    """The revived copy: reconsume times + 1, every property kept (the message id too), FIRST_POP_TIME
    set on the first revive, visible at once (the invisible time was the wait)."""
    retry = pop_retry_topic(group, topic)
    config = create_topic_in_send_back(topics, retry, c.POP_RETRY_QUEUE_NUMS, c.PERM_DEFAULT, now_ms)
    if not config.writable:
        raise MoveFailed(f"the pop retry topic {retry} is not writable; give it write permission")
    return _put(store, _copy(record, retry, 0, record.reconsume_times + 1,
                             {c.PROPERTY_POP_FIRST_POP_TIME: str(first_pop_wall_ms)},
                             {c.PROPERTY_RETRY_TOPIC: topic, c.PROPERTY_POP_RETRY_GROUP: group}))


def is_own_copy(record: Record, group: str, topic: str) -> bool:
    """Whether a record of a pop retry queue was revived there for this group and topic."""
    props = record.properties
    return props.get(c.PROPERTY_POP_RETRY_GROUP) == group and props.get(c.PROPERTY_RETRY_TOPIC) == topic


def to_dlq(store: MessageStore, topics: TopicConfigManager, record: Record, *, group: str, topic: str,
           now_ms: int) -> AppendResult:
    dead = dlq_topic(group)
    config = create_topic_in_send_back(topics, dead, c.DLQ_NUMS_PER_GROUP, c.PERM_DEFAULT, now_ms)
    if not config.writable:
        raise MoveFailed(f"the dead-letter topic {dead} is not writable; give it write permission")
    return _put(store, _copy(record, dead, 0, record.reconsume_times, {c.PROPERTY_RETRY_TOPIC: topic},
                             {c.PROPERTY_DLQ_ORIGIN_TOPIC: topic, c.PROPERTY_DLQ_ORIGIN_MESSAGE_ID: record.msg_id}))
