"""Frame walking over a proxied byte stream: the one loop the link proxies' filters share.

A link proxy sees a connection's bytes in whatever pieces TCP hands it. Its filters need whole
frames: the address rewriters (`harness.remoting_rewrite`, `harness.grpc_rewrite`) change bytes
inside them, the request journal (`harness.request_tap`) reads them. `FrameWalker.feed(bytes)`
cuts the stream into frames and hands each whole one to `transform` (the rewriters) and to an
optional `observer` (the journal), so a link that rewrites and journals walks its frames once.

Two ways to pass bytes on:

- holding (`hold=True`, the rewriters): `feed` returns whole, transformed frames only; the bytes
  of a frame not yet complete wait for the next read.
- observing (`hold=False`, the journal alone): `feed` returns its input unchanged at once, so a
  journal never delays a byte; frames are cut from a copy. A frame the walker can tell from its
  header alone is of no interest (`skippable`: an HTTP/2 DATA frame of a stream nobody follows)
  is counted past instead of copied.

Bytes that do not frame as the protocol says (a length no client would send) end the walking:
from there on the stream passes untouched and unobserved (`broken` says so).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from nodes.common import constants as c

_INT = struct.Struct(">i")
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
HTTP2_HEAD_BYTES = 9
REMOTING_HEAD_BYTES = 8  # the length prefix and the serialize-type / header-length word

Observer = Callable[[bytes], None]
Frames = bytes | bytearray
SkipTest = Callable[[Frames, int], bool]


class FrameWalker:
    """Stateful per connection direction. Subclasses say how long a frame is (`frame_size`)."""

    head_bytes = 0

    def __init__(self, observer: Observer | None = None, *, hold: bool = True, preface: bytes = b"",
                 skip: SkipTest | None = None) -> None:
        self._observer = observer
        self._hold = hold
        self._skip_test = skip
        self._buffer = bytearray()
        self._preface_left = len(preface)
        self._skip = 0
        self.broken = False
        self.frames = 0

    # ---- what a subclass says ---------------------------------------------------------------

    def frame_size(self, buf: Frames, at: int) -> int | None:
        """The whole length of the frame starting at `at` (at least `head_bytes` are there), or
        None when these bytes are no frame of the protocol."""
        raise NotImplementedError

    def skippable(self, buf: Frames, at: int) -> bool:
        """Observing only: True when the frame at `at` is of no interest (judged from the bytes there:
        `skip(buf, at)`), so it is counted past instead of copied, its rest too when not yet whole."""
        return self._skip_test is not None and self._skip_test(buf, at)

    def transform(self, frame: bytes) -> bytes:
        """Holding only: the bytes to pass on for one whole frame."""
        return frame

    # ---- the loop -----------------------------------------------------------------------------

    def feed(self, data: bytes) -> bytes:
        if self.broken:
            return data
        if self._hold:
            return self._feed_holding(data)
        self._feed_observing(data)
        return data

    def _feed_holding(self, data: bytes) -> bytes:
        buf = self._buffer
        buf += data
        out = bytearray()
        at = 0
        if self._preface_left:
            take = min(self._preface_left, len(buf))
            out += buf[:take]
            at, self._preface_left = take, self._preface_left - take
        while len(buf) - at >= self.head_bytes:
            size = self.frame_size(buf, at)
            if size is None:
                out += buf[at:]
                at = len(buf)
                self.broken = True
                break
            if len(buf) - at < size:
                break
            frame = bytes(buf[at:at + size])
            at += size
            if self._observer is not None:
                self._observer(frame)
            out += self.transform(frame)
            self.frames += 1
        del buf[:at]
        return bytes(out)

    def _feed_observing(self, data: bytes) -> None:
        start = 0
        if self._skip:
            start = min(self._skip, len(data))
            self._skip -= start
        if self._preface_left and start < len(data):
            take = min(self._preface_left, len(data) - start)
            start += take
            self._preface_left -= take
        if start >= len(data):
            return
        # walk the read itself when nothing is held over: only an incomplete tail is ever copied
        buf = self._buffer
        src: bytes | bytearray
        if buf:
            buf += memoryview(data)[start:]
            src, at = buf, 0
        else:
            src, at = data, start
        while len(src) - at >= self.head_bytes:
            size = self.frame_size(src, at)
            if size is None:
                self.broken = True
                buf.clear()
                return
            whole = len(src) - at >= size
            if self.skippable(src, at):
                if not whole:
                    self._skip = size - (len(src) - at)
                    at = len(src)
                else:
                    at += size
                self.frames += 1
                continue
            if not whole:
                break
            if self._observer is not None:
                self._observer(bytes(src[at:at + size]))
            at += size
            self.frames += 1
        if src is buf:
            del buf[:at]
        else:
            buf += memoryview(data)[at:]


class RemotingFrames(FrameWalker):
    """RocketMQ 4.x remoting: `int32 length | int32 (serialize type << 24 | header length) | header |
    body`, the length counting everything after itself."""

    head_bytes = 4

    def frame_size(self, buf: Frames, at: int) -> int | None:
        (length,) = _INT.unpack_from(buf, at)
        if length < 4 or length > c.REMOTING_FRAME_BYTES_MAX:
            return None
        return 4 + length


class Http2Frames(FrameWalker):
    """HTTP/2: `uint24 length | uint8 type | uint8 flags | uint31 stream` then the payload. The
    client's direction starts with the 24-byte connection preface (`preface=HTTP2_PREFACE`)."""

    head_bytes = HTTP2_HEAD_BYTES

    def frame_size(self, buf: Frames, at: int) -> int | None:
        return HTTP2_HEAD_BYTES + int.from_bytes(buf[at:at + 3], "big")
