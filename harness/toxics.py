"""Link toxics: slow, lossy, stalled and cut links, applied by the link proxies (`netproxy`).

A toxic is a small frozen dataclass with a `kind` and parameters; `toxic_to_dict` /
`toxic_from_dict` turn it into plain data and back, so a chaos schedule can carry toxics and a
journal can record exactly what was applied. Several toxics can sit on one direction of a link
at once; they act on *chunks* (what one read from the source socket returned) and compose in
this fixed order, whatever order they were added in:

    stall -> latency -> loss_like -> slicer -> bandwidth -> reset_peer_after_bytes

    stall                    stop reading the source and stop forwarding (backpressure)
    latency, loss_like       hold each chunk until read time + the holds they draw; a later
                             chunk never passes an earlier one (order is TCP's)
    slicer                   split the held chunk into small pieces written with delays
    bandwidth                pace each piece at the rate (carrying timing error over)
    reset_peer_after_bytes   forward the first N bytes, then reset both sockets

Two toxics of one kind on a direction: holds add up, the slowest rate wins, the smallest byte
budget cuts first, the first slicer slices, any stall stalls. Durations are real milliseconds: scaling them with the time
knob is the caller's business (a chaos schedule scales its own durations).
"""

from __future__ import annotations

import asyncio
import dataclasses
import fcntl
import random
import struct
import termios
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

# TCP's retransmission timeout never backs off past 120 s (Linux TCP_RTO_MAX)
LOSS_RTO_MAX_MS = 120_000
DEFAULT_LOSS_RTO_MS = 200  # Linux TCP_RTO_MIN: the first retransmission after a loss
# a bandwidth toxic paces pieces worth at most this long, so a big chunk trickles out
# instead of arriving in one burst after a long wait
BANDWIDTH_SLICE_MS = 100

DIRECTIONS = ("forward", "backward")


class ToxicError(ValueError):
    """A toxic that cannot be applied; the message says which parameter to fix."""


@dataclass(frozen=True)
class Latency:
    """Hold each chunk for latency_ms ± jitter_ms (uniform, drawn per chunk), order kept."""

    kind: ClassVar[str] = "latency"
    latency_ms: float
    jitter_ms: float = 0.0

    def __post_init__(self) -> None:
        _non_negative(self, "latency_ms", "jitter_ms")


@dataclass(frozen=True)
class Bandwidth:
    """Pace the bytes of each connection direction at rate_bytes_per_s."""

    kind: ClassVar[str] = "bandwidth"
    rate_bytes_per_s: int

    def __post_init__(self) -> None:
        if self.rate_bytes_per_s <= 0:
            raise ToxicError(f"bandwidth: rate_bytes_per_s must be > 0, got {self.rate_bytes_per_s}")


@dataclass(frozen=True)
class Slicer:
    """Split chunks into pieces of average_size_bytes ± size_variation_bytes, delay_us apart."""

    kind: ClassVar[str] = "slicer"
    average_size_bytes: int
    size_variation_bytes: int = 0
    delay_us: int = 0

    def __post_init__(self) -> None:
        _non_negative(self, "size_variation_bytes", "delay_us")
        if self.average_size_bytes <= 0:
            raise ToxicError(f"slicer: average_size_bytes must be > 0, got {self.average_size_bytes}")
        if self.size_variation_bytes >= self.average_size_bytes:
            raise ToxicError("slicer: size_variation_bytes must be below average_size_bytes")


@dataclass(frozen=True)
class Stall:
    """Stop reading and forwarding (the connection stays open; removal resumes the same bytes).

    With close_after_ms, close the connection after the stall has lasted that long (Toxiproxy's
    timeout > 0: an idle timeout, an expiring NAT entry); None stalls until removed."""

    kind: ClassVar[str] = "stall"
    close_after_ms: float | None = None

    def __post_init__(self) -> None:
        if self.close_after_ms is not None:
            _non_negative(self, "close_after_ms")


@dataclass(frozen=True)
class ResetPeerAfterBytes:
    """Forward the first `bytes` bytes of the direction on each connection, then reset both sockets."""

    kind: ClassVar[str] = "reset_peer_after_bytes"
    bytes: int

    def __post_init__(self) -> None:
        _non_negative(self, "bytes")


@dataclass(frozen=True)
class LossLike:
    """With `probability` per chunk, hold it rto_ms × 2^k (k = losses in a row): TCP retransmitting
    after packet loss, seen from above TCP. Bytes are never dropped or altered."""

    kind: ClassVar[str] = "loss_like"
    probability: float
    rto_ms: float = DEFAULT_LOSS_RTO_MS

    def __post_init__(self) -> None:
        if not 0.0 <= self.probability <= 1.0:
            raise ToxicError(f"loss_like: probability must be within [0, 1], got {self.probability}")
        if self.rto_ms <= 0:
            raise ToxicError(f"loss_like: rto_ms must be > 0, got {self.rto_ms}")


