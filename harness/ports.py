"""Fixed ports for a cluster's nodes: allocated once, kept for the cluster's lifetime.

Owns choosing free TCP ports on 127.0.0.1; does not bind them for the nodes (each node
binds its own port, with `grpc.so_reuseport=0` so a clash fails loudly).

Ports come from a range *below* the kernel's ephemeral range
(`/proc/sys/net/ipv4/ip_local_port_range`), so no outgoing connection of any process can
take a node's port while the node restarts: a restarted master keeps its address.

Parallel allocators (pytest-xdist workers, two `mqlab up`s) are kept apart twice over:
every allocated port is also locked with `flock` on `<tmp>/mqlab-ports-<uid>/<port>.lock`
while its `PortAllocator` lives, and each allocator starts probing at a random port. A port
counts as free only if its lock is free and a plain `bind` (no SO_REUSEADDR) succeeds.
"""

from __future__ import annotations

import fcntl
import os
import random
import socket
import tempfile
from pathlib import Path

from harness.errors import HarnessError

PORT_RANGE_LOW = 20_000  # first candidate port when the ephemeral range starts high enough
PORT_RANGE_SIZE_MIN = 1_000  # below this many candidates we refuse rather than thrash
EPHEMERAL_RANGE_DEFAULT = (32_768, 60_999)  # Linux default, used when /proc is unreadable
LOCALHOST = "127.0.0.1"


def ephemeral_range(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> tuple[int, int]:
    """The kernel's ephemeral port range (low, high), or Linux's default if unreadable."""
    try:
        low, high = (int(part) for part in path.read_text().split())
    except (OSError, ValueError):
        return EPHEMERAL_RANGE_DEFAULT
    return low, high


def candidate_range(ephemeral: tuple[int, int] | None = None) -> range:
    """The ports we may hand out: [PORT_RANGE_LOW, ephemeral low), widened downwards if small."""
    eph_low, _ = ephemeral or ephemeral_range()
    low = PORT_RANGE_LOW
    if eph_low - low < PORT_RANGE_SIZE_MIN:
        low = max(1_024, eph_low - 10 * PORT_RANGE_SIZE_MIN)
    if eph_low - low < PORT_RANGE_SIZE_MIN:
        raise HarnessError(
            f"the ephemeral port range starts at {eph_low}, leaving too few ports below it; "
            "raise the low end of /proc/sys/net/ipv4/ip_local_port_range")
    return range(low, eph_low)


def is_bindable(port: int, host: str = LOCALHOST) -> bool:
    """True if nothing listens on, or lingers (TIME_WAIT) at, host:port right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def lock_dir() -> Path:
    path = Path(tempfile.gettempdir()) / f"mqlab-ports-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


class PortAllocator:
    """Hands out distinct free ports and holds their locks until `release()`.

    Usable as a context manager. Not thread-safe; one per cluster.
    """

    def __init__(self, *, seed: int | None = None, ports: range | None = None) -> None:
        self._range = ports if ports is not None else candidate_range()
        self._rng = random.Random(seed)  # None: seeded from os.urandom, so workers start apart
        self._held: dict[int, int] = {}  # port -> open lock fd

    @property
    def ports(self) -> list[int]:
        return sorted(self._held)

    def allocate(self, count: int = 1) -> list[int]:
        """Return `count` free ports, each locked for this allocator's lifetime.

        Raises:
            HarnessError: the range has fewer than `count` free ports.
        """
        found: list[int] = []
        size = len(self._range)
        start = self._rng.randrange(size)
        for i in range(size):
            if len(found) == count:
                break
            port = self._range[(start + i) % size]
            if port in self._held:
                continue
            if self._try_lock(port):
                if is_bindable(port):
                    found.append(port)
                else:
                    self._unlock(port)
        if len(found) < count:
            for port in found:
                self._unlock(port)
            raise HarnessError(
                f"found only {len(found)} of {count} free ports in {self._range.start}-{self._range.stop - 1}; "
                "stop leftover clusters (`mqlab down`) or free some ports")
        return found

    def release(self) -> None:
        for port in list(self._held):
            self._unlock(port)

    def __enter__(self) -> PortAllocator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _try_lock(self, port: int) -> bool:
        fd = os.open(lock_dir() / f"{port}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._held[port] = fd
        return True

    def _unlock(self, port: int) -> None:
        fd = self._held.pop(port)
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
