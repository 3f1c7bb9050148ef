"""Offsets, long polling and restarts on a real broker over gRPC."""

import threading
import time

import grpc
import pytest
from support.rpc import broker_stub, code_name, create_topic

from nodes.client import Producer, PullConsumer
from nodes.common.types import Message, MessageQueue, PullStatus
from proto import broker_pb2


def _mq(cluster_topic, queue_id=0):
    return MessageQueue(cluster_topic, "broker-a", queue_id)


def _fill(cluster, topic, count, queue_id=0):
    """`count` messages into the queue: the broker stores offsets only up to a queue's max offset."""
    channel, stub = broker_stub(cluster.broker_addr)
    with channel:
        r = stub.SendMessage(broker_pb2.SendMessageRequest(topic=topic, queue_id=queue_id, messages=[
            broker_pb2.OutgoingMessage(body=b"m") for _ in range(count)]), timeout=10)
    assert code_name(r.code) == "SUCCESS", r.remark


def test_committed_offset_round_trip_and_new_group_starts_at_zero(cluster):
    create_topic(cluster, "Off", 2)
    _fill(cluster, "Off", 17)
    with PullConsumer(cluster.namesrv_addr, "g1") as consumer:
        mq = _mq("Off")
        assert consumer.query_offset(mq) == 0  # a young queue: a new group starts at 0
        consumer.update_offset(mq, 17)
        assert consumer.query_offset(mq) == 17
        consumer.update_offset(mq, 5)  # commits overwrite, as RocketMQ's do
        assert consumer.query_offset(mq) == 5


def test_pull_piggybacks_the_commit_even_when_nothing_is_found(cluster):
    create_topic(cluster, "Piggy", 1)
    _fill(cluster, "Piggy", 3)
    channel, stub = broker_stub(cluster.broker_addr)
    with channel:
        req = broker_pb2.PullRequest(request_id=9, consumer_group="pg", topic="Piggy", queue_id=0, queue_offset=3,
                                     max_msg_nums=32, commit_offset=True, commit_offset_value=3,
                                     has_subscription=True, subscription_expression="*")
        resp = next(iter(stub.Pull(iter([req]), timeout=10)))
        assert code_name(resp.code) == "PULL_NOT_FOUND" and resp.request_id == 9
        q = stub.QueryConsumerOffset(broker_pb2.QueryConsumerOffsetRequest(
            consumer_group="pg", topic="Piggy", queue_id=0), timeout=10)
    assert (code_name(q.code), q.offset) == ("SUCCESS", 3)


def test_a_piggy_backed_commit_that_overtook_a_later_update_is_dropped(cluster):
    """The client read 5 for its update, then 7 for a pull's commit; the pull arrives first."""
    create_topic(cluster, "Overtake", queue_nums=1)
    _fill(cluster, "Overtake", 7)
    channel, stub = broker_stub(cluster.broker_addr)
    with channel:
        req = broker_pb2.PullRequest(request_id=1, consumer_group="og", topic="Overtake", queue_id=0, queue_offset=0,
                                     max_msg_nums=32, commit_offset=True, commit_offset_value=7, client_id="c1",
                                     commit_seq=2, has_subscription=True, subscription_expression="*")
        next(iter(stub.Pull(iter([req]), timeout=10)))
        r = stub.UpdateConsumerOffset(broker_pb2.UpdateConsumerOffsetRequest(
            consumer_group="og", topic="Overtake", queue_id=0, offset=5, client_id="c1", commit_seq=1), timeout=10)
        assert code_name(r.code) == "SUCCESS"
        q = stub.QueryConsumerOffset(broker_pb2.QueryConsumerOffsetRequest(
            consumer_group="og", topic="Overtake", queue_id=0), timeout=10)
    assert q.offset == 7


def test_negative_offset_update_is_rejected(cluster):
    channel, stub = broker_stub(cluster.broker_addr)
    with channel:
        r = stub.UpdateConsumerOffset(broker_pb2.UpdateConsumerOffsetRequest(
            consumer_group="g", topic="T", queue_id=0, offset=-1), timeout=10)
    assert code_name(r.code) == "INVALID_ARGUMENT" and "offset" in r.remark


