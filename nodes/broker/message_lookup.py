"""Finding one message (RocketMQ's QueryMessageProcessor and VIEW_MESSAGE_BY_ID, and mqadmin's
queryMsgByKey / queryMsgById / queryMsgByOffset).

Owns: the three lookups and what their answer holds: by key (the store's message index, each
record checked), by message id (an offset message id names the store host and phys offset; a
client id, the UNIQ_KEY, goes through the index) and by (topic, queue id, queue offset) (the
consume queue's unit); for each message found, every consumer group's committed offset on its
queue and whether it is past the message. Nothing here changes state. A slave answers from its
own store (its index is built from its replicated commitlog) and its copied offsets.

A bad name is INVALID_ARGUMENT, an unknown topic TOPIC_NOT_EXIST, nothing found
QUERY_NOT_FOUND; each remark says what to do next.
"""

from __future__ import annotations

import logging
import string
from dataclasses import dataclass

from nodes.broker import validation
from nodes.broker.offsets import ConsumerOffsetTable
from nodes.broker.topics import TopicConfigManager
from nodes.common import constants as c
from nodes.common.codes import ResponseCode
from nodes.common.config import BrokerConfig
from nodes.common.errors import StoreError
from nodes.store.consume_queue import is_hole
from nodes.store.index_service import KEY_KIND, UNIQ_KIND
from nodes.store.message_store import MessageStore
from nodes.store.record import Record, parse_offset_msg_id

log = logging.getLogger(__name__)

NO_END_MS = c.NO_END_MS


# --- requests and answers --------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class QueryMessageRequest:
    """Messages of `topic` with `key` among their KEYS (or, `unique_key`, as their client id)."""

    topic: str
    key: str
    max_count: int = c.INDEX_QUERY_MAX_DEFAULT
    begin_timestamp_ms: int = 0
    end_timestamp_ms: int = 0  # 0: no upper bound
    unique_key: bool = False


@dataclass(frozen=True, slots=True)
class ViewMessageRequest:
    """One message by id: an offset message id (store host + phys offset) or a client id
    (UNIQ_KEY, which needs the topic); or, with `phys_offset` >= 0, the record there."""

    msg_id: str = ""
    topic: str = ""
    phys_offset: int = -1


@dataclass(frozen=True, slots=True)
class QueueMessageRequest:
    topic: str
    queue_id: int
    queue_offset: int


@dataclass(frozen=True, slots=True)
class GroupProgress:
    group: str
    consumer_offset: int  # the group's committed queue offset on the message's queue
    consumed: bool  # the committed offset is past the message


@dataclass(frozen=True, slots=True)
class FoundMessage:
    record: Record
    raw: bytes  # the record's bytes as stored (RocketMQ's layout), for remoting answers
    progress: tuple[GroupProgress, ...] = ()


@dataclass(frozen=True, slots=True)
class MessageLookupResponse:
    code: ResponseCode
    remark: str = ""
    broker_name: str = ""
    broker_id: int = 0
    messages: tuple[FoundMessage, ...] = ()
    # the index's newest record (RocketMQ's indexLastUpdateTimestamp / indexLastUpdatePhyoffset)
    index_last_update_timestamp_ms: int = 0
    index_last_update_phys_offset: int = 0


def looks_like_offset_msg_id(msg_id: str) -> bool:
    return len(msg_id) == 32 and all(ch in string.hexdigits for ch in msg_id)


# --- the handler -------------------------------------------------------------------------------

