"""A send stream broken by a real SIGKILL of the master: the sends in flight on it fail as a
unary call's would (the outcome is unknown), and the producer's next send, after the master
is back, goes through on a new stream."""

import concurrent.futures

import pytest
from support.timing import within_ms, within_s

from harness.waiting import wait_until
from nodes.client import Producer, PullConsumer
from nodes.common.errors import OutcomeUnknownError, RequestTimeoutError, RouteNotFoundError, TransportError
from nodes.common.types import Message

pytestmark = pytest.mark.cluster

MASTER = "broker-a-0"


def test_kill_mid_stream_fails_the_sends_in_flight_and_the_next_send_goes_through(local_cluster):
    addr = local_cluster.node(MASTER).addr
    with Producer(local_cluster.namesrv_addr, retry_times_async=0, send_timeout_ms=60_000) as producer:
        before = producer.send(Message("Broken", b"before"))
        stream = producer._instance.api.send_stream(addr)
        assert stream.opened_count == 1
        # Stopped, the master reads nothing: what the producer sends now stays in flight.
        local_cluster.pause(MASTER)
        try:
            futures = [producer.send_async(Message("Broken", b"in-flight-%d" % i)) for i in range(8)]
            wait_until(lambda: stream.pending_count, within_ms(), "sends in flight on the stream",
                       done=lambda n: n >= 1)
            in_flight = stream.pending_count
        finally:
            local_cluster.kill(MASTER)  # SIGKILL works on a stopped process
        _, not_done = concurrent.futures.wait(futures, timeout=within_s(60_000))
        assert not not_done, "a send in flight on the broken stream never resolved"
        errors = [f.exception() for f in futures]
        # A send still waiting behind the stream's window goes out after the break: it fails to
        # connect, or, once the name server has dropped the dead master, finds no writable queue.
        assert all(isinstance(e, (TransportError, RouteNotFoundError)) for e in errors), errors
        # the requests on the stream may have reached the broker: their outcome is unknown, as a
        # unary call reset mid-way reports it
        unknown = [e for e in errors if isinstance(e, OutcomeUnknownError)]
        assert len(unknown) >= in_flight >= 1
        assert stream.pending_count == 0

        local_cluster.restart(MASTER)
        local_cluster.wait_until_routable("Broken")
        after = producer.send(Message("Broken", b"after"))
        assert stream.opened_count >= 2  # a new call, opened by a send after the break
    with PullConsumer(local_cluster.namesrv_addr, "after-break") as consumer:
        for result, body in ((before, b"before"), (after, b"after")):
            pulled = consumer.pull(result.message_queue, result.queue_offset, 1)
            assert [m.body for m in pulled.messages] == [body]


def test_a_send_past_its_timeout_fails_alone_and_its_late_answer_is_dropped(local_cluster):
    """On the loop's stream (`send_orderly` is always made there)."""
    addr = local_cluster.node(MASTER).addr
    timeout_ms = 1_000
    with Producer(local_cluster.namesrv_addr, send_timeout_ms=timeout_ms, retry_times=0) as producer:
        producer.send_orderly(Message("Late", b"warm-up"), "k")
        stream = producer._instance.api.send_stream(addr)
        local_cluster.pause(MASTER)
        try:
            with pytest.raises(RequestTimeoutError) as info:
                producer.send_orderly(Message("Late", b"late"), "k")
            assert info.value.indeterminate  # it may still be stored: the master got the request
        finally:
            local_cluster.resume(MASTER)
        on_time = producer.send_orderly(Message("Late", b"on-time"), "k")
        # the same call carried both: the timeout failed one send, not the stream
        assert stream.opened_count == 1 and stream.pending_count == 0
    with PullConsumer(local_cluster.namesrv_addr, "late-check") as consumer:
        pulled = consumer.pull(on_time.message_queue, on_time.queue_offset, 1)
        assert [m.body for m in pulled.messages] == [b"on-time"]


def test_a_send_in_the_callers_thread_past_its_timeout_is_unknown_and_the_next_one_goes_through(local_cluster):
    """On the calling thread's own stream (`send` once the route is cached): the timed-out call is
    dropped, and the next send opens another; the late answer reaches nobody."""
    timeout_ms = 1_000
    with Producer(local_cluster.namesrv_addr, send_timeout_ms=timeout_ms, retry_times=0) as producer:
        producer.send(Message("LateHere", b"route"))  # the loop fetches the route
        producer.send(Message("LateHere", b"warm-up"))  # this thread's call, connected
        sends = producer._instance.api.blocking_sends
        assert sends.open_calls == 1
        local_cluster.pause(MASTER)
        try:
            with pytest.raises(RequestTimeoutError) as info:
                producer.send(Message("LateHere", b"late"))
            assert info.value.indeterminate  # it may still be stored: the master got the request
            assert sends.open_calls == 0
        finally:
            local_cluster.resume(MASTER)
        on_time = producer.send(Message("LateHere", b"on-time"))
        assert sends.open_calls == 1
    with PullConsumer(local_cluster.namesrv_addr, "late-here-check") as consumer:
        pulled = consumer.pull(on_time.message_queue, on_time.queue_offset, 1)
        assert [m.body for m in pulled.messages] == [b"on-time"]
