"""The pull fast path the benchmark drives (issue 8): the store's in-place record check and its
memory of checked records, the batched pull stream on both ends, lazily decoded messages,
pull_async and the pinned broker id.

The last tests run a name server and broker in this process over real gRPC (support.inprocess).
"""

from __future__ import annotations

import asyncio
import random

import grpc
import pytest
from support.inprocess import InProcessCluster
from support.rpc import create_topic

from nodes.client import Producer, PullConsumer
from nodes.client.pull_decode import MessageBatch, decode_messages
from nodes.client.rpc.pull_stream import PullStream
from nodes.common.config import StoreConfig
from nodes.common.types import Message, PullStatus
from nodes.store import message_store
from nodes.store.message_store import MessageStore, _CheckedExtents, _record_checks
from nodes.store.record import MessageToStore, RecordKind, check_at, encode_record
from proto import broker_pb2, broker_pb2_grpc, common_pb2

# ---- the store's read path -----------------------------------------------------------------


def _record(phys_offset: int = 4096, body: bytes = b"hello body", **props: str) -> bytes:
    msg = MessageToStore("Topic", 3, body, properties={"TAGS": "a", **props})
    return encode_record(msg, queue_offset=7, phys_offset=phys_offset, store_timestamp_ms=1_700_000_000_000)


def _fast(data: bytes, size: int, phys_offset: int) -> bool:
    with memoryview(data) as view:
        return _record_checks(view, 0, size, phys_offset)


def _slow(data: bytes, size: int, phys_offset: int) -> bool:
    return check_at(data[:size], 0, base_phys_offset=phys_offset) == (RecordKind.RECORD, size)


def test_fast_check_accepts_good_records():
    for body in (b"", b"x", b"y" * 3000):
        data = _record(body=body, KEYS="k1 k2")
        assert _fast(data, len(data), 4096) and _slow(data, len(data), 4096)


def test_fast_check_is_never_looser_than_check_at():
    rng = random.Random(8)
    data = _record(body=bytes(range(256)) * 2)
    size = len(data)
    cases = [(data, size, 4096), (data, size, 4097), (data, size - 1, 4096), (data + b"\0", size + 1, 4096)]
    for position in range(size):  # every byte flipped once, some bits at random
        damaged = bytearray(data)
        damaged[position] ^= 1 << rng.randrange(8)
        cases.append((bytes(damaged), size, 4096))
    for damaged, claimed_size, phys_offset in cases:
        if _fast(damaged, claimed_size, phys_offset):
            assert _slow(damaged, claimed_size, phys_offset)
    assert sum(_fast(*case) for case in cases) == 1  # only the undamaged record passes


def test_checked_extents_merge_and_answer_for_ranges():
    extents = _CheckedExtents(extents_max=10)
    assert extents.around(50) == (False, 0, 1 << 62)
    extents.add(100, 200)
    extents.add(300, 400)
    assert extents.around(150) == (True, 100, 200)
    assert extents.around(250) == (False, 200, 300)
    assert extents.around(50) == (False, 0, 100)
    extents.add(200, 300)  # bridges the two
    assert len(extents) == 1 and extents.around(399) == (True, 100, 400)
    extents.add(50, 120)
    extents.add(390, 500)
    assert len(extents) == 1 and extents.around(60) == (True, 50, 500)


def test_checked_extents_forget_everything_past_their_bound():
    extents = _CheckedExtents(extents_max=3)
    for start in range(0, 400, 100):
        extents.add(start, start + 10)
    assert len(extents) == 0 and extents.around(5)[0] is False


@pytest.fixture
def store(tmp_path):
    config = StoreConfig(commitlog_segment_bytes=1024 * 1024, cq_units_per_file=1_000,
                         transfer_count_max_in_memory=1024, transfer_bytes_max_in_memory=4 * 1024 * 1024)
    store = MessageStore(tmp_path / "store", config)
    store.open()
    yield store
    store.close()


def _put(store, count, queue_id=0, body=b"payload"):
    for i in range(count):
        store.put_messages([MessageToStore("T", queue_id, body + str(i).encode())])


def test_a_pull_is_the_records_back_to_back_and_reads_repeat_exactly(store):
    _put(store, 5, queue_id=0)
    _put(store, 5, queue_id=1)  # interleaved: queue 0's records are not all adjacent
    _put(store, 5, queue_id=0)
    first = store.get_messages("T", 0, 0, 32, None)
    assert first.records_bytes == len(first.record_data) == sum(first.record_sizes)
    assert b"".join(first.records) == first.record_data and len(first.records) == 10
    again = store.get_messages("T", 0, 0, 32, None)  # from the memory of checked records
    assert (again.record_data, again.next_begin_offset) == (first.record_data, 10)
    assert [m.body for m in decode_messages(again.record_data, broker_name="b", min_offset=0, max_offset=10,
                                            tags=None)][:2] == [b"payload0", b"payload1"]


def test_transfer_caps_come_from_the_config(tmp_path):
    store = MessageStore(tmp_path / "s", StoreConfig(commitlog_segment_bytes=1024 * 1024, cq_units_per_file=1_000))
    store.open()
    try:
        _put(store, 40)
        assert len(store.get_messages("T", 0, 0, 1024, None).record_sizes) == 32  # RocketMQ's in-memory cap
    finally:
        store.close()
    assert message_store.DEFAULT_TRANSFER_CAPS.count_in_memory == 32


def test_a_raised_transfer_cap_gives_whole_batches(store):
    _put(store, 300)
    assert len(store.get_messages("T", 0, 0, 1024, None).record_sizes) == 300


