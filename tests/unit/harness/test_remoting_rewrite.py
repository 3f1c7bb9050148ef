"""The route rewriter a real client's name-server link applies: whole frames, lengths recomputed."""

from __future__ import annotations

import json
import struct

from harness.remoting_rewrite import RemotingAddressRewriter

BROKERS = {"127.0.0.1:10911": "127.0.0.1:40001", "127.0.0.1:10912": "127.0.0.1:4"}


def frame(header: dict, body: bytes) -> bytes:
    raw = json.dumps(header).encode()
    rest = struct.pack(">i", len(raw)) + raw + body  # serialize type 0 (JSON)
    return struct.pack(">i", len(rest)) + rest


def parse(data: bytes) -> list[tuple[dict, bytes]]:
    out = []
    while data:
        (length,) = struct.unpack_from(">i", data)
        (mark,) = struct.unpack_from(">i", data, 4)
        header_len = mark & 0xFFFFFF
        out.append((json.loads(data[8:8 + header_len]), data[8 + header_len:4 + length]))
        data = data[4 + length:]
    return out


ROUTE = (b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10912"},"brokerName":"broker-a"}],'
         b'"queueDatas":[]}')


def test_route_answer_names_the_proxies_and_frame_lengths_follow() -> None:
    rw = RemotingAddressRewriter(BROKERS)
    out = rw.feed(frame({"code": 0, "opaque": 7, "flag": 1}, ROUTE) + frame({"code": 0, "opaque": 8}, b"x"))
    frames = parse(out)
    assert [h["opaque"] for h, _ in frames] == [7, 8]
    assert frames[0][1] == ROUTE.replace(b'"127.0.0.1:10911"', b'"127.0.0.1:40001"').replace(
        b'"127.0.0.1:10912"', b'"127.0.0.1:4"')
    assert frames[1][1] == b"x"
    assert rw.rewritten == 1 and rw.frames == 2


def test_bytes_split_anywhere_come_out_as_whole_frames() -> None:
    data = frame({"code": 0, "opaque": 1}, ROUTE) * 3
    rw = RemotingAddressRewriter(BROKERS)
    out = b"".join(rw.feed(data[i:i + 5]) for i in range(0, len(data), 5))
    assert len(parse(out)) == 3 and b"10911" not in out


def test_an_address_is_only_replaced_whole() -> None:
    body = b'{"a":"127.0.0.1:109110","b":"127.0.0.1:10911"}'
    out = parse(RemotingAddressRewriter(BROKERS).feed(frame({"code": 0}, body)))
    assert out[0][1] == b'{"a":"127.0.0.1:109110","b":"127.0.0.1:40001"}'


def test_a_stream_that_is_not_remoting_passes_untouched() -> None:
    data = b"\xff\xff\xff\xff" + b'"127.0.0.1:10911"'
    assert RemotingAddressRewriter(BROKERS).feed(data) == data
