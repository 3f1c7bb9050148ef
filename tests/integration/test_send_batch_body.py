"""Batch sends over real gRPC: RocketMQ's batch body, the compact answer, and send_async
coalescing; every message stored once, where its SendResult says."""

import concurrent.futures

from support.rpc import broker_stub, code_name

from nodes.client import Message, Producer, PullConsumer, SendStatus
from nodes.store import message_batch
from proto import broker_pb2


def _raw(addr, **fields):
    channel, stub = broker_stub(addr)
    with channel:
        return stub.SendMessage(broker_pb2.SendMessageRequest(**fields), timeout=10)


def test_a_batch_body_is_stored_and_answered_compactly(cluster):
    body = b"".join(message_batch.encode_entry(f"m{i}".encode(), i, {"TAGS": "t", "UNIQ_KEY": f"U{i}"})
                    for i in range(5))
    r = _raw(cluster.broker_addr, topic="Raw", queue_id=0, batch_body=body, born_timestamp_ms=1234)
    assert code_name(r.code) == "SUCCESS" and not r.entries
    assert r.first_queue_offset == 0 and len(r.phys_offsets) == 5 and len(r.offset_msg_id_prefix) == 16
    with PullConsumer(cluster.namesrv_addr, "g") as consumer:
        (mq,) = [q for q in consumer.fetch_queues("Raw") if q.queue_id == 0]
        got = consumer.pull(mq, 0, 32).messages
    assert [(m.body, m.flag, m.tags, m.msg_id, m.born_timestamp_ms) for m in got] == [
        (f"m{i}".encode(), i, "t", f"U{i}", 1234) for i in range(5)]
    assert [m.commitlog_offset for m in got] == list(r.phys_offsets)
    assert [m.offset_msg_id for m in got] == [f"{r.offset_msg_id_prefix}{p:016X}" for p in r.phys_offsets]


def test_a_malformed_batch_body_is_illegal_and_stores_nothing(cluster):
    good = message_batch.encode_entry(b"x", 0, {})
    r = _raw(cluster.broker_addr, topic="Raw2", queue_id=0, batch_body=good + good[:-1])
    assert code_name(r.code) == "MESSAGE_ILLEGAL" and "batch body" in r.remark
    r = _raw(cluster.broker_addr, topic="Raw2", queue_id=0, batch_body=message_batch.encode_entry(b"", 0, {}))
    assert code_name(r.code) == "MESSAGE_ILLEGAL" and "empty body" in r.remark


def test_send_batch_and_send_async_store_each_message_where_its_result_says(cluster):
    with Producer(cluster.namesrv_addr) as producer:
        batch = producer.send_batch([Message("Coalesced", f"b{i}".encode(), tags="bt") for i in range(20)])
        msgs = [Message("Coalesced", f"a{i}".encode(), tags="at") for i in range(300)]
        futures = [producer.send_async(m) for m in msgs]
        concurrent.futures.wait(futures, timeout=30)
        results = [f.result(0) for f in futures]
    assert batch.status is SendStatus.SEND_OK and len(batch.queue_offsets) == 20
    assert all(r.status is SendStatus.SEND_OK for r in results)
    assert len({(r.message_queue, r.queue_offset) for r in results}) == 300
    with PullConsumer(cluster.namesrv_addr, "g") as consumer:
        stored = {}
        for mq in consumer.fetch_queues("Coalesced"):
            offset = 0
            while True:
                got = consumer.pull(mq, offset, 32)
                if not got.messages:
                    break
                for m in got.messages:
                    stored[(mq.queue_id, m.queue_offset)] = m
                offset = got.next_begin_offset
    assert len(stored) == 320
    for i, queue_offset in enumerate(batch.queue_offsets):
        m = stored[(batch.message_queue.queue_id, queue_offset)]
        assert (m.body, m.msg_id, m.tags) == (f"b{i}".encode(), batch.msg_ids[i], "bt")
    for msg, r in zip(msgs, results, strict=True):
        m = stored[(r.message_queue.queue_id, r.queue_offset)]
        assert (m.body, m.msg_id, m.offset_msg_id) == (msg.body, r.msg_id, r.offset_msg_id)
    for queue_id in {q for q, _ in stored}:  # messages reach each queue in send_async order
        bodies = [stored[k].body for k in sorted(stored) if k[0] == queue_id and stored[k].body.startswith(b"a")]
        assert bodies == sorted(bodies, key=lambda b: int(b[1:]))
