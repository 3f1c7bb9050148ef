"""Link toxics on real loopback sockets: an echo or a sink server behind a LinkProxy."""

import contextlib
import random
import socket
import socketserver
import struct
import threading
import time
from types import SimpleNamespace

import pytest

from harness.netproxy import LinkMode, NetProxy
from harness.toxics import (
    Bandwidth,
    Latency,
    LossLike,
    ResetPeerAfterBytes,
    Slicer,
    Stall,
    ToxicError,
    toxic_from_dict,
    toxic_to_dict,
)


def _server(handle):
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), type("H", (socketserver.BaseRequestHandler,),
                                                                     {"handle": handle}))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server


@pytest.fixture
def echo_server():
    def handle(self):
        try:
            while data := self.request.recv(65536):
                self.request.sendall(data)
        except OSError:  # a reset toxic resets the proxy's side too: the echo just ends
            pass

    server = _server(handle)
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def sink():
    """Reads everything into `received`; `error` is how the connection ended (None: a clean close)."""
    state = SimpleNamespace(received=bytearray(), error=None, ended=threading.Event())

    def handle(self):
        try:
            while data := self.request.recv(65536):
                state.received += data
        except OSError as exc:
            state.error = exc
        state.ended.set()

    server = _server(handle)
    state.addr = f"127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def proxy():
    p = NetProxy(rng=random.Random(7))
    yield p
    p.close()


def _connect(port, timeout_s=5.0):
    return socket.create_connection(("127.0.0.1", port), timeout=timeout_s)


def _round_trip_s(sock, payload=b"ping"):
    start = time.monotonic()
    sock.sendall(payload)
    got = b""
    while len(got) < len(payload):
        got += sock.recv(65536)
    assert got == payload
    return time.monotonic() - start


