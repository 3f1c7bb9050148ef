"""Endpoint rewriting on a RocketMQ 5 gRPC byte stream, for 5.x clients behind link proxies.

A RocketMQ 5 client dials the endpoints its QueryRoute and QueryAssignment answers name, one per
broker: without help it would reach each broker's rocketmq5 port directly, past the harness. So
the proxy of a 5.x client's link to a broker rewrites, in what the broker sends back, every
broker's rocketmq5 address to the address of that client's own link proxy to that broker; its
receives, acks and heartbeats then cross proxies a partition can cut.

The stream is HTTP/2 (plaintext gRPC): frames of `uint24 length | type | flags | uint31 stream`
then the payload. Only DATA frames (type 0) are touched, and in them only an encoded
`apache.rocketmq.v2.Address` whose host and port are a broker's: field 1 `host` as
`0x0a <len> <host>` followed by field 2 `port` as `0x10 <varint>`. An Address split across two
DATA frames would pass unchanged; a route answer is a few hundred bytes, one frame.
A rewrite keeps the length of every byte range: the same host and a port whose varint has the
same length (every port from 16384 up takes three bytes; harness ports start at 20000), so no
protobuf length, gRPC message length, frame length or HTTP/2 flow-control window changes.
`EndpointRewriter` refuses pairs that would change a length.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from harness.frames import Http2Frames, Observer

_DATA = 0
_HOST_TAG, _PORT_TAG = 0x0A, 0x10  # Address.host (field 1, length-delimited), Address.port (field 2, varint)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encoded_address(addr: str) -> bytes:
    """`host:port` as the bytes of an encoded Address message's fields."""
    host, _, port = addr.rpartition(":")
    raw = host.encode()
    return bytes([_HOST_TAG, len(raw)]) + raw + bytes([_PORT_TAG]) + _varint(int(port))


def _address_pairs(addresses: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    pairs = []
    for old, new in sorted(addresses.items()):
        a, b = encoded_address(old), encoded_address(new)
        if len(a) != len(b):
            raise ValueError(f"cannot rewrite {old} to {new} in place: their encodings differ in length "
                             "(same host, and both ports from 16384 up, are needed)")
        if a != b:
            pairs.append((a, b))
    return pairs


class EndpointRewriter(Http2Frames):
    """Stateful per connection: `feed(bytes) -> bytes` returns whole (rewritten) HTTP/2 frames only.
    `observer` sees every whole frame as the server sent it (the request journal, same frame walk)."""

    def __init__(self, addresses: Mapping[str, str], observer: Observer | None = None) -> None:
        super().__init__(observer, hold=True)
        self._pairs = _address_pairs(addresses)
        self.rewritten = 0

    def transform(self, frame: bytes) -> bytes:
        if frame[3] != _DATA or not self._pairs:
            return frame
        new = frame
        for old, replacement in self._pairs:
            new = new.replace(old, replacement)
        if new != frame:
            self.rewritten += 1
        return new


def endpoint_rewriter_factory(addresses: Mapping[str, str]) -> Callable[..., Callable[[bytes], bytes]]:
    """One fresh rewriter per proxied connection (a `NetProxy.retarget` backward filter), called with
    the connection's frame observer if it has one; raises ValueError at once for an address pair
    that cannot be rewritten in place."""
    frozen = dict(addresses)
    _address_pairs(frozen)
    return lambda observer=None: EndpointRewriter(frozen, observer).feed
