"""Seeded fault schedules: drawn from a fault mix, stored as `<run_dir>/schedule.json`, replayed by `play`.

A schedule is an ordered list of timed entries (`at_ms` from the start of the fault phase, a
nemesis op with its symbolic target and duration), followed by a heal-and-recover phase long
enough for the cluster to converge (`Bounds.recovery_phase_ms`). Every draw goes through
`random.Random(seed)`, so the same seed and arguments give the same schedule; targets stay
symbolic ("lock-holder", "random-consumer") and are resolved when the op fires.

    schedule = generate_schedule(suite, derive_bounds(cluster.timing), seed=7, duration_ms=40_000)
    print(format_schedule(schedule))              # what --dry-run shows
    play(schedule, nemesis_runner, SYSTEM_CLOCK, stop_event)

Unless `overlap=True`, a fault starts only after the previous one was undone plus a staggered
gap, so each fault's effect can be told apart in the history.
"""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from chaos.bounds import Bounds
from chaos.nemesis_ops import (
    ClockFault,
    Corrupt,
    DiskFill,
    Kill,
    LinkToxic,
    Op,
    Outcome,
    Partition,
    Pause,
    PowerLoss,
    Starve,
    Stop,
    describe_op,
    op_from_dict,
    op_to_dict,
)

SCHEDULE_VERSION = 1
# How often a waiting `play` reports progress: a display refresh rate, not a system timer.
PROGRESS_TICK_MS = 250
FAULT_OPS = ("kill", "stop", "pause", "partition", "power-loss", "corrupt", "link-toxic", "clock", "starve",
             "disk-fill")


class Clock(Protocol):
    def monotonic_ms(self) -> int: ...


class Nemesis(Protocol):
    """What `play` drives (`chaos.nemesis.NemesisRunner`)."""

    def start(self, op: Op) -> Outcome: ...
    def recover(self, fault_id: str) -> Outcome | None: ...
    def recover_all(self) -> list[Outcome]: ...
    def active_faults(self) -> list[str]: ...


class ChoiceLike(Protocol):
    op: str
    target: str
    weight: float
    duration_of: str
    duration_x: float
    partition: str | None


@dataclass(frozen=True)
class FaultChoice:
    """One kind of fault a schedule may draw: `op` on `target` with relative `weight`, lasting
    `duration_x` times the bound named `duration_of` (a `Bounds` timer or derived bound)."""

    op: str
    target: str
    weight: float = 1.0
    duration_of: str = "L_c"
    duration_x: float = 1.5
    partition: str | None = None  # the partition kind (chaos.nemesis_ops.PARTITION_KINDS); link-toxic's link set
    mode: str = "DROP"  # partitions: DROP or REJECT
    # the gray ops' parameters: a literal, or (bound name, multiple) resolved against the run's
    # bounds like the duration, so a latency or a clock step keeps its size against the timers at
    # every time scale. link-toxic: `toxic` (a dict whose values may be such pairs) and `direction`;
    # clock: `jump_ms`, `rate`; starve: `share`, `period_ms`; disk-fill: `ratio`.
    params: Mapping[str, Any] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class Entry:
    at_ms: int
    op: Op
    note: str = ""  # how the duration was derived, e.g. "0.5 x L_b"

    @property
    def duration_ms(self) -> int | None:
        return self.op.duration_ms

    @property
    def recover_at_ms(self) -> int | None:
        return None if self.op.duration_ms is None else self.at_ms + self.op.duration_ms

    def to_json(self) -> dict[str, Any]:
        return {"at_ms": self.at_ms, **op_to_dict(self.op), "recover_at_ms": self.recover_at_ms, "note": self.note}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Entry:
        return cls(at_ms=int(data["at_ms"]), op=op_from_dict(data), note=str(data.get("note", "")))