Toxic = Latency | Bandwidth | Slicer | Stall | ResetPeerAfterBytes | LossLike

# the composition order on a direction (see the module docstring)
ORDER: tuple[type, ...] = (Stall, Latency, LossLike, Slicer, Bandwidth, ResetPeerAfterBytes)
KINDS: dict[str, type] = {cls.kind: cls for cls in ORDER}


def _non_negative(toxic: Any, *names: str) -> None:
    for name in names:
        if getattr(toxic, name) < 0:
            raise ToxicError(f"{toxic.kind}: {name} must be >= 0, got {getattr(toxic, name)}")


def toxic_to_dict(toxic: Toxic) -> dict[str, Any]:
    """`{"kind": ..., <parameters>}`: plain data a schedule or a journal line can hold."""
    return {"kind": toxic.kind, **dataclasses.asdict(toxic)}


def toxic_from_dict(data: Mapping[str, Any]) -> Toxic:
    """The inverse of `toxic_to_dict`; unknown kinds or parameters raise ToxicError."""
    params = dict(data)
    kind = params.pop("kind", None)
    cls = KINDS.get(str(kind))
    if cls is None:
        raise ToxicError(f"unknown toxic kind {kind!r}; kinds are {', '.join(KINDS)}")
    known = {f.name for f in dataclasses.fields(cls)}
    if unknown := set(params) - known:
        raise ToxicError(f"{kind}: unknown parameters {sorted(unknown)}; it takes {sorted(known)}")
    try:
        return cls(**params)  # type: ignore[no-any-return]
    except TypeError as exc:
        raise ToxicError(f"{kind}: {exc}") from None


def as_toxic(toxic: Toxic | Mapping[str, Any]) -> Toxic:
    return toxic if isinstance(toxic, ORDER) else toxic_from_dict(toxic)  # type: ignore[arg-type]


def directions_of(direction: str) -> frozenset[str]:
    if direction == "both":
        return frozenset(DIRECTIONS)
    if direction not in DIRECTIONS:
        raise ToxicError(f"direction must be 'forward', 'backward' or 'both', got {direction!r}")
    return frozenset({direction})


# ---- what a link applied ----------------------------------------------------------------


@dataclass
class ToxicStats:
    """What one toxic actually did, summed over its link's connections."""

    chunks: int = 0  # chunks it acted on
    delayed_chunks: int = 0  # chunks it held (latency, loss_like) or paced (bandwidth)
    total_delay_ms: float = 0.0
    max_delay_ms: float = 0.0
    losses: int = 0  # loss_like: chunks held as if lost
    bytes_paced: int = 0  # bandwidth
    pieces: int = 0  # slicer: pieces written
    stalls: int = 0  # stall: connection directions it stopped
    closes: int = 0  # stall with close_after_ms: connections it closed
    resets: int = 0  # reset_peer_after_bytes: connections it reset

    def delayed(self, ms: float) -> None:
        self.delayed_chunks += 1
        self.total_delay_ms += ms
        self.max_delay_ms = max(self.max_delay_ms, ms)


@dataclass
class ActiveToxic:
    """A toxic in force on a link (loop-confined, like the link)."""

    toxic_id: str
    toxic: Toxic
    directions: frozenset[str]
    rng: random.Random
    added_at: float  # loop time
    stats: ToxicStats = field(default_factory=ToxicStats)
    removed: bool = False

    def describe(self) -> dict[str, Any]:
        direction = "both" if len(self.directions) == 2 else next(iter(self.directions))
        return {"toxic_id": self.toxic_id, "direction": direction, **toxic_to_dict(self.toxic)}


def in_order(toxics: Iterator[ActiveToxic] | list[ActiveToxic], direction: str) -> list[ActiveToxic]:
    """The toxics on one direction, in composition order (then in the order they were added)."""
    on = [a for a in toxics if direction in a.directions]
    return sorted(on, key=lambda a: ORDER.index(type(a.toxic)))


@dataclass
class DirectionState:
    """Per connection direction: what the toxics remember between chunks."""

    opened_at: float  # loop time the connection was accepted
    last_deadline: float = 0.0  # no chunk may leave before the one read before it
    losses_in_row: int = 0
    forwarded_bytes: int = 0
    pace_free_at: dict[str, float] = field(default_factory=dict)  # bandwidth toxic id -> loop time
    stalled: bool = False
    writing: bool = False  # the writer holds a chunk: later ones queue behind it


def plan_hold(toxics: list[ActiveToxic], state: DirectionState, read_at: float) -> float:
    """The loop time a chunk read at `read_at` may leave: latency and loss-like holds (none without
    them), order kept."""
    hold_s = 0.0
    for active in toxics:
        toxic = active.toxic
        if isinstance(toxic, Latency):
            jitter = active.rng.uniform(-toxic.jitter_ms, toxic.jitter_ms) if toxic.jitter_ms else 0.0
            ms = max(0.0, toxic.latency_ms + jitter)
        elif isinstance(toxic, LossLike):
            if toxic.probability and active.rng.random() < toxic.probability:
                ms = min(toxic.rto_ms * 2 ** state.losses_in_row, LOSS_RTO_MAX_MS)
                state.losses_in_row += 1
                active.stats.losses += 1
            else:
                state.losses_in_row = 0
                ms = 0.0
        else:
            continue
        active.stats.chunks += 1
        if ms > 0:
            active.stats.delayed(ms)
        hold_s += ms / 1000
    deadline = max(read_at + hold_s, state.last_deadline)
    state.last_deadline = deadline
    return deadline