def test_min_max_and_search_offsets(cluster):
    with Producer(cluster.namesrv_addr) as producer, PullConsumer(cluster.namesrv_addr, "g") as consumer:
        first = producer.send_orderly(Message("Search", b"a"), "k")
        mq = first.message_queue
        time.sleep(0.05)
        middle_ms = int(time.time() * 1000)
        time.sleep(0.05)
        producer.send_orderly(Message("Search", b"b"), "k")
        assert consumer.min_offset(mq) == 0
        assert consumer.max_offset(mq) == 2
        assert consumer.search_offset(mq, 0) == 0
        assert consumer.search_offset(mq, middle_ms + 60_000) == 1
        with pytest.raises(Exception, match=r"TOPIC_NOT_EXIST|does not exist|route"):
            consumer.max_offset(MessageQueue("NoSuchTopic", "broker-a", 0))


def test_long_poll_is_woken_by_an_arriving_message(unscanned_cluster):
    cluster = unscanned_cluster  # no scan: only the arrival can answer the held pull with a message
    create_topic(cluster, "Wake", 1)
    mq = _mq("Wake")
    with Producer(cluster.namesrv_addr) as producer, PullConsumer(cluster.namesrv_addr, "g") as consumer:
        timer = threading.Timer(0.2, lambda: producer.send(Message("Wake", b"late")))
        started = time.monotonic()
        timer.start()
        result = consumer.pull_block_if_not_found(mq, 0, 32, "*", timeout_ms=10_000)
        waited_s = time.monotonic() - started
        timer.join()
    assert result.status is PullStatus.FOUND and [m.body for m in result.messages] == [b"late"]
    assert waited_s >= 0.15  # held until the message came, not answered empty at once


def test_long_poll_times_out_with_no_new_message(cluster):
    create_topic(cluster, "Quiet", 1)
    with PullConsumer(cluster.namesrv_addr, "g") as consumer:
        started = time.monotonic()
        result = consumer.pull_block_if_not_found(_mq("Quiet"), 0, 32, "*", timeout_ms=300)
        waited_s = time.monotonic() - started
    assert result.status is PullStatus.NO_NEW_MSG
    assert waited_s >= 0.25  # held for its hold time, then released by the scan


def test_client_disconnecting_during_a_long_poll_leaves_the_broker_serving(cluster):
    create_topic(cluster, "Gone", 1)
    channel, stub = broker_stub(cluster.broker_addr)
    stop = threading.Event()

    def requests():
        yield broker_pb2.PullRequest(request_id=1, consumer_group="g", topic="Gone", queue_id=0, queue_offset=0,
                                     max_msg_nums=32, suspend=True, suspend_timeout_ms=60_000,
                                     has_subscription=True, subscription_expression="*")
        stop.wait(10)

    call = stub.Pull(requests(), timeout=30)
    deadline = time.monotonic() + 5
    while cluster.call(lambda: cluster.broker.pull_hold.holds.count()) == 0:
        assert time.monotonic() < deadline, "the pull was never held"
        time.sleep(0.02)
    call.cancel()
    stop.set()
    channel.close()
    deadline = time.monotonic() + 5
    while cluster.call(lambda: cluster.broker.pull_hold.holds.count()) != 0:
        assert time.monotonic() < deadline, "the held pull of a vanished client was never dropped"
        time.sleep(0.02)
    with Producer(cluster.namesrv_addr) as producer:
        producer.send(Message("Gone", b"still-serving"))
    with pytest.raises(grpc.RpcError):
        next(iter(call))


def test_clean_restart_keeps_topics_offsets_and_messages(cluster):
    create_topic(cluster, "Durable", 3)
    with Producer(cluster.namesrv_addr) as producer:
        sent = [producer.send(Message("Durable", f"m{i}".encode())) for i in range(30)]
    with PullConsumer(cluster.namesrv_addr, "keeper") as consumer:
        consumer.update_offset(_mq("Durable", 1), 4)
    cluster.stop_broker()
    cluster.start_broker()
    with PullConsumer(cluster.namesrv_addr, "keeper") as consumer:
        assert [q.queue_id for q in consumer.fetch_queues("Durable")] == [0, 1, 2]
        assert consumer.query_offset(_mq("Durable", 1)) == 4
        for result in sent:
            pulled = consumer.pull(result.message_queue, result.queue_offset, 1)
            assert pulled.messages[0].msg_id == result.msg_id
