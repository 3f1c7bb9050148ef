"""The request journal's taps on real encodings: remoting frames from our codec, HTTP/2 frames with
HPACK header blocks from python-hyper's encoder and gRPC messages from the generated classes, fed
whole, byte by byte and split at every byte."""

from __future__ import annotations

import json

import hpack
import pytest

from harness.frames import HTTP2_PREFACE, Http2Frames, RemotingFrames
from harness.request_tap import ConnectionTap
from nodes.remoting.command import FLAG_RESPONSE, RemotingCommand, encode
from proto import broker_pb2, common_pb2, consumer_pb2, rmq5_definition_pb2, rmq5_service_pb2

CTX = {"link": "consumer-0->broker-a-0", "src": "consumer-0", "dst": "broker-a-0", "conn": 1}


class Journal:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict]] = []

    def __call__(self, event: str, fields: dict) -> None:
        self.lines.append((event, fields))

    def of(self, event: str) -> list[dict]:
        return [f for e, f in self.lines if e == event]


def feed_all(tap: ConnectionTap, forward: bytes, backward: bytes, split: str) -> None:
    """Feed both directions whole, one byte at a time, or cut at every byte (`split` = whole | bytes | N)."""
    def pieces(data: bytes) -> list[bytes]:
        if split == "whole":
            return [data]
        if split == "bytes":
            return [data[i:i + 1] for i in range(len(data))]
        cut = int(split)
        return [data[:cut], data[cut:]]

    for piece in pieces(forward):
        assert tap.forward(piece) == piece  # the journal never changes or holds a byte
    for piece in pieces(backward):
        assert tap.backward(piece) == piece


# ---- remoting ------------------------------------------------------------------------------------


def _remoting_streams() -> tuple[bytes, bytes]:
    heartbeat = RemotingCommand(code=34, opaque=1, body=json.dumps(
        {"clientID": "10.0.0.1@42", "consumerDataSet": [{"groupName": "G"}], "producerDataSet": []}).encode())
    commit = RemotingCommand(code=15, opaque=2, ext={"consumerGroup": "G", "topic": "T", "queueId": "3",
                                                     "commitOffset": "17"})
    pull = RemotingCommand(code=11, opaque=3, ext={"consumerGroup": "G", "topic": "T", "queueId": "3"})
    lock = RemotingCommand(code=41, opaque=4, body=json.dumps(
        {"consumerGroup": "G", "clientId": "10.0.0.1@42", "mqSet": [
            {"topic": "T", "brokerName": "broker-a", "queueId": 0},
            {"topic": "T", "brokerName": "broker-a", "queueId": 1}]}).encode())
    forward = b"".join(encode(x) for x in (heartbeat, commit, pull, lock))
    answers = [
        RemotingCommand(code=0, opaque=1, flag=FLAG_RESPONSE),
        # a pull's answer with a body the tap must walk past
        RemotingCommand(code=0, opaque=3, flag=FLAG_RESPONSE, body=b"\x00" * 5000),
        RemotingCommand(code=40, opaque=9, ext={"consumerGroup": "G"}),  # the broker's own request: no answer
        RemotingCommand(code=0, opaque=2, flag=FLAG_RESPONSE),
        RemotingCommand(code=0, opaque=4, flag=FLAG_RESPONSE, body=json.dumps(
            {"lockOKMQSet": [{"topic": "T", "brokerName": "broker-a", "queueId": 1}]}).encode()),
    ]
    return forward, b"".join(encode(x) for x in answers)


@pytest.mark.parametrize("split", ["whole", "bytes", *map(str, range(1, 40, 7))])
def test_remoting_requests_and_answers(split):
    forward, backward = _remoting_streams()
    journal = Journal()
    tap = ConnectionTap(journal, CTX)
    feed_all(tap, forward, backward, split)
    assert tap.protocol == "remoting"
    requests = journal.of("request")
    assert [(r["kind"], r["code"], r["request_id"], r["entry"]) for r in requests] == [
        ("heartbeat", 34, 1, 0), ("offset-commit", 15, 2, 0), ("lock", 41, 4, 0), ("lock", 41, 4, 1)]
    commit = requests[1]
    # remoting names no committer: the connection's heartbeat does
    assert (commit["group"], commit["topic"], commit["queue_id"], commit["offset"], commit["client_id"]) == \
        ("G", "T", 3, 17, "10.0.0.1@42")
    answers = journal.of("answer")
    assert [(a["kind"], a["request_id"], a["ok"], a["response_code"]) for a in answers] == [
        ("heartbeat", 1, True, 0), ("offset-commit", 2, True, 0), ("lock", 4, True, 0), ("lock", 4, True, 0)]
    assert [a["locked"] for a in answers[2:]] == [False, True]
    assert all(a["answered_mono_ms"] >= a["sent_mono_ms"] for a in answers)


