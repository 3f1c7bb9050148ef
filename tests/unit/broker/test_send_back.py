"""Send-back rules (asyncConsumerSendMsgBack) and sends to %RETRY% topics (handleRetryAndDLQ)."""

import dataclasses
import random

import pytest

from nodes.broker.send import SendProcessor, SendRequest
from nodes.broker.send_back import SendBackRequest, retry_send_header, route_retry_send
from nodes.broker.topics import SubscriptionGroupConfig, SubscriptionGroupManager
from nodes.common import constants as c
from nodes.common.codes import ResponseCode
from nodes.common.types import TopicConfig

from .conftest import DELAYS_MS

SCHEDULE = c.SCHEDULE_TOPIC


def back(phys_offset, group="g", delay_level=0, max_reconsume_times=16, origin_msg_id="", origin_topic="T"):
    return SendBackRequest(
        consumer_group=group, phys_offset=phys_offset, delay_level=delay_level, origin_msg_id=origin_msg_id,
        origin_topic=origin_topic, max_reconsume_times=max_reconsume_times)


def test_retry_waits_at_level_three_plus_reconsume_times(broker):
    offset = broker.put("T", 1, b"body", flag=5, properties={"TAGS": "a", "KEYS": "k1"}, reconsume_times=2)
    original = broker.store.lookup_message(offset)
    resp = broker.send_back().process(back(offset))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert broker.topics.get("%RETRY%g") == TopicConfig("%RETRY%g", 1, 1, c.PERM_DEFAULT)
    [waiting] = broker.records(SCHEDULE, 4)  # level 5 = 3 + 2 waits in queue 4
    assert waiting.reconsume_times == 3 and waiting.body == b"body" and waiting.flag == 5
    assert waiting.properties[c.PROPERTY_DELAY] == "5"
    assert waiting.properties[c.PROPERTY_REAL_TOPIC] == "%RETRY%g"
    assert waiting.properties[c.PROPERTY_REAL_QUEUE_ID] == "0"
    assert waiting.properties[c.PROPERTY_RETRY_TOPIC] == "T"
    assert waiting.properties[c.PROPERTY_ORIGIN_MESSAGE_ID] == original.msg_id
    assert waiting.properties["TAGS"] == "a" and waiting.properties["KEYS"] == "k1"
    assert waiting.born_timestamp_ms == original.born_timestamp_ms
    # the tag code of a waiting message is its deliver timestamp
    assert broker.tag_code(SCHEDULE, 4, 0) == waiting.store_timestamp_ms + DELAYS_MS[4]


def test_requested_level_wins_and_first_hop_properties_are_kept(broker):
    offset = broker.put("%RETRY%g", 0, properties={c.PROPERTY_RETRY_TOPIC: "Orig",
                                                   c.PROPERTY_ORIGIN_MESSAGE_ID: "FIRST"}, reconsume_times=1)
    assert broker.send_back().process(back(offset, delay_level=2)).code == ResponseCode.SUCCESS
    [waiting] = broker.records(SCHEDULE, 1)
    assert waiting.properties[c.PROPERTY_RETRY_TOPIC] == "Orig"
    assert waiting.properties[c.PROPERTY_ORIGIN_MESSAGE_ID] == "FIRST"
    assert waiting.reconsume_times == 2


def test_level_above_the_table_is_capped(broker):
    offset = broker.put(reconsume_times=40)
    assert broker.send_back().process(back(offset, max_reconsume_times=100)).code == ResponseCode.SUCCESS
    [waiting] = broker.records(SCHEDULE, 17)
    assert waiting.properties[c.PROPERTY_DELAY] == "18"


