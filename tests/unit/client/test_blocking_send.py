"""BlockingSends over real gRPC against a scripted SendStream server: answers in the caller's
thread matched by request id, one call per thread, and each failure read as the loop's send
stream reads it (a timeout, a broken or ended call: the outcome is unknown; nobody listening:
nothing was sent)."""

from __future__ import annotations

import socket
import threading
import time

import grpc
import pytest
from support.scripted_stream import ScriptedStream, failure_of_a_call_closed_under_it

from nodes.client.rpc.blocking_send import BlockingSends
from nodes.common import rpc
from nodes.common.errors import OutcomeUnknownError, RequestTimeoutError, TransportError
from proto import broker_pb2, common_pb2

NEVER, ABORT, END = -1, -2, -3  # queue ids the server treats as orders


def _send_stream(request_iterator, context):
    """SendStream: answers each request at once with queue_offset = its queue id, after a stale
    answer for another request id (which the client must skip), except the orders above (never
    answer, abort the call, end the call)."""
    for req in request_iterator:
        if req.queue_id == NEVER:
            continue
        if req.queue_id == ABORT:
            context.abort(grpc.StatusCode.UNAVAILABLE, "going away (test)")
        if req.queue_id == END:
            return
        yield broker_pb2.SendMessageResponse(request_id=req.request_id + 1000, code=common_pb2.SYSTEM_ERROR)
        yield broker_pb2.SendMessageResponse(
            request_id=req.request_id, code=common_pb2.SUCCESS,
            entries=[broker_pb2.SendEntry(queue_offset=req.queue_id, offset_msg_id=req.topic)])


@pytest.fixture
def broker():
    scripted = ScriptedStream("SendStream", _send_stream, broker_pb2.SendMessageRequest, broker_pb2.SendMessageResponse)
    yield scripted
    scripted.stop()


@pytest.fixture
def sends():
    made = BlockingSends(rpc.make_sync_channel)
    yield made
    made.close()


def request(queue_id: int, topic: str = "T") -> broker_pb2.SendMessageRequest:
    return broker_pb2.SendMessageRequest(topic=topic, queue_id=queue_id,
                                         messages=[broker_pb2.OutgoingMessage(body=b"x")])


def test_answers_come_back_in_the_callers_thread_matched_by_request_id(broker, sends):
    first = sends.send(broker.addr, request(3, "a"), 5000, "send a")
    assert (first.code, first.entries[0].queue_offset, first.entries[0].offset_msg_id) == (common_pb2.SUCCESS, 3, "a")
    got: dict[int, list[int]] = {}

    def sender(n: int) -> None:
        got[n] = [sends.send(broker.addr, request(100 * n + i), 5000, "send").entries[0].queue_offset
                  for i in range(30)]

    threads = [threading.Thread(target=sender, args=(n,)) for n in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert got == {n: [100 * n + i for i in range(30)] for n in (1, 2)}
    assert broker.calls == 3  # this thread's and one for each of the two


def test_a_send_with_no_answer_times_out_unknown_and_the_next_one_opens_a_new_call(broker, sends):
    start = time.monotonic()
    with pytest.raises(RequestTimeoutError, match="send x: deadline exceeded; the outcome is unknown") as info:
        sends.send(broker.addr, request(NEVER), 200, "send x")
    assert info.value.indeterminate
    assert 0.15 < time.monotonic() - start < 3
    assert sends.send(broker.addr, request(5), 5000, "send").entries[0].queue_offset == 5
    assert broker.calls == 2


@pytest.mark.parametrize(("order", "says"), [(ABORT, "UNAVAILABLE|going away"), (END, "ended by the broker")])
def test_a_broken_or_ended_call_leaves_the_outcome_unknown_and_the_next_send_reopens(broker, sends, order, says):
    with pytest.raises(OutcomeUnknownError, match=says) as info:
        sends.send(broker.addr, request(order), 5000, "send y")
    assert info.value.indeterminate and "send y" in str(info.value)
    assert sends.send(broker.addr, request(7), 5000, "send").entries[0].queue_offset == 7
    assert broker.calls == 2


def test_nobody_listening_is_a_determinate_transport_error(sends):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(TransportError) as info:
        sends.send(f"127.0.0.1:{port}", request(1), 3000, "send z")
    assert not info.value.indeterminate


def test_closing_the_calls_fails_a_waiting_send_at_once_and_a_later_send_reopens(broker, sends):
    failure = failure_of_a_call_closed_under_it(broker, lambda: sends.send(broker.addr, request(NEVER), 30_000, "send w"), sends.close_calls)
    assert isinstance(failure, OutcomeUnknownError)
    sends.close()  # the channels and the watchdog too
    assert sends.send(broker.addr, request(1), 5000, "send").entries[0].queue_offset == 1
