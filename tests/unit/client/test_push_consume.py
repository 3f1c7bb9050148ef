"""Concurrent consumption: ack-index arithmetic, send-back, local resubmit, offsets, expiry, shutdown."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from nodes.client.consume_concurrently import (
    ACK_INDEX_ALL,
    ConsumeConcurrentlyContext,
    ConsumeMessageConcurrentlyService,
    ConsumeRequest,
    reset_retry_topic,
    resolve_ack_index,
)
from nodes.client.process_queue import PROPERTY_CONSUME_START_TIMESTAMP, ProcessQueue
from nodes.common import constants as c
from nodes.common.clock import FakeClock
from nodes.common.types import ConsumeConcurrentlyStatus, MessageExt, MessageModel, MessageQueue

OK = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER
MQ = MessageQueue("T", "broker-a", 0)


def msg(queue_offset: int, *, topic: str = "T", props: dict[str, str] | None = None) -> MessageExt:
    return MessageExt(topic, b"body-%d" % queue_offset, dict(props or {}), f"id{queue_offset}", "", 0, queue_offset,
                      1000 + queue_offset, 0, 0, 0, "broker-a")


# --- pure -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("status", "ack_index", "size", "expected"), [
    (OK, ACK_INDEX_ALL, 4, 3),  # the default: all acknowledged
    (OK, 1, 4, 1),  # messages 2 and 3 failed
    (OK, -1, 4, -1),  # success with ack index -1: everything failed
    (OK, -7, 4, -1),
    (OK, 9, 4, 3),
    (LATER, ACK_INDEX_ALL, 4, -1),  # RECONSUME_LATER ignores the ack index
    (LATER, 2, 4, -1),
])
def test_resolve_ack_index(status, ack_index, size, expected):
    assert resolve_ack_index(status, ack_index, size) == expected


def test_retry_messages_are_delivered_under_their_original_topic():
    retry = msg(0, topic=c.RETRY_GROUP_TOPIC_PREFIX + "g", props={c.PROPERTY_RETRY_TOPIC: "T"})
    other_group = msg(1, topic=c.RETRY_GROUP_TOPIC_PREFIX + "h", props={c.PROPERTY_RETRY_TOPIC: "T"})
    plain = msg(2)
    reset_retry_topic([retry, other_group, plain], "g")
    assert (retry.topic, other_group.topic, plain.topic) == ("T", c.RETRY_GROUP_TOPIC_PREFIX + "h", "T")


# --- result processing on a loop, with fakes --------------------------------------------------------

class Store:
    def __init__(self) -> None:
        self.memory: dict[MessageQueue, int] = {}

    def update_offset(self, mq, offset, *, increase_only):
        current = self.memory.get(mq)
        if current is None or not increase_only or offset > current:
            self.memory[mq] = offset


class Harness:
    """A service bound to a running loop, a pq holding offsets 0..n-1, and a scripted send-back."""

    def __init__(self, n: int = 4, *, model: MessageModel = MessageModel.CLUSTERING, listener: Any = None,
                 back_ok: bool = True, batch: int = 1, threads: int = 2, redeliver_times: int = 0,
                 skip_every_requests: int = 0) -> None:
        self.store = Store()
        self.sent_back: list[tuple[str, int, str]] = []
        self.back_ok = back_ok
        self.clock = FakeClock()
        self.service = ConsumeMessageConcurrentlyService(
            group="g", listener=listener or (lambda msgs, ctx: OK), message_model=model, offset_store=self.store,
            send_back=self.send_back, clock=self.clock, thread_count=threads, batch_max_size=batch,
            resubmit_delay_ms=10, consume_timeout_ms=1000, redeliver_times=redeliver_times,
            skip_every_requests=skip_every_requests)
        self.pq = ProcessQueue(now_ms=0)
        self.msgs = [msg(i) for i in range(n)]
        self.pq.put_messages(self.msgs)

    async def send_back(self, m: MessageExt, delay_level: int, broker_name: str) -> bool:
        self.sent_back.append((m.msg_id, delay_level, broker_name))
        return self.back_ok

    async def drain(self, budget_s: float = 5.0) -> None:
        """Wait until every cached message is finished, then shut the service down."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget_s
        while self.pq.msg_count and loop.time() < deadline:
            await asyncio.sleep(0.005)
        await self.service.shutdown(5000)

    async def process(self, msgs: list[MessageExt], status: ConsumeConcurrentlyStatus,
                      ack_index: int = ACK_INDEX_ALL, delay_level: int = 0) -> None:
        self.service.start()
        ctx = ConsumeConcurrentlyContext(MQ, ack_index, delay_level)
        await self.service._process_consume_result(ConsumeRequest(msgs, self.pq, MQ), status, ctx)


