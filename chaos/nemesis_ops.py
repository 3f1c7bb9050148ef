"""Nemesis ops as data, and what performing one did.

An op is a frozen dataclass naming a symbolic target (chaos.nemesis_targets resolves it);
`chaos.nemesis.NemesisRunner` performs it through the harness:

    Kill("lock-holder:3", restart_after_ms=...)   SIGKILL, later a restart from the same store
    Stop("master", restart_after_ms=...)           SIGTERM (graceful), later a restart
    Pause("slave", duration_ms=...)                SIGSTOP, later SIGCONT
    Partition("isolate", "master", mode="DROP")    cut links (needs LocalCluster(links=True)), later heal
    Heal()                                         every link OPEN again, every partition closed
    PowerLoss("master", restart_after_ms=...)      SIGKILL, drop what the disk had not synced, later a restart
    Corrupt("slave")                               flip bytes in a record of a sealed segment (no recovery)

and the gray faults, which leave every process running and every link connected:

    LinkToxic("consumer-master", "lock-holder", toxic={"kind": "latency", ...})   slow, stalled or lossy links
    ClockFault("master", jump_ms=-30_000, rate=0.5)   a wall-clock step and a rate skew of our own Clock
    Starve("master", share=0.1)                       a small share of one core
    DiskFill("slave", ratio=0.95)                     the broker's store filesystem filled

Durations belong to the op (a schedule derives them from `chaos.bounds`). Ops travel in
schedules as `op_to_dict` / `op_from_dict` dicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from harness.netproxy import LinkMode

PARTITION_KINDS = ("isolate", "halves", "master-slave", "consumer-master", "one-way", "from-namesrv", "from-group")
LINK_MODES = (LinkMode.DROP.value, LinkMode.REJECT.value)
RECOVERY_OP = {"kill": "restart", "stop": "restart", "pause": "resume", "partition": "heal", "power-loss": "restart",
               "link-toxic": "remove-toxic", "clock": "clock-reset", "starve": "unstarve", "disk-fill": "free-disk"}


@dataclass(frozen=True)
class Kill:
    """SIGKILL the target's process group; restart it (same port, same store) `restart_after_ms` later."""

    op: ClassVar[str] = "kill"
    target: str = "random-consumer"
    restart_after_ms: int | None = None  # None: down until recover_all

    @property
    def duration_ms(self) -> int | None:
        return self.restart_after_ms


@dataclass(frozen=True)
class Stop:
    """SIGTERM (graceful: a consumer unlocks and persists), SIGKILL after `grace_ms`; restart later."""

    op: ClassVar[str] = "stop"
    target: str = "random-consumer"
    restart_after_ms: int | None = None
    grace_ms: int | None = None  # None: the harness's stop grace

    @property
    def duration_ms(self) -> int | None:
        return self.restart_after_ms


@dataclass(frozen=True)
class Pause:
    """SIGSTOP the target's process group; SIGCONT `duration_ms` later."""

    op: ClassVar[str] = "pause"
    target: str = "random-consumer"
    duration_ms: int | None = None


@dataclass(frozen=True)
class Partition:
    """Cut links; heal them `duration_ms` later.

    kind: `isolate` the target from everyone; `halves` every node shuffled into two halves;
    `master-slave` the target (a master) from `peer` (its slave); `consumer-master` the target
    (a consumer) from `peer` (the master) only; `one-way` the target's bytes to `peer` (the
    master) dropped, the other direction open; `from-namesrv` the target's nodes (e.g. a broker
    group) from every name server, and nothing else; `from-group` the target (e.g. the producer)
    from every node of `peer` (a broker group), both ways. mode: DROP (silent) or REJECT (connections reset).
    """

    op: ClassVar[str] = "partition"
    kind: str = "isolate"
    target: str = "master"
    peer: str | None = None
    mode: str = LinkMode.DROP.value
    duration_ms: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in PARTITION_KINDS:
            raise ValueError(f"partition kind must be one of {PARTITION_KINDS}, got {self.kind!r}")
        if self.mode not in LINK_MODES:
            raise ValueError(f"partition mode must be one of {LINK_MODES}, got {self.mode!r}")


@dataclass(frozen=True)
class Heal:
    """Every link OPEN again; closes every partition fault."""

    op: ClassVar[str] = "heal"
    target: str = "all-links"

    @property
    def duration_ms(self) -> int | None:
        return None


@dataclass(frozen=True)
class PowerLoss:
    """SIGKILL a broker, wait for its exit, rewrite its store as a power loss leaves it (every byte
    after the last fsync gone, a torn record at the tail); restart it `restart_after_ms` later."""

    op: ClassVar[str] = "power-loss"
    target: str = "master"
    restart_after_ms: int | None = None

    @property
    def duration_ms(self) -> int | None:
        return self.restart_after_ms


@dataclass(frozen=True)
class Corrupt:
    """Flip bytes inside one record of a sealed commitlog segment of a running broker. Instant:
    nothing to undo (the damage is what recovery and reads must cope with)."""

    op: ClassVar[str] = "corrupt"
    target: str = "master"

    @property
    def duration_ms(self) -> int | None:
        return None


