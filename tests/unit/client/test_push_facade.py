"""PushConsumer's surface without a network: argument checks, lifecycle rules, the fallback copy."""

from __future__ import annotations

import pytest

from nodes.client import AllocateAveragely, ConsumeFromWhere, MessageModel, PushConsumer
from nodes.client.send_back import retry_message
from nodes.common import constants as c
from nodes.common.errors import ClientStateError, InvalidArgumentError
from nodes.common.service import Lifecycle
from nodes.common.types import MessageExt

ADDR = "127.0.0.1:9876"


def ok_listener(msgs, ctx):
    return None


def test_defaults_follow_rocketmq():
    consumer = PushConsumer(ADDR, "g")
    assert consumer.message_model is MessageModel.CLUSTERING
    assert isinstance(consumer.allocate, AllocateAveragely)
    assert consumer.consume_from_where is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    assert consumer.consume_thread_min == 20 and consumer.consume_message_batch_max_size == 1
    assert consumer.pull_batch_size == 32 and consumer.effective_max_reconsume_times == 16
    assert consumer.post_subscription_when_pull is False
    consumer.shutdown()  # never started: just stopped
    assert consumer.lifecycle.state is Lifecycle.STOPPED


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"group": ""}, "group name is empty"),
    ({"group": "a b"}, "characters outside"),
    ({"message_model": "CLUSTERING"}, "message_model must be a MessageModel"),
    ({"consume_from_where": 1}, "consume_from_where must be"),
    ({"allocate": "AVG"}, "allocation strategy"),
    ({"consume_thread_min": 0}, "consume_thread_min"),
    ({"consume_message_batch_max_size": 1025}, "consume_message_batch_max_size"),
    ({"pull_batch_size": 0}, "pull_batch_size"),
    ({"max_reconsume_times": -2}, "max_reconsume_times"),
    ({"instance_name": ""}, "instance_name"),
])
def test_bad_arguments_are_refused_before_anything_starts(kwargs, message):
    args = {"namesrv_addr": ADDR, "group": "g"} | kwargs
    with pytest.raises(InvalidArgumentError, match=message):
        PushConsumer(**args)


def test_subscribe_and_listener_checks():
    consumer = PushConsumer(ADDR, "g")
    with pytest.raises(InvalidArgumentError, match="characters outside"):
        consumer.subscribe("bad topic")
    with pytest.raises(InvalidArgumentError, match="tag expression"):
        consumer.subscribe("T", 5)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="callable"):
        consumer.register_listener("not a function")  # type: ignore[arg-type]


def test_start_needs_a_listener_and_a_subscription():
    consumer = PushConsumer(ADDR, "g")
    with pytest.raises(ClientStateError, match="register_listener"):
        consumer.start()
    consumer.register_listener(ok_listener)
    with pytest.raises(ClientStateError, match="subscribe"):
        consumer.start()
    assert consumer.lifecycle.state is Lifecycle.INIT  # nothing happened; it may still be set up
    with pytest.raises(ClientStateError, match="needs a started consumer"):
        consumer.fetch_subscribe_message_queues("T")
    assert consumer.owned_queues() == []


def test_fallback_copy_carries_retry_properties_and_the_next_delay_level():
    original = MessageExt("T", b"payload", {c.PROPERTY_UNIQ_KEY: "U1", c.PROPERTY_TAGS: "a", "TRAN_MSG": "true"},
                          "U1", "OFF1", 2, 7, 900, 2, 0, 0, "broker-a", flag=3)
    retry = retry_message(original, "g", 16)
    assert retry.topic == "%RETRY%g" and retry.body == b"payload" and retry.flag == 3
    props = retry.properties or {}
    assert props[c.PROPERTY_RETRY_TOPIC] == "T" and props[c.PROPERTY_ORIGIN_MESSAGE_ID] == "U1"
    assert props[c.PROPERTY_RECONSUME_TIME] == "3"  # times + 1: this path dead-letters one attempt earlier
    assert props[c.PROPERTY_MAX_RECONSUME_TIMES] == "16"
    assert props[c.PROPERTY_DELAY] == "5"  # 3 + reconsume times
    assert props[c.PROPERTY_UNIQ_KEY] == "U1" and props[c.PROPERTY_TAGS] == "a" and "TRAN_MSG" not in props


def test_fallback_copy_keeps_an_existing_origin_message_id():
    original = MessageExt("T", b"x", {c.PROPERTY_ORIGIN_MESSAGE_ID: "FIRST"}, "U2", "", 0, 0, 0, 0, 0, 0, "broker-a")
    assert (retry_message(original, "g", 1).properties or {})[c.PROPERTY_ORIGIN_MESSAGE_ID] == "FIRST"
