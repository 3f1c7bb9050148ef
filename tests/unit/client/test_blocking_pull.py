"""BlockingPulls over real gRPC against a scripted PullBatch server: answers in the caller's
thread, one call per thread, deadlines, broken and ended calls, closing and reopening."""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from support.scripted_stream import ScriptedStream, failure_of_a_call_closed_under_it

from nodes.client.rpc.blocking_pull import BlockingPulls
from nodes.common import rpc
from nodes.common.errors import RequestTimeoutError, TransportError
from proto import broker_pb2, common_pb2

NEVER, ABORT, END = -1, -2, -3  # queue offsets the server treats as orders


def _pull_batch(request_iterator, context):
    """PullBatch: answers each request at once with next_begin_offset = offset + 1, except the
    orders above (never answer, abort the call, end the call)."""
    for batch in request_iterator:
        for req in batch.requests:
            if req.queue_offset == NEVER:
                continue
            if req.queue_offset == ABORT:
                context.abort(grpc.StatusCode.UNAVAILABLE, "going away (test)")
            if req.queue_offset == END:
                return
            yield broker_pb2.PullResponseBatch(responses=[broker_pb2.PullResponse(
                request_id=req.request_id, code=common_pb2.SUCCESS, next_begin_offset=req.queue_offset + 1)])


@pytest.fixture
def broker():
    scripted = ScriptedStream("PullBatch", _pull_batch, broker_pb2.PullRequestBatch, broker_pb2.PullResponseBatch)
    yield scripted
    scripted.stop()


@pytest.fixture
def pulls():
    made = BlockingPulls(rpc.make_sync_channel)
    yield made
    made.close()


def fields(offset: int) -> dict:
    return {"consumer_group": "g", "topic": "T", "queue_id": 3, "queue_offset": offset, "max_msg_nums": 32}


def test_answers_come_back_in_the_callers_thread_one_call_per_thread(broker, pulls):
    assert pulls.pull(broker.addr, fields(10), 5000).next_begin_offset == 11
    assert pulls.pull(broker.addr, fields(20), 5000).next_begin_offset == 21
    got: dict[int, list[int]] = {}

    def puller(n: int) -> None:
        got[n] = [pulls.pull(broker.addr, fields(100 * n + i), 5000).next_begin_offset for i in range(50)]

    threads = [threading.Thread(target=puller, args=(n,)) for n in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert got == {n: [100 * n + i + 1 for i in range(50)] for n in (1, 2)}
    assert broker.calls == 3  # this thread's and one for each of the two


def test_a_pull_with_no_answer_times_out_and_the_next_one_opens_a_new_call(broker, pulls):
    start = time.monotonic()
    with pytest.raises(RequestTimeoutError, match=r"pull T:3@-1 from .*: no answer within 200 ms"):
        pulls.pull(broker.addr, fields(NEVER), 200)
    assert 0.15 < time.monotonic() - start < 3
    assert pulls.pull(broker.addr, fields(5), 5000).next_begin_offset == 6
    assert broker.calls == 2


@pytest.mark.parametrize(("order", "says"), [(ABORT, "UNAVAILABLE|going away"), (END, "ended by the broker")])
def test_a_broken_or_ended_call_fails_the_pull_and_the_next_one_reopens(broker, pulls, order, says):
    with pytest.raises(TransportError, match=says):
        pulls.pull(broker.addr, fields(order), 5000)
    assert pulls.pull(broker.addr, fields(7), 5000).next_begin_offset == 8
    assert broker.calls == 2


def test_closing_the_calls_fails_a_waiting_pull_at_once_and_a_later_pull_reopens(broker, pulls):
    failure = failure_of_a_call_closed_under_it(broker, lambda: pulls.pull(broker.addr, fields(NEVER), 30_000), pulls.close_calls)
    assert isinstance(failure, TransportError)
    pulls.close()  # the channels and the watchdog too
    assert pulls.pull(broker.addr, fields(1), 5000).next_begin_offset == 2


def test_the_calls_of_a_thread_that_ended_are_closed(broker, pulls):
    done = threading.Thread(target=lambda: pulls.pull(broker.addr, fields(1), 5000))
    done.start()
    done.join(5)
    assert len(pulls._calls) == 1
    ended_call = next(iter(pulls._calls.values()))
    pulls.pull(broker.addr, fields(2), 5000)  # this thread's first call: the ended thread's goes
    assert list(pulls._calls.values()) != [ended_call] and len(pulls._calls) == 1
    assert ended_call.responses.done()


def test_a_call_cancelled_just_after_its_answer_is_not_reused(broker, pulls):
    # What the watchdog does when a pull's deadline and its answer cross: the answer was taken,
    # the call is cancelled; the thread's next pull must not fail on that call.
    pulls.pull(broker.addr, fields(1), 5000)
    (call,) = pulls._calls.values()
    call.cancel()
    assert pulls.pull(broker.addr, fields(2), 5000).next_begin_offset == 3
    assert broker.calls == 2