@dataclass(frozen=True)
class LinkToxic:
    """Degrade, without cutting, the links a partition of `kind` would cut (`kind`, `target` and
    `peer` as `Partition`'s): put `toxic` (a `harness.toxics` toxic as a dict: latency, bandwidth,
    slicer, stall, reset_peer_after_bytes, loss_like) on them in `direction` (forward: the target's
    requests, backward: the answers, both); remove it `duration_ms` later."""

    op: ClassVar[str] = "link-toxic"
    kind: str = "consumer-master"
    target: str = "lock-holder"
    peer: str | None = None
    toxic: Mapping[str, Any] = field(default_factory=dict, hash=False)
    direction: str = "both"
    duration_ms: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in PARTITION_KINDS:
            raise ValueError(f"link-toxic kind must be one of {PARTITION_KINDS}, got {self.kind!r}")
        if self.direction not in TOXIC_DIRECTIONS:
            raise ValueError(f"link-toxic direction must be one of {TOXIC_DIRECTIONS}, got {self.direction!r}")
        if not self.toxic.get("kind"):
            raise ValueError("link-toxic needs a toxic with a kind, e.g. {'kind': 'latency', 'latency_ms': 100}")


@dataclass(frozen=True)
class ClockFault:
    """Move the target's clocks: step its wall clock by `jump_ms` (the preloaded shift; store timestamps and
    every `wall_ms`) and run its own `Clock` (leases and timers) at `rate`; both back `duration_ms` later."""

    op: ClassVar[str] = "clock"
    target: str = "master"
    jump_ms: int = 0
    rate: float = 1.0
    duration_ms: int | None = None

    def __post_init__(self) -> None:
        if self.rate <= 0:
            raise ValueError(f"a clock rate must be positive, got {self.rate}")
        if not self.jump_ms and self.rate == 1.0:
            raise ValueError("a clock fault needs a jump_ms or a rate other than 1")


@dataclass(frozen=True)
class Starve:
    """Keep the target alive on `share` of one core (a CPU quota, or a stop/continue duty cycle where
    no cgroup can do it) for `duration_ms`."""

    op: ClassVar[str] = "starve"
    target: str = "master"
    share: float = 0.1
    period_ms: int = 100  # the quota's period: the longest stall is period x (1 - share)
    duration_ms: int | None = None

    def __post_init__(self) -> None:
        if not 0 < self.share < 1:
            raise ValueError(f"a CPU share must be in (0, 1), got {self.share}")


@dataclass(frozen=True)
class DiskFill:
    """Fill the filesystem of the target broker's store to `ratio` of its size (1.0: no byte left);
    free it `duration_ms` later. The broker's store must sit on a filesystem of its own."""

    op: ClassVar[str] = "disk-fill"
    target: str = "master"
    ratio: float = 0.95
    duration_ms: int | None = None

    def __post_init__(self) -> None:
        if not 0 < self.ratio <= 1:
            raise ValueError(f"a fill ratio must be in (0, 1], got {self.ratio}")


GRAY_OPS = ("link-toxic", "clock", "starve", "disk-fill")
TOXIC_DIRECTIONS = ("both", "forward", "backward")

Op = Kill | Stop | Pause | Partition | Heal | PowerLoss | Corrupt | LinkToxic | ClockFault | Starve | DiskFill
OP_TYPES: dict[str, type[Op]] = {t.op: t for t in (Kill, Stop, Pause, Partition, Heal, PowerLoss, Corrupt,
                                                  LinkToxic, ClockFault, Starve, DiskFill)}


def op_to_dict(op: Op) -> dict[str, Any]:
    """`{"op": "kill", "target": "master", "params": {"restart_after_ms": 1500}}`."""
    return {"op": op.op, "target": op.target,
            "params": {f.name: getattr(op, f.name) for f in fields(op) if f.name != "target"}}


def op_from_dict(data: Mapping[str, Any]) -> Op:
    cls = OP_TYPES.get(str(data.get("op")))
    if cls is None:
        raise ValueError(f"unknown nemesis op {data.get('op')!r}; known: {', '.join(OP_TYPES)}")
    return cls(target=data["target"], **dict(data.get("params") or {}))


def describe_op(op: Op) -> str:
    """One short line: `kill master`, `partition consumer-master lock-holder DROP`."""
    if isinstance(op, Partition):
        return f"partition {op.kind} {op.target}{f'->{op.peer}' if op.peer else ''} {op.mode}"
    if isinstance(op, LinkToxic):
        params = " ".join(f"{k}={v}" for k, v in op.toxic.items() if k != "kind")
        way = "" if op.direction == "both" else f" {op.direction}"
        return f"{op.toxic['kind']} {op.kind} {op.target}{f'->{op.peer}' if op.peer else ''}{way} {params}".rstrip()
    if isinstance(op, ClockFault):
        moves = [f"wall {op.jump_ms:+d} ms"] if op.jump_ms else []
        moves += [f"rate x{op.rate:g}"] if op.rate != 1.0 else []
        return f"clock {op.target} {', '.join(moves)}"
    if isinstance(op, Starve):
        return f"starve {op.target} to {op.share:.0%} of a core"
    if isinstance(op, DiskFill):
        return f"disk-fill {op.target} to {op.ratio:.0%}"
    return f"{op.op} {op.target}"


@dataclass(frozen=True)
class Outcome:
    """What one action did: the fault it opened or closed, the nodes named, its error."""

    op: str
    fault_id: str | None
    targets: tuple[str, ...]
    detail: str
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None
