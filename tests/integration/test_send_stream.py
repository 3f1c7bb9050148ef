"""Sends over the broker's SendStream: the same answers as unary SendMessage, matched to the
right caller with several in flight, and a stream that keeps serving after bad requests."""

import asyncio
import concurrent.futures

import grpc
import pytest
from support.rpc import TIMEOUT_S, broker_stub, code_name
from support.timing import within_s

from nodes.client import Producer, PullConsumer
from nodes.common import constants as c
from nodes.common.types import Message, MessageQueue
from proto import broker_pb2


def _request(topic, bodies, queue_id=0):
    return broker_pb2.SendMessageRequest(
        topic=topic, queue_id=queue_id, messages=[broker_pb2.OutgoingMessage(body=b) for b in bodies])


# Bad input of every kind the broker checks, each followed by a good send on the same stream.
_BAD = [
    _request("T", [b""]),                          # empty body
    _request("T", [b"x" * (1024 * 1024 + 1)]),     # body over the limit
    _request("bad topic!", [b"x"]),                # illegal topic name
    _request("TBW102", [b"x"]),                    # the default topic
    _request("T", []),                             # no message
    _request("Auto", [b"x"], queue_id=400),        # queue id out of range
]


def test_bad_requests_get_the_unary_answers_and_the_stream_keeps_serving(cluster):
    channel, stub = broker_stub(cluster.broker_addr)
    with channel:
        assert code_name(stub.SendMessage(_request("Auto", [b"warm"]), timeout=TIMEOUT_S).code) == "SUCCESS"
        unary = [stub.SendMessage(req, timeout=TIMEOUT_S) for req in _BAD]
        requests = []
        for i, bad in enumerate(_BAD):
            requests.append(broker_pb2.SendMessageRequest(request_id=2 * i + 1, **_fields(bad)))
            requests.append(broker_pb2.SendMessageRequest(request_id=2 * i + 2, **_fields(_request("T", [b"ok%d" % i]))))
        answers = {a.request_id: a for a in stub.SendStream(iter(requests), timeout=TIMEOUT_S)}
    assert sorted(answers) == [r.request_id for r in requests]
    for i, want in enumerate(unary):
        got = answers[2 * i + 1]
        assert (code_name(got.code), got.remark) == (code_name(want.code), want.remark)
        assert code_name(got.code) != "SUCCESS"
        assert code_name(answers[2 * i + 2].code) == "SUCCESS", answers[2 * i + 2].remark
    good_offsets = [answers[2 * i + 2].entries[0].queue_offset for i in range(len(_BAD))]
    assert good_offsets == sorted(good_offsets) and len(set(good_offsets)) == len(good_offsets)


def _fields(request):
    return {f.name: v for f, v in request.ListFields()}


def test_a_garbled_stream_message_ends_the_stream_with_invalid_argument(cluster):
    channel, _ = broker_stub(cluster.broker_addr)
    with channel:
        raw = channel.stream_stream("/mqlab.v1.Broker/SendStream", request_serializer=lambda b: b,
                                    response_deserializer=broker_pb2.SendMessageResponse.FromString)
        good = broker_pb2.SendMessageRequest(request_id=1, **_fields(_request("T", [b"before"]))).SerializeToString()
        call = raw(iter([good, b"\xff\xff\xff"]), timeout=TIMEOUT_S)
        answers = []
        try:
            for answer in call:
                answers.append(answer)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT
        else:
            raise AssertionError("the garbled stream ended without an error")
    assert [code_name(a.code) for a in answers] == ["SUCCESS"] and answers[0].request_id == 1


def test_send_async_window_answers_reach_their_callers(cluster):
    count = 3_000
    # small batches: many requests, each answer settling its own messages' futures
    with Producer(cluster.namesrv_addr, async_window=512, async_batch_count_max=8) as producer:
        producer.send(Message("Window", b"warm-up"))
        futures = [producer.send_async(Message("Window", b"w-%d" % i)) for i in range(count)]
        _, not_done = concurrent.futures.wait(futures, timeout=within_s(30_000))
        assert not not_done
        results = [f.result() for f in futures]
        assert producer._instance.api.send_stream(cluster.broker_addr).opened_count == 1
    assert len({(r.message_queue, r.queue_offset) for r in results}) == count
    index_of = {r.msg_id: i for i, r in enumerate(results)}
    with PullConsumer(cluster.namesrv_addr, "window-check") as consumer:
        for mq in {r.message_queue for r in results}:
            mine = sorted((r for r in results if r.message_queue == mq), key=lambda r: r.queue_offset)
            got = {}
            offset = mine[0].queue_offset
            while offset <= mine[-1].queue_offset:
                pulled = consumer.pull(mq, offset, 32)
                assert pulled.messages, f"nothing at {mq}@{offset}"
                got.update({m.queue_offset: m for m in pulled.messages})
                offset = pulled.next_begin_offset
            for r in mine:
                m = got[r.queue_offset]
                assert m.msg_id == r.msg_id
                assert m.body == b"w-%d" % index_of[r.msg_id]


def test_sends_in_flight_together_on_one_stream_get_their_own_answers(cluster):
    count = 16
    with Producer(cluster.namesrv_addr) as producer:
        first = producer.send(Message("Many", b"warm-up"))
        instance, api, addr = producer._instance, producer._instance.api, cluster.broker_addr
        queues = [MessageQueue("Many", first.message_queue.broker_name, q) for q in range(4)]
        prepared = [producer._prepare(Message("Many", b"c-%d" % i)) for i in range(count)]

        async def all_at_once():
            # started in one loop turn: every request is on the stream before any answer is read
            return await asyncio.gather(*(
                api.send(addr, queues[i % 4], [out], [uid], group=producer.group, default_topic_queue_nums=4,
                         born_host="127.0.0.1:0", timeout_ms=10_000, what=f"send {i}")
                for i, (out, uid) in enumerate(prepared)))

        results = instance.run(all_at_once(), within_s(10_000), "sends in flight together")
        assert api.send_stream(addr).pending_high_water >= count
    assert [r.msg_id for r in results] == [uid for _, uid in prepared]
    with PullConsumer(cluster.namesrv_addr, "many-check") as consumer:
        for i, r in enumerate(results):
            assert r.message_queue == queues[i % 4]
            pulled = consumer.pull(r.message_queue, r.queue_offset, 1)
            assert [(m.msg_id, m.body) for m in pulled.messages] == [(r.msg_id, b"c-%d" % i)]


def test_a_stream_request_over_the_entry_cap_is_answered_or_refused_as_over_unary(cluster):
    over = c.BATCH_MESSAGES_MAX + 1
    small = broker_pb2.SendMessageRequest(request_id=1, **_fields(_request("T", [b"x"] * over)))
    good = broker_pb2.SendMessageRequest(request_id=2, **_fields(_request("T", [b"after"])))
    big = broker_pb2.SendMessageRequest(request_id=3, **_fields(_request("T", [b"x"] * over)))
    big.messages[0].body = b"x" * c.REQUEST_SCAN_BYTES_MIN  # big enough to be counted before parsing
    channel, stub = broker_stub(cluster.broker_addr)
    with channel:
        call = stub.SendStream(iter([small, good, big]), timeout=TIMEOUT_S)
        answers = []
        with pytest.raises(grpc.RpcError) as info:
            for answer in call:
                answers.append(answer)
    # parsed and refused by the broker's checks, the stream going on; the big one refused unparsed
    assert {a.request_id: code_name(a.code) for a in answers} == {1: "MESSAGE_ILLEGAL", 2: "SUCCESS"}
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