class MessageLookupHandler:
    def __init__(self, *, config: BrokerConfig, store: MessageStore, topics: TopicConfigManager,
                 offsets: ConsumerOffsetTable) -> None:
        self._config = config
        self._store = store
        self._topics = topics
        self._offsets = offsets

    def query_message(self, req: QueryMessageRequest) -> MessageLookupResponse:
        if refusal := self._topic_refusal(req.topic):
            return refusal
        if not req.key:
            return self._answer(ResponseCode.INVALID_ARGUMENT, "no key to look up: give the message key (or the "
                                                               "client message id with the unique-key flag)")
        max_count = min(max(1, req.max_count), c.INDEX_QUERY_MAX) if req.max_count > 0 else c.INDEX_QUERY_MAX_DEFAULT
        end_ms = req.end_timestamp_ms if req.end_timestamp_ms > 0 else NO_END_MS
        records = self._store.lookup_by_key(req.topic, req.key, UNIQ_KIND if req.unique_key else KEY_KIND,
                                            max_count, max(0, req.begin_timestamp_ms), end_ms)
        if not records:
            what = "client message id" if req.unique_key else "key"
            return self._answer(ResponseCode.QUERY_NOT_FOUND, (
                f"no message of topic {req.topic!r} with {what} {req.key!r} on {self._config.broker_name} "
                f"(broker id {self._config.broker_id}) in the time range: check the {what} and the range, "
                "and whether the messages were sent to this broker group (`mqlab admin topic status`)"))
        return self._found(records)

    def view_message(self, req: ViewMessageRequest) -> MessageLookupResponse:
        if req.phys_offset >= 0:
            record = self._store.index.verified_record(req.phys_offset)
            if record is None or (req.topic and record.topic != req.topic):
                return self._answer(ResponseCode.QUERY_NOT_FOUND, self._not_at(req.phys_offset))
            return self._found([record])
        if req.topic and (refusal := self._topic_refusal(req.topic)):
            return refusal
        msg_id = req.msg_id.strip()
        if not msg_id:
            return self._answer(ResponseCode.INVALID_ARGUMENT, "no message id given: pass the offset message id "
                                                               "or the client message id (msg id) of a send")
        records: dict[int, Record] = {}
        if looks_like_offset_msg_id(msg_id):
            record = self._by_offset_msg_id(msg_id)
            if record is not None and (not req.topic or record.topic == req.topic):
                records[record.phys_offset] = record
        if req.topic:
            for record in self._store.lookup_by_key(req.topic, msg_id, UNIQ_KIND, c.INDEX_QUERY_MAX_DEFAULT):
                records.setdefault(record.phys_offset, record)
        if not records:
            hint = "" if req.topic else " (a client message id is found only with its topic: pass --topic)"
            return self._answer(ResponseCode.QUERY_NOT_FOUND, (
                f"no message with id {msg_id!r} on {self._config.broker_name} (broker id {self._config.broker_id})"
                f"{hint}: check the id, or look the message up by key or queue offset"))
        return self._found(sorted(records.values(), key=lambda r: r.phys_offset, reverse=True))

    def view_queue_message(self, req: QueueMessageRequest) -> MessageLookupResponse:
        if refusal := self._topic_refusal(req.topic):
            return refusal
        if req.queue_id < 0 or req.queue_offset < 0:
            return self._answer(ResponseCode.INVALID_ARGUMENT, (
                f"queue id {req.queue_id} and queue offset {req.queue_offset} must not be negative"))
        min_offset = self._store.min_queue_offset(req.topic, req.queue_id)
        max_offset = self._store.max_queue_offset(req.topic, req.queue_id)
        where = (f"queue {req.queue_id} of {req.topic!r} on {self._config.broker_name} holds queue offsets "
                 f"{min_offset}..{max_offset - 1}" if max_offset > min_offset else
                 f"queue {req.queue_id} of {req.topic!r} on {self._config.broker_name} holds no message")
        try:
            unit = self._store.queue_unit(req.topic, req.queue_id, req.queue_offset)
        except StoreError as exc:
            log.warning("queue unit %s/%d@%d unreadable: %s", req.topic, req.queue_id, req.queue_offset, exc)
            unit = None
        if unit is None or req.queue_offset < min_offset or is_hole(unit[0], unit[1]):
            return self._answer(ResponseCode.QUERY_NOT_FOUND, (
                f"no message at queue offset {req.queue_offset}: {where} (`mqlab admin topic status`)"))
        record = self._store.index.verified_record(unit[0])
        if (record is None or record.topic != req.topic or record.queue_id != req.queue_id
                or record.queue_offset != req.queue_offset):
            return self._answer(ResponseCode.QUERY_NOT_FOUND, (
                f"the message at queue offset {req.queue_offset} is damaged or was removed: {where}"))
        return self._found([record])

    # --- shared --------------------------------------------------------------------------------

    def _by_offset_msg_id(self, msg_id: str) -> Record | None:
        """The record an offset message id names, when this store holds it as stored there (a
        slave holds its master's records at the same phys offsets, with the master's store host)."""
        try:
            host, port, phys_offset = parse_offset_msg_id(msg_id)
        except ValueError:
            return None
        record = self._store.index.verified_record(phys_offset)
        if record is None or record.store_host != (host, port):
            return None
        return record

    def _found(self, records: list[Record]) -> MessageLookupResponse:
        index = self._store.index
        messages = tuple(FoundMessage(r, self._store.read_commitlog(r.phys_offset, r.total_size), self._progress(r))
                         for r in records)
        return MessageLookupResponse(ResponseCode.SUCCESS, "", self._config.broker_name, self._config.broker_id,
                                     messages, index.last_update_timestamp_ms, index.last_update_phys_offset)

    def _progress(self, record: Record) -> tuple[GroupProgress, ...]:
        """Every group with an offset on the record's queue here, and whether it is past the record."""
        progress = []
        for (topic, group), queues in sorted(self._offsets.offsets.items()):
            if topic != record.topic or record.queue_id not in queues:
                continue
            offset = queues[record.queue_id]
            progress.append(GroupProgress(group, offset, offset > record.queue_offset))
        return tuple(progress)

    def _topic_refusal(self, topic: str) -> MessageLookupResponse | None:
        if refusal := validation.names_refusal(topic=topic):
            return self._answer(*refusal)
        if self._topics.get(topic) is None:
            return self._answer(ResponseCode.TOPIC_NOT_EXIST, (
                f"topic {topic!r} does not exist on {self._config.broker_name}; list the topics with "
                "`mqlab admin topic list`"))
        return None

    def _not_at(self, phys_offset: int) -> str:
        return (f"no message at phys offset {phys_offset} on {self._config.broker_name}: the commitlog there holds "
                f"{self._store.min_phys_offset}..{self._store.max_phys_offset}; check the message id")

    def _answer(self, code: ResponseCode, remark: str) -> MessageLookupResponse:
        return MessageLookupResponse(code, remark, self._config.broker_name, self._config.broker_id)
