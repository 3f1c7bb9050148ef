"""The request journal through a real link proxy: real gRPC channels (HPACK with Huffman coding and a
dynamic table, as grpc's C core writes them) and a real remoting stream, to real servers."""

from __future__ import annotations

import json
import socket
import threading
from concurrent import futures

import grpc
import pytest

from harness.grpc_rewrite import endpoint_rewriter_factory
from harness.netproxy import NetProxy
from harness.request_journal import RequestJournal
from nodes.remoting.command import FLAG_RESPONSE, RemotingCommand, encode
from proto import (
    broker_pb2,
    broker_pb2_grpc,
    common_pb2,
    consumer_pb2,
    consumer_pb2_grpc,
    rmq5_definition_pb2,
    rmq5_service_pb2,
    rmq5_service_pb2_grpc,
)

SRC, DST = "consumer-0", "broker-a-0"


class _Broker(broker_pb2_grpc.BrokerServicer):
    def UpdateConsumerOffset(self, request, context):
        code = common_pb2.SUCCESS if request.offset % 2 == 0 else common_pb2.INVALID_ARGUMENT
        return broker_pb2.UpdateConsumerOffsetResponse(code=code)

    def Pull(self, request_iterator, context):
        for req in request_iterator:
            yield broker_pb2.PullResponse(request_id=req.request_id, records=b"r" * 100_000)


class _Consumers(consumer_pb2_grpc.ConsumerManagerServicer):
    def LockBatchMQ(self, request, context):
        return consumer_pb2.LockBatchResponse(code=common_pb2.SUCCESS, locked=request.queues[:1])

    def Heartbeat(self, request, context):
        return consumer_pb2.HeartbeatResponse(code=common_pb2.SUCCESS)


class _Rmq5(rmq5_service_pb2_grpc.MessagingServiceServicer):
    def AckMessage(self, request, context):
        ok = rmq5_definition_pb2.Status(code=rmq5_definition_pb2.OK)
        return rmq5_service_pb2.AckMessageResponse(status=ok, entries=[
            rmq5_service_pb2.AckMessageResultEntry(receipt_handle=e.receipt_handle, status=ok)
            for e in request.entries])


