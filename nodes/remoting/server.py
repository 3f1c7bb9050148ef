"""The RocketMQ 4.x remoting listener: asyncio TCP, one `Channel` per connection.

Owns reading and writing frames, running each request on its own (a long-polled pull must
not hold up the requests behind it on the same connection; a request becomes a task only once
it waits), the error answers for what a client got wrong, and telling the node when a connection closes. Does not own what a request
means: the node's adapter gives a `dispatch` coroutine per request.

A client's mistake never stops the node or disturbs another connection: a frame that cannot
be read (bad length, a header that does not parse) is logged in one line and its connection
closed, since what follows it cannot be found; a request whose fields are wrong gets an error
answer and the connection stays. Only a broken invariant of the node's own goes to `crash`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable

from nodes.common import constants as c
from nodes.common.codes import ResponseCode
from nodes.common.eager import start_eagerly
from nodes.common.errors import InvariantViolation
from nodes.common.reject_log import RejectLog
from nodes.remoting.command import (
    FLAG_ONEWAY,
    FrameError,
    HeaderFieldError,
    RemotingCommand,
    decode,
    encode,
    frame_length_ok,
)

log = logging.getLogger(__name__)

Dispatch = Callable[[RemotingCommand, "Channel"], Awaitable[RemotingCommand | None]]


class Channel:
    """One client connection. Loop-confined."""

    _opaques = itertools.count(1_000_000)

    def __init__(self, transport: asyncio.Transport, channel_id: int) -> None:
        self._transport = transport
        self.channel_id = channel_id
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.closed = False
        self.tasks: set[asyncio.Task[None]] = set()
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []

    def write(self, cmd: RemotingCommand) -> None:
        """Queue one frame; a closed channel drops it (its client is gone), and so does one whose
        transport is closing: a write that failed closes it a loop turn before `connection_lost`
        says so, and asyncio logs a warning for every write in between (a burst of answers to a
        client that reset its connection logged hundreds)."""
        if self.closed or self._transport.is_closing():
            return
        self._transport.write(encode(cmd))

    def send_oneway(self, code: int, ext: dict[str, str] | None = None, body: bytes = b"") -> None:
        """A server-initiated oneway request (NOTIFY_CONSUMER_IDS_CHANGED): no answer is awaited."""
        self.write(RemotingCommand(code=code, opaque=next(self._opaques), flag=FLAG_ONEWAY, ext=dict(ext or {}),
                                   body=body))

    async def drain(self) -> None:
        """Until the client has read enough of what was written (at once unless the transport's
        buffer is over its high-water mark); at once when the connection is gone."""
        if self.closed or not self._write_paused:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(waiter)
        await waiter

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._transport.close()
            self._release_drains()

    # --- called by the connection's protocol -------------------------------------------------
    def writing_paused(self) -> None:
        """The client stopped reading: `drain` waits from now on."""
        self._write_paused = True

    @property
    def writing_is_paused(self) -> bool:
        return self._write_paused

    def writing_resumed(self) -> None:
        self._write_paused = False
        self._release_drains()

    def _release_drains(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def __repr__(self) -> str:
        return f"Channel({self.channel_id}, {self.peer})"


class _FrameProtocol(asyncio.Protocol):
    """One connection's bytes -> frames -> the server's requests. While the client reads no
    answers (the transport's write buffer is over its high-water mark), its requests are not
    read either, so a client that never reads cannot grow the node's memory."""

    def __init__(self, server: RemotingServer) -> None:
        self._server = server
        self._buffer = bytearray()
        self.channel: Channel | None = None
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self.channel = self._server.channel_opened(transport)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        self._take_frames()

    def _take_frames(self) -> None:
        """Run the buffer's complete frames, stopping while the client reads no answers: one read
        can bring thousands of small requests, and their answers would pile up past the
        high-water mark before reading pauses (the rest run once writing resumes)."""
        channel = self.channel
        assert channel is not None
        buffer = self._buffer
        pos, size = 0, len(buffer)
        while size - pos >= 4 and not channel.closed and not channel.writing_is_paused:
            length = int.from_bytes(buffer[pos:pos + 4], "big", signed=True)
            if not frame_length_ok(length):
                self._server.refuse(channel, f"frame length {length} outside 4..{c.REMOTING_FRAME_BYTES_MAX}")
                break
            if size - pos - 4 < length:
                break
            frame = bytes(buffer[pos + 4:pos + 4 + length])
            pos += 4 + length
            self._server.frame_received(frame, channel)
        if channel.closed:
            buffer.clear()
        elif pos:
            del buffer[:pos]

    def connection_lost(self, exc: Exception | None) -> None:
        channel = self.channel
        assert channel is not None
        if self._buffer:  # a clean close between frames says nothing; one inside a frame (or with requests unread) does
            log.info("%s: %r went away with %d bytes of requests unread", self._server.name, channel, len(self._buffer))
            self._buffer.clear()
        self._server.channel_closed(channel)

    def pause_writing(self) -> None:
        assert self.channel is not None and self._transport is not None
        self.channel.writing_paused()
        self._transport.pause_reading()

    def resume_writing(self) -> None:
        assert self.channel is not None and self._transport is not None
        self.channel.writing_resumed()
        if not self.channel.closed:
            self._take_frames()  # what was read before the pause; it may pause writing again
            if not self.channel.writing_is_paused:
                self._transport.resume_reading()


class RemotingServer:
    def __init__(self, name: str, dispatch: Dispatch, *, crash: Callable[[BaseException], None],
                 on_channel_closed: Callable[[Channel], None] | None = None) -> None:
        self.name = name
        self._dispatch = dispatch
        self._crash = crash
        self._on_channel_closed = on_channel_closed
        self._server: asyncio.Server | None = None
        self._channels: set[Channel] = set()
        self._channel_ids = itertools.count(1)
        self.frames_refused = 0
        self._rejects = RejectLog(log)  # a client's bad frames and fields: one line per peer and interval

    async def start(self, host: str, port: int) -> int:
        """Listen on host:port (0 picks a port); returns the bound port."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _FrameProtocol(self), host, port, reuse_address=True)
        return self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for channel in list(self._channels):
            channel.close()
            for task in channel.tasks:
                task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), c.REMOTING_CLOSE_WAIT_MS / 1000)
        self._server = None

    @property
    def open_channels(self) -> int:
        return len(self._channels)

    # --- called by a connection's protocol (_FrameProtocol) ------------------------------------
    def channel_opened(self, transport: asyncio.Transport) -> Channel:
        channel = Channel(transport, next(self._channel_ids))
        self._channels.add(channel)
        return channel

    def frame_received(self, frame: bytes, channel: Channel) -> None:
        try:
            cmd = decode(frame)
        except FrameError as exc:
            self.refuse(channel, f"unreadable frame: {exc}")
            return
        if cmd.is_response:
            return  # a client's answer to a oneway notice: nothing waits for it
        # Each request runs on its own (a long-polled pull must not hold up the requests behind
        # it), started at once: most answer without waiting and never need a task.
        started = start_eagerly(self._handle(cmd, channel), name=f"{self.name}-{cmd.code}")
        if isinstance(started, asyncio.Task):
            channel.tasks.add(started)
            started.add_done_callback(channel.tasks.discard)

    def channel_closed(self, channel: Channel) -> None:
        self._channels.discard(channel)
        channel.close()
        if self._on_channel_closed is not None:
            try:
                self._on_channel_closed(channel)
            except InvariantViolation as exc:
                self._crash(exc)
            except Exception:
                log.exception("%s: handling the close of %r failed", self.name, channel)

    def refuse(self, channel: Channel, why: str) -> None:
        """Count and log a frame the server cannot take, and close its connection."""
        self.frames_refused += 1
        self._rejects.reject(repr(channel), f"{self.name}: a frame (connection closed)", why)
        channel.close()

    async def _handle(self, cmd: RemotingCommand, channel: Channel) -> None:
        try:
            answer = await self._dispatch(cmd, channel)
        except asyncio.CancelledError:
            raise
        except HeaderFieldError as exc:
            self._rejects.reject(repr(channel), f"{self.name}: request code {cmd.code}", exc)
            answer = cmd.answer(ResponseCode.SYSTEM_ERROR, f"bad request: {exc}")
        except InvariantViolation as exc:
            self._crash(exc)
            return
        except Exception as exc:
            log.exception("%s: request code %d from %r failed", self.name, cmd.code, channel)
            answer = cmd.answer(ResponseCode.SYSTEM_ERROR, f"request code {cmd.code} failed on the server: {exc!r}")
        # Always answer, even a "oneway" request: neither real client sets the oneway flag,
        # and both drop answers whose opaque they do not know.
        if answer is not None:
            channel.write(answer)
            with contextlib.suppress(ConnectionError):
                await channel.drain()
