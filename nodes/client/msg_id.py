"""Client-generated message ids (the UNIQ_KEY property), in the spirit of MessageClientIDSetter.

Layout, 16 bytes shown as 32 upper-case hex characters:

    ┌────────────┬───────────┬─────────────┬──────────────────────┬───────────────┐
    │ ip (4)     │ pid (2)   │ salt (4)    │ elapsed ms (4)       │ counter (2)   │
    └────────────┴───────────┴─────────────┴──────────────────────┴───────────────┘

ip, pid and salt are fixed per generator (the salt is random and plays the part of RocketMQ's
class-loader hash: it separates two processes that reuse a pid). The last six bytes form one
48-bit sequence, `max(elapsed_ms << 16, previous + 1)`, so ids from one generator are strictly
increasing and never repeat within the 49-day wrap of the millisecond field.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import socket
import threading
import time

_SEQ_MASK = (1 << 48) - 1


@functools.cache
def local_ipv4() -> str:
    """A non-loopback IPv4 address of this host when there is one, else 127.0.0.1."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: a UDP connect sends no packet
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


class UniqIdGenerator:
    """Thread-safe source of UNIQ_KEY values."""

    def __init__(self, *, ip: str | None = None, pid: int | None = None, salt: int | None = None) -> None:
        ip_bytes = ipaddress.IPv4Address(ip or local_ipv4()).packed
        pid_bytes = ((os.getpid() if pid is None else pid) & 0xFFFF).to_bytes(2, "big")
        salt_bytes = (int.from_bytes(os.urandom(4), "big") if salt is None else salt & 0xFFFFFFFF).to_bytes(4, "big")
        self.prefix = (ip_bytes + pid_bytes + salt_bytes).hex().upper()
        self._format = self.prefix + "%012X"  # the prefix is hex digits: no % in it
        self._start_ns = time.monotonic_ns()
        self._last = -1
        self._lock = threading.Lock()

    def next_id(self) -> str:
        """One id: `next_ids(1)[0]` without the list (every send_async takes one)."""
        return self._format % self._take(1)

    def next_ids(self, count: int) -> list[str]:
        """`count` ids, as `count` calls of `next_id` would give them, for one lock and one
        clock read (a batch send stamps hundreds at once)."""
        if count <= 0:
            return []
        first = self._take(count)
        if first + count - 1 <= _SEQ_MASK:  # no wrap-around: the usual case, one % per id
            fmt = self._format
            return [fmt % seq for seq in range(first, first + count)]
        prefix = self.prefix
        return [f"{prefix}{seq & _SEQ_MASK:012X}" for seq in range(first, first + count)]

    def _take(self, count: int) -> int:
        """The first of `count` sequence numbers taken for ids (one lock, one clock read): never
        below the clock's, always past the last one taken (48 bits, wrapping)."""
        elapsed_ms = (time.monotonic_ns() - self._start_ns) // 1_000_000
        with self._lock:
            first = max((elapsed_ms << 16) & _SEQ_MASK, (self._last + 1) & _SEQ_MASK)
            self._last = (first + count - 1) & _SEQ_MASK
        return first


_default: UniqIdGenerator | None = None
_default_lock = threading.Lock()


def default_generator() -> UniqIdGenerator:
    """The process-wide generator (created on first use; re-created after a fork)."""
    global _default
    with _default_lock:
        if _default is None or _default.prefix[8:12] != f"{os.getpid() & 0xFFFF:04X}":
            _default = UniqIdGenerator()
        return _default


def new_uniq_id() -> str:
    return default_generator().next_id()
