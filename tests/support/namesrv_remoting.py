"""A blocking RocketMQ remoting client for tests: one request, one answer, on a plain socket.

Also reads a route body: the name server writes fastjson's unquoted integer map keys, which
`json` does not take, so `route_from_body` quotes them first.
"""

from __future__ import annotations

import itertools
import json
import re
import socket
import struct
from typing import Any

from nodes.remoting.command import RemotingCommand, decode, encode

GET_ROUTEINFO_BY_TOPIC = 105
_opaques = itertools.count(1)
_BARE_INT_KEY = re.compile(r'([{,])(-?\d+):')


def connect(addr: str, timeout_s: float = 5.0) -> socket.socket:
    host, _, port = addr.rpartition(":")
    return socket.create_connection((host, int(port)), timeout=timeout_s)


def read_answer(sock: socket.socket) -> RemotingCommand:
    (length,) = struct.unpack(">i", _read_exactly(sock, 4))
    return decode(_read_exactly(sock, length))


def request(sock: socket.socket, code: int, ext: dict[str, Any] | None = None) -> RemotingCommand:
    opaque = next(_opaques)
    sock.sendall(encode(RemotingCommand(code=code, opaque=opaque, ext=dict(ext or {}))))
    answer = read_answer(sock)
    assert answer.opaque == opaque and answer.is_response, answer
    return answer


def route(sock: socket.socket, topic: str) -> RemotingCommand:
    return request(sock, GET_ROUTEINFO_BY_TOPIC, {"topic": topic})


def route_from_body(body: bytes) -> dict[str, Any]:
    return json.loads(_BARE_INT_KEY.sub(r'\1"\2":', body.decode()))


def _read_exactly(sock: socket.socket, count: int) -> bytes:
    chunks, left = [], count
    while left:
        chunk = sock.recv(left)
        if not chunk:
            raise ConnectionError(f"closed with {left} of {count} bytes unread")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
