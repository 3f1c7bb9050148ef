"""Bad input on a real name server's RocketMQ remoting listener, property-tested.

A name-server process (with one master, so TBW102 has a route) is started once through
LocalCluster; its remoting address comes from cluster.json. Each example throws one kind of bad
input at it on fresh connections: truncated frames, a header length larger than the frame, a
frame length over 16 MiB (the prefix only), a header that is not JSON, extFields of the wrong
type, unknown codes (JSON and binary headers), a client that vanishes mid-request, many
connections opened and dropped. After every example:
  - the node is alive,
  - a connection opened before any example still gets the same correct 105 answer,
  - each refused input (an error answer, a closed connection or a frame cut short) left a line
    in the node's log naming the refused client's address.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from support import namesrv_remoting as remoting
from support.examples import examples

from harness import LocalCluster, NodeProcess
from harness.run_dir import read_cluster_json
from harness.spec import DEFAULT_NODES, ClusterSpec
from nodes.common import constants as c
from nodes.remoting.command import RemotingCommand, encode

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("remoting-bad-input")]  # one worker starts `target` once

TOPIC = c.AUTO_CREATE_TOPIC_KEY  # registered by the master (auto_create_topic_enable is on by default)
SUCCESS, SYSTEM_ERROR, REQUEST_CODE_NOT_SUPPORTED = 0, 1, 3
NAMESRV_CODES = (105, 206)  # GET_ROUTEINFO_BY_TOPIC, GET_ALL_TOPIC_LIST_FROM_NAMESERVER: the codes it answers
LOG_BUDGET_S = 5.0  # how long a refusal may take to reach node.log on a loaded machine
SOCKET_TIMEOUT_S = 5.0


@dataclass
class Target:
    cluster: LocalCluster
    namesrv: NodeProcess
    addr: str  # the name server's remoting address, from cluster.json
    healthy: socket.socket  # opened before any example; must keep working through all of them
    route_body: bytes  # the correct 105 answer's body


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    spec = ClusterSpec(nodes=DEFAULT_NODES[:2], time_scale=0.05)  # namesrv-0 and the broker-a master
    run_dir = tmp_path_factory.mktemp("remoting-bad-input")
    with LocalCluster(spec, run_dir=run_dir) as cluster:
        entries = {n["id"]: n for n in read_cluster_json(run_dir)["nodes"]}
        addr = entries["namesrv-0"]["remoting_addr"]
        healthy = remoting.connect(addr, SOCKET_TIMEOUT_S)
        answer = remoting.route(healthy, TOPIC)
        assert answer.code == SUCCESS, answer
        yield Target(cluster, cluster.node("namesrv-0"), addr, healthy, answer.body)
        healthy.close()
        assert not cluster.unexpected_exits, cluster.unexpected_exits


# ---- the inputs ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Attempt:
    """Bytes for one connection, and how that connection ends.

    ending: "answer" reads one answer (or the close); "close" waits for the server to close;
    "vanish" closes at once, without reading.
    """

    kind: str
    data: bytes
    ending: str
    logged: bool  # the node must log the refusal
    answer_codes: tuple[int, ...] = ()  # acceptable answer codes when the server answers


def _frame(header: bytes, serialize_type: int = 0, body: bytes = b"") -> bytes:
    mark = (serialize_type << 24) | len(header)
    return struct.pack(">iI", 4 + len(header) + len(body), mark) + header + body


def _json_header(code: object, ext: object, opaque: int = 7, flag: int = 0) -> bytes:
    return json.dumps({"code": code, "language": "OTHER", "version": 1, "opaque": opaque, "flag": flag,
                       "extFields": ext}).encode()


def _binary_header(code: int, opaque: int) -> bytes:
    return struct.pack(">hBhii", code, 9, 1, opaque, 0) + struct.pack(">ii", 0, 0)  # no remark, no extFields


_route_frame = encode(RemotingCommand(code=105, opaque=3, ext={"topic": TOPIC}))

truncated = st.integers(1, len(_route_frame) - 1).map(
    lambda cut: Attempt("truncated frame", _route_frame[:cut], "vanish", logged=True))

header_longer_than_frame = st.tuples(st.integers(0, 1024), st.integers(1, 0xFFFFFF), st.sampled_from([0, 1]),
                                     st.binary(max_size=1024)).map(
    lambda t: Attempt(
        "header length past the frame",
        struct.pack(">iI", 4 + t[0], (t[2] << 24) | min(0xFFFFFF, t[0] + t[1])) + (t[3] + bytes(t[0]))[:t[0]],
        "close", logged=True))

bad_length = st.one_of(st.integers(c.REMOTING_FRAME_BYTES_MAX + 1, 2**31 - 1), st.integers(-(2**31), 3)).map(
    lambda n: Attempt("frame length out of range", struct.pack(">i", n), "close", logged=True))


def _not_a_json_header(raw: bytes) -> bool:
    try:
        header = json.loads(raw)
    except ValueError:
        return True
    return not isinstance(header, dict) or not isinstance(header.get("code"), int)


non_json_header = st.one_of(
    st.binary(max_size=256).filter(_not_a_json_header).map(
        lambda h: Attempt("non-JSON header", _frame(h), "close", logged=True)),
    st.tuples(st.integers(2, 255), st.binary(max_size=64)).map(
        lambda t: Attempt("unknown serialize type", _frame(t[1], t[0]), "close", logged=True)),
)

def _parses_as_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8))
_not_scalar = st.one_of(st.lists(_scalars, max_size=3), st.dictionaries(st.text(max_size=4), _scalars, max_size=3))

wrong_ext_types = st.one_of(
    # a topic that is an array or an object: the header is refused, the connection closed
    _not_scalar.map(lambda v: Attempt("extFields topic of the wrong type", _frame(_json_header(105, {"topic": v})),
                                      "answer", logged=True, answer_codes=(SYSTEM_ERROR,))),
    # extFields that are not an object at all
    st.one_of(st.lists(_scalars, min_size=1, max_size=3), st.text(min_size=1, max_size=8), st.integers(1)).map(
        lambda v: Attempt("extFields not an object", _frame(_json_header(105, v)), "answer", logged=True,
                          answer_codes=(SYSTEM_ERROR,))),
    # no topic at all (null is dropped): an error answer, the connection kept
    st.sampled_from([{}, {"topic": None}, {"Topic": TOPIC}]).map(
        lambda v: Attempt("extFields without a topic", _frame(_json_header(105, v)), "answer", logged=True,
                          answer_codes=(SYSTEM_ERROR,))),
    # a code that is not an integer
    st.one_of(st.text(max_size=6).filter(lambda s: not _parses_as_int(s)), st.floats(),
              st.lists(st.integers(), max_size=2), st.booleans()).map(
        lambda code: Attempt("code of the wrong type", _frame(_json_header(code, {"topic": TOPIC})), "answer",
                             logged=True, answer_codes=(SYSTEM_ERROR,))),
)

unknown_code = st.one_of(
    st.tuples(st.integers(-(2**40), 2**40).filter(lambda n: n not in NAMESRV_CODES), st.sampled_from([0, 2])).map(
        lambda t: Attempt("unknown code (JSON)", _frame(_json_header(t[0], {"topic": TOPIC}, flag=t[1])), "answer",
                          logged=True, answer_codes=(REQUEST_CODE_NOT_SUPPORTED,))),
    st.integers(-(2**15), 2**15 - 1).filter(lambda n: n not in NAMESRV_CODES).map(
        lambda code: Attempt("unknown code (binary header)", _frame(_binary_header(code, 11), 1), "answer",
                             logged=True, answer_codes=(REQUEST_CODE_NOT_SUPPORTED,))),
)

vanishing = st.just(Attempt("vanishes after a whole request", _route_frame, "vanish", logged=False))

many_dropped = st.lists(st.sampled_from([b"", b"\x00", b"\x00\x00\x00\x40", _route_frame]), min_size=2,
                        max_size=40)

bad_input = st.one_of(truncated, header_longer_than_frame, bad_length, non_json_header, wrong_ext_types,
                      unknown_code, vanishing)


# ---- running one attempt ---------------------------------------------------------------------------

def _run(target: Target, attempt: Attempt) -> tuple[int, RemotingCommand | None]:
    """Send the attempt on a fresh connection; returns (its local port, the answer if any)."""
    sock = remoting.connect(target.addr, SOCKET_TIMEOUT_S)
    port = sock.getsockname()[1]
    try:
        sock.sendall(attempt.data)
        if attempt.ending == "vanish":
            return port, None
        if attempt.ending == "close":
            assert sock.recv(1) == b"", f"{attempt.kind}: the server did not close the connection"
            return port, None
        try:
            answer = remoting.read_answer(sock)
        except ConnectionError:
            return port, None  # refused by closing: the other allowed outcome
        assert answer.code in attempt.answer_codes, (attempt.kind, answer)
        assert answer.opaque in (7, 11) and answer.is_response, answer
        return port, answer
    finally:
        sock.close()


def _logged_since(log_path: Path, offset: int, port: int) -> bool:
    needle = f"127.0.0.1:{port})"
    deadline = time.monotonic() + LOG_BUDGET_S
    while True:
        with log_path.open("rb") as f:
            f.seek(offset)
            if needle.encode() in f.read():
                return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)


def _still_serving(target: Target) -> None:
    assert target.namesrv.alive, target.namesrv.node_log.read_text()[-2000:]
    answer = remoting.route(target.healthy, TOPIC)
    assert (answer.code, answer.body) == (SUCCESS, target.route_body)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(attempt=bad_input)
def test_bad_input_is_refused_logged_and_disturbs_nobody(target: Target, attempt: Attempt) -> None:
    event(attempt.kind)
    log_path = target.namesrv.node_log
    offset = log_path.stat().st_size
    port, answer = _run(target, attempt)
    if attempt.ending == "answer" and answer is not None and answer.code == REQUEST_CODE_NOT_SUPPORTED:
        assert answer.remark and "request code" in answer.remark, answer
    if attempt.logged:
        assert _logged_since(log_path, offset, port), f"{attempt.kind}: nothing in node.log about port {port}"
    _still_serving(target)


@settings(max_examples=examples(10), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(openings=many_dropped, reset=st.booleans())
def test_many_connections_opened_and_dropped_disturb_nobody(target: Target, openings: list[bytes],
                                                           reset: bool) -> None:
    socks = [remoting.connect(target.addr, SOCKET_TIMEOUT_S) for _ in openings]
    for sock, data in zip(socks, openings, strict=True):
        if data:
            sock.sendall(data)
        if reset:  # an abortive close (RST), as a killed client leaves it
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    _still_serving(target)
