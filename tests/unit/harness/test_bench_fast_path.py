"""The pull fast path the benchmark drives (issue 8): the batched pull stream on both ends, lazily
decoded messages, pull_async and the pinned broker id (the store's side: tests/unit/store/test_read_check.py
and test_read_path.py).

The last tests run a name server and broker in this process over real gRPC (support.inprocess).
"""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest
from support.inprocess import InProcessCluster
from support.rpc import create_topic

from nodes.client import Producer, PullConsumer
from nodes.client.pull_decode import MessageBatch, decode_messages
from nodes.client.rpc.pull_stream import PullStream
from nodes.common.types import Message, PullStatus
from nodes.store.record import MessageToStore, encode_record
from proto import broker_pb2, broker_pb2_grpc, common_pb2


def _record(phys_offset: int = 4096, body: bytes = b"hello body", **props: str) -> bytes:
    msg = MessageToStore("Topic", 3, body, properties={"TAGS": "a", **props})
    return encode_record(msg, queue_offset=7, phys_offset=phys_offset, store_timestamp_ms=1_700_000_000_000)

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


def test_a_held_pull_is_answered_after_the_client_half_closes_and_ends_the_call(cluster):
    # The batch's first request is answered at once; its second waits at the queue's end (held)
    # until a message comes, although the client has sent everything it will send.
    create_topic(cluster, "Held", 1)
    with Producer(cluster.namesrv_addr) as producer:
        producer.send(Message("Held", b"first"))
        requests = [broker_pb2.PullRequest(request_id=i + 1, consumer_group="g", topic="Held", queue_id=0,
                                           queue_offset=offset, max_msg_nums=4, suspend=suspend,
                                           suspend_timeout_ms=20_000, has_subscription=True,
                                           subscription_expression="*")
                    for i, (offset, suspend) in enumerate(((0, False), (1, True)))]
        sent_late = threading.Timer(0.5, lambda: producer.send(Message("Held", b"late")))
        with grpc.insecure_channel(cluster.broker_addr) as channel:
            call = broker_pb2_grpc.BrokerStub(channel).PullBatch(
                iter([broker_pb2.PullRequestBatch(requests=requests)]), timeout=15)
            sent_late.start()
            answers = [(r.request_id, r.record_count) for message in call for r in message.responses]
        sent_late.join()
    assert answers == [(1, 1), (2, 1)]  # the call ended once the held pull was answered
    assert call.code() == grpc.StatusCode.OK


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
