"""The push consumer's pull loop: each pull outcome, flow control, failures, the OFFSET_ILLEGAL fix-up."""

from __future__ import annotations

import asyncio
from typing import Any

from nodes.client.consumer_state import ConsumerState, SubscriptionData
from nodes.client.flow_control import FlowThresholds
from nodes.client.process_queue import ProcessQueue
from nodes.client.pull_service import PullRequest, PullService
from nodes.common.clock import FakeClock
from nodes.common.config import Timing
from nodes.common.errors import RequestTimeoutError
from nodes.common.types import MessageExt, MessageModel, MessageQueue, PullResult, PullStatus

MQ = MessageQueue("T", "broker-a", 1)
TIMING = Timing()


def msg(queue_offset: int) -> MessageExt:
    return MessageExt("T", b"x" * 10, {}, f"id{queue_offset}", "", 1, queue_offset, 0, 0, 0, 0, "broker-a")


class FakeApi:
    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.calls: list[dict[str, Any]] = []

    def next_commit_seq(self) -> int:
        self.seq = getattr(self, "seq", 0) + 1
        return self.seq

    async def pull_kernel(self, mq, expression, queue_offset, max_nums, **kwargs):
        self.calls.append({"mq": mq, "expression": expression, "offset": queue_offset, "max": max_nums, **kwargs})
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


class Store:
    def __init__(self) -> None:
        self.memory: dict[MessageQueue, int] = {}
        self.persisted: list[MessageQueue] = []

    def read_memory(self, mq):
        return self.memory.get(mq, -1)

    def update_offset(self, mq, offset, *, increase_only):
        current = self.memory.get(mq)
        if current is None or not increase_only or offset > current:
            self.memory[mq] = offset

    async def persist(self, mq):
        self.persisted.append(mq)


def service(api: FakeApi, *, model=MessageModel.CLUSTERING, thresholds=FlowThresholds(), clock=None):
    store = Store()
    submitted: list[tuple[list[MessageExt], MessageQueue]] = []
    removed: list[MessageQueue] = []

    async def remove(mq):
        removed.append(mq)

    state = ConsumerState(group="g", message_model=model, clock=clock or FakeClock(),
                          client_lock_lease_ms=TIMING.client_lock_lease_ms)
    state.subscriptions["T"] = SubscriptionData("T", "a || b", 123)
    svc = PullService(api=api, state=state, offset_store=store,
                      submit=lambda msgs, pq, mq: submitted.append((list(msgs), mq)), remove_process_queue=remove,
                      thresholds=lambda: thresholds, message_model=model, timing=TIMING, clock=clock or FakeClock(),
                      pull_batch_size=32, post_subscription=False)
    return svc, store, submitted, removed


def found(first: int, n: int, next_offset: int | None = None) -> PullResult:
    return PullResult(PullStatus.FOUND, next_offset if next_offset is not None else first + n, 0, 100,
                      [msg(first + i) for i in range(n)])


def test_found_caches_and_submits_then_pulls_again_at_once():
    api = FakeApi(found(5, 3))
    svc, store, submitted, _ = service(api)
    store.memory[MQ] = 5
    req = PullRequest(MQ, ProcessQueue(now_ms=0), 5)
    assert asyncio.run(svc.pull_message(req)) == 0
    assert req.next_offset == 8 and req.pq.offsets() == [5, 6, 7]
    assert [m.queue_offset for m in submitted[0][0]] == [5, 6, 7]
    call = api.calls[0]
    assert call["offset"] == 5 and call["max"] == 32 and call["suspend"] is True
    assert call["suspend_timeout_ms"] == TIMING.broker_suspend_max_ms and call["commit_offset_value"] == 5
    assert call["post_subscription"] is False and call["sub_version"] == 123 and call["expression"] == "a || b"


def test_found_but_all_filtered_moves_on_without_touching_offsets():
    api = FakeApi(PullResult(PullStatus.FOUND, 40, 0, 100, []))
    svc, store, submitted, _ = service(api)
    req = PullRequest(MQ, ProcessQueue(now_ms=0), 10)
    assert asyncio.run(svc.pull_message(req)) == 0
    assert req.next_offset == 40 and submitted == [] and MQ not in store.memory


