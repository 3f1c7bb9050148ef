"""The endpoint rewriter a RocketMQ 5 client's broker links apply: in DATA frames only, in place."""

from __future__ import annotations

import struct

import pytest

from harness.grpc_rewrite import EndpointRewriter, endpoint_rewriter_factory
from proto import rmq5_definition_pb2 as d
from proto import rmq5_service_pb2 as s

MASTER, SLAVE = "127.0.0.1:20101", "127.0.0.1:20102"
OWN = {MASTER: "127.0.0.1:41001", SLAVE: "127.0.0.1:41002"}


def route_answer(addr: str) -> bytes:
    host, _, port = addr.rpartition(":")
    endpoints = d.Endpoints(scheme=d.IPv4, addresses=[d.Address(host=host, port=int(port))])
    answer = s.QueryRouteResponse(message_queues=[
        d.MessageQueue(topic=d.Resource(name="T"), id=q, broker=d.Broker(name="broker-a", id=0, endpoints=endpoints))
        for q in range(4)])
    raw = answer.SerializeToString()
    return b"\x00" + struct.pack(">I", len(raw)) + raw  # gRPC: not compressed, length, message


def frame(kind: int, payload: bytes, stream: int = 1) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, 0]) + struct.pack(">I", stream) + payload


def decoded(data: bytes) -> s.QueryRouteResponse:
    payload = data[9:]
    return s.QueryRouteResponse.FromString(payload[5:])


def test_a_route_answer_names_the_clients_own_links_and_keeps_every_length() -> None:
    original = frame(0, route_answer(MASTER))
    out = EndpointRewriter(OWN).feed(original)
    assert len(out) == len(original)
    ports = {mq.broker.endpoints.addresses[0].port for mq in decoded(out).message_queues}
    assert ports == {41001}


def test_frames_split_across_reads_come_out_whole_and_other_frames_pass_unchanged() -> None:
    headers = frame(1, b"\x0a\x09127.0.0.1\x10" + bytes([0xC5, 0x9C, 0x01]), stream=3)  # HEADERS: never touched
    data = headers + frame(0, route_answer(SLAVE), stream=3)
    rw = EndpointRewriter(OWN)
    out = b"".join(rw.feed(data[i:i + 7]) for i in range(0, len(data), 7))
    assert out[:len(headers)] == headers
    assert {mq.broker.endpoints.addresses[0].port for mq in decoded(out[len(headers):]).message_queues} == {41002}
    assert rw.frames == 2 and rw.rewritten == 1


def test_an_address_whose_encoding_would_change_length_is_refused_up_front() -> None:
    with pytest.raises(ValueError, match="in place"):
        endpoint_rewriter_factory({MASTER: "127.0.0.1:9876"})  # a 2-byte varint port against a 3-byte one
