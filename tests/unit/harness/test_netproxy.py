"""Link proxies on real loopback sockets: OPEN forwards, DROP blackholes, REJECT resets."""

import socket
import socketserver
import threading
import time
from typing import ClassVar

import pytest

from harness.netproxy import LinkMode, NetProxy, complete_grudge, isolate


class _Echo(socketserver.BaseRequestHandler):
    received: ClassVar[list[bytes]] = []

    def handle(self):
        try:
            while data := self.request.recv(4096):
                _Echo.received.append(data)
                self.request.sendall(data)
        except ConnectionResetError:  # a REJECT link resets the proxy's side too: the echo just ends
            pass


@pytest.fixture
def echo_server():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Echo.received = []
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def proxy():
    p = NetProxy()
    yield p
    p.close()


def _connect(port, timeout_s=1.0):
    return socket.create_connection(("127.0.0.1", port), timeout=timeout_s)


def _echo(sock, payload=b"ping"):
    sock.sendall(payload)
    return sock.recv(4096)


def test_open_link_forwards_both_ways(proxy, echo_server):
    port = proxy.add_link("a", "b", echo_server)
    with _connect(port) as sock:
        assert _echo(sock) == b"ping"
    stats = proxy.stats()["a->b"]
    assert stats["forward_bytes"] == 4 and stats["backward_bytes"] == 4


def test_drop_blackholes_new_connections(proxy, echo_server):
    port = proxy.add_link("a", "b", echo_server)
    proxy.set_link("a", "b", LinkMode.DROP)
    with _connect(port, timeout_s=0.3) as sock:
        sock.sendall(b"lost")
        with pytest.raises(TimeoutError):
            sock.recv(4096)
    assert _Echo.received == []


def test_drop_cuts_a_live_connection_and_heal_resets_it(proxy, echo_server):
    port = proxy.add_link("a", "b", echo_server)
    with _connect(port, timeout_s=0.3) as sock:
        assert _echo(sock) == b"ping"
        proxy.set_link("a", "b", "DROP")
        sock.sendall(b"during")
        with pytest.raises(TimeoutError):
            sock.recv(4096)
        proxy.heal()
        time.sleep(0.05)
        with pytest.raises((ConnectionError, OSError)):
            sock.sendall(b"after")
            assert sock.recv(4096) == b""  # reset or closed: the old stream is gone
            raise ConnectionResetError
    with _connect(port) as fresh:
        assert _echo(fresh, b"healed") == b"healed"


def test_reject_resets_live_and_new_connections(proxy, echo_server):
    port = proxy.add_link("a", "b", echo_server)
    with _connect(port) as sock:
        assert _echo(sock) == b"ping"
        proxy.set_link("a", "b", LinkMode.REJECT)
        time.sleep(0.05)
        with pytest.raises((ConnectionError, OSError)):
            sock.sendall(b"x")
            if sock.recv(4096) == b"":
                raise ConnectionResetError
    with pytest.raises((ConnectionError, OSError)), _connect(port) as sock:  # connect itself may be reset
        sock.sendall(b"x")
        if sock.recv(4096) == b"":
            raise ConnectionResetError
    deadline = time.monotonic() + 5  # the proxy counts on its own thread
    while proxy.stats()["a->b"]["rejected"] < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proxy.stats()["a->b"]["rejected"] >= 1


def test_one_way_partition_delivers_requests_but_not_answers(proxy, echo_server):
    port = proxy.add_link("a", "b", echo_server)
    proxy.set_link("a", "b", forward=LinkMode.OPEN, backward=LinkMode.DROP)
    with _connect(port, timeout_s=0.3) as sock:
        sock.sendall(b"one-way")
        with pytest.raises(TimeoutError):
            sock.recv(4096)
    assert b"one-way" in b"".join(_Echo.received)


def test_a_dead_peer_looks_refused(proxy):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    port = proxy.add_link("a", "b", dead)
    # reset at once, during or right after connect
    with pytest.raises((ConnectionError, OSError)), _connect(port) as sock:
        sock.sendall(b"x")
        if sock.recv(4096) == b"":
            raise ConnectionResetError


def test_grudges():
    assert complete_grudge([{"a"}, {"b", "c"}]) == {("a", "b"), ("a", "c"), ("b", "a"), ("c", "a")}
    assert isolate("m", ["m", "s", "n"]) == {("m", "s"), ("m", "n"), ("s", "m"), ("n", "m")}