def test_no_new_message_corrects_the_offset_only_when_nothing_is_cached():
    api = FakeApi(PullResult(PullStatus.NO_NEW_MSG, 12, 0, 12), PullResult(PullStatus.NO_MATCHED_MSG, 15, 0, 15))
    svc, store, _, _ = service(api)
    req = PullRequest(MQ, ProcessQueue(now_ms=0), 12)
    assert asyncio.run(svc.pull_message(req)) == 0
    assert store.memory[MQ] == 12
    req.pq.put_messages([msg(12)])
    asyncio.run(svc.pull_message(req))
    assert req.next_offset == 15 and store.memory[MQ] == 12  # a cached message pins the stored offset


def test_broadcasting_never_piggybacks_a_commit_offset():
    api = FakeApi(PullResult(PullStatus.NO_NEW_MSG, 1, 0, 1))
    svc, store, _, _ = service(api, model=MessageModel.BROADCASTING)
    store.memory[MQ] = 1
    asyncio.run(svc.pull_message(PullRequest(MQ, ProcessQueue(now_ms=0), 1)))
    assert api.calls[0]["commit_offset_value"] is None


def test_a_failed_pull_backs_off_by_the_exception_delay():
    svc, _, _, _ = service(FakeApi(RequestTimeoutError("no answer")))
    req = PullRequest(MQ, ProcessQueue(now_ms=0), 3)
    assert asyncio.run(svc.pull_message(req)) == TIMING.pull_delay_when_exception_ms
    assert req.next_offset == 3 and svc.stats.errors == 1


def test_flow_control_waits_without_pulling_but_refreshes_the_pull_timestamp():
    clock = FakeClock()
    api = FakeApi()
    svc, _, _, _ = service(api, thresholds=FlowThresholds(count_per_queue=2), clock=clock)
    pq = ProcessQueue(now_ms=0)
    pq.put_messages([msg(i) for i in range(3)])
    assert asyncio.run(svc.pull_message(PullRequest(MQ, pq, 3))) == TIMING.pull_delay_when_flow_control_ms
    assert api.calls == [] and pq.last_pull_timestamp_ms == clock.monotonic_ms()
    assert svc.stats.flow_controlled == 1


def test_a_dropped_queue_ends_its_loop_and_ignores_a_late_answer():
    svc, _, _, _ = service(FakeApi())
    pq = ProcessQueue(now_ms=0)
    pq.dropped = True
    assert asyncio.run(svc.pull_message(PullRequest(MQ, pq, 0))) is None

    class DropDuringPull(FakeApi):
        async def pull_kernel(self, *args, **kwargs):
            pq2.dropped = True
            return found(0, 2)

    pq2 = ProcessQueue(now_ms=0)
    svc2, _, submitted2, _ = service(DropDuringPull())
    assert asyncio.run(svc2.pull_message(PullRequest(MQ, pq2, 0))) is None
    assert submitted2 == [] and pq2.msg_count == 0


def test_offset_illegal_drops_now_and_fixes_the_offset_after_the_delay():
    clock = FakeClock()
    api = FakeApi(PullResult(PullStatus.OFFSET_ILLEGAL, 3, 3, 50, store_status="OFFSET_TOO_SMALL"))
    svc, store, _, removed = service(api, clock=clock)
    store.memory[MQ] = 9
    req = PullRequest(MQ, ProcessQueue(now_ms=0), 0)

    async def run() -> None:
        start = clock.monotonic_ms()
        assert await svc.pull_message(req) is None
        assert req.pq.dropped and removed == []
        while svc.task_count:
            await asyncio.sleep(0)
        assert clock.monotonic_ms() - start == TIMING.pull_offset_fix_delay_ms

    asyncio.run(run())
    assert store.memory[MQ] == 3  # moved backwards, as RocketMQ's fix-up may
    assert store.persisted == [MQ] and removed == [MQ]


def test_the_loop_runs_until_its_queue_is_dropped():
    pq = ProcessQueue(now_ms=0)

    class Api(FakeApi):
        async def pull_kernel(self, mq, expression, queue_offset, max_nums, **kwargs):
            self.calls.append(queue_offset)
            if len(self.calls) == 3:
                pq.dropped = True
            return PullResult(PullStatus.NO_NEW_MSG, queue_offset + 1, 0, 0)

    api = Api()
    svc, _, _, _ = service(api)

    async def run() -> None:
        svc.execute_pull_request_immediately(PullRequest(MQ, pq, 0))
        while svc.task_count:
            await asyncio.sleep(0)

    asyncio.run(run())
    assert api.calls == [0, 1, 2]