# ---- the batched pull stream, client side --------------------------------------------------------------


class BatchCall:
    def __init__(self, feed):
        self.batches: list[broker_pb2.PullRequestBatch] = []
        self.answers: asyncio.Queue = asyncio.Queue()
        self._pump = asyncio.create_task(self._drain(feed))

    async def _drain(self, feed):
        async for batch in feed:
            self.batches.append(batch)

    async def read(self):
        return await self.answers.get()

    def cancel(self):
        self._pump.cancel()


def test_batched_stream_sends_queued_pulls_in_one_message_and_matches_batched_answers():
    async def scenario():
        calls = []

        def opener():
            def start(feed):
                calls.append(BatchCall(feed))
                return calls[-1]
            return start

        stream = PullStream("b:1", opener)
        fields = {"consumer_group": "g", "topic": "T", "queue_offset": 0, "max_msg_nums": 32}
        pulls = [asyncio.create_task(stream.pull({**fields, "queue_id": q}, 1000)) for q in range(3)]
        while not calls or not calls[0].batches:
            await asyncio.sleep(0)
        call = calls[0]
        requests = call.batches[0].requests
        assert len(call.batches) == 1 and [r.queue_id for r in requests] == [0, 1, 2]
        call.answers.put_nowait(broker_pb2.PullResponseBatch(responses=[
            broker_pb2.PullResponse(request_id=r.request_id, code=common_pb2.SUCCESS, next_begin_offset=10 + r.queue_id)
            for r in reversed(requests)]))
        assert [(await p).next_begin_offset for p in pulls] == [10, 11, 12]
        assert stream.pending_count == 0
        await stream.close()

    asyncio.run(scenario())


# ---- lazily decoded messages ----------------------------------------------------------------------------


def test_message_batch_counts_without_decoding_and_decodes_once():
    records = _record(phys_offset=0) + _record(phys_offset=len(_record(phys_offset=0)))
    decoded = []

    def decode():
        decoded.append(1)
        return decode_messages(records, broker_name="b", min_offset=0, max_offset=2, tags=None)

    batch = MessageBatch(2, decode)
    assert len(batch) == 2 and bool(batch) and not decoded and "not decoded" in repr(batch)
    assert [m.queue_offset for m in batch] == [7, 7] and batch[0].body == b"hello body"
    assert batch[-1:] == batch[1:] and batch == decode() and batch != []
    assert len(decoded) == 2  # the batch decoded once; the comparison list once more
    with pytest.raises(TypeError):
        hash(batch)


# ---- over real gRPC: PullBatch on the broker, pull_async and pinning on the client ------------------------


@pytest.fixture
def cluster(tmp_path):
    with InProcessCluster(tmp_path) as c:
        yield c


def test_broker_answers_a_request_batch_with_every_pull_named(cluster):
    create_topic(cluster, "Batched", 2)
    with Producer(cluster.namesrv_addr) as producer:
        for i in range(6):
            producer.send_orderly(Message("Batched", f"m{i}".encode()), "one-key")
    queue_id = next(q for q in range(2) if _max_offset(cluster, "Batched", q) == 6)
    requests = [broker_pb2.PullRequest(request_id=i + 1, consumer_group="g", topic="Batched", queue_id=queue_id,
                                       queue_offset=offset, max_msg_nums=2, has_subscription=True,
                                       subscription_expression="*") for i, offset in enumerate((0, 2, 4, 6))]
    with grpc.insecure_channel(cluster.broker_addr) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        answers = {}
        for message in stub.PullBatch(iter([broker_pb2.PullRequestBatch(requests=requests)]), timeout=10):
            for response in message.responses:
                answers[response.request_id] = response
    assert sorted(answers) == [1, 2, 3, 4]
    assert [(answers[i].record_count, answers[i].next_begin_offset) for i in (1, 2, 3)] == [(2, 2), (2, 4), (2, 6)]
    assert answers[4].code == common_pb2.PULL_NOT_FOUND and answers[4].remark == "OFFSET_OVERFLOW_ONE"


def _max_offset(cluster, topic, queue_id):
    with grpc.insecure_channel(cluster.broker_addr) as channel:
        return broker_pb2_grpc.BrokerStub(channel).GetQueueOffset(broker_pb2.GetQueueOffsetRequest(
            topic=topic, queue_id=queue_id, kind=broker_pb2.MAX), timeout=10).offset


def test_pull_async_matches_pull_and_pinning_keeps_the_broker_id(cluster):
    with Producer(cluster.namesrv_addr) as producer:
        sent = [producer.send_orderly(Message("Async", f"a{i}".encode()), "k") for i in range(5)]
    mq = sent[0].message_queue
    with PullConsumer(cluster.namesrv_addr, "g_async", pull_from_broker_id=0) as consumer:
        futures = [consumer.pull_async(mq, offset, 2) for offset in (0, 2, 4)]
        results = [f.result(10) for f in futures]
        assert [r.status for r in results] == [PullStatus.FOUND] * 3
        assert [[m.body for m in r.messages] for r in results] == [[b"a0", b"a1"], [b"a2", b"a3"], [b"a4"]]
        assert isinstance(results[0].messages, MessageBatch) and len(results[2].messages) == 1
        assert consumer.pull(mq, 0, 5).messages == [m for r in results for m in r.messages]
        assert results[0].requested_broker_id == 0
    with pytest.raises(ValueError, match="pull_from_broker_id"):
        PullConsumer(cluster.namesrv_addr, "g", pull_from_broker_id=-1)
