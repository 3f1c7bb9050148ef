"""RocketMQ 4.9's pull status table row by row on a real broker over gRPC."""

import pytest
from support.rpc import code_name, create_topic, pull_once

from nodes.client import Producer, PullConsumer
from nodes.common.types import Message, PullStatus


@pytest.fixture
def producer(cluster):
    with Producer(cluster.namesrv_addr) as p:
        yield p


def _send_to_queue(producer, topic, count, tags=None, body_prefix=b"m"):
    results = []
    for i in range(count):
        results.append(producer.send_orderly(Message(topic, body_prefix + str(i).encode(), tags=tags), "key"))
    return results


def test_no_message_in_queue_at_offset_zero_is_not_found(cluster):
    create_topic(cluster, "Empty", 2)
    r = pull_once(cluster.broker_addr, topic="Empty", queue_id=0, queue_offset=0)
    assert (code_name(r.code), r.remark, r.next_begin_offset) == ("PULL_NOT_FOUND", "NO_MESSAGE_IN_QUEUE", 0)


def test_no_message_in_queue_at_nonzero_offset_moves_the_offset(cluster):
    create_topic(cluster, "Empty", 2)
    r = pull_once(cluster.broker_addr, topic="Empty", queue_id=1, queue_offset=7)
    assert (code_name(r.code), r.remark, r.next_begin_offset) == ("PULL_OFFSET_MOVED", "NO_MESSAGE_IN_QUEUE", 0)


def test_found_returns_records_and_next_begin_offset(cluster, producer):
    sent = _send_to_queue(producer, "Found", 5)
    qid = sent[0].message_queue.queue_id
    r = pull_once(cluster.broker_addr, topic="Found", queue_id=qid, queue_offset=1, max_msg_nums=3)
    assert (code_name(r.code), r.remark) == ("SUCCESS", "FOUND")
    assert (r.record_count, r.next_begin_offset, r.min_offset, r.max_offset) == (3, 4, 0, 5)
    assert r.suggest_which_broker_id == 0


def test_offset_overflow_one_is_not_found_with_offset_unchanged(cluster, producer):
    sent = _send_to_queue(producer, "Over", 3)
    qid = sent[0].message_queue.queue_id
    r = pull_once(cluster.broker_addr, topic="Over", queue_id=qid, queue_offset=3)
    assert (code_name(r.code), r.remark, r.next_begin_offset) == ("PULL_NOT_FOUND", "OFFSET_OVERFLOW_ONE", 3)


def test_offset_overflow_badly_moves_to_max(cluster, producer):
    sent = _send_to_queue(producer, "Over", 3)
    qid = sent[0].message_queue.queue_id
    r = pull_once(cluster.broker_addr, topic="Over", queue_id=qid, queue_offset=1_000_000)
    assert (code_name(r.code), r.remark, r.next_begin_offset) == ("PULL_OFFSET_MOVED", "OFFSET_OVERFLOW_BADLY", 3)


def test_negative_offset_is_too_small_and_moves_to_min(cluster, producer):
    sent = _send_to_queue(producer, "Neg", 2)
    qid = sent[0].message_queue.queue_id
    r = pull_once(cluster.broker_addr, topic="Neg", queue_id=qid, queue_offset=-5)
    assert (code_name(r.code), r.remark, r.next_begin_offset) == ("PULL_OFFSET_MOVED", "OFFSET_TOO_SMALL", 0)


def test_no_matched_message_skips_filtered_units(cluster, producer):
    sent = _send_to_queue(producer, "Tagged", 4, tags="A")
    qid = sent[0].message_queue.queue_id
    r = pull_once(cluster.broker_addr, topic="Tagged", queue_id=qid, queue_offset=0, subscription_expression="B")
    assert (code_name(r.code), r.remark) == ("PULL_RETRY_IMMEDIATELY", "NO_MATCHED_MESSAGE")
    assert r.next_begin_offset == 4  # filtered units still advance the offset


def test_tag_filter_returns_only_matching_tags(cluster, producer):
    topic = "Mixed"
    for i in range(6):
        producer.send_orderly(Message(topic, f"m{i}".encode(), tags="A" if i % 2 else "B"), "k")
    with PullConsumer(cluster.namesrv_addr, "g") as consumer:
        mq = producer.send_orderly(Message(topic, b"last", tags="C"), "k").message_queue
        result = consumer.pull(mq, 0, 32, "A || C")
    assert result.status is PullStatus.FOUND
    assert [m.body for m in result.messages] == [b"m1", b"m3", b"m5", b"last"]


@pytest.mark.parametrize("fields, code", [
    ({"topic": "NoSuchTopic", "queue_id": 0}, "TOPIC_NOT_EXIST"),
    ({"topic": "Q", "queue_id": 99}, "SYSTEM_ERROR"),
    ({"topic": "Q", "queue_id": -1}, "SYSTEM_ERROR"),
    ({"topic": "Q", "queue_id": 0, "max_msg_nums": 0}, "INVALID_ARGUMENT"),
    ({"topic": "Q", "queue_id": 0, "max_msg_nums": 5000}, "INVALID_ARGUMENT"),
    ({"topic": "Q", "queue_id": 0, "has_subscription": False}, "SUBSCRIPTION_NOT_EXIST"),
])
def test_prechecks_reject_bad_requests_and_the_broker_keeps_serving(cluster, fields, code):
    create_topic(cluster, "Q", 2)
    r = pull_once(cluster.broker_addr, queue_offset=0, **fields)
    assert code_name(r.code) == code and r.remark
    ok = pull_once(cluster.broker_addr, topic="Q", queue_id=0, queue_offset=0)
    assert code_name(ok.code) == "PULL_NOT_FOUND"


def test_client_maps_codes_to_pull_statuses(cluster, producer):
    sent = _send_to_queue(producer, "Map", 2)
    mq = sent[0].message_queue
    with PullConsumer(cluster.namesrv_addr, "g") as consumer:
        assert consumer.pull(mq, 0).status is PullStatus.FOUND
        assert consumer.pull(mq, 2).status is PullStatus.NO_NEW_MSG
        moved = consumer.pull(mq, 50)
        assert (moved.status, moved.next_begin_offset) == (PullStatus.OFFSET_ILLEGAL, 2)
        found = consumer.pull(mq, 0)
    assert [m.queue_offset for m in found.messages] == [0, 1]
    assert found.messages[0].properties["MAX_OFFSET"] == "2"
    assert "__RECORD_CRC32" not in found.messages[0].properties  # the store's checksum stays inside