def test_remoting_binary_header_request_is_read():
    # RocketMQ's own binary header (serialize type 1): code, language, version, opaque, flag, remark, ext
    ext = b"".join(len(k).to_bytes(2, "big") + k + len(v).to_bytes(4, "big") + v
                   for k, v in ((b"consumerGroup", b"G"), (b"topic", b"T"), (b"queueId", b"0"),
                                (b"commitOffset", b"5")))
    header = (15).to_bytes(2, "big") + b"\x00" + (1).to_bytes(2, "big") + (7).to_bytes(4, "big") + \
        (0).to_bytes(4, "big") + (0).to_bytes(4, "big") + len(ext).to_bytes(4, "big") + ext
    frame = (4 + len(header)).to_bytes(4, "big") + ((1 << 24) | len(header)).to_bytes(4, "big") + header
    journal = Journal()
    tap = ConnectionTap(journal, CTX)
    tap.forward(frame)
    (req,) = journal.of("request")
    assert (req["code"], req["request_id"], req["offset"]) == (15, 7, 5)


def test_remoting_frame_walker_passes_garbage_through_once_broken():
    seen: list[bytes] = []
    walker = RemotingFrames(seen.append, hold=False)
    assert walker.feed(b"\x7f\xff\xff\xff" + b"x" * 10) == b"\x7f\xff\xff\xff" + b"x" * 10
    assert walker.broken and not seen


# ---- HTTP/2 gRPC ---------------------------------------------------------------------------------


