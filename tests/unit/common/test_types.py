import pytest

from nodes.common.errors import InvalidMessageError
from nodes.common.types import Message, MessageQueue, validate_message, validate_topic


def test_message_queue_string_is_rocketmq_to_string():
    assert str(MessageQueue("T", "broker-a", 3)) == "MessageQueue [topic=T, brokerName=broker-a, queueId=3]"


def test_message_queues_sort_by_topic_broker_then_queue_id_numerically():
    qs = [MessageQueue("T", "b", 10), MessageQueue("T", "a", 2), MessageQueue("T", "b", 9)]
    assert sorted(qs) == [MessageQueue("T", "a", 2), MessageQueue("T", "b", 9), MessageQueue("T", "b", 10)]


@pytest.mark.parametrize("topic", ["", "  ", "a b", "topic!", "x" * 128, "中文"])
def test_invalid_topic_names_are_rejected(topic):
    with pytest.raises(InvalidMessageError):
        validate_topic(topic)


@pytest.mark.parametrize("topic", ["T", "a-b_c", "%RETRY%g", "x" * 127, "a|b"])
def test_valid_topic_names(topic):
    validate_topic(topic)


def test_empty_and_oversize_bodies_are_rejected():
    with pytest.raises(InvalidMessageError, match="empty"):
        validate_message(Message("T", b""))
    with pytest.raises(InvalidMessageError, match="limit"):
        validate_message(Message("T", b"x" * 11), body_bytes_max=10)
    with pytest.raises(InvalidMessageError, match="reserved"):
        validate_message(Message("TBW102", b"x"))


def test_tags_and_keys_become_properties():
    props = Message("T", b"x", tags="A", keys=["k1", "k2"], properties={"p": "v"}).all_properties()
    assert props == {"p": "v", "TAGS": "A", "KEYS": "k1 k2"}


@pytest.mark.parametrize("properties", [{"a\x01": "v"}, {"a": "v\x02"}, {"__RECORD_CRC32": "0"}])
def test_properties_with_separators_or_reserved_names_are_rejected(properties):
    with pytest.raises(InvalidMessageError, match="property"):
        validate_message(Message("T", b"x", properties=properties))
