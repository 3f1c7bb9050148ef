"""Address rewriting on a RocketMQ remoting byte stream, for real clients behind link proxies.

mqlab's own clients reach each broker through the proxy of their link because their config maps
every broker address to that proxy (`dial_overrides`). A real RocketMQ client has no such knob:
it dials whatever broker addresses the name server's route answer lists. So the proxy of a real
client's link to the name server rewrites those answers: every broker remoting address in a
frame coming back from the name server becomes the address of that client's own link proxy to
that broker, and partitions reach the real client exactly like they reach a node.

Frames (RocketMQ 4.x remoting): `int32 length | int32 (serialize type << 24 | header length) |
header | body`, length counting everything after itself. A rewritten frame gets its length (and,
for a header rewrite, its header length) recomputed; bytes that do not yet form a whole frame
wait for the next read.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping

from harness.frames import Observer, RemotingFrames

_INT = struct.Struct(">i")


class RemotingAddressRewriter(RemotingFrames):
    """Stateful per connection: `feed(bytes) -> bytes` returns whole rewritten frames only; bytes
    that are not remoting frames pass through untouched from there on. `observer` sees every whole
    frame as the peer sent it (the request journal, on the same frame walk)."""

    def __init__(self, addresses: Mapping[str, str], observer: Observer | None = None) -> None:
        super().__init__(observer, hold=True)
        # quoted, so "127.0.0.1:1091" never matches inside "127.0.0.1:10911"
        self._pairs = [(f'"{a}"'.encode(), f'"{b}"'.encode()) for a, b in sorted(addresses.items()) if a != b]
        self.rewritten = 0

    def transform(self, frame: bytes) -> bytes:
        (mark,) = _INT.unpack_from(frame, 4)
        header_len = mark & 0xFFFFFF
        header, body = frame[8:8 + header_len], frame[8 + header_len:]
        new_header, new_body = header, body
        for old, new in self._pairs:
            new_header = new_header.replace(old, new)
            new_body = new_body.replace(old, new)
        if new_header == header and new_body == body:
            return frame
        self.rewritten += 1
        new_mark = (mark & ~0xFFFFFF) | len(new_header)
        rest = _INT.pack(new_mark) + new_header + new_body
        return _INT.pack(len(rest)) + rest


def rewriter_factory(addresses: Mapping[str, str]) -> Callable[..., Callable[[bytes], bytes]]:
    """One fresh rewriter per proxied connection (a `NetProxy.retarget` backward filter); called
    with the connection's frame observer, if it has one."""
    frozen = dict(addresses)
    return lambda observer=None: RemotingAddressRewriter(frozen, observer).feed
