"""Orderly consumption decisions with fakes: the result table (auto-commit on and off), suspend and
consume-again, reconsume limits and dead letters, the lock checks between batches, one listener
call at a time per queue, the continuous-consume cap, waiting for a running call, shutdown."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import threading
import time
from typing import Any

import pytest

from nodes.client.consume_orderly import (
    SUSPEND_DEFAULT,
    ConsumeMessageOrderlyService,
    ConsumeOrderlyContext,
    clamp_suspend_ms,
    orderly_send_back_message,
)
from nodes.client.consumer_state import ConsumerState
from nodes.client.process_queue import ProcessQueue
from nodes.common import constants as c
from nodes.common.clock import SYSTEM_CLOCK
from nodes.common.config import Timing
from nodes.common.types import ConsumeOrderlyStatus, MessageExt, MessageModel, MessageQueue

SUCCESS = ConsumeOrderlyStatus.SUCCESS
COMMIT = ConsumeOrderlyStatus.COMMIT
ROLLBACK = ConsumeOrderlyStatus.ROLLBACK
SUSPEND = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
MQ = MessageQueue("T", "broker-a", 0)
FAST = Timing().scaled(0.005)  # suspend 5 ms, lock retries 15 ms, client lease 150 ms, cap 300 ms


def msg(queue_offset: int, *, times: int = 0, topic: str = "T") -> MessageExt:
    return MessageExt(topic, b"body-%d" % queue_offset, {}, f"id{queue_offset}", "", 0, queue_offset,
                      1000 + queue_offset, times, 0, 0, "broker-a")


class Store:
    def __init__(self) -> None:
        self.updates: list[tuple[MessageQueue, int, bool]] = []

    def update_offset(self, mq, offset, *, increase_only):
        self.updates.append((mq, offset, increase_only))


class Harness:
    """An orderly service on the running loop with recording fakes around it."""

    def __init__(self, listener: Any = None, *, timing: Timing = FAST, model: MessageModel = MessageModel.CLUSTERING,
                 max_reconsume_times: int = -1, send_back_ok: bool = True, lock_ok: bool = True,
                 batch: int = 1, threads: int = 4, client_lease_ms: int | None = 600_000) -> None:
        if client_lease_ms is not None:  # the fake lock_one renews nothing: keep the lease out of the way
            timing = dataclasses.replace(timing, client_lock_lease_ms=client_lease_ms)
        self.store = Store()
        self.locks: list[MessageQueue] = []
        self.dead: list[tuple[int, str]] = []  # (queue offset, RECONSUME_TIME property)
        self.expired: list[MessageQueue] = []
        self.send_back_ok = send_back_ok
        self.lock_ok = lock_ok
        self.state = ConsumerState(group="g", message_model=model, clock=SYSTEM_CLOCK,
                                   client_lock_lease_ms=timing.client_lock_lease_ms, orderly=True)
        self.svc = ConsumeMessageOrderlyService(
            state=self.state, listener=listener or (lambda msgs, ctx: SUCCESS),
            offset_store=self.store, lock_one=self._lock_one, send_back=self._send_back,
            timing=timing, thread_count=threads, batch_max_size=batch, max_reconsume_times=max_reconsume_times,
            on_lock_expired=lambda mq, pq: self.expired.append(mq))
        self.svc.start()

    async def _lock_one(self, mq):
        self.locks.append(mq)
        return self.lock_ok

    async def _send_back(self, m):
        self.dead.append((m.queue_offset, m.properties.get(c.PROPERTY_RECONSUME_TIME, "")))
        return self.send_back_ok


def locked_pq(*offsets: int, times: int = 0) -> ProcessQueue:
    pq = ProcessQueue(now_ms=SYSTEM_CLOCK.monotonic_ms())
    pq.locked = True
    pq.put_messages([msg(o, times=times) for o in offsets])
    return pq


async def settle(h: Harness, budget_s: float = 3.0, until: Any = None) -> None:
    deadline = time.monotonic() + budget_s
    while time.monotonic() < deadline:
        await asyncio.sleep(0.01)
        if until is not None and until():
            return
        if until is None and not h.svc.in_flight and not h.svc._later:
            return


# --- pure ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("requested", "expected"), [
    (SUSPEND_DEFAULT, 1_000), (0, 10), (9, 10), (10, 10), (2_500, 2_500), (30_000, 30_000), (45_000, 30_000)])
def test_suspend_time_defaults_and_is_clamped(requested, expected):
    assert clamp_suspend_ms(requested, default_ms=1_000, min_ms=10, max_ms=30_000) == expected


def test_the_dead_letter_copy_keeps_the_reconsume_count_and_names_the_origin():
    m = msg(7, times=3)
    m.properties["TRAN_MSG"] = "true"
    copy = orderly_send_back_message(m, "g", 3)
    assert copy.topic == "%RETRY%g" and copy.body == m.body
    props = copy.properties
    assert props[c.PROPERTY_RECONSUME_TIME] == "3"  # not + 1: the broker sees it at the limit
    assert props[c.PROPERTY_MAX_RECONSUME_TIMES] == "3"
    assert props[c.PROPERTY_RETRY_TOPIC] == "T" and props[c.PROPERTY_ORIGIN_MESSAGE_ID] == "id7"
    assert props[c.PROPERTY_DELAY] == "6" and "TRAN_MSG" not in props
    m.properties[c.PROPERTY_ORIGIN_MESSAGE_ID] = "first"
    assert orderly_send_back_message(m, "g", 3).properties[c.PROPERTY_ORIGIN_MESSAGE_ID] == "first"


# --- the result table ---------------------------------------------------------------------------

async def _result(status: ConsumeOrderlyStatus, *, auto_commit: bool = True, harness: Harness | None = None,
                  offsets: tuple[int, ...] = (5, 6), take: int = 2, times: int = 0
                  ) -> tuple[Harness, ProcessQueue, list[MessageExt], bool]:
    h = harness or Harness()
    pq = locked_pq(*offsets, times=times)
    msgs = pq.take_messages(take, now_ms=0)
    go_on = await h.svc.process_consume_result(msgs, status, ConsumeOrderlyContext(MQ, auto_commit=auto_commit),
                                               pq, MQ)
    return h, pq, msgs, go_on


@pytest.mark.parametrize("status", [SUCCESS, COMMIT, ROLLBACK])
def test_with_auto_commit_success_commit_and_rollback_all_commit(status):
    async def run():
        h, pq, _, go_on = await _result(status)
        assert go_on and pq.msg_count == 0 and pq.taken_offsets() == []
        assert h.store.updates == [(MQ, 7, False)]  # stored even if it goes backwards
    asyncio.run(run())


def test_suspend_puts_the_batch_back_first_and_counts_a_reconsume():
    async def run():
        h, pq, msgs, go_on = await _result(SUSPEND, offsets=(5, 6, 7))
        assert not go_on and h.store.updates == []
        assert pq.offsets() == [5, 6, 7] and pq.taken_offsets() == []
        assert [m.reconsume_times for m in msgs] == [1, 1]
        assert h.svc._later  # the queue comes back after the suspend time
        await settle(h)
    asyncio.run(run())


def test_a_message_at_its_limit_is_dead_lettered_and_the_batch_committed():
    async def run():
        h, pq, _, go_on = await _result(SUSPEND, harness=Harness(max_reconsume_times=2), times=2)
        assert go_on and h.dead == [(5, "2"), (6, "2")]
        assert h.store.updates == [(MQ, 7, False)] and pq.msg_count == 0
        assert h.svc.stats.dead_lettered == 2
    asyncio.run(run())


def test_a_failed_dead_letter_send_suspends_the_queue_instead():
    async def run():
        h, pq, msgs, go_on = await _result(SUSPEND, harness=Harness(max_reconsume_times=2, send_back_ok=False),
                                           times=2)
        assert not go_on and h.store.updates == [] and pq.offsets() == [5, 6]
        assert [m.reconsume_times for m in msgs] == [3, 3]
        await settle(h)
    asyncio.run(run())


def test_the_default_limit_is_unbounded():
    async def run():
        h, _, _, go_on = await _result(SUSPEND, times=10_000)
        assert not go_on and h.dead == []
        assert h.svc.max_reconsume_times == 2**31 - 1
        await settle(h)
    asyncio.run(run())


def test_without_auto_commit_success_leaves_the_batch_in_flight_until_commit():
    async def run():
        h = Harness()
        pq = locked_pq(1, 2, 3)
        ctx = ConsumeOrderlyContext(MQ, auto_commit=False)
        first = pq.take_messages(1, now_ms=0)
        assert await h.svc.process_consume_result(first, SUCCESS, ctx, pq, MQ)
        assert h.store.updates == [] and pq.taken_offsets() == [1]
        second = pq.take_messages(1, now_ms=0)
        assert await h.svc.process_consume_result(second, COMMIT, ctx, pq, MQ)
        assert h.store.updates == [(MQ, 3, False)] and pq.taken_offsets() == [] and pq.offsets() == [3]
    asyncio.run(run())


def test_without_auto_commit_rollback_puts_every_uncommitted_message_back():
    async def run():
        h = Harness()
        pq = locked_pq(1, 2, 3)
        ctx = ConsumeOrderlyContext(MQ, auto_commit=False)
        assert await h.svc.process_consume_result(pq.take_messages(1, now_ms=0), SUCCESS, ctx, pq, MQ)
        assert not await h.svc.process_consume_result(pq.take_messages(1, now_ms=0), ROLLBACK, ctx, pq, MQ)
        assert pq.offsets() == [1, 2, 3] and h.store.updates == [] and h.svc.stats.rollbacks == 1
        await settle(h)
    asyncio.run(run())


def test_without_auto_commit_suspend_puts_back_only_the_batch():
    async def run():
        h = Harness()
        pq = locked_pq(1, 2, 3)
        ctx = ConsumeOrderlyContext(MQ, auto_commit=False)
        assert await h.svc.process_consume_result(pq.take_messages(1, now_ms=0), SUCCESS, ctx, pq, MQ)
        assert not await h.svc.process_consume_result(pq.take_messages(1, now_ms=0), SUSPEND, ctx, pq, MQ)
        assert pq.offsets() == [2, 3] and pq.taken_offsets() == [1]
        await settle(h)
    asyncio.run(run())


def test_a_dropped_queue_commits_nothing():
    async def run():
        h = Harness()
        pq = locked_pq(1)
        msgs = pq.take_messages(1, now_ms=0)
        pq.dropped = True
        assert await h.svc.process_consume_result(msgs, SUCCESS, ConsumeOrderlyContext(MQ), pq, MQ)
        assert h.store.updates == []
    asyncio.run(run())


# --- consume requests -------------------------------------------------------------------------------

class Recorder:
    """A listener that records calls, checks no two run at once per queue, and answers by a rule."""

    def __init__(self, answer: Any = None, work_s: float = 0.0) -> None:
        self.calls: list[tuple[int, list[int], int]] = []  # (queue id, offsets, reconsume times of the first)
        self.answer = answer or (lambda m, n: SUCCESS)
        self.work_s = work_s
        self.lock = threading.Lock()
        self.running: dict[int, int] = {}
        self.overlaps = 0
        self.at: list[float] = []

    def __call__(self, msgs, ctx):
        qid = ctx.message_queue.queue_id
        with self.lock:
            self.running[qid] = self.running.get(qid, 0) + 1
            if self.running[qid] > 1:
                self.overlaps += 1
            self.calls.append((qid, [m.queue_offset for m in msgs], msgs[0].reconsume_times))
            self.at.append(time.monotonic())
            n = sum(1 for call in self.calls if call[1] == [m.queue_offset for m in msgs])
        time.sleep(self.work_s)
        with self.lock:
            self.running[qid] -= 1
        return self.answer(msgs[0], n)


def test_a_queue_is_consumed_in_order_one_call_at_a_time_and_queues_in_parallel():
    rec = Recorder(work_s=0.005)

    async def run():
        h = Harness(rec)
        queues = [MessageQueue("T", "broker-a", i) for i in range(3)]
        pqs = [locked_pq(*range(10)) for _ in queues]
        for _ in range(3):  # dispatch repeatedly: extra requests must wait, not run alongside
            for pq, mq in zip(pqs, queues, strict=True):
                h.svc.submit_consume_request(pq, mq, True)
        await settle(h, until=lambda: len(rec.calls) >= 30 and not h.svc.in_flight)
        assert rec.overlaps == 0
        for mq in queues:
            assert [call[1][0] for call in rec.calls if call[0] == mq.queue_id] == list(range(10))
        assert all(pq.msg_count == 0 and not pq.consuming for pq in pqs)
        assert sorted(u[1] for u in h.store.updates if u[0] == queues[0]) == list(range(1, 11))
        await h.svc.shutdown(1000)
    asyncio.run(run())


def test_a_suspended_message_comes_back_first_after_the_suspend_time():
    timing = Timing().scaled(0.05)  # suspend 50 ms
    rec = Recorder(answer=lambda m, n: SUSPEND if m.queue_offset == 1 and n <= 2 else SUCCESS)

    async def run():
        h = Harness(rec, timing=timing)
        pq = locked_pq(0, 1, 2, 3)
        h.svc.submit_consume_request(pq, MQ, True)
        await settle(h, until=lambda: len(rec.calls) >= 6)
        assert [call[1] for call in rec.calls] == [[0], [1], [1], [1], [2], [3]]
        assert [call[2] for call in rec.calls[1:4]] == [0, 1, 2]  # each suspend counts a reconsume
        gaps = [rec.at[i + 1] - rec.at[i] for i in (1, 2)]
        assert all(g >= timing.suspend_current_queue_ms / 1000 * 0.9 for g in gaps), gaps
        await h.svc.shutdown(1000)
    asyncio.run(run())


def test_the_context_can_set_the_suspend_time():
    def answer(msgs, ctx):
        ctx.suspend_current_queue_time_ms = 120
        return SUSPEND if len(seen) == 1 else SUCCESS

    seen: list[float] = []

    def listener(msgs, ctx):
        seen.append(time.monotonic())
        return answer(msgs, ctx)

    async def run():
        h = Harness(listener, timing=Timing().scaled(0.01))  # default suspend 10 ms
        h.svc.submit_consume_request(locked_pq(0), MQ, True)
        await settle(h, until=lambda: len(seen) >= 2)
        assert seen[1] - seen[0] >= 0.11
        await h.svc.shutdown(1000)
    asyncio.run(run())


@pytest.mark.parametrize("answer", [None, "ok", RuntimeError("boom")])
def test_an_exception_or_a_wrong_answer_suspends(answer):
    calls: list[int] = []

    def listener(msgs, ctx):
        calls.append(msgs[0].queue_offset)
        if len(calls) > 1:
            return SUCCESS
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def run():
        h = Harness(listener)
        h.svc.submit_consume_request(locked_pq(0, 1), MQ, True)
        await settle(h, until=lambda: len(calls) >= 3)
        assert calls == [0, 0, 1]
        await h.svc.shutdown(1000)
    asyncio.run(run())


def test_an_unlocked_queue_is_locked_later_and_then_consumed():
    rec = Recorder()

    async def run():
        h = Harness(rec)
        pq = locked_pq(0, 1)
        pq.locked = False

        async def lock_and_flag(mq):
            h.locks.append(mq)
            pq.locked = True
            pq.last_lock_timestamp_ms = SYSTEM_CLOCK.monotonic_ms()
            return True

        h.svc.lock_one = lock_and_flag
        h.svc.submit_consume_request(pq, MQ, True)
        await settle(h, until=lambda: len(rec.calls) >= 2)
        assert h.locks == [MQ] and [call[1] for call in rec.calls] == [[0], [1]]
        await h.svc.shutdown(1000)
    asyncio.run(run())


def test_a_failed_lock_retries_much_later_and_consumes_nothing():
    rec = Recorder()

    async def run():
        h = Harness(rec, lock_ok=False)
        attempts: list[float] = []

        async def lock_one(mq):
            attempts.append(time.monotonic())
            return False

        h.svc.lock_one = lock_one
        pq = locked_pq(0)
        pq.locked = False
        h.svc.submit_consume_request(pq, MQ, True)
        await settle(h, until=lambda: len(attempts) >= 3)
        await h.svc.shutdown(1000)
        assert rec.calls == [] and len(attempts) >= 3
        gaps = [b - a for a, b in itertools.pairwise(attempts)]
        assert min(gaps) >= FAST.orderly_lock_failed_retry_ms / 1000 * 0.9, gaps
    asyncio.run(run())


def test_an_expired_client_lock_stops_consumption_between_batches():
    lease_ms = 300
    starts: list[int] = []

    def listener(msgs, ctx):
        starts.append(ctx.consume_start_mono_ms)
        time.sleep(0.12)
        return SUCCESS

    async def run():
        h = Harness(listener, lock_ok=False, client_lease_ms=lease_ms)
        pq = locked_pq(*range(10))
        h.svc.submit_consume_request(pq, MQ, True)
        await asyncio.sleep(0.8)
        # calls start only while the lock is valid (0, 120, 240 ms: the third runs past the lease)
        assert 1 <= len(starts) <= 3 and all(t <= pq.last_lock_timestamp_ms + lease_ms for t in starts), starts
        assert pq.offsets() and not pq.taken_offsets()  # the rest waits for a lock
        assert h.expired and set(h.expired) == {MQ}  # reported to the locker, which records it once per lock
        assert h.locks  # it tries to lock again
        await h.svc.shutdown(1000)
    asyncio.run(run())


def test_a_call_that_waited_for_a_thread_past_the_lease_is_not_run():
    started = threading.Event()
    calls: list[int] = []

    def listener(msgs, ctx):
        calls.append(ctx.message_queue.queue_id)
        started.set()
        time.sleep(0.3)  # holds the only thread past the other queue's lease
        return SUCCESS

    async def run():
        h = Harness(listener, threads=1, client_lease_ms=100)
        first, second = MessageQueue("T", "broker-a", 1), MessageQueue("T", "broker-a", 2)
        pq1, pq2 = locked_pq(0), locked_pq(0)
        h.svc.submit_consume_request(pq1, first, True)
        await asyncio.to_thread(started.wait, 5)
        h.svc.submit_consume_request(pq2, second, True)  # valid now, but waits 300 ms for the thread
        # until the waiting call is decided (0.3 s on an idle machine; longer when the thread is starved)
        await settle(h, budget_s=10.0, until=lambda: second in h.expired)
        await settle(h)  # and its put-back done
        assert calls == [1]
        assert pq2.offsets() == [0] and pq2.taken_offsets() == []  # put back, untouched
        assert pq2._msgs[0].reconsume_times == 0  # not a failure: no reconsume counted
        assert second in h.expired
        await h.svc.shutdown(1000)
    asyncio.run(run())


def test_broadcasting_needs_no_lock():
    rec = Recorder()

    async def run():
        h = Harness(rec, model=MessageModel.BROADCASTING)
        pq = ProcessQueue(now_ms=0)  # locked is False and its lock long expired
        pq.put_messages([msg(0)])
        h.svc.submit_consume_request(pq, MQ, True)
        await settle(h, until=lambda: rec.calls)
        assert rec.calls and h.locks == []
        await h.svc.shutdown(1000)
    asyncio.run(run())


def test_a_long_run_yields_after_the_continuous_consume_cap():
    timing = Timing().scaled(0.002)  # cap 120 ms
    rec = Recorder(work_s=0.01)

    async def run():
        h = Harness(rec, timing=timing)
        pq = locked_pq(*range(40))
        h.svc.submit_consume_request(pq, MQ, True)
        await settle(h, budget_s=5, until=lambda: len(rec.calls) >= 40)
        assert h.svc.stats.time_capped >= 1
        assert [call[1][0] for call in rec.calls] == list(range(40))
        await h.svc.shutdown(1000)
    asyncio.run(run())


def test_wait_consume_idle_waits_for_the_running_call():
    started = threading.Event()
    release = threading.Event()

    def listener(msgs, ctx):
        started.set()
        release.wait(5)
        return SUCCESS

    async def run():
        h = Harness(listener)
        pq = locked_pq(0, 1)
        h.svc.submit_consume_request(pq, MQ, True)
        await asyncio.to_thread(started.wait, 5)
        pq.dropped = True
        assert not await h.svc.wait_consume_idle(pq, 50)
        release.set()
        assert await h.svc.wait_consume_idle(pq, 2_000)
        await settle(h)
        assert pq.offsets() == [1]  # dropped: the next message was never taken
        assert h.store.updates == []  # nor the finished one committed
        await h.svc.shutdown(1000)
    asyncio.run(run())


def test_shutdown_lets_the_running_call_finish_and_starts_no_other():
    rec = Recorder(work_s=0.1)

    async def run():
        h = Harness(rec)
        pq = locked_pq(0, 1, 2)
        h.svc.submit_consume_request(pq, MQ, True)
        await settle(h, until=lambda: rec.calls)
        await h.svc.shutdown(2_000)
        assert [call[1] for call in rec.calls] == [[0]]
        assert h.store.updates == [(MQ, 1, False)]
        h.svc.submit_consume_request(pq, MQ, True)
        await asyncio.sleep(0.05)
        assert len(rec.calls) == 1
    asyncio.run(run())
