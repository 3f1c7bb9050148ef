"""Bounded work and quiet rejections on a real master.

A send carries at most BATCH_MESSAGES_MAX messages; a request that claims more is refused
before its entries are handled (before they are even parsed when it is big). Bytes that are no
request are answered INVALID_ARGUMENT — unary calls and Pull/PullBatch streams alike — with
one log line per peer (connection) and interval and no traceback. Under a flood of 200 connections sending
garbage, maximum batches and oversize batches, a normal send and pull are still answered
within their deadlines.
"""

from __future__ import annotations

import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.examples import examples
from support.local_cluster import module_cluster, module_master_stub

from nodes.common import constants as c
from nodes.store.message_batch import encode_entry
from proto import broker_pb2, broker_pb2_grpc, common_pb2

TIMEOUT_S = 10.0
CONNECTIONS = 200
GARBAGE = b"\xff\xff\xff\x07 this is no protobuf message"
ONE_BYTE_ENTRY = encode_entry(b"x", 0, {})


cluster = module_cluster("surface-flood")
pytestmark = pytest.mark.xdist_group("surface-flood")  # one worker starts the module's cluster once
broker = module_master_stub()


def _batch(broker, entries: int, *, timeout_s: float = TIMEOUT_S):
    return broker.SendMessage(broker_pb2.SendMessageRequest(
        topic="SurfFlood", queue_id=0, default_topic_queue_nums=4, batch_body=ONE_BYTE_ENTRY * entries,
        born_timestamp_ms=1), timeout=timeout_s)


def test_a_batch_holds_at_most_the_cap(broker):
    full = _batch(broker, c.BATCH_MESSAGES_MAX)
    assert full.code == common_pb2.SUCCESS and len(full.phys_offsets) == c.BATCH_MESSAGES_MAX
    over = _batch(broker, c.BATCH_MESSAGES_MAX + 1)
    assert over.code == common_pb2.MESSAGE_ILLEGAL and str(c.BATCH_MESSAGES_MAX) in over.remark
    probe = _batch(broker, 300_000)  # the probe's 300,000 one-byte entries
    assert probe.code == common_pb2.MESSAGE_ILLEGAL


def test_a_big_request_with_too_many_entries_is_refused_unparsed(broker):
    request = broker_pb2.SendMessageRequest(topic="SurfFlood", queue_id=0)
    request.messages.extend(broker_pb2.OutgoingMessage(body=b"x") for _ in range(c.BATCH_MESSAGES_MAX + 1))
    request.messages[0].body = b"x" * c.REQUEST_SCAN_BYTES_MIN  # big enough to be counted before parsing
    with pytest.raises(grpc.RpcError) as info:
        broker.SendMessage(request, timeout=TIMEOUT_S)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    small = broker_pb2.SendMessageRequest(topic="SurfFlood", queue_id=0, messages=[
        broker_pb2.OutgoingMessage(body=b"x") for _ in range(c.BATCH_MESSAGES_MAX + 1)])
    assert broker.SendMessage(small, timeout=TIMEOUT_S).code == common_pb2.MESSAGE_ILLEGAL


@pytest.mark.parametrize("method", ["/mqlab.v1.Broker/Pull", "/mqlab.v1.Broker/PullBatch"])
def test_pull_streams_answer_garbage_with_an_error_status(cluster, method):
    with grpc.insecure_channel(cluster.node("broker-a-0").addr) as channel:
        call = channel.stream_stream(method)(iter([GARBAGE]), timeout=TIMEOUT_S)
        with pytest.raises(grpc.RpcError) as info:
            list(call)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(topic=st.text(max_size=140), group=st.text(max_size=20))
def test_any_names_are_answered_with_a_code_never_a_failure(broker, topic, group):
    send = broker.SendMessage(broker_pb2.SendMessageRequest(
        topic=topic, queue_id=0, default_topic_queue_nums=4, messages=[broker_pb2.OutgoingMessage(body=b"x")]),
        timeout=TIMEOUT_S)
    assert send.code != common_pb2.SYSTEM_ERROR, send.remark
    pull = next(iter(broker.Pull(iter([broker_pb2.PullRequest(
        request_id=1, consumer_group=group, topic=topic, queue_id=0, queue_offset=0, max_msg_nums=1,
        has_subscription=True, subscription_expression="*")]), timeout=TIMEOUT_S)))
    assert pull.code != common_pb2.SYSTEM_ERROR, pull.remark


