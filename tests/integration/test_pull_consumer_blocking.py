"""`PullConsumer.pull` in the caller's thread (ClientApi.blocking_pulls) against a real broker:
the loop's path until the queue's route is cached, the same answers as `pull_async`, routing
events still delivered on the client's loop thread, and a broker that went away read as a
TransportError, then pulled from again once it is back."""

from __future__ import annotations

import threading
import time

import pytest

from nodes.client import Message, Producer, PullConsumer
from nodes.common.errors import TransportError
from nodes.common.types import PullStatus


def _blocking_calls(consumer: PullConsumer) -> int:
    return consumer._instance.api.blocking_pulls.open_calls


def test_pull_takes_the_callers_thread_once_the_route_is_known_and_answers_as_pull_async(cluster):
    with Producer(cluster.namesrv_addr) as producer:
        sent = [producer.send_orderly(Message("Blocking", f"b{i}".encode()), "k") for i in range(6)]
    mq = sent[0].message_queue
    events: list[tuple[str, dict]] = []
    with PullConsumer(cluster.namesrv_addr, "g_blocking",
                      on_routing_event=lambda e: events.append((threading.current_thread().name, e))) as consumer:
        first = consumer.pull(mq, 0, 2)  # no route cached yet: the loop fetches it and pulls
        assert _blocking_calls(consumer) == 0
        second = consumer.pull(mq, 2, 2)
        assert _blocking_calls(consumer) == 1  # this one went over this thread's own call
        third = consumer.pull_async(mq, 4, 4).result(10)
        assert [r.status for r in (first, second, third)] == [PullStatus.FOUND] * 3
        assert [[m.body for m in r.messages] for r in (first, second, third)] == \
            [[b"b0", b"b1"], [b"b2", b"b3"], [b"b4", b"b5"]]
        assert consumer.pull(mq, 2, 2).messages == second.messages
        assert second.next_begin_offset == 4 and second.requested_broker_id == second.broker_id == 0
        assert consumer.pull(mq, 6, 2).status is PullStatus.NO_NEW_MSG
        consumer._instance.run(_settled(), 5)  # a loop turn after the last pull: its event was delivered
    loop_threads = {name for name, _ in events}
    assert len(events) == 5 and len(loop_threads) == 1 and threading.current_thread().name not in loop_threads
    assert [e["queue_offset"] for _, e in events if e["status"] == "FOUND"] == [0, 2, 4, 2]


async def _settled() -> None:
    return None


def test_a_broker_that_went_away_fails_the_pull_and_is_pulled_from_again_once_back(cluster):
    with Producer(cluster.namesrv_addr) as producer:
        mq = producer.send(Message("Away", b"x")).message_queue
    with PullConsumer(cluster.namesrv_addr, "g_away", pull_timeout_ms=2000) as consumer:
        consumer.pull(mq, 0, 1)
        assert consumer.pull(mq, 0, 1).status is PullStatus.FOUND  # over this thread's call
        cluster.stop_broker()
        with pytest.raises(TransportError):
            consumer.pull(mq, 0, 1)
        cluster.start_broker()
        for _ in range(50):
            try:
                assert consumer.pull(mq, 0, 1).status is PullStatus.FOUND
                break
            except TransportError:
                time.sleep(0.1)
        else:
            raise AssertionError("no pull succeeded after the broker came back")
