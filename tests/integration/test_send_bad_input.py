"""Bad sends get a clear status; the broker keeps serving and loses nothing."""

import pytest
from support.inprocess import InProcessCluster
from support.rpc import broker_stub, code_name

from nodes.client import Producer, PullConsumer
from nodes.common.errors import InvalidMessageError, MqError
from nodes.common.types import Message
from proto import broker_pb2


def _raw_send(addr, topic, bodies, queue_id=0):
    channel, stub = broker_stub(addr)
    with channel:
        return stub.SendMessage(broker_pb2.SendMessageRequest(
            topic=topic, queue_id=queue_id, messages=[broker_pb2.OutgoingMessage(body=b) for b in bodies]),
            timeout=10)


@pytest.mark.parametrize("topic, bodies, code", [
    ("T", [b""], "MESSAGE_ILLEGAL"),
    ("T", [b"x" * (1024 * 1024 + 1)], "MESSAGE_ILLEGAL"),
    ("bad topic!", [b"x"], "MESSAGE_ILLEGAL"),
    ("x" * 128, [b"x"], "MESSAGE_ILLEGAL"),
    ("TBW102", [b"x"], "MESSAGE_ILLEGAL"),
    ("T", [], "MESSAGE_ILLEGAL"),
])
def test_broker_rejects_bad_sends_with_a_code(cluster, topic, bodies, code):
    r = _raw_send(cluster.broker_addr, topic, bodies)
    assert code_name(r.code) == code and r.remark


def test_queue_id_out_of_range_is_a_system_error(cluster):
    assert code_name(_raw_send(cluster.broker_addr, "Auto", [b"x"]).code) == "SUCCESS"
    r = _raw_send(cluster.broker_addr, "Auto", [b"x"], queue_id=400)
    assert code_name(r.code) == "SYSTEM_ERROR" and "queue id" in r.remark


def test_producer_validates_before_sending(cluster):
    with Producer(cluster.namesrv_addr) as producer:
        for bad in (Message("T", b""), Message("bad topic", b"x"), Message("T", b"x" * (5 * 1024 * 1024))):
            with pytest.raises(InvalidMessageError):
                producer.send(bad)
        ok = producer.send(Message("T", b"fine"))
    with PullConsumer(cluster.namesrv_addr, "g") as consumer:
        got = consumer.pull(ok.message_queue, ok.queue_offset, 1)
    assert [m.body for m in got.messages] == [b"fine"]


def test_auto_creation_uses_min_of_client_and_broker_defaults(cluster):
    with Producer(cluster.namesrv_addr) as producer:
        producer.send(Message("Fresh", b"x"))
    with PullConsumer(cluster.namesrv_addr, "g") as consumer:
        assert len(consumer.fetch_queues("Fresh")) == 4


def test_unknown_topic_without_auto_creation(tmp_path):
    with InProcessCluster(tmp_path, auto_create_topic_enable=False) as cluster:
        r = _raw_send(cluster.broker_addr, "Nope", [b"x"])
        assert code_name(r.code) == "TOPIC_NOT_EXIST" and "create it" in r.remark
        with Producer(cluster.namesrv_addr) as producer, pytest.raises(MqError):
            producer.send(Message("Nope", b"x"))