def _flood_one(addr: str, remoting_addr: str, i: int) -> None:
    """One hostile connection: garbage on gRPC and remoting, and a batch at or over the cap."""
    with grpc.insecure_channel(addr) as channel:
        for method in ("/mqlab.v1.Broker/SendMessage", "/mqlab.v1.Broker/UpdateConsumerOffset",
                       "/mqlab.v1.Admin/Shutdown"):
            try:
                channel.unary_unary(method)(GARBAGE, timeout=TIMEOUT_S)
            except grpc.RpcError:
                pass
        if i % 20 == 0:
            entries = c.BATCH_MESSAGES_MAX if i % 40 == 0 else 300_000  # at the cap, or far over it
            broker_pb2_grpc.BrokerStub(channel).SendMessage(broker_pb2.SendMessageRequest(
                topic="SurfFlood", queue_id=1, batch_body=ONE_BYTE_ENTRY * entries), timeout=TIMEOUT_S)
    host, _, port = remoting_addr.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as sock:
        sock.sendall(b"\x7f\xff\xff\xff garbage")  # a frame length beyond the limit
        sock.recv(1)


def test_a_send_and_a_pull_keep_their_deadlines_during_a_flood(cluster, broker):
    master = cluster.node("broker-a-0")
    log_before = master.node_log.read_text()
    deadline_s = cluster.timing.send_timeout_ms / 1000
    stop = threading.Event()
    answered: list[int] = []

    def normal_traffic() -> None:
        while not stop.is_set():
            sent = broker.SendMessage(broker_pb2.SendMessageRequest(
                topic="SurfFlood", queue_id=2, default_topic_queue_nums=4,
                messages=[broker_pb2.OutgoingMessage(body=b"normal")]), timeout=deadline_s)
            assert sent.code == common_pb2.SUCCESS, sent.remark
            pulled = next(iter(broker.Pull(iter([broker_pb2.PullRequest(
                request_id=1, consumer_group="surf_flood_reader", topic="SurfFlood", queue_id=2,
                queue_offset=sent.entries[0].queue_offset, max_msg_nums=1, has_subscription=True,
                subscription_expression="*")]), timeout=deadline_s)))
            assert pulled.code == common_pb2.SUCCESS and pulled.record_count == 1
            answered.append(1)

    with ThreadPoolExecutor(max_workers=51) as pool:
        normal = pool.submit(normal_traffic)
        flood = [pool.submit(_flood_one, master.addr, master.remoting_addr, i) for i in range(CONNECTIONS)]
        for future in flood:
            future.result()
        stop.set()
        normal.result()  # a deadline missed would have raised DEADLINE_EXCEEDED here
    assert answered
    assert master.alive
    new_log = master.node_log.read_text()[len(log_before):]
    assert "Traceback" not in new_log
    # 600 malformed gRPC calls and 200 bad frames: at most a line per connection, never one per
    # request (gRPC may carry several channels' calls on one connection: fewer still)
    rejected = [line for line in new_log.splitlines() if "rejected" in line]
    assert 1 <= len(rejected) <= 2 * CONNECTIONS, len(rejected)


def test_one_connection_sending_garbage_logs_one_line(cluster):
    master = cluster.node("broker-a-0")
    before = master.node_log.read_text()
    with grpc.insecure_channel(master.addr, options=[("grpc.use_local_subchannel_pool", 1)]) as channel:
        send = channel.unary_unary("/mqlab.v1.Broker/SendMessage")
        for _ in range(50):
            with pytest.raises(grpc.RpcError) as info:
                send(GARBAGE, timeout=TIMEOUT_S)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    new_log = master.node_log.read_text()[len(before):]
    assert len([line for line in new_log.splitlines() if "rejected a malformed" in line]) == 1