def _frame(ftype: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([ftype, flags]) + stream.to_bytes(4, "big") + payload


def _grpc(message) -> bytes:
    raw = message.SerializeToString()
    return b"\x00" + len(raw).to_bytes(4, "big") + raw


def _request_headers(enc: hpack.Encoder, path: str, extra=()) -> bytes:
    return enc.encode([(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "127.0.0.1"),
                       ("content-type", "application/grpc"), ("te", "trailers"), *extra])


def _http2_streams() -> tuple[bytes, bytes]:
    """Four calls on one connection: two commits (the second's headers mostly from the dynamic
    table), a pull (walked past), an ack with two entries; HEADERS with padding and priority, a header
    block continued in CONTINUATION frames, a request split over two DATA frames."""
    cenc, senc = hpack.Encoder(), hpack.Encoder()
    fwd = bytearray(HTTP2_PREFACE) + _frame(0x4, 0, 0, b"")  # SETTINGS
    back = bytearray(_frame(0x4, 0, 0, b""))
    commit_path = "/mqlab.v1.Broker/UpdateConsumerOffset"
    for stream, offset in ((1, 10), (3, 20)):
        block = _request_headers(cenc, commit_path)
        padded = bytes([4]) + b"\x00\x00\x00\x00\x10" + block + b"\x00" * 4  # PADDED + PRIORITY
        fwd += _frame(0x1, 0x4 | 0x8 | 0x20, stream, padded)
        body = _grpc(broker_pb2.UpdateConsumerOffsetRequest(consumer_group="G", topic="T", queue_id=2, offset=offset,
                                                            client_id="c1", commit_seq=stream))
        fwd += _frame(0x0, 0, stream, body[:7]) + _frame(0x0, 0x1, stream, body[7:])  # split DATA
    # a pull the journal does not follow: its answer's DATA is walked past
    fwd += _frame(0x1, 0x4, 5, _request_headers(cenc, "/mqlab.v1.Broker/Pull"))
    fwd += _frame(0x0, 0, 5, _grpc(broker_pb2.PullRequest(request_id=1, topic="T")))
    ack_path = "/apache.rocketmq.v2.MessagingService/AckMessage"
    block = _request_headers(cenc, ack_path, [("x-mq-client-id", "py5-client")])
    fwd += _frame(0x1, 0, 7, block[:5]) + _frame(0x9, 0, 7, block[5:9]) + _frame(0x9, 0x4, 7, block[9:])
    handle = "p1 n broker-a G T 1 42 9000 1700000000000 30000 3"
    ack = rmq5_service_pb2.AckMessageRequest(
        group=rmq5_definition_pb2.Resource(name="G"), topic=rmq5_definition_pb2.Resource(name="T"),
        entries=[rmq5_service_pb2.AckMessageEntry(message_id="m1", receipt_handle=handle),
                 rmq5_service_pb2.AckMessageEntry(message_id="m2", receipt_handle="foreign-handle")])
    fwd += _frame(0x0, 0x1, 7, _grpc(ack))

    def answer(stream: int, message, status: str = "0") -> bytes:
        out = _frame(0x1, 0x4, stream, senc.encode([(":status", "200"), ("content-type", "application/grpc")]))
        out += _frame(0x0, 0, stream, _grpc(message))
        return out + _frame(0x1, 0x4 | 0x1, stream, senc.encode([("grpc-status", status), ("grpc-message", "")]))

    back += answer(1, broker_pb2.UpdateConsumerOffsetResponse(code=common_pb2.SUCCESS))
    back += answer(5, broker_pb2.PullResponse(request_id=1, records=b"r" * 40_000))
    back += answer(3, broker_pb2.UpdateConsumerOffsetResponse(code=common_pb2.SYSTEM_ERROR, remark="full"))
    ok = rmq5_definition_pb2.Status(code=rmq5_definition_pb2.OK)
    bad = rmq5_definition_pb2.Status(code=rmq5_definition_pb2.INVALID_RECEIPT_HANDLE)
    back += answer(7, rmq5_service_pb2.AckMessageResponse(status=ok, entries=[
        rmq5_service_pb2.AckMessageResultEntry(message_id="m1", receipt_handle=handle, status=ok),
        rmq5_service_pb2.AckMessageResultEntry(message_id="m2", receipt_handle="foreign-handle", status=bad)]))
    return bytes(fwd), bytes(back)


@pytest.mark.parametrize("split", ["whole", "bytes", "3", "30", "100", "200"])
def test_grpc_requests_and_answers(split):
    forward, backward = _http2_streams()
    journal = Journal()
    tap = ConnectionTap(journal, CTX)
    feed_all(tap, forward, backward, split)
    assert tap.protocol == "grpc"
    requests = journal.of("request")
    assert [(r["kind"], r["request_id"], r["entry"]) for r in requests] == [
        ("offset-commit", 1, 0), ("offset-commit", 3, 0), ("ack", 7, 0), ("ack", 7, 1)]
    assert [(r["offset"], r["client_id"], r["commit_seq"]) for r in requests[:2]] == [(10, "c1", 1), (20, "c1", 3)]
    ack = requests[2]
    assert (ack["client_id"], ack["broker_name"], ack["queue_topic"], ack["queue_id"], ack["queue_offset"],
            ack["generation"], ack["message_id"]) == ("py5-client", "broker-a", "T", 1, 42, 3, "m1")
    answers = {(a["request_id"], a["entry"]): a for a in journal.of("answer")}
    assert sorted(answers) == [(1, 0), (3, 0), (7, 0), (7, 1)]
    assert (answers[(1, 0)]["ok"], answers[(1, 0)]["status"], answers[(1, 0)]["grpc_status"]) == (True, "SUCCESS", 0)
    assert (answers[(3, 0)]["ok"], answers[(3, 0)]["status"]) == (False, "SYSTEM_ERROR")
    assert (answers[(7, 0)]["ok"], answers[(7, 0)]["status"]) == (True, "OK")
    assert (answers[(7, 1)]["ok"], answers[(7, 1)]["status"]) == (False, "INVALID_RECEIPT_HANDLE")
    assert answers[(1, 0)]["method"] == "/mqlab.v1.Broker/UpdateConsumerOffset"


def test_grpc_trailers_only_answer_and_reset_stream():
    cenc, senc = hpack.Encoder(), hpack.Encoder()
    fwd = HTTP2_PREFACE + _frame(0x1, 0x4, 1, _request_headers(cenc, "/mqlab.v1.ConsumerManager/UnlockBatchMQ"))
    unlock = consumer_pb2.UnlockBatchRequest(consumer_group="G", client_id="c1", queues=[
        common_pb2.MessageQueue(topic="T", broker_name="broker-a", queue_id=0)])
    fwd += _frame(0x0, 0x1, 1, _grpc(unlock))
    fwd += _frame(0x1, 0x4, 3, _request_headers(cenc, "/mqlab.v1.ConsumerManager/UnlockBatchMQ"))
    fwd += _frame(0x0, 0x1, 3, _grpc(unlock))
    fwd += _frame(0x3, 0, 3, b"\x00\x00\x00\x08")  # the client cancels call 3: no answer will pass
    back = _frame(0x1, 0x4 | 0x1, 1, senc.encode([(":status", "200"), ("grpc-status", "14")]))
    journal = Journal()
    tap = ConnectionTap(journal, CTX)
    feed_all(tap, fwd, back, "whole")
    assert [(r["kind"], r["request_id"], r["queue_id"]) for r in journal.of("request")] == [
        ("unlock", 1, 0), ("unlock", 3, 0)]
    (answer,) = journal.of("answer")
    assert (answer["request_id"], answer["grpc_status"], answer["ok"], answer["status"]) == (1, 14, False, None)


def test_broken_header_block_stops_the_journal_not_the_bytes():
    fwd = HTTP2_PREFACE + _frame(0x1, 0x4, 1, b"\xff\xff\xff\xff")  # an index far past any table
    journal = Journal()
    tap = ConnectionTap(journal, CTX)
    assert tap.forward(fwd) == fwd
    assert tap.forward(_frame(0x0, 0x1, 1, b"\x00" * 10)) == _frame(0x0, 0x1, 1, b"\x00" * 10)
    assert journal.lines == []


def test_observing_walker_skips_data_it_does_not_follow_without_buffering():
    seen: list[bytes] = []

    class Frames(Http2Frames):
        def skippable(self, buf, at):
            return buf[at + 3] == 0

    walker = Frames(seen.append, hold=False)
    big = _frame(0x0, 0, 1, b"d" * 50_000)
    ping = _frame(0x6, 0, 0, b"12345678")
    for i in range(0, len(big), 1000):
        walker.feed(big[i:i + 1000])
    assert len(walker._buffer) == 0  # the DATA payload was counted past, not held
    walker.feed(ping)
    assert seen == [ping]


def test_remoting_answer_nobody_waits_for_is_walked_past_without_buffering():
    journal = Journal()
    tap = ConnectionTap(journal, CTX)
    tap.forward(encode(RemotingCommand(code=11, opaque=1)))  # a pull: not journalled, nothing pending
    tap.forward(encode(RemotingCommand(code=15, opaque=2, ext={"consumerGroup": "G", "topic": "T", "queueId": "0",
                                                               "commitOffset": "3"})))
    pull_answer = encode(RemotingCommand(code=0, opaque=1, flag=FLAG_RESPONSE, body=b"y" * 262_144))
    for i in range(0, len(pull_answer), 65_536):
        tap.backward(pull_answer[i:i + 65_536])
        assert len(tap._impl.backward_walker._buffer) < 1_000  # the body is counted past, not held
    tap.backward(encode(RemotingCommand(code=0, opaque=2, flag=FLAG_RESPONSE)))
    assert [(a["kind"], a["ok"]) for a in journal.of("answer")] == [("offset-commit", True)]


def test_a_rewriting_walker_feeds_the_journal_on_its_own_frame_walk():
    """The name-server link's remoting rewriter and the journal share one walk: the observer sees each
    frame as the peer sent it, the client gets it rewritten."""
    from harness.remoting_rewrite import rewriter_factory

    seen: list[bytes] = []
    feed = rewriter_factory({"127.0.0.1:10911": "127.0.0.1:30001"})(seen.append)
    answer = encode(RemotingCommand(code=0, opaque=1, flag=FLAG_RESPONSE,
                                    body=b'{"brokerAddrs":{"0":"127.0.0.1:10911"}}'))
    out = b"".join(feed(answer[i:i + 3]) for i in range(0, len(answer), 3))
    assert seen == [answer]
    assert b"127.0.0.1:30001" in out and b"127.0.0.1:10911" not in out


def test_a_broker_that_talks_before_the_client_is_buffered_only_so_far():
    tap = ConnectionTap(Journal(), CTX)
    for _ in range(100):
        tap.backward(b"\x00" * 1024)
    assert tap.failed and tap.forward(b"abc") == b"abc"