def test_success_commits_the_lowest_unfinished_offset():
    h = Harness(4)

    async def run() -> None:
        await h.process([h.msgs[1]], OK)
        assert h.store.memory[MQ] == 0  # offset 0 is still in flight
        await h.process([h.msgs[0]], OK)
        assert h.store.memory[MQ] == 2
        await h.process(h.msgs[2:], OK)
        assert h.store.memory[MQ] == 4  # one past the highest message seen

    asyncio.run(run())
    assert h.sent_back == [] and h.pq.msg_count == 0


def test_reconsume_later_sends_every_message_back_and_moves_on():
    h = Harness(2)
    asyncio.run(h.process(h.msgs, LATER, delay_level=5))
    assert h.sent_back == [("id0", 5, "broker-a"), ("id1", 5, "broker-a")]
    assert h.store.memory[MQ] == 2 and h.service.stats.failed == 2 and h.service.stats.sent_back == 2


def test_ack_index_sends_back_only_the_tail():
    h = Harness(4, batch=4)
    asyncio.run(h.process(h.msgs, OK, ack_index=1))
    assert [s[0] for s in h.sent_back] == ["id2", "id3"]
    assert h.service.stats.ok == 2 and h.store.memory[MQ] == 4


def test_a_failed_send_back_keeps_the_message_and_consumes_it_again_locally():
    seen: list[tuple[str, int]] = []
    done = threading.Event()

    def listener(msgs, ctx):
        seen.extend((m.msg_id, m.reconsume_times) for m in msgs)
        done.set()
        return OK

    h = Harness(2, listener=listener, back_ok=False)

    async def run() -> None:
        await h.process([h.msgs[0]], LATER)
        assert h.store.memory[MQ] == 0  # the failed message pins the offset
        assert h.msgs[0].reconsume_times == 1
        await asyncio.to_thread(done.wait, 5)
        for _ in range(100):  # the resubmitted call's result is processed on this loop
            if h.store.memory[MQ] == 1:
                break
            await asyncio.sleep(0.01)
        await h.service.shutdown(1000)

    asyncio.run(run())
    assert seen == [("id0", 1)]
    assert h.store.memory[MQ] == 1 and h.service.stats.send_back_failed == 1


def test_broadcasting_drops_failures_without_sending_them_back():
    h = Harness(2, model=MessageModel.BROADCASTING)
    asyncio.run(h.process(h.msgs, LATER))
    assert h.sent_back == [] and h.store.memory[MQ] == 2


def test_results_for_a_dropped_queue_are_discarded():
    h = Harness(2)
    h.pq.dropped = True
    asyncio.run(h.process(h.msgs, LATER))
    assert h.sent_back == [] and MQ not in h.store.memory and h.service.stats.discarded == 2


def test_listener_runs_on_the_pool_with_renamed_retry_topic_and_start_stamp():
    calls: list[tuple[str, str, str, str | None]] = []

    def listener(msgs, ctx):
        for m in msgs:
            calls.append((threading.current_thread().name, m.topic, ctx.message_queue.topic,
                          m.properties.get(PROPERTY_CONSUME_START_TIMESTAMP)))
        return OK

    h = Harness(0, listener=listener)
    retry_mq = MessageQueue(c.RETRY_GROUP_TOPIC_PREFIX + "g", "broker-a", 0)
    m = msg(0, topic=retry_mq.topic, props={c.PROPERTY_RETRY_TOPIC: "T"})
    h.pq.put_messages([m])

    async def run() -> None:
        h.service.start()
        h.service.submit_consume_request([m], h.pq, retry_mq)
        await h.drain()

    asyncio.run(run())
    (thread, topic, queue_topic, stamp) = calls[0]
    assert thread.startswith("ConsumeMessageThread_g") and topic == "T" and queue_topic == retry_mq.topic
    assert stamp == str(h.clock.wall_ms())
    assert h.store.memory[retry_mq] == 1