def slice_chunk(toxics: list[ActiveToxic], data: bytes) -> Iterator[tuple[bytes, float]]:
    """(piece, seconds to wait after writing it): the first slicer's pieces, or the whole chunk."""
    slicer = next((a for a in toxics if isinstance(a.toxic, Slicer)), None)
    if slicer is None:
        yield data, 0.0
        return
    toxic = slicer.toxic
    assert isinstance(toxic, Slicer)
    slicer.stats.chunks += 1
    pos = 0
    while pos < len(data):
        size = toxic.average_size_bytes
        if toxic.size_variation_bytes:
            size += slicer.rng.randint(-toxic.size_variation_bytes, toxic.size_variation_bytes)
        piece = data[pos:pos + max(1, size)]
        pos += len(piece)
        slicer.stats.pieces += 1
        yield piece, (toxic.delay_us / 1e6 if pos < len(data) else 0.0)


def pace(toxics: list[ActiveToxic], state: DirectionState, piece: bytes, now: float) -> list[tuple[bytes, float]]:
    """Bandwidth: (sub-piece, loop time it may be written) for `piece`.

    Each sub-piece is worth at most BANDWIDTH_SLICE_MS at the slowest rate and leaves when its
    transmission time has passed. The schedule is absolute (the next piece starts where this one
    planned to end, not where it ended), so an oversleep is made up on the next piece."""
    rated = [a for a in toxics if isinstance(a.toxic, Bandwidth)]
    if not rated:
        return [(piece, now)]
    slowest = min(a.toxic.rate_bytes_per_s for a in rated)  # type: ignore[union-attr]
    step = max(1, slowest * BANDWIDTH_SLICE_MS // 1000)
    out = []
    for pos in range(0, len(piece), step):
        sub = piece[pos:pos + step]
        leave = now
        for active in rated:
            rate = active.toxic.rate_bytes_per_s  # type: ignore[union-attr]
            start = max(state.pace_free_at.get(active.toxic_id, now), now)
            done = start + len(sub) / rate
            state.pace_free_at[active.toxic_id] = done
            active.stats.chunks += 1
            active.stats.bytes_paced += len(sub)
            active.stats.delayed((done - start) * 1000)  # its transmission time at this rate
            leave = max(leave, done)
        out.append((sub, leave))
    return out


def reset_budget(toxics: list[ActiveToxic], state: DirectionState) -> tuple[ActiveToxic, int] | None:
    """The reset toxic that cuts first and how many more bytes it lets through, or None."""
    budgets = [(a, a.toxic.bytes - state.forwarded_bytes)  # type: ignore[union-attr]
               for a in toxics if isinstance(a.toxic, ResetPeerAfterBytes)]
    return min(budgets, key=lambda b: b[1]) if budgets else None


def stall_of(toxics: list[ActiveToxic]) -> ActiveToxic | None:
    return next((a for a in toxics if isinstance(a.toxic, Stall)), None)


async def send_chunk(toxics: list[ActiveToxic], state: DirectionState, data: bytes,
                     write: Callable[[bytes], Awaitable[None]],
                     reset: Callable[[ActiveToxic], Awaitable[None]]) -> bool:
    """Write one held chunk through the slicer, bandwidth and reset toxics (in that order) with
    `write`; False when a reset toxic's budget ran out and `reset` was called."""
    loop = asyncio.get_running_loop()
    for piece, pause_s in slice_chunk(toxics, data):
        for sub, leave_at in pace(toxics, state, piece, loop.time()):
            if (wait_s := leave_at - loop.time()) > 0:
                await asyncio.sleep(wait_s)
            cut = reset_budget(toxics, state)
            if cut is not None and len(sub) >= cut[1]:
                if cut[1] > 0:
                    await write(sub[:cut[1]])
                await reset(cut[0])
                return False
            await write(sub)
        if pause_s:
            await asyncio.sleep(pause_s)
    return True


async def flushed(writer: asyncio.StreamWriter, limit_s: float = 1.0) -> None:
    """Wait (up to limit_s) until the bytes written are out of asyncio's buffer and the kernel's
    send queue: an RST discards whatever is still queued there."""
    sock = writer.get_extra_info("socket")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while loop.time() < deadline:
        try:
            unsent = writer.transport.get_write_buffer_size()
            if sock is not None:
                unsent += struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]
        except OSError:
            return
        if unsent == 0:
            return
        await asyncio.sleep(0.001)
