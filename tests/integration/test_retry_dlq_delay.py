"""Send-back, retry topic, dead letters and delayed delivery on a real broker.

Delays are scaled: at the fixture's time scale 0.05 level 1 is 50 ms, level 2 250 ms and level
3 500 ms.
"""

from __future__ import annotations

import time

import grpc
import pytest
from support.rpc import broker_stub, code_name, create_topic, pull_once
from support.timing import within_ms

from nodes.client import Producer
from nodes.common import constants as c
from nodes.common.types import Message
from nodes.store.record import Record, iter_records
from proto import broker_pb2, common_pb2, consumer_pb2, consumer_pb2_grpc

TIMEOUT_S = 10.0
LEVEL_UNITS = (1, 5, 10)  # levels 1..3 are 1s, 5s and 10s
CLOCK_SLACK_MS = 10  # wall vs monotonic clock reading differences


def records(cluster, topic: str, queue_id: int = 0, offset: int = 0) -> list[Record]:
    resp = pull_once(cluster.broker_addr, consumer_group="reader", topic=topic, queue_id=queue_id,
                     queue_offset=offset)
    return list(iter_records(resp.records)) if resp.code == common_pb2.SUCCESS else []


def wait_records(cluster, topic: str, count: int = 1, timeout_s: float = 10.0, queue_id: int = 0) -> list[Record]:
    deadline = time.monotonic() + timeout_s
    while True:
        found = records(cluster, topic, queue_id)
        if len(found) >= count:
            return found
        assert time.monotonic() < deadline, f"{topic} has {len(found)} of {count} messages"
        time.sleep(0.005)


def send_back(cluster, phys_offset: int, group: str = "g", delay_level: int = 0, max_reconsume_times: int = 16,
              origin_msg_id: str = "", origin_topic: str = "RT") -> consumer_pb2.ConsumerSendMsgBackResponse:
    with grpc.insecure_channel(cluster.broker_addr) as channel:
        return consumer_pb2_grpc.ConsumerManagerStub(channel).ConsumerSendMsgBack(
            consumer_pb2.ConsumerSendMsgBackRequest(
                consumer_group=group, phys_offset=phys_offset, delay_level=delay_level,
                origin_msg_id=origin_msg_id, origin_topic=origin_topic,
                max_reconsume_times=max_reconsume_times), timeout=TIMEOUT_S)


@pytest.fixture
def original(cluster) -> Record:
    """One message on topic RT (one queue), as the broker stored it."""
    create_topic(cluster, "RT", 1)
    with Producer(cluster.namesrv_addr) as producer:
        producer.send(Message("RT", b"payload", tags="t", keys="k1", properties={"user": "v"}))
    [record] = wait_records(cluster, "RT")
    return record


@pytest.mark.parametrize("level", [1, 2, 3])
def test_sent_back_message_reappears_in_the_retry_topic_after_the_scaled_delay(cluster, original, level):
    delay_ms = LEVEL_UNITS[level - 1] * cluster.timing.delay_level_unit_ms
    started = time.monotonic()
    resp = send_back(cluster, original.phys_offset, delay_level=level, origin_msg_id=original.msg_id)
    assert code_name(resp.code) == "SUCCESS", resp.remark
    if level > 1:
        assert records(cluster, "%RETRY%g") == []  # still waiting
    [retried] = wait_records(cluster, "%RETRY%g")
    waited_ms = (time.monotonic() - started) * 1000
    # due after its level, looked at every schedule_poll_ms; late only by what a busy machine adds
    assert delay_ms - CLOCK_SLACK_MS <= waited_ms < within_ms(delay_ms + cluster.timing.schedule_poll_ms)
    assert retried.body == b"payload" and retried.reconsume_times == original.reconsume_times + 1 == 1
    props = retried.properties
    assert props[c.PROPERTY_RETRY_TOPIC] == "RT"
    assert props[c.PROPERTY_ORIGIN_MESSAGE_ID] == original.msg_id
    assert props["user"] == "v" and props["KEYS"] == "k1" and props["TAGS"] == "t"
    assert c.PROPERTY_DELAY not in props and props[c.PROPERTY_REAL_TOPIC] == "%RETRY%g"
    assert retried.msg_id == original.msg_id  # UNIQ_KEY travels with the message


