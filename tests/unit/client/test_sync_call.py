"""A synchronous call's hand-off to the loop (SyncCall, through ClientInstance.run and a pull):
answered while the caller waits, failing, timing out before and after the loop starts it,
cancelled on the loop, and the instance closed under it. No RPC is made."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import pytest
from support.timing import within_s

from nodes.client import MessageQueue, PullConsumer, PullStatus
from nodes.client.instance import ClientInstance
from nodes.client.pull_api import PullApi
from nodes.common.errors import RemoteError, RequestTimeoutError
from proto import broker_pb2, common_pb2

MQ = MessageQueue("T", "broker-a", 1)


def in_thread(fn):
    """Run `fn` in a thread; returns a future of its outcome."""
    fut: concurrent.futures.Future = concurrent.futures.Future()

    def main():
        try:
            fut.set_result(fn())
        except BaseException as exc:
            fut.set_exception(exc)

    threading.Thread(target=main, daemon=True).start()
    return fut


def test_an_answer_that_comes_while_the_caller_waits_is_returned(instance):
    started = threading.Event()
    answer = threading.Event()

    async def later():
        started.set()
        while not answer.is_set():
            await asyncio.sleep(0.005)
        return "answered"

    outcome = in_thread(lambda: instance.run(later(), within_s(1000)))
    assert started.wait(within_s())
    assert not outcome.done()  # the caller is blocked on the answer
    answer.set()
    assert outcome.result(within_s()) == "answered"


def test_a_failure_after_the_caller_waits_is_raised_as_is(instance):
    error = RemoteError("refused", code="SYSTEM_BUSY")

    async def fails():
        await asyncio.sleep(0.01)
        raise error

    with pytest.raises(RemoteError) as info:
        instance.run(fails(), within_s(1000))
    assert info.value is error


def test_a_timeout_before_the_loop_starts_the_call_means_it_never_runs(instance):
    """The caller sees the same RequestTimeoutError as with a concurrent future; unlike the
    future's chain (which let the coroutine take its first step before the cancel arrived), the
    cancel now reaches the task before that step, so a pull the caller gave up on is not sent."""
    blocking = threading.Event()
    release = threading.Event()
    ran = threading.Event()

    async def block_the_loop():
        blocking.set()
        release.wait(within_s(1000))  # blocks the loop thread on purpose

    async def never():
        ran.set()

    blocker = instance.submit(block_the_loop())
    assert blocking.wait(within_s())  # the loop is stuck before the call below reaches it
    with pytest.raises(RequestTimeoutError) as info:
        instance.run(never(), 0.05, "late")
    assert info.value.indeterminate and "late" in str(info.value)
    release.set()
    blocker.result(within_s(1000))
    assert instance.run(asyncio.sleep(0, "after"), within_s(1000)) == "after"  # the loop has run the hand-off
    assert not ran.is_set()


def test_a_call_cancelled_on_the_loop_raises_cancelled_error(instance):
    async def cancelled():
        raise asyncio.CancelledError

    with pytest.raises(concurrent.futures.CancelledError):
        instance.run(cancelled(), within_s(1000))


def test_closing_the_instance_under_a_waiting_call_ends_the_wait():
    inst = ClientInstance("127.0.0.1:9876", name="t")
    inst.start()
    started = threading.Event()
    finished = threading.Event()

    async def forever():
        started.set()
        try:
            await asyncio.sleep(3600)
        finally:
            finished.set()

    outcome = in_thread(lambda: inst.run(forever(), 3600))
    assert started.wait(within_s())
    inst.close()
    with pytest.raises(concurrent.futures.CancelledError):
        outcome.result(within_s(1000))
    assert finished.is_set()


# --- through the pull consumer -------------------------------------------------------------------

@pytest.fixture
def consumer_with(fakes, wired_instance_factory):
    made = []

    def make(handler):
        consumer = PullConsumer("127.0.0.1:9876", "cg")
        inst = wired_instance_factory({"T": fakes.two_broker_route()}, handler, timing=consumer.timing)
        consumer._instance = inst
        consumer._api = PullApi(inst, "cg")
        consumer.start()
        made.append(consumer)
        return consumer

    yield make
    for consumer in made:
        consumer.shutdown()


def test_pulls_in_a_row_each_get_their_own_answer(consumer_with):
    def handler(addr, method, request):
        return broker_pb2.PullResponse(code=common_pb2.PULL_NOT_FOUND, remark="NO_MESSAGE_IN_QUEUE",
                                       next_begin_offset=request["queue_offset"] + 1, min_offset=0, max_offset=99)

    consumer = consumer_with(handler)
    for queue_offset in range(20):
        result = consumer.pull(MQ, queue_offset, 32)
        assert result.status is PullStatus.NO_NEW_MSG and result.next_begin_offset == queue_offset + 1


def test_a_pull_the_broker_refuses_raises_remote_error(consumer_with):
    def handler(addr, method, request):
        return broker_pb2.PullResponse(code=common_pb2.SYSTEM_BUSY, remark="busy")

    consumer = consumer_with(handler)
    with pytest.raises(RemoteError):
        consumer.pull(MQ, 0, 32)
    assert consumer.pull_async(MQ, 0, 32).exception(within_s(1000)) is not None


# --- started calls: work begun by a loop callback and settled by whoever ends it -------------------

def test_a_started_call_returns_what_its_settle_is_given_later(instance):
    held = []

    def start(settle):
        assert instance.in_loop_thread()
        held.append(settle)

    outcome = in_thread(lambda: instance.run_started(start, within_s(1000), "started"))
    while not held:
        threading.Event().wait(0.001)
    assert not outcome.done()  # nothing settled yet: the caller waits
    instance.submit(_settle_on_loop(held[0], "answered", None)).result(within_s(1000))
    assert outcome.result(within_s()) == "answered"


async def _settle_on_loop(settle, result, error):
    settle(result, error)
    settle("again", None)  # only the first settle counts


def test_a_started_call_raises_its_settled_error_or_what_start_raised(instance):
    error = RemoteError("refused", code="SYSTEM_BUSY")
    with pytest.raises(RemoteError) as info:
        instance.run_started(lambda settle: settle(None, error), within_s(1000))
    assert info.value is error

    def start(settle):
        raise ValueError("bad start")

    with pytest.raises(ValueError, match="bad start"):
        instance.run_started(start, within_s(1000))
    with pytest.raises(concurrent.futures.CancelledError):
        instance.run_started(lambda settle: settle(None, asyncio.CancelledError()), within_s(1000))


def test_a_started_call_that_is_never_settled_times_out(instance):
    with pytest.raises(RequestTimeoutError) as info:
        instance.run_started(lambda settle: None, 0.05, "silent")
    assert info.value.indeterminate and "silent" in str(info.value)


def test_a_pull_without_a_cached_route_and_one_with_it_answer_and_route_alike(fakes, wired_instance_factory):
    """PullApi.start_pull runs pull_kernel as a task until the route is cached, then sends from
    the loop callback itself; both follow the broker's suggestion and report the same event."""
    events = []

    def handler(addr, method, request):
        return broker_pb2.PullResponse(code=common_pb2.PULL_NOT_FOUND, remark="NO_MESSAGE_IN_QUEUE",
                                       next_begin_offset=request["queue_offset"], min_offset=0, max_offset=9,
                                       suggest_which_broker_id=1)

    consumer = PullConsumer("127.0.0.1:9876", "cg")
    inst = wired_instance_factory({"T": fakes.two_broker_route()}, handler, timing=consumer.timing)
    consumer._instance = inst
    consumer._api = PullApi(inst, "cg", events.append)
    consumer.start()
    try:
        assert inst.routes.route("T") is None  # the first pull has to fetch it
        first = consumer.pull(MQ, 4, 32)
        assert inst.routes.route("T") is not None
        second = consumer.pull(MQ, 4, 32)
    finally:
        consumer.shutdown()
    for result in (first, second):
        assert result.status is PullStatus.NO_NEW_MSG and result.suggest_which_broker_id == 1
    assert (first.requested_broker_id, second.requested_broker_id) == (0, 1)  # the suggestion was followed
    assert [e["requested_broker_id"] for e in events] == [0, 1]
    assert sorted(events[0]) == sorted(events[1])  # the same fields either way
    assert [addr for addr, method, _ in inst.calls if method == "Pull"] == ["a0:1", "a1:1"]
    assert [e["addr"] for e in events] == ["a0:1", "a1:1"]


def test_a_submitted_started_call_resolves_its_future_and_can_be_cancelled_only_before_it_starts(instance):
    fut = instance.submit_started(lambda settle: settle("answered", None))
    assert fut.result(within_s(1000)) == "answered"
    failing = instance.submit_started(lambda settle: settle(None, RemoteError("refused", code="SYSTEM_BUSY")))
    assert isinstance(failing.exception(within_s(1000)), RemoteError)

    blocking, release, ran = threading.Event(), threading.Event(), threading.Event()

    async def block_the_loop():
        blocking.set()
        release.wait(within_s(1000))  # blocks the loop thread on purpose

    blocker = instance.submit(block_the_loop())
    assert blocking.wait(within_s())
    early = instance.submit_started(lambda settle: ran.set())
    assert early.cancel()  # the loop has not begun it
    release.set()
    blocker.result(within_s(1000))
    held = []
    late = instance.submit_started(held.append)
    instance.run(asyncio.sleep(0), within_s(1000))  # the loop has begun both by now
    assert not ran.is_set() and early.cancelled()
    assert held and not late.cancel()  # begun: it runs to its own end
    instance.submit(_settle_on_loop(held[0], "late answer", None)).result(within_s(1000))
    assert late.result(within_s(1000)) == "late answer"
