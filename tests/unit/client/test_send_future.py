"""SendFuture behaves as a concurrent.futures.Future for every caller, with or without waiters."""

import concurrent.futures
import threading

import pytest

from nodes.client.send_future import SendFuture


def test_is_a_concurrent_future_and_starts_pending_without_a_condition():
    fut = SendFuture()
    assert isinstance(fut, concurrent.futures.Future)
    assert not fut.done() and fut._cond is None


def test_result_and_callbacks_without_any_waiter():
    fut = SendFuture()
    seen = []
    fut.add_done_callback(lambda f: seen.append(("before", f.result())))
    assert fut.set_running_or_notify_cancel()
    fut.set_result(7)
    fut.add_done_callback(lambda f: seen.append(("after", f.result())))
    assert fut.done() and fut.result(0) == 7 and fut.exception(0) is None
    assert seen == [("before", 7), ("after", 7)]
    assert fut._cond is None  # nobody had to wait: no Condition was made


def test_exception_is_raised_by_result():
    fut = SendFuture()
    fut.set_exception(KeyError("k"))
    with pytest.raises(KeyError):
        fut.result()
    assert isinstance(fut.exception(), KeyError)


def test_setting_twice_is_refused():
    fut = SendFuture()
    fut.set_result(1)
    with pytest.raises(concurrent.futures.InvalidStateError):
        fut.set_result(2)
    with pytest.raises(concurrent.futures.InvalidStateError):
        fut.set_exception(ValueError())
    assert fut.result() == 1


def test_result_timeout_while_pending():
    with pytest.raises(concurrent.futures.TimeoutError):
        SendFuture().result(timeout=0.01)


def test_cancel_before_running_and_not_after():
    cancelled = SendFuture()
    calls = []
    cancelled.add_done_callback(calls.append)
    assert cancelled.cancel() and cancelled.cancelled() and calls == [cancelled]
    assert not cancelled.set_running_or_notify_cancel()
    running = SendFuture()
    assert running.set_running_or_notify_cancel()
    assert not running.cancel()
    with pytest.raises(concurrent.futures.CancelledError):
        cancelled.result()


def test_a_blocked_waiter_is_woken_by_the_setter_thread():
    for _ in range(200):  # each round races the waiter's Condition against the setter
        fut = SendFuture()
        got = []
        waiter = threading.Thread(target=lambda f=fut, out=got: out.append(f.result(timeout=30)))
        waiter.start()
        fut.set_running_or_notify_cancel()
        fut.set_result("done")
        waiter.join(30)
        assert got == ["done"]


def test_wait_and_as_completed_see_futures_finished_before_and_after():
    early, late = SendFuture(), SendFuture()
    early.set_result(1)
    timer = threading.Timer(0.01, late.set_exception, (RuntimeError("late"),))
    timer.start()
    done, not_done = concurrent.futures.wait([early, late], timeout=30)
    assert done == {early, late} and not not_done
    assert set(concurrent.futures.as_completed([early, late], timeout=30)) == {early, late}
    timer.join()


def test_first_completed_returns_on_a_later_set():
    futs = [SendFuture() for _ in range(3)]
    threading.Timer(0.01, futs[1].set_result, ("x",)).start()
    done, _ = concurrent.futures.wait(futs, timeout=30, return_when=concurrent.futures.FIRST_COMPLETED)
    assert done == {futs[1]}
