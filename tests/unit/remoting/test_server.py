"""The remoting listener on a real socket: concurrency per connection, error answers, bad frames."""

from __future__ import annotations

import asyncio
import struct

import pytest

from nodes.common.errors import InvariantViolation
from nodes.remoting.command import FLAG_RESPONSE, RemotingCommand, decode, encode
from nodes.remoting.server import Channel, RemotingServer


async def _read_answer(reader: asyncio.StreamReader) -> RemotingCommand:
    (length,) = struct.unpack(">i", await reader.readexactly(4))
    return decode(await reader.readexactly(length))


class _Node:
    """A dispatch that answers code 1 at once, holds code 2 until released, and fails on others."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.closed: list[Channel] = []
        self.crashed: list[BaseException] = []

    async def dispatch(self, cmd: RemotingCommand, channel: Channel) -> RemotingCommand | None:
        if cmd.code == 1:
            return cmd.answer(0, ext={"echo": cmd.ext_int("n")})
        if cmd.code == 2:
            await self.release.wait()
            return cmd.answer(0, remark="released")
        if cmd.code == 3:
            channel.send_oneway(40, {"consumerGroup": "G"})
            return cmd.answer(0)
        if cmd.code == 4:
            raise InvariantViolation("ours")
        raise RuntimeError("boom")


def _run(scenario) -> None:
    """Run `scenario(node, server, port)` against a listener on a free loopback port."""
    async def main() -> None:
        node = _Node()
        server = RemotingServer("test", node.dispatch, crash=node.crashed.append,
                                on_channel_closed=node.closed.append)
        port = await server.start("127.0.0.1", 0)
        try:
            await asyncio.wait_for(scenario(node, server, port), 20)
        finally:
            await server.stop()
    asyncio.run(main())


def test_a_held_request_does_not_hold_up_the_next_one_on_the_same_connection():
    async def scenario(node, server, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(encode(RemotingCommand(code=2, opaque=1)))
        writer.write(encode(RemotingCommand(code=1, opaque=2, ext={"n": "7"})))
        first = await _read_answer(reader)
        assert (first.opaque, first.ext, first.flag & FLAG_RESPONSE) == (2, {"echo": "7"}, FLAG_RESPONSE)
        node.release.set()
        second = await _read_answer(reader)
        assert (second.opaque, second.remark) == (1, "released")
        writer.close()
    _run(scenario)


def test_a_bad_field_or_a_failing_handler_is_answered_and_the_connection_stays():
    async def scenario(node, server, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(encode(RemotingCommand(code=1, opaque=1, ext={"n": "x"})))
        bad_field = await _read_answer(reader)
        assert bad_field.code == 1 and "must be an integer" in bad_field.remark
        writer.write(encode(RemotingCommand(code=9, opaque=2)))
        failed = await _read_answer(reader)
        assert failed.code == 1 and "boom" in failed.remark
        writer.write(encode(RemotingCommand(code=1, opaque=3, ext={"n": "1"})))
        assert (await _read_answer(reader)).ext == {"echo": "1"}
        writer.close()
    _run(scenario)


def test_a_server_initiated_notice_goes_out_on_the_requests_connection():
    async def scenario(node, server, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(encode(RemotingCommand(code=3, opaque=1)))
        notice = await _read_answer(reader)
        assert (notice.code, notice.ext, notice.is_response) == (40, {"consumerGroup": "G"}, False)
        assert (await _read_answer(reader)).opaque == 1
        writer.close()
    _run(scenario)


@pytest.mark.parametrize("garbage", [
    struct.pack(">i", 64 * 1024 * 1024),  # a frame over 16 MiB
    struct.pack(">i", -5),  # a negative length
    struct.pack(">i", 6) + struct.pack(">i", 2) + b"{x",  # a header that is not JSON
    struct.pack(">i", 6) + struct.pack(">i", 99) + b"{}",  # a header longer than its frame
])
def test_an_unreadable_frame_closes_only_its_connection(garbage):
    async def scenario(node, server, port):
        healthy_reader, healthy_writer = await asyncio.open_connection("127.0.0.1", port)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(garbage)
        assert await reader.read() == b""  # closed by the server
        healthy_writer.write(encode(RemotingCommand(code=1, opaque=1, ext={"n": "2"})))
        assert (await _read_answer(healthy_reader)).ext == {"echo": "2"}
        assert server.frames_refused == 1
        healthy_writer.close()
    _run(scenario)


def test_a_client_that_vanishes_mid_frame_is_a_closed_channel():
    async def scenario(node, server, port):
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        frame = encode(RemotingCommand(code=1, opaque=1, ext={"n": "1"}))
        writer.write(frame[: len(frame) // 2])
        await writer.drain()
        writer.close()
        while not node.closed:
            await asyncio.sleep(0.01)
        assert len(node.closed) == 1 and server.open_channels == 0
    _run(scenario)


def test_a_broken_invariant_of_the_node_goes_to_crash():
    async def scenario(node, server, port):
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(encode(RemotingCommand(code=4, opaque=1)))
        while not node.crashed:
            await asyncio.sleep(0.01)
        assert isinstance(node.crashed[0], InvariantViolation)
        writer.close()
    _run(scenario)


def test_a_request_that_never_waits_is_answered_without_a_task_and_one_that_waits_gets_one():
    async def scenario(node, server, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        [channel] = server._channels
        writer.write(encode(RemotingCommand(code=1, opaque=1, ext={"n": "1"})))
        assert (await _read_answer(reader)).ext == {"echo": "1"}
        assert channel.tasks == set()
        writer.write(encode(RemotingCommand(code=2, opaque=2)))
        for _ in range(200):
            if channel.tasks:
                break
            await asyncio.sleep(0.005)
        assert len(channel.tasks) == 1
        node.release.set()
        assert (await _read_answer(reader)).remark == "released"
        await asyncio.sleep(0.01)
        assert channel.tasks == set()
        writer.close()
    _run(scenario)


def test_a_client_that_reads_no_answers_stops_being_read_until_it_does():
    """Backpressure: past the transport's high-water mark of unread answers the listener stops
    reading that connection's requests (memory stays bounded), and every request is still
    answered once the client reads."""
    count = 4_000
    padding = "p" * 2_000  # each answer ~2 KB: the answers pass the 64 KiB high-water mark early

    async def dispatch(cmd: RemotingCommand, channel: Channel) -> RemotingCommand:
        return cmd.answer(0, remark=padding)

    async def main() -> None:
        server = RemotingServer("test", dispatch, crash=lambda exc: None)
        port = await server.start("127.0.0.1", 0)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.transport.set_write_buffer_limits(high=1 << 24)  # the client's sends do not block it
            writer.write(b"".join(encode(RemotingCommand(code=1, opaque=i)) for i in range(count)))
            await asyncio.sleep(0.5)
            [channel] = server._channels
            answered_before_reading = channel._transport.get_write_buffer_size()
            # no request is run once the answers pass the high-water mark, however many one read brought
            high_water = channel._transport.get_write_buffer_limits()[1]
            assert high_water <= answered_before_reading <= high_water + 2 * len(padding)
            seen = 0
            while seen < count:
                answer = await asyncio.wait_for(_read_answer(reader), 10)
                assert answer.opaque == seen
                seen += 1
            writer.close()
        finally:
            await server.stop()
    asyncio.run(main())


class _ClosingTransport:
    """A transport whose last write failed: asyncio closes it, and tells the protocol a turn later."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    def get_extra_info(self, name: str) -> tuple[str, int]:
        return ("127.0.0.1", 1)

    def is_closing(self) -> bool:
        return True

    def write(self, data: bytes) -> None:
        self.written.append(data)


def test_a_channel_whose_transport_is_closing_drops_its_frames():
    transport = _ClosingTransport()
    channel = Channel(transport, 1)  # type: ignore[arg-type]
    channel.write(RemotingCommand(code=1, opaque=1).answer(0))
    channel.send_oneway(40)
    assert transport.written == [] and not channel.closed
