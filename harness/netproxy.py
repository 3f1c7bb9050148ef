"""Link proxies: one TCP proxy per directed node-to-node link, so partitions need no root.

Node X reaches node Y through the proxy of link X->Y (X's config maps Y's address to the
proxy's port with `dial_overrides`). Each link has a mode per direction of its bytes:

    OPEN    forward bytes
    DROP    blackhole: accept and read, forward nothing, close nothing (callers hit deadlines)
    REJECT  refuse new connections and reset live ones at once

`forward` is X->Y (requests), `backward` is Y->X (responses); setting only one gives a
one-way partition. Changing a link's mode applies to its live connections too, so a
long-lived replication or pull stream is cut like a new connection would be.

Everything runs on one asyncio loop in a harness thread; the public API is synchronous and
thread-safe. The harness's own control plane (Admin calls) never goes through a proxy.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
import socket
import struct
import threading
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

_READ_BYTES = 64 * 1024
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


@dataclass
class _Conn:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class LinkProxy:
    """The proxy of one directed link `src -> dst` (loop-confined)."""

    def __init__(self, src: str, dst: str, target_addr: str) -> None:
        self.src = src
        self.dst = dst
        self.target_addr = target_addr
        self.forward = LinkMode.OPEN
        self.backward = LinkMode.OPEN
        self.stats = LinkStats()
        self.port = 0
        # optional: a fresh `bytes -> bytes` filter per connection for the backward bytes
        # (harness.remoting_rewrite: a real client's route answers name its own link proxies)
        self.backward_filter: Callable[[], Callable[[bytes], bytes]] | None = None
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
        # REJECT resets live connections; so does healing a blackholed link, because bytes it
        # swallowed mid-stream leave the HTTP/2 framing of those connections unusable.
        if LinkMode.REJECT in (forward, backward) or (was_dropping and LinkMode.DROP not in (forward, backward)):
            for conn_id in list(self._conns):
                self._reset(conn_id)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.stats.connections += 1
        if LinkMode.REJECT in (self.forward, self.backward):
            self.stats.rejected += 1
            _reset_writer(writer)
            return
        conn_id = next(self._ids)
        conn = _Conn(writer)
        self._conns[conn_id] = conn
        self.stats.live += 1
        try:
            host, _, port = self.target_addr.rpartition(":")
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            # The peer is down: behave like it (a refused connection), whatever the mode.
            self._forget(conn_id)
            _reset_writer(writer)
            return
        conn.upstream = up_writer
        back_filter = self.backward_filter() if self.backward_filter is not None else None
        conn.tasks = [
            asyncio.create_task(self._pipe(conn_id, reader, up_writer, forward=True), name=f"{self.name}-fwd"),
            asyncio.create_task(self._pipe(conn_id, up_reader, writer, forward=False, transform=back_filter),
                                name=f"{self.name}-back"),
        ]

    async def _pipe(self, conn_id: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                    forward: bool, transform: Callable[[bytes], bytes] | None = None) -> None:
        try:
            while True:
                data = await reader.read(_READ_BYTES)
                if not data:
                    break
                mode = self.forward if forward else self.backward
                if mode is LinkMode.OPEN and transform is not None:
                    data = transform(data)
                if mode is LinkMode.OPEN:
                    # count before writing: the receiver may act on the bytes before drain() returns
                    if forward:
                        self.stats.forward_bytes += len(data)
                    else:
                        self.stats.backward_bytes += len(data)
                    writer.write(data)
                    await writer.drain()
                else:
                    self.stats.dropped_bytes += len(data)  # blackholed: read and forget
        except (ConnectionError, OSError, asyncio.CancelledError):
            pass
        finally:
            # One side ended: end the other too (unless the link is blackholing: then stay silent).
            if self.forward is LinkMode.OPEN and self.backward is LinkMode.OPEN:
                self._close(conn_id)

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


class NetProxy:
    """All link proxies of a cluster, on one harness-owned event loop thread."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mqlab-netproxy", daemon=True)
        self._thread.start()
        self._links: dict[tuple[str, str], LinkProxy] = {}
        self._lock = threading.Lock()
        self.on_change: Callable[[dict[str, Any]], None] | None = None

    def _call(self, coro: Coroutine[Any, Any, Any], timeout_s: float = 10.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    def add_link(self, src: str, dst: str, target_addr: str, port: int = 0) -> int:
        """Create the proxy of `src -> dst`; returns its local port (dial it instead of target)."""
        link = LinkProxy(src, dst, target_addr)
        bound = self._call(link.start(port))
        with self._lock:
            self._links[(src, dst)] = link
        return bound

    def retarget(self, src: str, dst: str, target_addr: str,
                 backward_filter: Callable[[], Callable[[bytes], bytes]] | None = None) -> None:
        """Point the proxy of `src -> dst` at another address of dst (new connections only), with an
        optional per-connection filter of the backward bytes. A real-client consumer dials its peers'
        RocketMQ remoting listeners instead of their gRPC ports."""
        link = self._links[(src, dst)]

        async def apply() -> None:
            link.target_addr = target_addr
            link.backward_filter = backward_filter

        self._call(apply())

    def port_of(self, src: str, dst: str) -> int:
        return self._links[(src, dst)].port

    def links(self) -> list[tuple[str, str]]:
        return sorted(self._links)

    def set_link(self, src: str, dst: str, forward: LinkMode | str,
                 backward: LinkMode | str | None = None) -> None:
        """Set one directed link; `backward` defaults to the same mode as `forward`."""
        fwd = LinkMode(forward)
        back = LinkMode(backward) if backward is not None else fwd
        link = self._links[(src, dst)]

        async def apply() -> None:
            link.set_mode(fwd, back)

        self._call(apply())
        log.info("link %s: forward %s, backward %s", link.name, fwd.value, back.value)
        if self.on_change is not None:
            self.on_change({"link": link.name, "forward": fwd.value, "backward": back.value})

    def cut(self, pairs: Iterable[tuple[str, str]], mode: LinkMode | str = LinkMode.DROP) -> list[str]:
        """Cut every listed directed link that exists; returns the names of the links cut."""
        cut = []
        for src, dst in pairs:
            if (src, dst) in self._links:
                self.set_link(src, dst, mode)
                cut.append(f"{src}->{dst}")
        return cut

    def heal(self) -> None:
        for src, dst in self.links():
            link = self._links[(src, dst)]
            if link.forward is not LinkMode.OPEN or link.backward is not LinkMode.OPEN:
                self.set_link(src, dst, LinkMode.OPEN)

    def stats(self) -> dict[str, dict[str, Any]]:
        return {link.name: {"forward": link.forward.value, "backward": link.backward.value,
                            **link.stats.__dict__} for link in self._links.values()}

    def close(self) -> None:
        async def close_all() -> None:
            for link in list(self._links.values()):
                await link.close()

        try:
            self._call(close_all())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()


# --- grudges (Jepsen nemesis.clj style): which directed links a partition cuts ----------------


def complete_grudge(components: list[set[str]]) -> set[tuple[str, str]]:
    """Every directed link between different components."""
    cut = set()
    for comp in components:
        others = set().union(*(c for c in components if c is not comp))
        cut |= {(a, b) for a in comp for b in others}
    return cut


def isolate(node: str, everyone: Iterable[str]) -> set[tuple[str, str]]:
    """Both directions between `node` and everyone else."""
    return complete_grudge([{node}, set(everyone) - {node}])