@dataclass(frozen=True)
class Schedule:
    entries: tuple[Entry, ...]
    fault_phase_ms: int  # faults happen in [0, fault_phase_ms); then everything is undone
    recovery_phase_ms: int  # ... and the cluster gets this long to converge
    seed: int | None = None
    spacing_ms: int = 0
    overlap: bool = False
    meta: Mapping[str, Any] = field(default_factory=dict, hash=False)

    @property
    def total_ms(self) -> int:
        return self.fault_phase_ms + self.recovery_phase_ms

    def to_json(self) -> dict[str, Any]:
        return {"version": SCHEDULE_VERSION, "seed": self.seed, "fault_phase_ms": self.fault_phase_ms,
                "recovery_phase_ms": self.recovery_phase_ms, "spacing_ms": self.spacing_ms,
                "overlap": self.overlap, "meta": dict(self.meta), "entries": [e.to_json() for e in self.entries]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Schedule:
        if data.get("version") != SCHEDULE_VERSION:
            raise ValueError(f"schedule version {data.get('version')!r} is not {SCHEDULE_VERSION}")
        entries = tuple(Entry.from_json(e) for e in data["entries"])
        if any(b.at_ms < a.at_ms for a, b in itertools.pairwise(entries)):
            raise ValueError("schedule entries must be in time order")
        return cls(entries=entries, fault_phase_ms=int(data["fault_phase_ms"]),
                   recovery_phase_ms=int(data["recovery_phase_ms"]), seed=data.get("seed"),
                   spacing_ms=int(data.get("spacing_ms", 0)), overlap=bool(data.get("overlap", False)),
                   meta=dict(data.get("meta") or {}))


# ---- generation -------------------------------------------------------------------------


def default_spacing_ms(bounds: Bounds) -> int:
    """The mean gap between faults: one rebalance or route poll and a pull retry, so the cluster
    has noticed a recovery before the next fault lands."""
    return max(bounds.R_b, bounds.N_r) + bounds.W_p


def bound_ms(bounds: Bounds, name: str) -> int:
    value = getattr(bounds, name, None)
    if not isinstance(value, int):
        raise ValueError(f"{name!r} is no bound; use a timer ({', '.join(bounds.timers())}) "
                         f"or a derived bound ({', '.join(bounds.derived())})")
    return value


def choice_duration_ms(choice: ChoiceLike, bounds: Bounds) -> int:
    return max(1, round(choice.duration_x * bound_ms(bounds, choice.duration_of)))


def resolve_param(value: Any, bounds: Bounds | None) -> Any:
    """A gray op's parameter: `(bound name, multiple)` becomes that many of the bound's ms (a whole
    number, negative for a negative multiple); a dict is resolved value by value; anything else is
    taken as it is."""
    if isinstance(value, Mapping):
        return {k: resolve_param(v, bounds) for k, v in value.items()}
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        if bounds is None:
            return 1  # validation only (no bounds yet): any positive size
        ms = round(value[1] * bound_ms(bounds, value[0]))
        return ms or (1 if value[1] > 0 else -1)  # a step back stays a step back at the 5 ms floor
    return value


def op_for(choice: ChoiceLike, duration_ms: int, bounds: Bounds | None = None) -> Op:
    params = resolve_param(dict(getattr(choice, "params", None) or {}), bounds)
    if choice.op == "link-toxic":
        return LinkToxic(choice.partition or "consumer-master", choice.target, toxic=params.get("toxic", {}),
                         direction=params.get("direction", "both"), peer=params.get("peer"),
                         duration_ms=duration_ms)
    if choice.op == "clock":
        return ClockFault(choice.target, jump_ms=int(params.get("jump_ms", 0)), rate=float(params.get("rate", 1.0)),
                          duration_ms=duration_ms)
    if choice.op == "starve":
        return Starve(choice.target, share=float(params.get("share", 0.1)),
                      period_ms=int(params.get("period_ms", 100)), duration_ms=duration_ms)
    if choice.op == "disk-fill":
        return DiskFill(choice.target, ratio=float(params.get("ratio", 0.95)), duration_ms=duration_ms)
    if choice.op == "kill":
        return Kill(choice.target, restart_after_ms=duration_ms)
    if choice.op == "stop":
        return Stop(choice.target, restart_after_ms=duration_ms)
    if choice.op == "pause":
        return Pause(choice.target, duration_ms=duration_ms)
    if choice.op == "partition":
        return Partition(choice.partition or "isolate", choice.target, mode=getattr(choice, "mode", "DROP"),
                         duration_ms=duration_ms)
    if choice.op == "power-loss":
        return PowerLoss(choice.target, restart_after_ms=duration_ms)
    if choice.op == "corrupt":  # instant; its duration only spaces the next fault
        return Corrupt(choice.target)
    raise ValueError(f"fault op must be one of {FAULT_OPS}, got {choice.op!r}")


def generate_schedule(faults: Any, bounds: Bounds, *, seed: int, duration_ms: int, spacing_ms: int | None = None,
                      overlap: bool = False, unit_bounds: Bounds | None = None,
                      unit_duration_ms: int | None = None, lead: Sequence[ChoiceLike] = ()) -> Schedule:
    """Draw faults from `faults` (a suite with `.faults`, or a sequence of `FaultChoice`-like
    choices) over a fault phase of `duration_ms`.

    Each entry is a weighted draw among the choices that still fit before the phase ends; the
    next starts a gap drawn from [spacing/2, 3*spacing/2] after this one ends (after it starts,
    with `overlap`). Only `random.Random(seed)` is consulted.

    Every draw is made in timer units: the milliseconds of `unit_bounds` (the bounds at time
    scale 1) over a phase of `unit_duration_ms` units, then mapped onto this run's `bounds`. So a
    seed draws the same faults, in the same order, each lasting the same multiple of its bound, at
    every time scale; only the milliseconds differ. Without `unit_bounds` the units are `bounds`.

    `lead` is a composite fault every seed plays first: its choices all start together (in
    order, so a later one lands on what an earlier one left) half a spacing into the phase. The
    drawn faults follow it, each drawn exactly as without a lead and shifted by the lead's end,
    and the phase grows by as much: a lead changes no draw of the seed, only when they happen.
    """
    choices: Sequence[ChoiceLike] = tuple(getattr(faults, "faults", faults))
    if not choices:
        raise ValueError("a schedule needs at least one fault choice")
    for ch in choices:
        if ch.weight <= 0:
            raise ValueError(f"fault weights must be positive: {ch}")
        op_for(ch, 1)  # reject unknown ops and partition kinds before drawing anything
    if duration_ms <= 0:
        raise ValueError("duration_ms must be positive")
    spacing = spacing_ms if spacing_ms is not None else default_spacing_ms(bounds)
    if spacing <= 0:
        raise ValueError("spacing_ms must be positive")
    units = unit_bounds or bounds
    # this run's ms per timer unit (its time scale), read off the spacing, a sum of timers
    ms_per_unit = default_spacing_ms(bounds) / default_spacing_ms(units)
    unit_spacing = round(spacing / ms_per_unit)
    length_units = unit_duration_ms if unit_duration_ms is not None else round(duration_ms / ms_per_unit)
    rng = random.Random(seed)
    unit_durations = [choice_duration_ms(ch, units) for ch in choices]
    durations = [choice_duration_ms(ch, bounds) for ch in choices]
    entries: list[Entry] = []
    lead_units = 0  # where the drawn faults' timeline begins: after the lead fault ends
    earliest_ms = 0  # where the next fault may start in this run's ms (floors can stretch a timer)
    if lead:
        lead_at_units = unit_spacing // 2
        lead_at_ms = round(lead_at_units * ms_per_unit)
        for ch in lead:
            entries.append(Entry(lead_at_ms, op_for(ch, choice_duration_ms(ch, bounds), bounds),
                                 f"{ch.duration_x:g} x {ch.duration_of}, lead"))
        lead_units = lead_at_units + max(choice_duration_ms(ch, units) for ch in lead)
        earliest_ms = lead_at_ms + max(choice_duration_ms(ch, bounds) for ch in lead)
        length_units += lead_units
        duration_ms += round(lead_units * ms_per_unit)
    first_gap = rng.randint(unit_spacing // 2, unit_spacing)
    at_units = lead_units + first_gap
    if lead:
        earliest_ms += round(first_gap * ms_per_unit)
    while True:
        fitting = [i for i, d in enumerate(unit_durations) if at_units + d <= length_units]
        if not fitting:
            break
        i = rng.choices(fitting, weights=[choices[i].weight for i in fitting])[0]
        ch, dur = choices[i], durations[i]
        at_ms = max(round(at_units * ms_per_unit), earliest_ms)
        entries.append(Entry(at_ms, op_for(ch, dur, bounds), f"{ch.duration_x:g} x {ch.duration_of}"))
        gap_units = rng.randint(unit_spacing // 2, unit_spacing * 3 // 2)
        at_units += gap_units if overlap else unit_durations[i] + gap_units
        earliest_ms = at_ms + (0 if overlap else dur) + round(gap_units * ms_per_unit)
    ends = [e.recover_at_ms for e in entries if e.recover_at_ms is not None]
    phase_ms = max([duration_ms, *ends])
    return Schedule(entries=tuple(entries), fault_phase_ms=phase_ms, recovery_phase_ms=bounds.recovery_phase_ms,
                    seed=seed, spacing_ms=spacing, overlap=overlap,
                    meta={"time_bounds": bounds.timers(), "fault_phase_units": length_units})


def overlaps(schedule: Schedule) -> list[tuple[int, int]]:
    """Index pairs of entries whose fault windows overlap in time."""
    spans = [(e.at_ms, e.recover_at_ms if e.recover_at_ms is not None else schedule.fault_phase_ms)
             for e in schedule.entries]
    return [(i, j) for i in range(len(spans)) for j in range(i + 1, len(spans))
            if spans[j][0] < spans[i][1] and spans[i][0] < spans[j][1]]


def format_schedule(schedule: Schedule) -> str:
    """One line per entry (time, op, target, duration), then the final recovery phase."""
    head = (f"schedule (seed {schedule.seed}): {len(schedule.entries)} faults in "
            f"{schedule.fault_phase_ms / 1000:.1f} s, then heal and recover for {schedule.recovery_phase_ms / 1000:.1f} s")
    lines = [head]
    for e in schedule.entries:
        dur = "instant" if isinstance(e.op, Corrupt) else (
            "until recovery" if e.duration_ms is None else f"for {e.duration_ms / 1000:7.3f} s")
        note = f"  ({e.note})" if e.note else ""
        lines.append(f"  +{e.at_ms / 1000:8.3f} s  {describe_op(e.op):<50} {dur}{note}")
    lines.append(f"  +{schedule.fault_phase_ms / 1000:8.3f} s  {'recover all: resume, heal, restart':<50} "
                 f"then settle {schedule.recovery_phase_ms / 1000:.3f} s")
    return "\n".join(lines)


# ---- playing --------------------------------------------------------------------------


@dataclass(frozen=True)
class PlayProgress:
    elapsed_ms: int
    fault_phase_ms: int
    phase: str  # faults | recover-all | done
    last: str  # the last action, e.g. "kill lock-holder -> consumer-1"
    active: list[str]


@dataclass
class PlayResult:
    outcomes: list[Outcome] = field(default_factory=list)
    recovered: list[Outcome] = field(default_factory=list)  # what the final recover_all did
    stopped_early: bool = False


def play(schedule: Schedule, runner: Nemesis, clock: Clock, stop_event: threading.Event,
         on_progress: Callable[[PlayProgress], object] | None = None, *, tick_ms: int = PROGRESS_TICK_MS,
         ) -> PlayResult:
    """Fire every entry at its time and undo it at its own recovery time (monotonic deadlines
    from the call), until the fault phase ends or `stop_event` is set; then always `recover_all`.

    Returns at the end of the fault phase: waiting out `recovery_phase_ms` (drain, converge) is the
    caller's. `clock` must run in real time: waits are `stop_event.wait` slices of `tick_ms`.
    """
    t0 = clock.monotonic_ms()
    result = PlayResult()
    fault_ids: dict[int, str | None] = {}
    started_ms: dict[int, int] = {}  # entry -> when its fault actually started (from t0)
    last = ""

    def report(phase: str) -> None:
        if on_progress is not None:
            on_progress(PlayProgress(clock.monotonic_ms() - t0, schedule.fault_phase_ms, phase, last,
                                     runner.active_faults()))

    def wait_until(at_ms: int) -> bool:
        while (left := t0 + at_ms - clock.monotonic_ms()) > 0:
            if stop_event.wait(min(left, tick_ms) / 1000):
                return False
            report("faults")
        return not stop_event.is_set()

    try:
        for at_ms, _, i, kind in _timeline(schedule):
            entry = schedule.entries[i]
            if kind == "recover" and i in started_ms and entry.duration_ms is not None:
                # a fault that started late (resolving its target takes RPCs) still lasts its duration
                at_ms = max(at_ms, started_ms[i] + entry.duration_ms)
            if not wait_until(at_ms):
                result.stopped_early = True
                break
            if kind == "fault":
                outcome = runner.start(entry.op)
                started_ms[i] = clock.monotonic_ms() - t0
                fault_ids[i] = outcome.fault_id
            else:
                fid = fault_ids.get(i)
                recovered = runner.recover(fid) if fid is not None else None
                if recovered is None:
                    continue
                outcome = recovered
            result.outcomes.append(outcome)
            last = f"{outcome.op} {','.join(outcome.targets) or describe_op(entry.op)}" + (
                f" (error: {outcome.error})" if outcome.error else "")
            report("faults")
        else:
            result.stopped_early = not wait_until(schedule.fault_phase_ms)
    finally:
        report("recover-all")
        result.recovered = runner.recover_all()
        last = f"recovered {len(result.recovered)}"
        report("done")
    return result


def _timeline(schedule: Schedule) -> Iterable[tuple[int, int, int, str]]:
    """(at_ms, order, entry index, fault|recover), a recovery before a fault at the same instant
    (the node is back before the next fault may pick it); recoveries after the phase are left to
    recover_all."""
    events = []
    for i, e in enumerate(schedule.entries):
        if e.at_ms < schedule.fault_phase_ms:
            events.append((e.at_ms, 1, i, "fault"))
            if e.recover_at_ms is not None and e.recover_at_ms <= schedule.fault_phase_ms:
                events.append((e.recover_at_ms, 0, i, "recover"))
    return sorted(events)
