"""send_async coalescing: the SendBatcher on its own (a fake send, a real event loop), then the
producer's send_async end to end over a WiredInstance (no sockets)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
import threading

import pytest

from nodes.client import Message, SendStatus
from nodes.client.msg_id import UniqIdGenerator
from nodes.client.producer import Producer
from nodes.client.queue_selector import QueueSelector
from nodes.client.rpc.send_wire import Outgoing
from nodes.client.send_batcher import PendingSend, SendBatcher, WindowFullError, split_result
from nodes.common import constants as c
from nodes.common import errors
from nodes.common.clock import SYSTEM_CLOCK, Deadline
from nodes.common.errors import ClientStateError
from nodes.common.types import MessageQueue, SendResult
from proto import common_pb2

QUEUES = [MessageQueue("T", "broker-a", q) for q in range(4)]


class FakeSends:
    """send_batch for a SendBatcher: records every batch and holds it until released."""

    def __init__(self, queue_count: int = 4, fail: BaseException | None = None,
                 hold_queue_ids: frozenset[int] | None = None) -> None:
        self.queues = QUEUES[:queue_count]
        self.hold_queue_ids = hold_queue_ids  # None: hold every batch until released
        self.batches: list[tuple[MessageQueue, list[str]]] = []
        self.in_flight: dict[MessageQueue, int] = {}
        self.max_in_flight_per_queue = 0
        self.max_in_flight = 0
        self.release = asyncio.Event()
        self.fail = fail
        self.next_offset: dict[MessageQueue, int] = {}

    async def publish_queues(self, topic: str) -> list[MessageQueue]:
        return self.queues

    async def send(self, topic, outs, uids, queue, deadline) -> SendResult:
        assert queue is not None
        self.batches.append((queue, list(uids)))
        self.in_flight[queue] = self.in_flight.get(queue, 0) + 1
        self.max_in_flight_per_queue = max(self.max_in_flight_per_queue, self.in_flight[queue])
        self.max_in_flight = max(self.max_in_flight, sum(self.in_flight.values()))
        try:
            if self.hold_queue_ids is None or queue.queue_id in self.hold_queue_ids:
                await self.release.wait()
            else:
                await asyncio.sleep(0)
        finally:
            self.in_flight[queue] -= 1
        if self.fail is not None:
            raise self.fail
        first = self.next_offset.get(queue, 0)
        self.next_offset[queue] = first + len(uids)
        offsets = tuple(range(first, first + len(uids)))
        return SendResult(SendStatus.SEND_OK, ",".join(uids), queue, first,
                          offset_msg_id=",".join(f"{o:032X}" for o in offsets), msg_ids=tuple(uids),
                          queue_offsets=offsets)


def pending(uid: str, body_bytes: int = 10, solo: bool = False) -> PendingSend:
    return PendingSend("T", Outgoing(b"x" * body_bytes, 0, {}, 0), uid, body_bytes,
                       concurrent.futures.Future(), Deadline.after(SYSTEM_CLOCK, 3000), solo)


def run_batcher(scenario, *, fake: FakeSends | None = None, **limits):
    """Run `scenario(batcher, fake)` (async) on a fresh loop with a batcher over `fake`."""
    fake = fake or FakeSends()
    limits = {"window": 1000, "batch_count_max": 100, "batch_bytes_max": 1 << 20, "batches_in_flight_max": 4} | limits

    async def main():
        loop = asyncio.get_running_loop()
        batcher = SendBatcher(send_batch=fake.send, publish_queues=fake.publish_queues,
                              pick_queue=QueueSelector(random.Random(0)).select,
                              wake=lambda: loop.call_soon(batcher.drain), **limits)
        await scenario(batcher, fake)

    asyncio.run(main())
    return fake


async def settle(batcher: SendBatcher) -> None:
    for _ in range(50):
        await asyncio.sleep(0)


def test_messages_submitted_while_a_batch_is_in_flight_leave_together():
    items = [pending(f"m{i}") for i in range(10)]

    async def scenario(batcher, fake):
        fake.queues = QUEUES[:1]  # one queue: one batch in flight at a time
        batcher.submit(items[0])
        await settle(batcher)
        for item in items[1:]:
            batcher.submit(item)
        await settle(batcher)
        assert [uids for _, uids in fake.batches] == [["m0"]]  # the rest wait for the first
        fake.release.set()
        await settle(batcher)
        assert batcher.wait_idle(0)

    fake = run_batcher(scenario)
    assert [uids for _, uids in fake.batches] == [["m0"], [f"m{i}" for i in range(1, 10)]]
    results = [item.future.result(0) for item in items]
    # each message its own id, queue and offset, in submission order
    assert [r.msg_id for r in results] == [f"m{i}" for i in range(10)]
    assert [r.queue_offset for r in results] == list(range(10))
    assert [r.offset_msg_id for r in results] == [f"{i:032X}" for i in range(10)]
    assert all(r.message_queue == QUEUES[0] and r.msg_ids == (r.msg_id,) and r.queue_offsets == (r.queue_offset,)
               for r in results)  # the shape `send` gives one message


def test_one_batch_in_flight_per_queue_and_order_kept_per_queue():
    items = [pending(f"m{i:03}") for i in range(200)]

    async def scenario(batcher, fake):
        # batches to queues 0 and 2 stay in flight for a while, the others come straight back:
        # the round robin keeps landing on a queue that is still busy
        for item in items:
            batcher.submit(item)
            if int(item.uid[1:]) % 7 == 0:
                await asyncio.sleep(0)
        await settle(batcher)
        fake.release.set()
        for _ in range(20):
            await settle(batcher)

    fake = run_batcher(scenario, fake=FakeSends(hold_queue_ids=frozenset({0, 2})), batch_count_max=8,
                       batches_in_flight_max=3)
    assert fake.max_in_flight_per_queue == 1
    assert fake.max_in_flight <= 3
    assert sorted(uid for _, uids in fake.batches for uid in uids) == [i.uid for i in items]
    assert all(len(uids) <= 8 for _, uids in fake.batches)
    for queue in QUEUES:
        sent = [uid for q, uids in fake.batches if q == queue for uid in uids]
        assert sent == sorted(sent)  # submission order within the queue
    for item in items:
        result = item.future.result(0)
        assert result.msg_id == item.uid


def test_batches_never_exceed_the_byte_budget_and_solo_messages_go_alone():
    items = [pending("a", 400), pending("b", 400), pending("c", 400), pending("d", 10, solo=True),
             pending("e", 10), pending("f", 10)]

    async def scenario(batcher, fake):
        fake.queues = QUEUES[:1]
        fake.release.set()
        for item in items:
            batcher.submit(item)
        for _ in range(10):
            await settle(batcher)

    fake = run_batcher(scenario, batch_bytes_max=1000)
    assert [uids for _, uids in fake.batches] == [["a", "b"], ["c"], ["d"], ["e", "f"]]


def test_a_failed_batch_fails_every_future_with_its_error():
    items = [pending(f"m{i}") for i in range(5)]
    refused = errors.for_code("SYSTEM_BUSY", "too busy")

    async def scenario(batcher, fake):
        fake.queues = QUEUES[:1]
        fake.release.set()
        for item in items:
            batcher.submit(item)
        for _ in range(5):
            await settle(batcher)
        assert batcher.wait_idle(0)

    run_batcher(scenario, fake=FakeSends(fail=refused))
    for item in items:
        with pytest.raises(type(refused), match="too busy"):
            item.future.result(0)


def test_a_cancelled_message_is_never_sent():
    items = [pending(f"m{i}") for i in range(4)]

    async def scenario(batcher, fake):
        fake.queues = QUEUES[:1]
        batcher.submit(items[0])
        await settle(batcher)
        for item in items[1:]:
            batcher.submit(item)
        assert items[2].future.cancel()
        fake.release.set()
        for _ in range(5):
            await settle(batcher)
        assert batcher.wait_idle(0)

    fake = run_batcher(scenario)
    assert [uids for _, uids in fake.batches] == [["m0"], ["m1", "m3"]]


def test_a_message_on_its_way_cannot_be_cancelled():
    items = [pending("m0"), pending("m1")]

    async def scenario(batcher, fake):
        fake.queues = QUEUES[:1]
        batcher.submit(items[0])
        await settle(batcher)  # m0 is in flight, held by the fake
        batcher.submit(items[1])
        assert not items[0].future.cancel() and items[0].future.running()
        fake.release.set()
        for _ in range(5):
            await settle(batcher)
        assert batcher.wait_idle(0)

    fake = run_batcher(scenario)
    assert [uids for _, uids in fake.batches] == [["m0"], ["m1"]]
    assert items[0].future.result().msg_id == "m0" and items[1].future.result().msg_id == "m1"


def test_split_result_picks_one_message():
    batch = SendResult(SendStatus.FLUSH_SLAVE_TIMEOUT, "a,b", QUEUES[2], 7, offset_msg_id="X,Y",
                       msg_ids=("a", "b"), queue_offsets=(7, 8))
    assert split_result(batch) == [
        SendResult(SendStatus.FLUSH_SLAVE_TIMEOUT, "a", QUEUES[2], 7, offset_msg_id="X", msg_ids=("a",), queue_offsets=(7,)),
        SendResult(SendStatus.FLUSH_SLAVE_TIMEOUT, "b", QUEUES[2], 8, offset_msg_id="Y", msg_ids=("b",), queue_offsets=(8,))]


# --- the producer, end to end ---------------------------------------------------------------------

@pytest.fixture
def producer_over(fakes, wired_instance_factory, no_network):
    made: list[Producer] = []

    def make(handler, **kw):
        kw.setdefault("id_generator", UniqIdGenerator(ip="10.0.0.1", pid=1, salt=1))
        producer = Producer("127.0.0.1:9876", "pg", **kw)
        inst = wired_instance_factory({"T": fakes.make_route(("broker-a", 2, 2, c.PERM_DEFAULT, {0: "a0:1"}))},
                                      handler)
        producer._instance = inst
        producer._batcher._publish_queues = inst.routes.publish_info
        made.append(producer)
        producer.start()
        return producer, inst

    yield make
    for producer in made:
        producer.shutdown()


def sent_requests(inst):
    return [req for _, method, req in inst.calls if method == "SendMessage"]


def test_send_async_coalesces_while_the_loop_is_busy(producer_over, fakes):
    gate = threading.Event()
    offsets = {0: 0, 1: 0}

    def handler(addr, method, request):
        gate.wait(5)  # holds the client loop: later send_async calls pile up
        first = offsets[request.queue_id]
        offsets[request.queue_id] += len(fakes.sent_messages(request))
        return fakes.send_ok(request, first_offset=first)

    producer, inst = producer_over(handler)
    msgs = [Message("T", f"m{i}".encode()) for i in range(30)]
    futures = [producer.send_async(m) for m in msgs]
    gate.set()
    results = [f.result(5) for f in futures]
    requests = sent_requests(inst)
    assert len(requests) < 30 and max(len(fakes.sent_messages(r)) for r in requests) > 1
    where = {m.properties[c.PROPERTY_UNIQ_KEY]: (r.queue_id, i) for r in requests
             for i, m in enumerate(fakes.sent_messages(r))}
    for queue_id in (0, 1):  # submission order within each queue, offsets dense from 0
        bodies = [m.body for r in requests if r.queue_id == queue_id for m in fakes.sent_messages(r)]
        assert bodies == sorted(bodies, key=lambda b: int(b[1:]))
    for msg, result in zip(msgs, results, strict=True):
        uid = msg.properties[c.PROPERTY_UNIQ_KEY]
        assert result.status is SendStatus.SEND_OK and result.msg_id == uid
        assert result.message_queue.queue_id == where[uid][0]
    for queue_id in (0, 1):
        got = sorted(r.queue_offset for r in results if r.message_queue.queue_id == queue_id)
        assert got == list(range(len(got)))


def test_send_async_batch_refused_fails_each_of_its_futures(producer_over, fakes):
    gate = threading.Event()

    def handler(addr, method, request):
        gate.wait(5)
        return fakes.send_ok(request, code=common_pb2.MESSAGE_ILLEGAL)

    producer, _ = producer_over(handler)
    futures = [producer.send_async(Message("T", b"x")) for _ in range(10)]
    gate.set()
    for fut in futures:
        with pytest.raises(errors.RemoteError):
            fut.result(5)


def test_a_delayed_message_is_sent_alone(producer_over, fakes):
    gate = threading.Event()

    def handler(addr, method, request):
        gate.wait(5)
        return fakes.send_ok(request)

    producer, inst = producer_over(handler, async_batches_in_flight_max=1)
    futures = [producer.send_async(Message("T", b"a")), producer.send_async(Message("T", b"b")),
               producer.send_async(Message("T", b"late", properties={"DELAY": "2"})),
               producer.send_async(Message("T", b"c"))]
    gate.set()
    assert all(f.result(5).status is SendStatus.SEND_OK for f in futures)
    batches = [[m.body for m in fakes.sent_messages(r)] for r in sent_requests(inst)]
    assert [body for batch in batches for body in batch] == [b"a", b"b", b"late", b"c"]
    assert [b"late"] in batches  # coalescing never puts a delayed message in a batch


def test_shutdown_waits_for_async_sends_and_leaves_none_unresolved(producer_over, fakes):
    gate = threading.Event()

    def handler(addr, method, request):
        gate.wait(5)
        return fakes.send_ok(request)

    producer, _ = producer_over(handler, async_batches_in_flight_max=1)
    futures = [producer.send_async(Message("T", f"m{i}".encode())) for i in range(5)]
    threading.Timer(0.3, gate.set).start()
    producer.shutdown()
    assert all(f.done() and f.result(0).status is SendStatus.SEND_OK for f in futures)


def test_fail_waiting_fails_only_the_messages_not_yet_sent():
    items = [pending(f"m{i}") for i in range(4)]
    closing = ClientStateError("closing")

    async def scenario(batcher, fake):
        fake.queues = QUEUES[:1]
        batcher.submit(items[0])
        await settle(batcher)
        for item in items[1:]:
            batcher.submit(item)
        batcher.fail_waiting(closing)
        assert all(item.future.exception(0) is closing for item in items[1:])
        assert not items[0].future.done()
        fake.release.set()
        await settle(batcher)
        assert batcher.wait_idle(0)

    fake = run_batcher(scenario)
    assert items[0].future.result(0).msg_id == "m0"
    assert [uids for _, uids in fake.batches] == [["m0"]]


def test_the_window_bounds_messages_submitted_and_not_resolved():
    items = [pending(f"m{i}") for i in range(5)]

    async def scenario(batcher, fake):
        fake.queues = QUEUES[:1]
        for item in items[:3]:
            batcher.submit(item, block=False)
        with pytest.raises(WindowFullError):
            batcher.submit(items[3], block=False)
        await settle(batcher)
        blocked = threading.Thread(target=batcher.submit, args=(items[3],))  # waits for room
        blocked.start()
        blocked.join(0.1)
        assert blocked.is_alive()
        fake.release.set()
        for _ in range(5):
            await settle(batcher)
            await asyncio.sleep(0.01)
        blocked.join(5)
        assert not blocked.is_alive()
        batcher.submit(items[4], block=False)
        for _ in range(5):
            await settle(batcher)
        assert batcher.wait_idle(1)

    fake = run_batcher(scenario, window=3)
    assert sorted(uid for _, uids in fake.batches for uid in uids) == [f"m{i}" for i in range(5)]
    assert all(item.future.result(0).msg_id == item.uid for item in items)


def test_a_message_whose_properties_may_not_fit_fails_alone(producer_over, fakes):
    gate = threading.Event()

    def handler(addr, method, request):
        gate.wait(5)
        too_big = any(len(v) > 20_000 for m in fakes.sent_messages(request) for v in m.properties.values())
        return fakes.send_ok(request, code=common_pb2.MESSAGE_ILLEGAL if too_big else common_pb2.SUCCESS)

    producer, inst = producer_over(handler, async_batches_in_flight_max=1)
    futures = [producer.send_async(Message("T", b"a")), producer.send_async(Message("T", b"b")),
               producer.send_async(Message("T", b"big", properties={"k": "v" * 30_000})),
               producer.send_async(Message("T", b"c")), producer.send_async(Message("T", b"d"))]
    gate.set()
    with pytest.raises(errors.RemoteError):
        futures[2].result(5)
    assert all(f.result(5).status is SendStatus.SEND_OK for i, f in enumerate(futures) if i != 2)
    assert [b"big"] in [[m.body for m in fakes.sent_messages(r)] for r in sent_requests(inst)]