def test_default_level_is_three_plus_reconsume_times(cluster, original):
    delay_ms = LEVEL_UNITS[2] * cluster.timing.delay_level_unit_ms
    started = time.monotonic()
    assert code_name(send_back(cluster, original.phys_offset).code) == "SUCCESS"
    wait_records(cluster, "%RETRY%g")
    assert (time.monotonic() - started) * 1000 >= delay_ms - CLOCK_SLACK_MS


def test_max_reconsume_times_leads_to_the_dlq(cluster, original):
    current = original
    for hop in (1, 2):  # reconsume times 0 and 1 are below the max of 2: retried
        assert code_name(send_back(cluster, current.phys_offset, delay_level=1, max_reconsume_times=2).code) == "SUCCESS"
        current = wait_records(cluster, "%RETRY%g", count=hop)[-1]
        assert current.reconsume_times == hop
    assert code_name(send_back(cluster, current.phys_offset, delay_level=1, max_reconsume_times=2).code) == "SUCCESS"
    [dead] = wait_records(cluster, "%DLQ%g")
    assert dead.reconsume_times == 3 and dead.body == b"payload"
    assert dead.properties[c.PROPERTY_RETRY_TOPIC] == "RT"
    assert dead.properties[c.PROPERTY_ORIGIN_MESSAGE_ID] == original.msg_id  # first hop's, kept
    assert c.PROPERTY_DELAY not in dead.properties
    assert len(records(cluster, "%RETRY%g")) == 2
    topics = cluster.call(lambda: cluster.broker.status().details["topics"])
    assert "%DLQ%g" in topics


def test_negative_delay_level_dead_letters_at_once(cluster, original):
    assert code_name(send_back(cluster, original.phys_offset, delay_level=-1).code) == "SUCCESS"
    [dead] = records(cluster, "%DLQ%g")
    assert dead.reconsume_times == 1


def test_send_back_of_an_unknown_offset_is_a_system_error(cluster, original):
    resp = send_back(cluster, original.phys_offset + 1)
    assert code_name(resp.code) == "SYSTEM_ERROR" and str(original.phys_offset + 1) in resp.remark


def test_producer_send_to_retry_past_the_max_lands_in_the_dlq(cluster):
    channel, stub = broker_stub(cluster.broker_addr)
    with channel:
        for reconsume_times in (3, 16):
            resp = stub.SendMessage(broker_pb2.SendMessageRequest(
                producer_group="p", topic="%RETRY%pg", queue_id=0, reconsume_times=reconsume_times,
                born_host="127.0.0.1:1", default_topic_queue_nums=1,
                messages=[broker_pb2.OutgoingMessage(body=b"r%d" % reconsume_times)]), timeout=TIMEOUT_S)
            assert code_name(resp.code) == "SUCCESS", resp.remark
    assert [r.body for r in records(cluster, "%RETRY%pg")] == [b"r3"]
    assert [(r.body, r.reconsume_times) for r in records(cluster, "%DLQ%pg")] == [(b"r16", 16)]


def test_producer_delayed_message_is_delivered_after_its_level(cluster):
    create_topic(cluster, "DT", 1)
    delay_ms = LEVEL_UNITS[1] * cluster.timing.delay_level_unit_ms
    with Producer(cluster.namesrv_addr) as producer:
        started = time.monotonic()
        result = producer.send(Message("DT", b"later", properties={c.PROPERTY_DELAY: "2"}))
    assert result.status.name == "SEND_OK"
    assert records(cluster, "DT") == []
    [delivered] = wait_records(cluster, "DT")
    assert (time.monotonic() - started) * 1000 >= delay_ms - CLOCK_SLACK_MS
    assert delivered.body == b"later" and c.PROPERTY_DELAY not in delivered.properties
    assert delivered.properties[c.PROPERTY_REAL_TOPIC] == "DT"
    assert delivered.properties[c.PROPERTY_REAL_QUEUE_ID] == "0"


def test_delay_progress_survives_a_restart(cluster):
    create_topic(cluster, "DR", 1)
    with Producer(cluster.namesrv_addr) as producer:
        producer.send(Message("DR", b"once", properties={c.PROPERTY_DELAY: "1"}))
    wait_records(cluster, "DR")
    cluster.stop_broker()  # the schedule service persists its cursors on stop
    cluster.start_broker()
    schedule = cluster.call(lambda: cluster.broker.status().details["schedule"])
    assert schedule["offsets"]["1"] == 1
    time.sleep((cluster.timing.schedule_first_delay_ms + 10 * cluster.timing.schedule_poll_ms) / 1000)
    assert [r.body for r in records(cluster, "DR")] == [b"once"]  # not delivered twice
