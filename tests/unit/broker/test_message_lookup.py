"""The message lookups called with plain values, and their remoting codes 12 and 33 as frames."""

from __future__ import annotations

import pytest

from nodes.broker.message_lookup import (
    MessageLookupHandler,
    QueryMessageRequest,
    QueueMessageRequest,
    ViewMessageRequest,
)
from nodes.broker.offsets import ConsumerOffsetTable
from nodes.broker.request_table import RequestKind, RequestTable
from nodes.broker.transport.remoting_lookup import UNIQUE_KEY_QUERY, RemotingLookup
from nodes.common import constants as c
from nodes.common.codes import ResponseCode
from nodes.common.types import TopicConfig
from nodes.remoting.command import RemotingCommand, RequestCode
from nodes.store.record import iter_records, offset_msg_id

from .conftest import Broker

STORE_HOST = ("10.0.0.5", 10911)


@pytest.fixture
def lookup(broker: Broker):
    broker.topics.put(TopicConfig("T", 4, 4, c.PERM_DEFAULT), broker.clock.wall_ms())
    offsets = ConsumerOffsetTable(broker.store.metadata)
    handler = MessageLookupHandler(config=broker.config, store=broker.store, topics=broker.topics, offsets=offsets)
    return broker, handler, offsets


def put(broker: Broker, keys: str, uniq: str, queue_id: int = 0, body: bytes = b"payload") -> int:
    return broker.put("T", queue_id, body, properties={"KEYS": keys, "UNIQ_KEY": uniq, "color": "red"},
                      store_host=STORE_HOST)


def test_by_key_with_each_group_progress_on_the_queue(lookup):
    broker, handler, offsets = lookup
    first = put(broker, "order-1", "AAAA")
    put(broker, "order-2", "BBBB")
    offsets.commit("past", "T", 0, 1)  # past queue offset 0
    offsets.commit("behind", "T", 0, 0)
    offsets.commit("other-queue", "T", 1, 5)
    answer = handler.query_message(QueryMessageRequest("T", "order-1"))
    assert answer.code is ResponseCode.SUCCESS
    [found] = answer.messages
    assert found.record.phys_offset == first and found.record.properties["color"] == "red"
    assert [(p.group, p.consumer_offset, p.consumed) for p in found.progress] == [("behind", 0, False),
                                                                                   ("past", 1, True)]
    assert [r.phys_offset for r in iter_records(found.raw)] == [first]


def test_by_either_id_and_by_queue_offset(lookup):
    broker, handler, _ = lookup
    put(broker, "a", "AAAA")
    second = put(broker, "b", "BBBB", queue_id=2)
    by_offset_id = handler.view_message(ViewMessageRequest(offset_msg_id(*STORE_HOST, second)))
    assert [m.record.phys_offset for m in by_offset_id.messages] == [second]
    by_uniq = handler.view_message(ViewMessageRequest("BBBB", topic="T"))
    assert [m.record.phys_offset for m in by_uniq.messages] == [second]
    by_queue = handler.view_queue_message(QueueMessageRequest("T", 2, 0))
    assert [m.record.phys_offset for m in by_queue.messages] == [second]


def test_an_offset_id_of_another_store_host_finds_nothing(lookup):
    broker, handler, _ = lookup
    phys_offset = put(broker, "a", "AAAA")
    answer = handler.view_message(ViewMessageRequest(offset_msg_id("10.0.0.6", 10911, phys_offset)))
    assert answer.code is ResponseCode.QUERY_NOT_FOUND
    assert "--topic" in answer.remark  # a client id needs its topic


def test_misses_say_what_to_do_next(lookup):
    broker, handler, _ = lookup
    put(broker, "a", "AAAA")
    missing = handler.query_message(QueryMessageRequest("T", "nope"))
    assert missing.code is ResponseCode.QUERY_NOT_FOUND and "topic status" in missing.remark
    unknown = handler.query_message(QueryMessageRequest("Nope", "a"))
    assert unknown.code is ResponseCode.TOPIC_NOT_EXIST and "topic list" in unknown.remark
    past_end = handler.view_queue_message(QueueMessageRequest("T", 0, 7))
    assert past_end.code is ResponseCode.QUERY_NOT_FOUND and "0..0" in past_end.remark
    bad = handler.view_queue_message(QueueMessageRequest("T", -1, 0))
    assert bad.code is ResponseCode.INVALID_ARGUMENT


def _remoting(handler: MessageLookupHandler) -> RemotingLookup:
    table = RequestTable()
    table.register(RequestKind.QUERY_MESSAGE, handler.query_message)
    table.register(RequestKind.VIEW_MESSAGE, handler.view_message)
    return RemotingLookup(table)


def test_remoting_query_message_answers_the_records_back_to_back(lookup):
    broker, handler, _ = lookup
    first = put(broker, "shared", "AAAA")
    second = put(broker, "shared", "BBBB")
    remoting = _remoting(handler)
    cmd = RemotingCommand(code=RequestCode.QUERY_MESSAGE, opaque=7, ext={
        "topic": "T", "key": "shared", "maxNum": "32", "beginTimestamp": "0", "endTimestamp": str(2**62)})
    answer = remoting.query_message(cmd, None)
    assert answer.code == ResponseCode.SUCCESS and answer.opaque == 7
    assert [r.phys_offset for r in iter_records(answer.body)] == [second, first]
    assert answer.ext["indexLastUpdatePhyoffset"] == str(second)
    uniq = remoting.query_message(RemotingCommand(code=RequestCode.QUERY_MESSAGE, ext={
        "topic": "T", "key": "AAAA", "maxNum": "1", "beginTimestamp": "0", "endTimestamp": "0",
        UNIQUE_KEY_QUERY: "true"}), None)
    assert [r.properties["UNIQ_KEY"] for r in iter_records(uniq.body)] == ["AAAA"]
    missing = remoting.query_message(RemotingCommand(code=RequestCode.QUERY_MESSAGE, ext={
        "topic": "T", "key": "nope", "maxNum": "1", "beginTimestamp": "0", "endTimestamp": "0"}), None)
    assert missing.code == 22 and missing.body == b""  # RocketMQ's QUERY_NOT_FOUND


def test_remoting_view_message_by_phys_offset(lookup):
    broker, handler, _ = lookup
    put(broker, "a", "AAAA")
    second = put(broker, "b", "BBBB")
    remoting = _remoting(handler)
    answer = remoting.view_message(RemotingCommand(code=RequestCode.VIEW_MESSAGE_BY_ID, ext={"offset": str(second)}),
                                   None)
    assert answer.code == ResponseCode.SUCCESS
    [record] = iter_records(answer.body)
    assert record.phys_offset == second and record.keys == "b"
    wrong = remoting.view_message(RemotingCommand(code=RequestCode.VIEW_MESSAGE_BY_ID,
                                                  ext={"offset": str(second + 1)}), None)
    assert wrong.code == ResponseCode.SYSTEM_ERROR and "can not find message by the offset" in wrong.remark
