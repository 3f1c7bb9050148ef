"""mqlab's Producer -> real consumers: the C++ push and pull consumers and ali-ons get every
acknowledged message with mqlab's body, tags, keys and properties; a failed message comes back
once from %RETRY%<group> with reconsumeTimes 1 after the client's CONSUMER_SEND_MSG_BACK.

A group new to a queue starts at offset 0 (the young-queue rule), so messages sent before the
consumer started are delivered too.
"""

from __future__ import annotations

import pytest

from interop.mqlab_side import make_topic
from nodes.client import Producer
from nodes.common.types import Message, SendStatus

pytestmark = pytest.mark.cluster

USER_PROPS = {"color": "green", "shape": "round"}
# First deliveries: a long poll answers within the broker's (scaled) hold; no client timer.
DELIVERY_BUDGET_S = 20.0
# A redelivery waits for the send-back's delay level 3 (scaled) and for the consumer to pull
# %RETRY%<group>: C++ finds the retry topic on its next route update (a few s) and takes its
# queue on the next rebalance (10 s).
RETRY_BUDGET_S = 40.0


def _produce(cluster, topic: str, count: int, prefix: str) -> list[str]:
    bodies = [f"{prefix}-{i}" for i in range(count)]
    with Producer(cluster.namesrv_addr) as producer:
        for body in bodies:
            result = producer.send(Message(topic, body.encode(), tags="TagM", keys=f"key-{body}",
                                           properties=dict(USER_PROPS)))
            assert result.status is SendStatus.SEND_OK
    return bodies


def _assert_like_mqlab_sent(event: dict, topic: str) -> None:
    assert event["topic"] == topic
    assert event["tags"] == "TagM" and event["keys"] == f"key-{event['body']}"
    for key, value in USER_PROPS.items():
        assert event["properties"].get(key) == value, event


def _assert_sent_back_once(consumer, topic: str, body: str) -> None:
    deliveries = [e for e in consumer.received() if e["body"] == body]
    assert [(e["status"], e["reconsume_times"]) for e in deliveries] == [
        ("RECONSUME_LATER", 0), ("CONSUME_SUCCESS", 1)], deliveries
    redelivered = deliveries[1]
    assert redelivered["topic"] == topic, "the client restores the topic from RETRY_TOPIC"
    assert redelivered["properties"].get("RETRY_TOPIC") == topic


@pytest.mark.slow
def test_cpp_push_consumer_gets_every_message_and_sends_back_a_failure(shared_cluster, clients):
    """Concurrent C++ push: heartbeat, consumer list, offsets, long-polled pulls, send-back (36) to
    the message's store host. Other messages of the failed one's batch may come back too."""
    topic, group = "InteropCppPush", "CG_cpp_push"
    make_topic(shared_cluster, topic)
    bodies = _produce(shared_cluster, topic, 12, "cpp-push")
    # One failure: the C API fails a whole pulled batch when one callback fails, and sends back
    # the batch's later messages unseen; a second failing body in that batch would go back twice.
    failing = [bodies[3]]
    consumer = clients.cpp("push", shared_cluster.namesrv_remoting_addr, group=group, topic=topic,
                           fail_first=failing, prop=list(USER_PROPS), expect=len(bodies), max_s=60)
    consumer.wait_received(set(bodies) - set(failing), DELIVERY_BUDGET_S)
    consumer.wait_received(bodies, RETRY_BUDGET_S)
    consumer.finish()
    assert not consumer.of("error"), consumer.story()
    for event in consumer.received():
        _assert_like_mqlab_sent(event, topic)
    for body in failing:
        _assert_sent_back_once(consumer, topic, body)


def test_ali_ons_push_consumer_gets_every_message_and_sends_back_a_failure(shared_cluster, clients):
    """Concurrent ali-ons push: Java-style heartbeat, offsets, pulls with numeric headers, send-back
    with origin fields. Its retry topic exists up front: ali-ons looks routes up every 30 s."""
    topic, group = "InteropOnsPush", "CG_ons_push"
    make_topic(shared_cluster, topic)
    make_topic(shared_cluster, f"%RETRY%{group}", 1)
    bodies = _produce(shared_cluster, topic, 8, "ons-push")
    failing = [bodies[2]]
    consumer = clients.ons("push", shared_cluster.namesrv_remoting_addr, group=group, topic=topic,
                           fail_first=failing, expect=len(bodies), max_s=60)
    consumer.wait_received(bodies, RETRY_BUDGET_S)
    consumer.finish()
    assert not [e for e in consumer.of("error") if e["where"] == "httpclient"], "no HTTP name-server lookup"
    for event in consumer.received():
        _assert_like_mqlab_sent(event, topic)
    _assert_sent_back_once(consumer, topic, failing[0])


def test_cpp_pull_consumer_reads_every_queue_to_the_end(shared_cluster, clients):
    """The C++ pull consumer: route (105), then PULL_MESSAGE without suspend until 19 on each queue,
    with a tag expression the broker filters; no heartbeat and no offsets on the broker."""
    topic = "InteropCppPull"
    make_topic(shared_cluster, topic)
    wanted = _produce(shared_cluster, topic, 10, "cpp-pull")
    with Producer(shared_cluster.namesrv_addr) as producer:
        for i in range(4):
            producer.send(Message(topic, f"other-{i}".encode(), tags="TagOther"))
    consumer = clients.cpp("pull", shared_cluster.namesrv_remoting_addr, group="CG_cpp_pull", topic=topic,
                           expression="TagM || TagX", prop=list(USER_PROPS), expect=len(wanted), max_s=30)
    events = consumer.finish()
    received = consumer.received()
    assert sorted(e["body"] for e in received) == sorted(wanted), consumer.story()
    for event in received:
        _assert_like_mqlab_sent(event, topic)
    pulled = [e for e in events if e["event"] == "pulled"]
    assert len(pulled[-1]["offsets"]) == 4, "every queue was read"
    assert sum(pulled[-1]["offsets"].values()) == len(wanted) + 4, "each queue was read to its end"