def test_exceptions_and_bad_returns_count_as_reconsume_later():
    answers = iter([RuntimeError("boom"), None, "yes"])

    def listener(msgs, ctx):
        answer = next(answers)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    h = Harness(3, listener=listener, threads=1)

    async def run() -> None:
        h.service.start()
        h.service.submit_consume_request(h.msgs, h.pq, MQ)
        await h.drain()

    asyncio.run(run())
    assert sorted(s[0] for s in h.sent_back) == ["id0", "id1", "id2"]
    assert h.service.stats.exceptions == 1 and h.service.stats.by_status == {"RECONSUME_LATER": 3}


def test_batches_split_by_consume_message_batch_max_size():
    sizes: list[int] = []
    h = Harness(5, listener=lambda msgs, ctx: sizes.append(len(msgs)) or OK, batch=2, threads=1)

    async def run() -> None:
        h.service.start()
        h.service.submit_consume_request(h.msgs, h.pq, MQ)
        await h.drain()

    asyncio.run(run())
    assert sizes == [2, 2, 1] and h.store.memory[MQ] == 5


def test_fault_switch_redeliver_consumed_batch_hands_acked_batches_over_again():
    """OFF: each message reaches the listener once. ON (2 more times): a successful batch is delivered
    three times although it was acknowledged; a failed one is not repeated; every offset is committed."""
    seen: list[int] = []

    def listener(msgs, ctx):
        seen.extend(m.queue_offset for m in msgs)
        return LATER if msgs[0].queue_offset == 2 else OK

    for times, expected in ((0, [0, 1, 2]), (2, [0, 0, 0, 1, 1, 1, 2])):
        seen.clear()
        h = Harness(3, listener=listener, threads=1, redeliver_times=times)

        async def run(h: Harness = h) -> None:
            h.service.start()
            h.service.submit_consume_request(h.msgs, h.pq, MQ)
            await h.drain()

        asyncio.run(run())
        assert seen == expected
        assert h.store.memory[MQ] == 3


def test_switch_ack_unhanded_request_acknowledges_every_nth_request_unseen():
    """The test-only bug: one request in `skip_every_requests` never reaches the listener, yet its
    offset is committed past it (what the `lost` check must catch); off, every message is seen."""
    for every, expected in ((0, list(range(6))), (3, [0, 1, 3, 4])):
        seen: list[int] = []

        def listener(msgs, ctx, seen: list[int] = seen):
            seen.extend(m.queue_offset for m in msgs)
            return OK

        h = Harness(6, listener=listener, threads=1, skip_every_requests=every)

        async def run(h: Harness = h) -> None:
            h.service.start()
            h.service.submit_consume_request(h.msgs, h.pq, MQ)
            await h.drain()

        asyncio.run(run())
        assert sorted(seen) == expected
        assert h.store.memory[MQ] == 6


def test_expired_heads_are_sent_back_at_level_3_and_removed():
    h = Harness(3)
    start = h.clock.wall_ms()
    for m in h.msgs[:2]:
        m.properties[PROPERTY_CONSUME_START_TIMESTAMP] = str(start)
    h.clock.advance_ms(1001)

    async def run() -> None:
        h.service.start()
        await h.service.clean_expired_messages({MQ: h.pq})

    asyncio.run(run())
    assert h.sent_back == [("id0", 3, "broker-a"), ("id1", 3, "broker-a")]
    assert h.pq.offsets() == [2] and h.service.stats.expired_cleaned == 2


def test_a_failed_expiry_send_back_keeps_the_message():
    h = Harness(2, back_ok=False)
    h.msgs[0].properties[PROPERTY_CONSUME_START_TIMESTAMP] = str(h.clock.wall_ms())
    h.clock.advance_ms(5000)
    asyncio.run(h.service.clean_expired_messages({MQ: h.pq}))
    assert h.pq.offsets() == [0, 1] and len(h.sent_back) == 1


def test_shutdown_waits_for_running_calls_and_cancels_queued_ones():
    started, release = threading.Event(), threading.Event()
    calls: list[str] = []

    def listener(msgs, ctx):
        calls.append(msgs[0].msg_id)
        started.set()
        release.wait(5)
        return OK

    h = Harness(3, listener=listener, threads=1)

    async def run() -> None:
        h.service.start()
        h.service.submit_consume_request(h.msgs, h.pq, MQ)
        await asyncio.to_thread(started.wait, 5)
        asyncio.get_running_loop().call_later(0.05, release.set)
        await h.service.shutdown(5000)

    asyncio.run(run())
    assert calls == ["id0"]  # the two queued calls never ran
    assert h.store.memory[MQ] == 1 and h.pq.offsets() == [1, 2]


