"""Seeded schedules: same seed same schedule, JSON round trip, staggering, the final recovery phase, and
`play` driving a recording nemesis on monotonic deadlines."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field

import pytest

from chaos.bounds import derive_bounds
from chaos.nemesis_ops import Kill, Op, Outcome, Partition, Pause, Stop
from chaos.schedule import (
    Entry,
    FaultChoice,
    Schedule,
    default_spacing_ms,
    format_schedule,
    generate_schedule,
    overlaps,
    play,
)
from nodes.common.clock import SYSTEM_CLOCK
from nodes.common.config import Timing

BOUNDS = derive_bounds(Timing().scaled(0.05))
MIX = (
    FaultChoice("kill", "lock-holder", 2.0, "L_b", 0.5),
    FaultChoice("pause", "random-consumer", 1.0, "L_c", 1.5),
    FaultChoice("partition", "master", 1.0, "N_r", 2.0, partition="master-slave", mode="REJECT"),
    FaultChoice("stop", "master", 0.5, "takeover_after_stop_ms", 1.0),
)


@dataclass(frozen=True)
class Suite:
    faults: tuple[FaultChoice, ...]


def test_same_seed_and_arguments_give_the_same_schedule():
    a = generate_schedule(MIX, BOUNDS, seed=42, duration_ms=60_000)
    assert a == generate_schedule(MIX, BOUNDS, seed=42, duration_ms=60_000)
    assert a == generate_schedule(Suite(MIX), BOUNDS, seed=42, duration_ms=60_000)  # a suite with .faults
    assert a.entries != generate_schedule(MIX, BOUNDS, seed=43, duration_ms=60_000).entries
    assert len(a.entries) >= 10
    assert {type(e.op) for e in a.entries} == {Kill, Pause, Partition, Stop}


def test_ops_carry_their_targets_and_durations_derived_from_the_bounds():
    s = generate_schedule(MIX, BOUNDS, seed=1, duration_ms=60_000)
    expected = {Kill: ("lock-holder", 1_500), Pause: ("random-consumer", 2_250), Partition: ("master", 3_000),
                Stop: ("master", BOUNDS.takeover_after_stop_ms)}
    for e in s.entries:
        assert (e.op.target, e.duration_ms) == expected[type(e.op)]
        assert e.recover_at_ms == e.at_ms + e.duration_ms
    part = next(e.op for e in s.entries if isinstance(e.op, Partition))
    assert (part.kind, part.mode) == ("master-slave", "REJECT")


def test_json_round_trip_replays_the_same_schedule():
    s = generate_schedule(MIX, BOUNDS, seed=7, duration_ms=30_000)
    text = json.dumps(s.to_json())
    back = Schedule.from_json(json.loads(text))
    assert back == s
    first = json.loads(text)["entries"][0]
    assert set(first) == {"at_ms", "op", "target", "params", "recover_at_ms", "note"}
    with pytest.raises(ValueError, match="version"):
        Schedule.from_json({**s.to_json(), "version": 99})
    with pytest.raises(ValueError, match="time order"):
        Schedule.from_json({**s.to_json(), "entries": list(reversed(s.to_json()["entries"]))})


def test_faults_are_staggered_and_never_overlap_unless_asked():
    spacing = default_spacing_ms(BOUNDS)
    for seed in range(20):
        s = generate_schedule(MIX, BOUNDS, seed=seed, duration_ms=40_000)
        assert overlaps(s) == []
        assert all(e.recover_at_ms <= s.fault_phase_ms for e in s.entries)
        assert spacing // 2 <= s.entries[0].at_ms <= spacing
        for prev, nxt in zip(s.entries, s.entries[1:], strict=False):
            assert spacing // 2 <= nxt.at_ms - prev.recover_at_ms <= spacing * 3 // 2
    crowded = generate_schedule((FaultChoice("pause", "random-consumer", 1.0, "X_c", 1.0),), BOUNDS, seed=3,
                                duration_ms=40_000, overlap=True)
    assert overlaps(crowded)
    for prev, nxt in zip(crowded.entries, crowded.entries[1:], strict=False):
        assert spacing // 2 <= nxt.at_ms - prev.at_ms <= spacing * 3 // 2


@pytest.mark.parametrize("suite_name", ["lock-takeover", "offset-resync", "read-routing", "failover", "mixed"])
def test_a_seed_draws_the_same_faults_at_every_time_scale(suite_name):
    """Same seed, same faults in the same order, each the same multiple of its bound: only the ms scale."""
    from chaos.runner import RunOptions, plan
    from chaos.suites import SUITES

    suite = SUITES[suite_name]
    for seed in range(1, 11):
        fast, fast_bounds = plan(RunOptions(suite, seed=seed, time_scale=0.05))
        slow, slow_bounds = plan(RunOptions(suite, seed=seed, time_scale=0.1))
        assert fast.entries, (suite_name, seed)
        assert [(e.op.op, getattr(e.op, "target", None), e.note) for e in fast.entries] == \
            [(e.op.op, getattr(e.op, "target", None), e.note) for e in slow.entries], (suite_name, seed)
        assert slow.fault_phase_ms == 2 * fast.fault_phase_ms
        assert slow.recovery_phase_ms == slow_bounds.recovery_phase_ms
        for a, b in zip(fast.entries, slow.entries, strict=True):
            assert b.duration_ms == 2 * a.duration_ms, (suite_name, seed, a, b)
            assert abs(b.at_ms - 2 * a.at_ms) <= len(fast.entries), (suite_name, seed, a, b)  # ms rounding only
        assert overlaps(fast) == [] and overlaps(slow) == []
        assert fast_bounds.N_r * 2 == slow_bounds.N_r


def test_timer_units_keep_faults_apart_when_a_floor_stretches_a_timer():
    """Scaled far enough, timers sit at the floor and lose their ratios: the draw stays the unscaled one,
    the faults still never overlap and all fit in the (possibly longer) phase."""
    unit = derive_bounds(Timing())
    tiny = derive_bounds(Timing().scaled(0.0005))
    for seed in range(10):
        base = generate_schedule(MIX, unit, seed=seed, duration_ms=800_000)
        s = generate_schedule(MIX, tiny, seed=seed, duration_ms=400, unit_bounds=unit, unit_duration_ms=800_000)
        assert [e.op.op for e in s.entries] == [e.op.op for e in base.entries]
        assert overlaps(s) == []
        assert all(e.recover_at_ms <= s.fault_phase_ms for e in s.entries)


def test_every_schedule_ends_with_a_recovery_phase_from_the_bounds():
    s = generate_schedule(MIX, BOUNDS, seed=5, duration_ms=20_000)
    assert s.recovery_phase_ms == BOUNDS.recovery_phase_ms and s.total_ms == 20_000 + BOUNDS.recovery_phase_ms
    text = format_schedule(s).splitlines()
    assert len(text) == len(s.entries) + 2
    assert "kill lock-holder" in "\n".join(text) and "for   1.500 s" in "\n".join(text)
    assert text[-1].strip().startswith("+  20.000 s  recover all") and f"settle {BOUNDS.recovery_phase_ms / 1000:.3f} s" in text[-1]
    assert "[" not in "\n".join(text)  # printed through rich: no markup brackets


def test_a_phase_too_short_for_any_fault_is_empty_and_bad_mixes_are_refused():
    assert generate_schedule(MIX, BOUNDS, seed=1, duration_ms=1_000).entries == ()
    with pytest.raises(ValueError, match="fault op"):
        generate_schedule((FaultChoice("explode", "master"),), BOUNDS, seed=1, duration_ms=1_000)
    with pytest.raises(ValueError, match="no bound"):
        generate_schedule((FaultChoice("kill", "master", duration_of="nope"),), BOUNDS, seed=1, duration_ms=1_000)
    with pytest.raises(ValueError, match="weights"):
        generate_schedule((FaultChoice("kill", "master", weight=0),), BOUNDS, seed=1, duration_ms=1_000)


# ---- play -------------------------------------------------------------------------------------


@dataclass
class RecordingNemesis:
    """Stands in for NemesisRunner: notes when each call came, in monotonic ms."""

    fail_on: str | None = None
    calls: list[tuple[str, str, int]] = field(default_factory=list)
    active: dict[str, str] = field(default_factory=dict)
    seq: int = 0

    def start(self, op: Op) -> Outcome:
        self.seq += 1
        fid = f"f{self.seq}"
        self.calls.append(("start", op.op, SYSTEM_CLOCK.monotonic_ms()))
        if op.op == self.fail_on:
            raise RuntimeError("boom")
        self.active[fid] = op.op
        return Outcome(op.op, fid, (op.target,), "")

    def recover(self, fault_id: str) -> Outcome | None:
        op = self.active.pop(fault_id, None)
        if op is None:
            return None
        self.calls.append(("recover", op, SYSTEM_CLOCK.monotonic_ms()))
        return Outcome("restart" if op == "kill" else "resume", fault_id, (), "")

    def recover_all(self) -> list[Outcome]:
        self.calls.append(("recover_all", ",".join(sorted(self.active.values())), SYSTEM_CLOCK.monotonic_ms()))
        out = [Outcome("x", fid, (), "") for fid in self.active]
        self.active.clear()
        return out

    def active_faults(self) -> list[str]:
        return sorted(self.active.values())


def small_schedule() -> Schedule:
    return Schedule(entries=(Entry(0, Kill("a", restart_after_ms=120)), Entry(60, Pause("b", duration_ms=100)),
                             Entry(200, Pause("c", duration_ms=10_000))), fault_phase_ms=300, recovery_phase_ms=0)


def test_play_fires_faults_and_recoveries_at_their_own_times_then_recovers_all():
    nemesis, progress = RecordingNemesis(), []
    t0 = SYSTEM_CLOCK.monotonic_ms()
    result = play(small_schedule(), nemesis, SYSTEM_CLOCK, threading.Event(), progress.append, tick_ms=20)
    took = SYSTEM_CLOCK.monotonic_ms() - t0
    assert [(kind, op) for kind, op, _ in nemesis.calls] == [
        ("start", "kill"), ("start", "pause"), ("recover", "kill"), ("recover", "pause"), ("start", "pause"),
        ("recover_all", "pause")]
    at = [t - t0 for _, _, t in nemesis.calls]
    for got, want in zip(at, [0, 60, 120, 160, 200, 300], strict=True):
        assert want <= got <= want + 150, at
    assert 300 <= took < 1_000 and not result.stopped_early
    assert [o.op for o in result.outcomes] == ["kill", "pause", "restart", "resume", "pause"]
    assert len(result.recovered) == 1
    assert [p.phase for p in progress[-2:]] == ["recover-all", "done"] and progress[-1].active == []
    assert any(p.phase == "faults" and p.active == ["pause"] for p in progress)


def test_play_stops_early_on_the_event_and_still_recovers_everything():
    stop = threading.Event()
    stopped_at: list[float] = []

    class StoppedAfterTwoStarts(RecordingNemesis):
        # the event comes while both faults are on (after the pause at 60 ms, before the kill's
        # recovery at 120 ms) however late a loaded machine runs the schedule's ticks
        def start(self, op: Op) -> Outcome:
            outcome = super().start(op)
            if self.seq == 2:
                stopped_at.append(time.monotonic())
                stop.set()
            return outcome

    nemesis = StoppedAfterTwoStarts()
    result = play(small_schedule(), nemesis, SYSTEM_CLOCK, stop)
    assert time.monotonic() - stopped_at[0] < 0.25 and result.stopped_early
    assert [kind for kind, _, _ in nemesis.calls] == ["start", "start", "recover_all"]
    assert nemesis.calls[-1][1] == "kill,pause"


def test_play_recovers_everything_when_an_op_raises():
    nemesis = RecordingNemesis(fail_on="pause")
    with pytest.raises(RuntimeError, match="boom"):
        play(small_schedule(), nemesis, SYSTEM_CLOCK, threading.Event())
    assert nemesis.calls[-1][:2] == ("recover_all", "kill")
