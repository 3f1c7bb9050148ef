"""Resetting a consumer group's offsets by time (RocketMQ Broker2Client#resetOffset, asked by
INVOKE_BROKER_TO_RESET_OFFSET: mqadmin resetOffsetByTime, `mqlab admin reset-offset`).

Owns: per queue of the topic on this master, finding the first queue offset stored at or after
the time, storing it as the group's offset (an `offset-commit` event with source `reset`), and
handing one reset notice to every online client of the group (client_manage puts it on each
client's notification channel; the transports carry it). Does not own the offset table, the
store's search, nor the channels.

Beyond RocketMQ 4.x, whose broker only tells the clients and whose mqadmin writes the offsets
itself when the group is offline: here the broker stores them first, so an offline group is
reset as well, and a client that misses the notice (its channel broke) still starts from the
reset offsets whenever it next takes a queue over. The reset is forced (RocketMQ's isForce
true): a time after the group's position moves it forward, skipping what lies between.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from nodes.broker import validation
from nodes.broker.client_manage import ClientManageHandler, ResetNotice
from nodes.broker.consumers import ConsumerRegistry
from nodes.broker.offsets import SOURCE_RESET, ConsumerOffsetTable
from nodes.broker.topics import TopicConfigManager
from nodes.common.codes import ResponseCode
from nodes.common.config import BrokerConfig
from nodes.store.message_store import MessageStore

log = logging.getLogger(__name__)

# RocketMQ's timestamp for "each queue's max offset" (skip everything stored)
RESET_TO_MAX = -1


@dataclass(frozen=True, slots=True)
class ResetOffsetRequest:
    consumer_group: str
    topic: str
    timestamp_ms: int  # RESET_TO_MAX: each queue's max offset


@dataclass(frozen=True, slots=True)
class QueueReset:
    queue_id: int
    old_offset: int  # -1: the group had no offset for the queue
    new_offset: int


@dataclass(frozen=True, slots=True)
class ResetOffsetResponse:
    code: ResponseCode
    remark: str = ""
    broker_name: str = ""
    broker_id: int = 0
    queues: tuple[QueueReset, ...] = ()
    clients_told: tuple[str, ...] = ()


class OffsetResetHandler:
    def __init__(self, *, config: BrokerConfig, store: MessageStore, topics: TopicConfigManager,
                 offsets: ConsumerOffsetTable, consumers: ConsumerRegistry, client_manage: ClientManageHandler,
                 master_addr: Callable[[], str]) -> None:
        self._consumers = consumers
        self._config = config
        self._store = store
        self._topics = topics
        self._offsets = offsets
        self._client_manage = client_manage
        self._master_addr = master_addr

    def reset(self, req: ResetOffsetRequest) -> ResetOffsetResponse:
        config = self._config
        if refusal := validation.names_refusal(topic=req.topic, group=req.consumer_group):
            return ResetOffsetResponse(*refusal)
        if req.timestamp_ms < RESET_TO_MAX:
            return ResetOffsetResponse(ResponseCode.INVALID_ARGUMENT,
                                       f"timestamp {req.timestamp_ms} is not epoch milliseconds (or -1 for the "
                                       "max offsets)")
        if not config.is_master:
            master = self._master_addr()
            return ResetOffsetResponse(ResponseCode.NO_PERMISSION,
                                       f"{config.broker_name} is a slave: reset offsets on its master "
                                       f"({master or 'not known yet'}); a slave takes its offsets from the master")
        topic = self._topics.get(req.topic)
        if topic is None:
            return ResetOffsetResponse(ResponseCode.TOPIC_NOT_EXIST,
                                       f"topic {req.topic!r} does not exist on {config.broker_name}: "
                                       "`mqlab admin topic list` shows the topics there are")
        group, name = req.consumer_group, req.topic
        known = self._consumers.client_ids(group) or any(
            self._offsets.query(group, name, queue_id) >= 0 for queue_id in range(topic.read_queue_nums))
        if not known:
            return ResetOffsetResponse(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                       f"group {group!r} has no offset of {name} and no client on "
                                       f"{config.broker_name}: is the name right (`mqlab admin group list`)?")
        queues = []
        for queue_id in range(topic.read_queue_nums):
            old = self._offsets.query(group, name, queue_id)
            if req.timestamp_ms == RESET_TO_MAX:
                new = self._store.max_queue_offset(name, queue_id)
            else:
                new = self._store.search_queue_offset(name, queue_id, req.timestamp_ms, at_or_after=True)
            self._offsets.commit(group, name, queue_id, new, source=SOURCE_RESET)
            queues.append(QueueReset(queue_id, old, new))
        notice = ResetNotice(group, name, config.broker_name, req.timestamp_ms,
                             tuple((q.queue_id, q.new_offset) for q in queues))
        told = self._client_manage.notify_reset(notice)
        log.info("offsets of %s on %s reset to time %d: %s; told %s", group, name, req.timestamp_ms,
                 {q.queue_id: (q.old_offset, q.new_offset) for q in queues}, told or "no client (offline)")
        return ResetOffsetResponse(ResponseCode.SUCCESS, broker_name=config.broker_name, broker_id=config.broker_id,
                                   queues=tuple(queues), clients_told=tuple(told))