def test_max_reconsume_times_reached_goes_to_the_dlq(broker):
    offset = broker.put(reconsume_times=2)
    assert broker.send_back().process(back(offset, max_reconsume_times=2)).code == ResponseCode.SUCCESS
    assert broker.topics.get("%DLQ%g") == TopicConfig("%DLQ%g", 1, 1, c.PERM_DEFAULT)
    [dead] = broker.records("%DLQ%g", 0)
    assert dead.reconsume_times == 3 and c.PROPERTY_DELAY not in dead.properties
    assert dead.properties[c.PROPERTY_RETRY_TOPIC] == "T"
    assert broker.store.max_queue_offset(SCHEDULE, 4) == 0


def test_group_max_applies_when_the_request_names_none(broker):
    broker.groups.put(SubscriptionGroupConfig("g", retry_max_times=1))
    offset = broker.put(reconsume_times=1)
    assert broker.send_back().process(back(offset, max_reconsume_times=0)).code == ResponseCode.SUCCESS
    assert len(broker.records("%DLQ%g")) == 1


def test_negative_delay_level_goes_straight_to_the_dlq(broker):
    offset = broker.put(reconsume_times=0)
    assert broker.send_back().process(back(offset, delay_level=-1)).code == ResponseCode.SUCCESS
    assert [r.reconsume_times for r in broker.records("%DLQ%g")] == [1]


def test_no_retry_queues_answers_success_and_drops_the_message(broker):
    broker.groups.put(SubscriptionGroupConfig("g", retry_queue_nums=0))
    offset = broker.put()
    end = broker.store.max_phys_offset
    resp = broker.send_back().process(back(offset))
    assert resp.code == ResponseCode.SUCCESS and "dropped" in resp.remark
    assert broker.store.max_phys_offset == end and broker.topics.get("%RETRY%g") is None


def test_retry_queue_is_picked_among_the_groups_retry_queues(broker):
    broker.groups.put(SubscriptionGroupConfig("g", retry_queue_nums=3))
    offsets = [broker.put(body=b"m%d" % i) for i in range(12)]
    processor = broker.send_back()
    for offset in offsets:
        assert processor.process(back(offset, delay_level=1)).code == ResponseCode.SUCCESS
    assert broker.topics.get("%RETRY%g").write_queue_nums == 3
    queue_ids = {int(r.properties[c.PROPERTY_REAL_QUEUE_ID]) for r in broker.records(SCHEDULE, 0)}
    assert queue_ids <= {0, 1, 2} and len(queue_ids) > 1


def test_unknown_offset_is_a_system_error(broker):
    broker.put()
    resp = broker.send_back().process(back(12_345))
    assert resp.code == ResponseCode.SYSTEM_ERROR and "12345" in resp.remark


def test_missing_group_and_read_only_broker_are_refused(tmp_path, broker):
    broker.groups = SubscriptionGroupManager(broker.store.metadata, auto_create_enable=False)
    offset = broker.put()
    assert broker.send_back().process(back(offset, group="nope")).code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
    broker.groups.put(SubscriptionGroupConfig("g"))
    read_only = dataclasses.replace(broker.config, broker_perm=c.PERM_READ)
    assert broker.send_back(config=read_only).process(back(offset)).code == ResponseCode.NO_PERMISSION


def test_successful_send_back_calls_on_put(broker):
    calls = []
    offset = broker.put()
    broker.send_back(on_put=lambda: calls.append(1)).process(back(offset))
    assert calls == [1]


# --- producer-side sends to %RETRY% (handleRetryAndDLQ) -------------------------------------


def route(broker, reconsume_times, max_reconsume_times=0):
    return route_retry_send(groups=broker.groups, topics=broker.topics, topic="%RETRY%g", queue_id=0,
                            reconsume_times=reconsume_times, max_reconsume_times=max_reconsume_times,
                            now_ms=broker.clock.wall_ms(), rng=random.Random(1))


def test_retry_send_below_the_max_stays(broker):
    r = route(broker, 15)
    assert (r.code, r.topic, r.dead_letter) == (ResponseCode.SUCCESS, "%RETRY%g", False)


