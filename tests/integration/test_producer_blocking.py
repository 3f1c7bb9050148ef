"""`Producer.send` / `send_batch` in the caller's thread (ClientApi.blocking_sends) against a real
broker: the loop's path until the topic's route is cached, then one call per calling thread with
the same results as the loop's path, and a broker that went away read as a failed send, then sent
to again once it is back."""

from __future__ import annotations

import threading
import time

from nodes.client import Message, Producer, PullConsumer
from nodes.common.errors import MqError
from nodes.common.types import MessageQueue, PullStatus, SendStatus


def _blocking_calls(producer: Producer) -> int:
    return producer._instance.api.blocking_sends.open_calls


def test_sends_take_the_callers_thread_once_the_route_is_known_and_store_what_the_loop_would(cluster):
    mq = MessageQueue("Direct", "broker-a", 0)
    with Producer(cluster.namesrv_addr, retry_times=0) as producer:
        first = producer.send_orderly(Message("Direct", b"m0"), "k")  # fetches the route on the loop
        assert _blocking_calls(producer) == 0
        results = [producer.send(Message("Direct", f"m{i}".encode())) for i in range(1, 5)]
        assert _blocking_calls(producer) == 1  # this thread's own call
        batch = producer.send_batch([Message("Direct", b"b0"), Message("Direct", b"b1")])
        async_result = producer.send_async(Message("Direct", b"a0")).result(10)  # the loop's stream
        others: list = []
        thread = threading.Thread(target=lambda: others.append(producer.send(Message("Direct", b"t0"))))
        thread.start()
        thread.join(10)
        assert _blocking_calls(producer) == 2  # one more for the other thread
    every = [first, *results, batch, async_result, *others]
    assert all(r.status is SendStatus.SEND_OK for r in every)
    offsets = {r.message_queue.queue_id: [] for r in every}
    for r in every:
        offsets[r.message_queue.queue_id].extend(r.queue_offsets)
    assert all(o == sorted(o) and len(set(o)) == len(o) for o in offsets.values())
    with PullConsumer(cluster.namesrv_addr, "g_direct") as consumer:
        bodies = []
        for queue_id in offsets:
            mq = MessageQueue("Direct", "broker-a", queue_id)
            pulled = consumer.pull(mq, 0, 32)
            assert pulled.status is PullStatus.FOUND
            bodies += [m.body for m in pulled.messages]
    assert sorted(bodies) == sorted([b"m0", b"m1", b"m2", b"m3", b"m4", b"b0", b"b1", b"a0", b"t0"])
    # one message's result has the same shape whichever way it was sent
    assert all(r.msg_ids == (r.msg_id,) and r.queue_offsets == (r.queue_offset,) for r in every if r is not batch)
    ids = {m for r in every for m in r.msg_ids}
    assert len(ids) == 9


def test_a_broker_that_went_away_fails_the_send_and_is_sent_to_again_once_back(cluster):
    with Producer(cluster.namesrv_addr, send_timeout_ms=2000) as producer:
        producer.send(Message("Away", b"x"))
        assert producer.send(Message("Away", b"y")).status is SendStatus.SEND_OK  # over this thread's call
        cluster.stop_broker()
        started = time.monotonic()
        try:
            producer.send(Message("Away", b"z"))
            raise AssertionError("a send to a stopped broker succeeded")
        except MqError as err:
            assert time.monotonic() - started < 10, err
        cluster.start_broker()
        for _ in range(50):
            try:
                assert producer.send(Message("Away", b"back")).status is SendStatus.SEND_OK
                break
            except MqError:
                time.sleep(0.1)
        else:
            raise AssertionError("no send succeeded after the broker came back")