def test_a_burst_of_answers_is_drained_by_one_loop_wakeup_and_commits_every_offset():
    """Answers posted by the pool while a drain is pending ride on it: one loop callback settles
    them all, each fully acknowledged call without a task of its own."""
    h = Harness(6)
    wakeups: list[int] = []

    async def run() -> None:
        loop = asyncio.get_running_loop()
        h.service.start()
        real = loop.call_soon_threadsafe

        def counting(callback, *args):
            wakeups.append(1)
            return real(callback, *args)

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
        try:
            # Post from a thread while the loop is blocked here: all six pile up behind one wake-up.
            def post_all() -> None:
                for m in h.msgs:
                    h.service._post_answer(ConsumeRequest([m], h.pq, MQ), OK, ConsumeConcurrentlyContext(MQ))

            worker = threading.Thread(target=post_all)
            worker.start()
            worker.join()
            assert h.service._result_tasks == set()
            await asyncio.sleep(0.01)
        finally:
            loop.call_soon_threadsafe = real  # type: ignore[method-assign]
        assert h.service._result_tasks == set()  # nothing to send back: settled in the callback

    asyncio.run(run())
    assert len(wakeups) == 1
    assert h.store.memory[MQ] == 6 and h.pq.msg_count == 0
    assert (h.service.stats.calls, h.service.stats.ok) == (6, 6)


def test_a_partly_failed_answer_still_sends_back_its_tail_after_the_drain():
    h = Harness(3, batch=3)

    async def run() -> None:
        h.service.start()
        threading.Thread(target=h.service._post_answer,
                         args=(ConsumeRequest(h.msgs, h.pq, MQ), OK, ConsumeConcurrentlyContext(MQ, 0))).start()
        for _ in range(200):
            if h.sent_back and not h.service._result_tasks:
                break
            await asyncio.sleep(0.005)

    asyncio.run(run())
    assert [s[0] for s in h.sent_back] == ["id1", "id2"] and h.store.memory[MQ] == 3


def test_one_drain_settles_several_queues_each_with_its_own_lowest_unfinished_offset():
    """Acknowledged answers are removed and committed per queue, once per drain; a failed answer
    in the same drain still goes back, and a dropped queue's answers commit nothing."""
    h = Harness(4)
    mq2, mq3 = MessageQueue("T", "broker-a", 1), MessageQueue("T", "broker-a", 2)
    pq2, pq3 = ProcessQueue(now_ms=0), ProcessQueue(now_ms=0)
    msgs2, msgs3 = [msg(i) for i in range(10, 13)], [msg(i) for i in range(20, 22)]
    pq2.put_messages(msgs2)
    pq3.put_messages(msgs3)
    pq3.dropped = True

    async def run() -> None:
        h.service.start()
        answers = [(ConsumeRequest([h.msgs[1]], h.pq, MQ), OK), (ConsumeRequest([msgs2[0]], pq2, mq2), OK),
                   (ConsumeRequest([h.msgs[0]], h.pq, MQ), OK), (ConsumeRequest([h.msgs[2]], h.pq, MQ), LATER),
                   (ConsumeRequest([msgs2[2]], pq2, mq2), OK), (ConsumeRequest(msgs3, pq3, mq3), OK)]

        def post_all() -> None:  # from a thread, as the pool does, while the loop is blocked here
            for request, status in answers:
                h.service._post_answer(request, status, ConsumeConcurrentlyContext(request.mq))

        worker = threading.Thread(target=post_all)
        worker.start()
        worker.join()
        for _ in range(200):
            if h.sent_back and not h.service._result_tasks:
                break
            await asyncio.sleep(0.005)

    asyncio.run(run())
    assert h.sent_back == [("id2", 0, "broker-a")]
    assert h.store.memory[MQ] == 3 and h.pq.offsets() == [3]  # 0-2 done (2 sent back), 3 still cached
    assert h.store.memory[mq2] == 11 and pq2.offsets() == [11]  # 11 not answered yet
    assert mq3 not in h.store.memory and pq3.msg_count == 2  # dropped: nothing removed, nothing committed
    stats = h.service.stats
    assert (stats.calls, stats.ok, stats.failed, stats.discarded) == (6, 4, 1, 2)