def _wait(cond, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_toxics_round_trip_through_dicts_and_bad_ones_say_what_to_fix():
    for toxic in (Latency(100, 20), Bandwidth(50_000), Slicer(64, 16, 500), Stall(), Stall(close_after_ms=300),
                  ResetPeerAfterBytes(1000), LossLike(0.1), LossLike(1.0, rto_ms=50)):
        data = toxic_to_dict(toxic)
        assert data["kind"] == toxic.kind
        assert toxic_from_dict(data) == toxic
    with pytest.raises(ToxicError, match="unknown toxic kind"):
        toxic_from_dict({"kind": "netem"})
    with pytest.raises(ToxicError, match="unknown parameters"):
        toxic_from_dict({"kind": "latency", "latency_ms": 1, "delay": 3})
    with pytest.raises(ToxicError, match="probability"):
        LossLike(1.5)
    with pytest.raises(ToxicError, match="direction"):
        NetProxy.add_toxic(None, "a", "b", Latency(1), direction="up")  # type: ignore[arg-type]


def test_latency_added_to_a_live_connection_slows_it_and_removal_restores_it(proxy, echo_server):
    port = proxy.add_link("a", "b", echo_server)
    with _connect(port) as sock:
        assert _round_trip_s(sock) < 0.15
        toxic_id = proxy.add_toxic("a", "b", Latency(100))  # both directions: +200 ms a round trip
        assert _round_trip_s(sock) >= 0.2
        proxy.remove_toxic("a", "b", toxic_id)
        assert _round_trip_s(sock) < 0.15
        forward_only = proxy.add_toxic("a", "b", {"kind": "latency", "latency_ms": 100}, direction="forward")
        assert _round_trip_s(sock) >= 0.1
    stats = proxy.stats()["a->b"]
    assert stats["forward_max_hold_ms"] >= 100 and stats["backward_max_hold_ms"] >= 100
    assert stats["toxics"][toxic_id]["active"] is False and stats["toxics"][toxic_id]["delayed_chunks"] == 2
    assert stats["toxics"][forward_only]["delayed_chunks"] == 1  # the request only, not the answer
    assert [t["toxic_id"] for t in proxy.toxics()] == [forward_only]


def test_jitter_never_reorders_and_holding_chunks_does_not_cap_throughput(proxy, sink):
    port = proxy.add_link("a", "b", sink.addr)
    proxy.add_toxic("a", "b", Latency(80, jitter_ms=60), direction="forward")
    count = 150
    with _connect(port) as sock:
        start = time.monotonic()
        for i in range(count):  # separate chunks, each with its own jitter draw
            sock.sendall(struct.pack(">I", i))
            time.sleep(0.002)
        _wait(lambda: len(sink.received) == 4 * count)
        elapsed = time.monotonic() - start
    assert list(struct.unpack(f">{count}I", bytes(sink.received))) == list(range(count))
    # each chunk waits ~80 ms, but they wait side by side: one at a time would take ~12 s
    assert elapsed < 3.0
    latency = next(iter(proxy.stats()["a->b"]["toxics"].values()))
    assert latency["delayed_chunks"] >= 10 and latency["max_delay_ms"] > 100  # jitter drew above 80


def test_bandwidth_caps_a_bulk_transfer_near_the_rate(proxy, sink):
    port = proxy.add_link("a", "b", sink.addr)
    rate = 400_000
    proxy.add_toxic("a", "b", Bandwidth(rate), direction="forward")
    payload = bytes(range(256)) * 800  # 200 KiB: 0.5 s at the rate
    with _connect(port) as sock:
        start = time.monotonic()
        sock.sendall(payload)
        _wait(lambda: len(sink.received) == len(payload))
        elapsed = time.monotonic() - start
    assert bytes(sink.received) == payload
    assert 0.45 <= elapsed <= 1.5, elapsed
    paced = next(iter(proxy.stats()["a->b"]["toxics"].values()))
    assert paced["bytes_paced"] == len(payload)


def test_slicer_delivers_the_same_bytes_in_more_reads(proxy, echo_server):
    port = proxy.add_link("a", "b", echo_server)
    proxy.add_toxic("a", "b", Slicer(200, 50, delay_us=3000), direction="backward")
    payload = bytes(range(256)) * 16  # 4 KiB: about 20 pieces
    with _connect(port) as sock:
        sock.sendall(payload)
        reads = []
        while sum(map(len, reads)) < len(payload):
            reads.append(sock.recv(65536))
    assert b"".join(reads) == payload
    assert len(reads) >= 8 and max(map(len, reads)) < len(payload)
    assert next(iter(proxy.stats()["a->b"]["toxics"].values()))["pieces"] >= 15


def test_stall_blocks_the_sender_and_removal_delivers_every_byte_without_reset(proxy, sink):
    port = proxy.add_link("a", "b", sink.addr)
    # 16 MiB: the kernel alone buffers about 4 MiB for a peer that does not read (tcp_wmem here)
    payload = bytes(range(256)) * (64 * 1024)
    with _connect(port, timeout_s=20) as sock:
        sock.sendall(b"hello")
        _wait(lambda: len(sink.received) == 5)
        stall = proxy.add_toxic("a", "b", Stall(), direction="forward")
        sender = threading.Thread(target=sock.sendall, args=(payload,), daemon=True)
        sender.start()
        sender.join(0.8)
        assert sender.is_alive(), "the sender felt no backpressure: the stalled proxy kept reading"
        assert len(sink.received) == 5
        proxy.remove_toxic("a", "b", stall)
        sender.join(10)
        assert not sender.is_alive()
        _wait(lambda: len(sink.received) == 5 + len(payload))
        sock.sendall(b"after")  # the same connection carries on
        _wait(lambda: len(sink.received) == 10 + len(payload))
    assert bytes(sink.received) == b"hello" + payload + b"after"
    assert sink.ended.wait(5) and sink.error is None
    assert next(iter(proxy.stats()["a->b"]["toxics"].values()))["stalls"] == 1


def test_stall_with_close_after_closes_busy_and_idle_connections(proxy, echo_server):
    port = proxy.add_link("a", "b", echo_server)
    toxic_id = proxy.add_toxic("a", "b", Stall(close_after_ms=200))
    start = time.monotonic()  # the stall's clock starts when the proxy takes the connection
    with _connect(port) as sock:
        sock.sendall(b"never answered")
        assert sock.recv(100) == b""  # closed, not reset
        assert 0.2 <= time.monotonic() - start < 2
    proxy.remove_toxic("a", "b", toxic_id)
    with _connect(port) as idle:
        _round_trip_s(idle)
        start = time.monotonic()
        idle_id = proxy.add_toxic("a", "b", Stall(close_after_ms=200), direction="backward")
        assert idle.recv(100) == b""  # an idle timeout fires with no bytes waiting
        assert 0.2 <= time.monotonic() - start < 2
    toxics = proxy.stats()["a->b"]["toxics"]
    assert toxics[toxic_id]["closes"] == 1 and toxics[idle_id]["closes"] == 1


def test_reset_peer_after_bytes_delivers_exactly_n_then_resets(proxy, echo_server, sink):
    port = proxy.add_link("a", "b", echo_server)
    proxy.add_toxic("a", "b", ResetPeerAfterBytes(5000), direction="backward")
    with _connect(port) as sock:
        sock.sendall(bytes(20_000))
        got = 0
        with pytest.raises(ConnectionResetError):
            while data := sock.recv(65536):
                got += len(data)
    assert got == 5000
    # forward: the server side gets exactly N, then a reset
    sink_port = proxy.add_link("a", "s", sink.addr)
    reset_id = proxy.add_toxic("a", "s", ResetPeerAfterBytes(3000), direction="forward")
    with _connect(sink_port) as sock, contextlib.suppress(OSError):  # the client's side is reset too
        for _ in range(5):
            sock.sendall(bytes(1000))
            time.sleep(0.02)
    assert sink.ended.wait(5)
    assert len(sink.received) == 3000 and isinstance(sink.error, ConnectionResetError)
    assert proxy.stats()["a->s"]["toxics"][reset_id]["resets"] == 1


def test_loss_like_with_p_1_stalls_by_rto_then_doubles(proxy, echo_server):
    port = proxy.add_link("a", "b", echo_server)
    toxic_id = proxy.add_toxic("a", "b", LossLike(1.0, rto_ms=100), direction="forward")
    with _connect(port) as sock:
        first, second, third = (_round_trip_s(sock, b"x") for _ in range(3))
    assert first >= 0.1 and second >= 0.2 and third >= 0.4, (first, second, third)
    assert third - first >= 0.2  # the backoff doubles, it does not stay at one RTO
    stats = proxy.stats()["a->b"]["toxics"][toxic_id]
    assert stats["losses"] == 3 and stats["max_delay_ms"] == 400 and stats["total_delay_ms"] == 700


def test_several_toxics_at_once_compose(proxy, echo_server):
    port = proxy.add_link("a", "b", echo_server)
    ids = [proxy.add_toxic("a", "b", toxic, direction="backward")
           for toxic in (Bandwidth(200_000), Latency(50), Slicer(1000, 200, delay_us=100))]
    payload = bytes(range(256)) * 80  # 20 KiB: 100 ms at the rate, after 50 ms of latency
    with _connect(port) as sock:
        elapsed = _round_trip_s(sock, payload)
    assert elapsed >= 0.15
    stats = proxy.stats()["a->b"]["toxics"]
    assert stats[ids[0]]["bytes_paced"] == len(payload)
    assert stats[ids[1]]["delayed_chunks"] >= 1
    assert stats[ids[2]]["pieces"] >= 15


def test_a_mode_wins_over_toxics_and_heal_keeps_them(proxy, echo_server):
    changes = []
    proxy.on_change = changes.append
    port = proxy.add_link("a", "b", echo_server)
    toxic_id = proxy.add_toxic("a", "b", Latency(30))
    proxy.set_link("a", "b", LinkMode.DROP)
    with _connect(port, timeout_s=0.3) as sock:
        sock.sendall(b"lost")
        with pytest.raises(TimeoutError):
            sock.recv(100)
    _wait(lambda: proxy.stats()["a->b"]["dropped_bytes"] == 4)
    proxy.heal()
    assert [t["toxic_id"] for t in proxy.toxics()] == [toxic_id]
    with _connect(port) as sock:
        assert _round_trip_s(sock) >= 0.06
    assert proxy.clear_toxics(src="a") == [toxic_id] and proxy.toxics() == []
    assert changes[0] == {"link": "a->b", "change": "toxic-added", "toxic_id": toxic_id, "direction": "both",
                          "toxic": {"kind": "latency", "latency_ms": 30, "jitter_ms": 0.0}}
    assert changes[-1] == {"link": "a->b", "change": "toxic-removed", "toxic_id": toxic_id}
    with pytest.raises(KeyError, match="no toxic"):
        proxy.remove_toxic("a", "b", toxic_id)


def test_what_a_link_applied_stays_readable_after_close(echo_server):
    proxy = NetProxy()
    port = proxy.add_link("a", "b", echo_server)
    toxic_id = proxy.add_toxic("a", "b", Latency(20), direction="forward")
    with _connect(port) as sock:
        assert _round_trip_s(sock) >= 0.02
    proxy.close()
    assert proxy.stats()["a->b"]["toxics"][toxic_id]["delayed_chunks"] == 1
    assert [t["toxic_id"] for t in proxy.toxics()] == [toxic_id]
