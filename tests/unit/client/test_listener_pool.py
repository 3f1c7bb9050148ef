"""ListenerPool: the push consumer's listener threads (no Future per call, one hand-off per batch)."""

from __future__ import annotations

import threading
import time

from support.timing import within_s

from nodes.client.listener_pool import ListenerPool


def test_calls_run_on_named_threads_never_more_than_the_pool_size():
    pool = ListenerPool(3, "ConsumeMessageThread_g")
    lock = threading.Lock()
    running, peak, names, done = [0], [0], set(), threading.Event()
    total = 12

    def call(i: int) -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            names.add(threading.current_thread().name)
        time.sleep(0.01)
        with lock:
            running[0] -= 1
            if i == total - 1:
                done.set()

    for i in range(total):
        assert pool.submit(call, i)
    assert pool.wait_finished(10)
    assert pool.unfinished == 0
    assert peak[0] == 3  # all three threads worked side by side, and no fourth was started
    assert len(names) == 3 and all(n.startswith("ConsumeMessageThread_g_") for n in names)
    pool.shutdown()


def _one_blocking_thread():
    """A one-thread pool and a call that records its argument, then blocks until `release` is set."""
    pool = ListenerPool(1, "p")
    started, release = threading.Event(), threading.Event()
    ran: list[int] = []

    def call(i: int) -> None:
        ran.append(i)
        started.set()
        release.wait(5)

    return pool, call, started, release, ran


def test_shutdown_drops_queued_calls_lets_the_running_one_finish_and_refuses_more():
    pool, call, started, release, ran = _one_blocking_thread()
    for i in range(3):
        pool.submit(call, i)
    assert started.wait(5)
    assert pool.unfinished == 3
    assert pool.shutdown() == 2  # the two queued calls are dropped
    assert not pool.submit(call, 9)
    assert not pool.wait_finished(0.05)  # the running call has not finished
    release.set()
    assert pool.wait_finished(5) and pool.unfinished == 0
    assert ran == [0]


def test_one_batch_hand_off_still_runs_its_calls_side_by_side():
    """A whole pulled batch arrives in one `submit_many`; calls that block still spread over
    every thread: each of the first four waits at a barrier the other three must reach."""
    pool = ListenerPool(4, "p")
    barrier = threading.Barrier(4)
    lock = threading.Lock()
    names: set[str] = set()
    broken: list[int] = []

    def call(i: int) -> None:
        with lock:
            names.add(threading.current_thread().name)
        if i < 4:
            try:
                barrier.wait(within_s())
            except threading.BrokenBarrierError:
                broken.append(i)

    assert pool.submit_many(call, list(range(8)))
    assert pool.wait_finished(2 * within_s())
    assert broken == []  # the four first calls ran at the same time
    assert len(names) == 4 and pool.unfinished == 0
    pool.shutdown()


def test_calls_of_one_batch_run_in_order_on_one_thread_and_each_exactly_once():
    pool = ListenerPool(1, "p")
    ran: list[int] = []
    assert pool.submit_many(ran.append, list(range(100)))
    assert pool.submit_many(ran.append, [])  # nothing to do is not an error
    assert pool.submit(ran.append, 100)
    assert pool.wait_finished(5)
    assert ran == list(range(101))
    pool.shutdown()


def test_shutdown_drops_the_untaken_rest_of_a_batch():
    pool, call, started, release, ran = _one_blocking_thread()
    assert pool.submit_many(call, [0, 1, 2, 3, 4])
    assert started.wait(5)
    assert pool.unfinished == 5
    assert pool.shutdown() == 4  # the running call stays, the other four never start
    assert not pool.submit_many(call, [9])
    release.set()
    assert pool.wait_finished(5) and pool.unfinished == 0
    assert ran == [0]


def test_a_call_that_raises_does_not_cost_the_pool_its_thread():
    pool = ListenerPool(1, "p")
    ran: list[int] = []

    def call(i: int) -> None:
        if i == 0:
            raise ValueError("boom")
        ran.append(i)

    assert pool.submit_many(call, [0, 1, 2])
    assert pool.wait_finished(5) and pool.unfinished == 0
    assert ran == [1, 2]  # the one thread went on after the failure
    pool.shutdown()
