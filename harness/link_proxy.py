"""The proxy of one directed link: its modes, its connections and how their bytes flow.

Each direction of a connection is a reader and a writer with a queue between them. The reader
stamps each chunk with the time it may leave (latency and loss-like holds, `harness.toxics`)
and keeps reading, so holding chunks never caps the throughput; the writer waits for that
time, then slices, paces and writes. A chunk with no toxic and nothing queued before it is
written by the reader itself. Loop-confined: `harness.netproxy.NetProxy` is the thread-safe
face of all links.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.request_journal import RequestJournal
from harness.request_tap import ConnectionTap
from harness.toxics import (
    DIRECTIONS,
    ActiveToxic,
    DirectionState,
    flushed,
    in_order,
    plan_hold,
    send_chunk,
    stall_of,
)

_READ_BYTES = 64 * 1024
# chunks a direction may hold (latency, loss-like) before its reader stops and the sender feels
# backpressure; Toxiproxy buffers as many
_QUEUE_CHUNKS = 1024
_LINGER_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST


class LinkMode(enum.Enum):
    OPEN = "OPEN"
    DROP = "DROP"
    REJECT = "REJECT"


@dataclass
class LinkStats:
    connections: int = 0
    live: int = 0
    forward_bytes: int = 0
    backward_bytes: int = 0
    dropped_bytes: int = 0
    rejected: int = 0
    # the longest a chunk spent inside the proxy, read to written: what the endpoints felt of
    # the toxics (and of the proxy's own loop), so a checker can tell a fault really applied
    forward_max_hold_ms: float = 0.0
    backward_max_hold_ms: float = 0.0


@dataclass
class _Conn:
    client: asyncio.StreamWriter
    opened_at: float
    upstream: asyncio.StreamWriter | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    states: dict[str, DirectionState] = field(default_factory=dict)


_EOF = None  # queued after a direction's last chunk: its close passes once the chunks before it are out


class LinkProxy:
    """The proxy of one directed link `src -> dst` (loop-confined). Toxics are looked up per
    chunk, so adding or removing one acts on live connections at once."""

    def __init__(self, src: str, dst: str, target_addr: str) -> None:
        self.src = src
        self.dst = dst
        self.target_addr = target_addr
        self.forward = LinkMode.OPEN
        self.backward = LinkMode.OPEN
        self.stats = LinkStats()
        self.port = 0
        # optional: a fresh `bytes -> bytes` filter per connection for the backward bytes
        # (harness.remoting_rewrite: a real client's route answers name its own link proxies),
        # called with the connection's frame observer when the link journals its requests
        self.backward_filter: Callable[..., Callable[[bytes], bytes]] | None = None
        # optional: the journal this link's requests and their answers go to (harness.request_tap)
        self.journal: RequestJournal | None = None
        self.toxics: dict[str, ActiveToxic] = {}  # in force
        self.applied: dict[str, ActiveToxic] = {}  # every toxic this link ever had, for its stats
        self._changed = asyncio.Event()  # set (and replaced) on every mode or toxic change
        self._server: Any = None
        self._conns: dict[int, _Conn] = {}
        self._ids = itertools.count(1)

    @property
    def name(self) -> str:
        return f"{self.src}->{self.dst}"

    async def start(self, port: int = 0) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn_id in list(self._conns):
            self._reset(conn_id)
        if self._server is not None:
            await self._server.wait_closed()

    def set_mode(self, forward: LinkMode, backward: LinkMode) -> None:
        was_dropping = LinkMode.DROP in (self.forward, self.backward)
        self.forward, self.backward = forward, backward
        self._notify()
        # REJECT resets live connections; so does healing a blackholed link, because bytes it
        # swallowed mid-stream leave the HTTP/2 framing of those connections unusable.
        if LinkMode.REJECT in (forward, backward) or (was_dropping and LinkMode.DROP not in (forward, backward)):
            for conn_id in list(self._conns):
                self._reset(conn_id)

    def add_toxic(self, active: ActiveToxic) -> None:
        self.toxics[active.toxic_id] = active
        self.applied[active.toxic_id] = active
        for conn_id in self._conns:
            self._arm_stall_close(conn_id, active)
        self._notify()

    def remove_toxic(self, toxic_id: str) -> bool:
        active = self.toxics.pop(toxic_id, None)
        if active is None:
            return False
        active.removed = True
        self._notify()
        return True

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _mode(self, direction: str) -> LinkMode:
        return self.forward if direction == "forward" else self.backward

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.stats.connections += 1
        if LinkMode.REJECT in (self.forward, self.backward):
            self.stats.rejected += 1
            _reset_writer(writer)
            return
        conn_id = next(self._ids)
        now = asyncio.get_running_loop().time()
        conn = _Conn(writer, now, states={d: DirectionState(now) for d in DIRECTIONS})
        self._conns[conn_id] = conn
        self.stats.live += 1
        for active in self.toxics.values():
            self._arm_stall_close(conn_id, active)
        try:
            host, _, port = self.target_addr.rpartition(":")
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            # The peer is down: behave like it (a refused connection), whatever the mode.
            self._forget(conn_id)
            _reset_writer(writer)
            return
        if conn_id not in self._conns:  # reset or closed while connecting (REJECT, a stall's close)
            up_writer.close()
            return
        conn.upstream = up_writer
        fwd_filter, back_filter = self._filters(conn_id)
        fwd_queue: asyncio.Queue[Any] = asyncio.Queue(_QUEUE_CHUNKS)
        back_queue: asyncio.Queue[Any] = asyncio.Queue(_QUEUE_CHUNKS)
        conn.tasks = [
            asyncio.create_task(self._read(conn_id, "forward", reader, up_writer, fwd_queue, fwd_filter),
                                name=f"{self.name}-fwd-read"),
            asyncio.create_task(self._write(conn_id, "forward", up_writer, fwd_queue), name=f"{self.name}-fwd"),
            asyncio.create_task(self._read(conn_id, "backward", up_reader, writer, back_queue, back_filter),
                                name=f"{self.name}-back-read"),
            asyncio.create_task(self._write(conn_id, "backward", writer, back_queue), name=f"{self.name}-back"),
        ]

    def _filters(self, conn_id: int) -> tuple[Callable[[bytes], bytes] | None, Callable[[bytes], bytes] | None]:
        """The forward and backward filters of a new connection: the journal's tap observes both
        directions; a rewriter, when the link has one, walks the backward frames for both duties."""
        tap = None
        if self.journal is not None:
            tap = ConnectionTap(self.journal.record, {"link": self.name, "src": self.src, "dst": self.dst,
                                                      "conn": conn_id})
        if self.backward_filter is not None:
            back = self.backward_filter(tap.backward_frame) if tap is not None else self.backward_filter()
        else:
            back = tap.backward if tap is not None else None
        return (tap.forward if tap is not None else None), back

    async def _read(self, conn_id: int, direction: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    queue: asyncio.Queue[Any], transform: Callable[[bytes], bytes] | None = None) -> None:
        loop = asyncio.get_running_loop()
        state = self._conns[conn_id].states[direction]
        try:
            while await self._gate(conn_id, direction):
                data = await reader.read(_READ_BYTES)
                if not data:
                    break
                read_at = loop.time()
                if self._mode(direction) is not LinkMode.OPEN:
                    self.stats.dropped_bytes += len(data)  # blackholed: read and forget
                    continue
                if transform is not None:
                    data = transform(data)
                toxics = in_order(self.toxics.values(), direction)
                if not toxics and not state.writing and queue.empty():
                    # nothing held or toxic: write it here and spare the hand-off to the writer
                    await self._send(conn_id, direction, writer, state, data)
                    continue
                deadline = plan_hold(toxics, state, read_at)
                await queue.put((read_at, deadline, data))  # a full queue stops the reading: backpressure
        except (ConnectionError, OSError):
            pass
        except asyncio.CancelledError:
            return
        await queue.put(_EOF)

    async def _write(self, conn_id: int, direction: str, writer: asyncio.StreamWriter,
                     queue: asyncio.Queue[Any]) -> None:
        loop = asyncio.get_running_loop()
        state = self._conns[conn_id].states[direction]
        try:
            while (item := await queue.get()) is not _EOF:
                read_at, deadline, data = item
                state.writing = True  # until this chunk is out, the reader queues behind it
                if (wait_s := deadline - loop.time()) > 0:
                    await asyncio.sleep(wait_s)
                if not await self._gate(conn_id, direction):
                    return
                if self._mode(direction) is not LinkMode.OPEN:
                    self.stats.dropped_bytes += len(data)  # cut while held: a DROP wins over toxics
                    state.writing = False
                    continue
                if not await self._send(conn_id, direction, writer, state, data):
                    return
                state.writing = False
                hold_ms = (loop.time() - read_at) * 1000
                if direction == "forward":
                    self.stats.forward_max_hold_ms = max(self.stats.forward_max_hold_ms, hold_ms)
                else:
                    self.stats.backward_max_hold_ms = max(self.stats.backward_max_hold_ms, hold_ms)
        except (ConnectionError, OSError):
            pass
        except asyncio.CancelledError:
            return
        # One side ended: end the other too (unless the link is blackholing: then stay silent).
        if self.forward is LinkMode.OPEN and self.backward is LinkMode.OPEN:
            self._close(conn_id)

    async def _gate(self, conn_id: int, direction: str) -> bool:
        """Return once no stall toxic holds this direction (at once on a DROP or REJECT link);
        False when the connection is gone."""
        while (conn := self._conns.get(conn_id)) is not None:
            changed = self._changed
            state = conn.states[direction]
            stall = stall_of(in_order(self.toxics.values(), direction))
            if stall is None or self._mode(direction) is not LinkMode.OPEN:
                state.stalled = False
                return True
            if not state.stalled:
                state.stalled = True
                stall.stats.stalls += 1
            await changed.wait()
        return False

    def _arm_stall_close(self, conn_id: int, active: ActiveToxic) -> None:
        """A stall with close_after_ms closes the connection that long after it began on it,
        whether or not bytes were waiting (an idle timeout fires on idle connections too)."""
        close_after_ms = getattr(active.toxic, "close_after_ms", None)
        if close_after_ms is None:
            return
        loop = asyncio.get_running_loop()
        at = max(active.added_at, self._conns[conn_id].opened_at) + close_after_ms / 1000
        loop.call_at(at, self._stall_close, conn_id, active)

    def _stall_close(self, conn_id: int, active: ActiveToxic) -> None:
        if active.removed or conn_id not in self._conns:
            return
        if any(self._mode(d) is LinkMode.OPEN for d in active.directions):  # a mode wins over a stall
            active.stats.closes += 1
            self._close(conn_id)

    async def _send(self, conn_id: int, direction: str, writer: asyncio.StreamWriter, state: DirectionState,
                    data: bytes) -> bool:
        """Write one chunk through the slicer, bandwidth and reset toxics; False once reset."""
        async def write(piece: bytes) -> None:
            # count before writing: the receiver may act on the bytes before drain() returns
            if direction == "forward":
                self.stats.forward_bytes += len(piece)
            else:
                self.stats.backward_bytes += len(piece)
            state.forwarded_bytes += len(piece)
            writer.write(piece)
            await writer.drain()

        async def reset(cut_by: ActiveToxic) -> None:
            await flushed(writer)  # the receiver gets exactly the budget, then the reset
            if conn_id in self._conns:
                cut_by.stats.resets += 1
            self._reset(conn_id)

        toxics = in_order(self.toxics.values(), direction)
        if not toxics:
            await write(data)
            return True
        return await send_chunk(toxics, state, data, write, reset)

    def _close(self, conn_id: int) -> None:
        conn = self._forget(conn_id)
        if conn is None:
            return
        for w in (conn.client, conn.upstream):
            if w is not None:
                w.close()

    def _reset(self, conn_id: int) -> None:
        conn = self._forget(conn_id)
        if conn is None:
            return
        for w in (conn.client, conn.upstream):
            if w is not None:
                _reset_writer(w)

    def _forget(self, conn_id: int) -> _Conn | None:
        conn = self._conns.pop(conn_id, None)
        if conn is not None:
            self.stats.live -= 1
            for task in conn.tasks:
                if task is not asyncio.current_task():
                    task.cancel()
        return conn


def _reset_writer(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    try:
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    except OSError:
        pass
    writer.close()