def test_retry_send_at_the_max_is_dead_lettered(broker):
    r = route(broker, 16)
    assert (r.code, r.topic, r.queue_id, r.dead_letter) == (ResponseCode.SUCCESS, "%DLQ%g", 0, True)
    assert broker.topics.get("%DLQ%g").perm == c.PERM_DEFAULT


def test_retry_send_uses_the_producers_max(broker):
    assert route(broker, 3, 3).dead_letter is True
    assert route(broker, 2, 3).dead_letter is False


@pytest.mark.parametrize(("field", "properties", "expected"), [
    (0, {}, (0, 0)),
    (4, {}, (4, 0)),
    (0, {c.PROPERTY_RECONSUME_TIME: "5", c.PROPERTY_MAX_RECONSUME_TIMES: "7"}, (5, 7)),
    (2, {c.PROPERTY_RECONSUME_TIME: "x", c.PROPERTY_MAX_RECONSUME_TIMES: ""}, (2, 0)),
])
def test_retry_send_header_prefers_the_moved_properties(field, properties, expected):
    assert retry_send_header(field, properties) == expected


def test_client_fallback_send_is_counted_and_its_header_properties_are_not_stored(broker):
    send = SendProcessor(broker.config, broker.store, broker.topics, broker.clock, groups=broker.groups)
    props = {c.PROPERTY_RECONSUME_TIME: "2", c.PROPERTY_MAX_RECONSUME_TIMES: "3", c.PROPERTY_DELAY: "5",
             c.PROPERTY_RETRY_TOPIC: "T"}
    req = SendRequest(topic="%RETRY%g", queue_id=0, messages=[(b"x", 0, dict(props), 0)])
    assert send.process(req).code == ResponseCode.SUCCESS
    [waiting] = broker.records(SCHEDULE, 4)
    assert waiting.reconsume_times == 2
    assert c.PROPERTY_RECONSUME_TIME not in waiting.properties
    assert c.PROPERTY_MAX_RECONSUME_TIMES not in waiting.properties
    props[c.PROPERTY_RECONSUME_TIME] = "3"  # = the client's max: dead letter
    req = SendRequest(topic="%RETRY%g", queue_id=0, messages=[(b"x", 0, dict(props), 0)])
    assert send.process(req).code == ResponseCode.SUCCESS
    [dead] = broker.records("%DLQ%g")
    assert dead.reconsume_times == 3 and dead.properties == {c.PROPERTY_RETRY_TOPIC: "T"}


def test_send_processor_dead_letters_a_retry_send_and_drops_its_delay(broker):
    send = SendProcessor(broker.config, broker.store, broker.topics, broker.clock, groups=broker.groups,
                         rng=random.Random(3))
    def request(reconsume_times: int) -> SendRequest:
        return SendRequest(topic="%RETRY%g", queue_id=0, reconsume_times=reconsume_times,
                           born_host=("127.0.0.1", 5000),
                           messages=[(b"x", 0, {c.PROPERTY_DELAY: "3", "KEYS": "k"}, 0)])

    resp = send.process(request(16))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    [dead] = broker.records("%DLQ%g")
    assert dead.reconsume_times == 16 and dead.properties == {"KEYS": "k"}
    assert send.process(request(1)).code == ResponseCode.SUCCESS
    assert len(broker.records(SCHEDULE, 2)) == 1  # below the max: delayed like any message


def test_send_processor_creates_a_retry_topic_even_without_auto_creation(broker):
    broker.topics.auto_create_enable = False
    send = SendProcessor(broker.config, broker.store, broker.topics, broker.clock, groups=broker.groups)
    req = SendRequest(topic="%RETRY%h", queue_id=0, messages=[(b"x", 0, {}, 0)])
    assert send.process(req).code == ResponseCode.SUCCESS
    assert broker.topics.get("%RETRY%h") == TopicConfig("%RETRY%h", 1, 1, c.PERM_DEFAULT)