@pytest.fixture
def grpc_server():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=[("grpc.so_reuseport", 0)])
    broker_pb2_grpc.add_BrokerServicer_to_server(_Broker(), server)
    consumer_pb2_grpc.add_ConsumerManagerServicer_to_server(_Consumers(), server)
    rmq5_service_pb2_grpc.add_MessagingServiceServicer_to_server(_Rmq5(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(0)


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_grpc_calls_through_a_real_proxy_are_journalled_with_answers(tmp_path, grpc_server):
    path = tmp_path / "links" / "requests.jsonl"
    proxy = NetProxy(journal_path=path)
    try:
        port = proxy.add_link(SRC, DST, grpc_server)
        proxy.journal_link(SRC, DST)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            broker = broker_pb2_grpc.BrokerStub(channel)
            consumers = consumer_pb2_grpc.ConsumerManagerStub(channel)
            pulls = broker.Pull(iter([broker_pb2.PullRequest(request_id=i, topic="T") for i in range(3)]))
            assert len(list(pulls)) == 3  # 300 KB of answers on a stream the journal walks past
            for offset in range(6):  # the later calls' headers come from the dynamic tables
                broker.UpdateConsumerOffset(broker_pb2.UpdateConsumerOffsetRequest(
                    consumer_group="G", topic="T", queue_id=1, offset=offset, client_id="c1"), timeout=5)
            consumers.LockBatchMQ(consumer_pb2.LockBatchRequest(consumer_group="G", client_id="c1", queues=[
                common_pb2.MessageQueue(topic="T", broker_name="broker-a", queue_id=q) for q in (0, 1)]), timeout=5)
            consumers.Heartbeat(consumer_pb2.HeartbeatRequest(client_id="c1", consumers=[
                consumer_pb2.ConsumerData(group="G")]), timeout=5)
            rmq5 = rmq5_service_pb2_grpc.MessagingServiceStub(channel)
            rmq5.AckMessage(rmq5_service_pb2.AckMessageRequest(
                group=rmq5_definition_pb2.Resource(name="G"), entries=[rmq5_service_pb2.AckMessageEntry(
                    message_id="m", receipt_handle="p1 n broker-a G T 0 5 100 1 2 7")]),
                metadata=[("x-mq-client-id", "py5-c")], timeout=5)
    finally:
        proxy.close()
    lines = _lines(path)
    assert {x["node"] for x in lines} == {"links"}
    assert all(x["link"] == f"{SRC}->{DST}" and x["protocol"] == "grpc" for x in lines)
    commits = [x for x in lines if x["kind"] == "offset-commit"]
    assert [x["offset"] for x in commits if x["event"] == "request"] == list(range(6))
    answered = {x["offset"]: x for x in commits if x["event"] == "answer"}
    assert {o: a["ok"] for o, a in answered.items()} == {o: o % 2 == 0 for o in range(6)}
    assert all(a["grpc_status"] == 0 and a["answered_mono_ms"] >= a["sent_mono_ms"] for a in answered.values())
    locks = [x for x in lines if x["kind"] == "lock" and x["event"] == "answer"]
    assert sorted((x["queue_id"], x["locked"]) for x in locks) == [(0, True), (1, False)]
    (ack,) = [x for x in lines if x["kind"] == "ack" and x["event"] == "answer"]
    assert (ack["client_id"], ack["queue_offset"], ack["generation"], ack["ok"]) == ("py5-c", 5, 7, True)
    assert [x["kind"] for x in lines if x["event"] == "request"].count("heartbeat") == 1
    assert not [x for x in lines if "Pull" in (x.get("method") or "")]


def test_rewriting_link_journals_on_the_rewriters_frame_walk(tmp_path, grpc_server):
    """A py5 link: the backward rewriter's frames feed the journal (one walk for both duties)."""
    path = tmp_path / "requests.jsonl"
    proxy = NetProxy(journal_path=path)
    try:
        port = proxy.add_link(SRC, DST, grpc_server)
        proxy.retarget(SRC, DST, grpc_server, backward_filter=endpoint_rewriter_factory({"127.0.0.1:30001":
                                                                                         "127.0.0.1:30002"}))
        proxy.journal_link(SRC, DST)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            broker_pb2_grpc.BrokerStub(channel).UpdateConsumerOffset(broker_pb2.UpdateConsumerOffsetRequest(
                consumer_group="G", topic="T", queue_id=0, offset=4), timeout=5)
    finally:
        proxy.close()
    assert [(x["event"], x.get("ok")) for x in _lines(path)] == [("request", None), ("answer", True)]


def _remoting_server(answer_lock: bool):
    """A one-connection remoting peer: answers every request with code 0 (locks: the first queue)."""
    srv = socket.create_server(("127.0.0.1", 0))

    def serve():
        try:
            answer_all()
        except OSError:  # the proxy's close resets the connection: the peer just ends
            pass

    def answer_all():
        conn, _ = srv.accept()
        buf = b""
        with conn:
            while data := conn.recv(65536):
                buf += data
                while len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:4], "big"):
                    n = 4 + int.from_bytes(buf[:4], "big")
                    header_len = int.from_bytes(buf[5:8], "big")
                    header = json.loads(buf[8:8 + header_len])
                    body = b""
                    if header["code"] == 41 and answer_lock:
                        mq = json.loads(buf[8 + header_len:n])["mqSet"][0]
                        body = json.dumps({"lockOKMQSet": [mq]}).encode()
                    buf = buf[n:]
                    conn.sendall(encode(RemotingCommand(code=0, opaque=header["opaque"], flag=FLAG_RESPONSE,
                                                        body=body)))

    threading.Thread(target=serve, daemon=True).start()
    return srv


def test_remoting_through_a_real_proxy(tmp_path):
    srv = _remoting_server(answer_lock=True)
    path = tmp_path / "requests.jsonl"
    proxy = NetProxy(journal_path=path)
    try:
        port = proxy.add_link(SRC, DST, f"127.0.0.1:{srv.getsockname()[1]}")
        proxy.journal_link(SRC, DST)
        with socket.create_connection(("127.0.0.1", port)) as s:
            reqs = [RemotingCommand(code=15, opaque=i, ext={"consumerGroup": "G", "topic": "T", "queueId": "0",
                                                            "commitOffset": str(i)}) for i in range(1, 4)]
            stream = b"".join(encode(r) for r in reqs)
            for i in range(0, len(stream), 5):  # split across many reads
                s.sendall(stream[i:i + 5])
            got = b""
            while got.count(b'"flag":1') < 3:
                got += s.recv(65536)
    finally:
        proxy.close()
        srv.close()
    lines = _lines(path)
    assert [(x["event"], x["offset"]) for x in lines if x["event"] == "request"] == [("request", i) for i in (1, 2, 3)]
    assert sorted(x["offset"] for x in lines if x["event"] == "answer" and x["ok"]) == [1, 2, 3]


def test_journal_buffers_and_flushes_at_close(tmp_path):
    journal = RequestJournal(tmp_path / "x" / "requests.jsonl", flush_ms=60_000)
    journal.record("request", {"kind": "lock"})  # outside a loop: written at once
    assert journal.lines_written == 1
    journal.close()
    assert json.loads((tmp_path / "x" / "requests.jsonl").read_text())["kind"] == "lock"
