"""Gray nemesis ops as schedule data: parameters resolved against the run's bounds, round trips, and
what the checker takes their windows for."""

import pytest

from chaos.bounds import Bounds, derive_bounds
from chaos.checker.faults import fault_windows
from chaos.nemesis_ops import ClockFault, DiskFill, LinkToxic, Starve, describe_op, op_from_dict, op_to_dict
from chaos.schedule import FaultChoice, generate_schedule, op_for
from nodes.common.config import Timing


def _bounds(scale: float) -> Bounds:
    return derive_bounds(Timing().scaled(scale))


def test_gray_params_given_in_bounds_scale_with_the_run():
    choice = FaultChoice("link-toxic", "lock-holder", 1.0, "X_c", 1.5, partition="consumer-master",
                         params={"toxic": {"kind": "latency", "latency_ms": ("L_c", 0.1), "jitter_ms": 7}})
    slow = op_for(choice, 9_000, _bounds(0.05))
    fast = op_for(choice, 9_000, _bounds(1.0))
    assert isinstance(slow, LinkToxic) and slow.kind == "consumer-master" and slow.target == "lock-holder"
    assert slow.toxic == {"kind": "latency", "latency_ms": 150, "jitter_ms": 7}  # 0.1 x L_c at 0.05; literals kept
    assert fast.toxic["latency_ms"] == 3_000
    clock = op_for(FaultChoice("clock", "master", params={"jump_ms": ("L_b", -1.0), "rate": 0.5}), 100, _bounds(0.05))
    assert clock == ClockFault("master", jump_ms=-3_000, rate=0.5, duration_ms=100)


@pytest.mark.parametrize("op", [
    LinkToxic("master-slave", "master", toxic={"kind": "stall"}, direction="forward", duration_ms=500),
    ClockFault("consumer-1", jump_ms=30_000, duration_ms=200),
    Starve("master", share=0.2, period_ms=50, duration_ms=700),
    DiskFill("slave", ratio=1.0, duration_ms=900),
])
def test_gray_ops_round_trip_as_schedule_data(op):
    assert op_from_dict(op_to_dict(op)) == op
    assert describe_op(op).startswith((op.op, "stall"))


@pytest.mark.parametrize("bad", [
    lambda: LinkToxic(toxic={}), lambda: LinkToxic(toxic={"kind": "latency"}, direction="sideways"),
    lambda: ClockFault(rate=0), lambda: ClockFault(), lambda: Starve(share=1.5), lambda: DiskFill(ratio=0),
])
def test_gray_ops_refuse_nonsense(bad):
    with pytest.raises(ValueError):
        bad()


def test_a_schedule_of_gray_choices_is_the_same_story_at_every_time_scale():
    choices = (FaultChoice("starve", "master", 1.0, "N_r", 2.0, params={"share": 0.1}),
               FaultChoice("disk-fill", "slave", 1.0, "N_r", 2.0, params={"ratio": 0.95}))
    a = generate_schedule(choices, _bounds(0.05), seed=3, duration_ms=40_500, unit_bounds=_bounds(1.0))
    b = generate_schedule(choices, _bounds(0.1), seed=3, duration_ms=81_000, unit_bounds=_bounds(1.0))
    assert [type(e.op) for e in a.entries] == [type(e.op) for e in b.entries] and a.entries


def _line(op, phase, t, targets, fault_id="f1"):
    return {"op": op, "phase": phase, "mono_ms": t, "targets": targets, "fault_id": fault_id, "event": "nemesis"}


def test_the_checker_takes_a_toxic_link_for_a_partition_and_a_starved_node_for_a_pause():
    rows = [_line("link-toxic", "start", 100, ["consumer-1", "broker-a-0"]),
            _line("link-toxic", "end", 101, ["consumer-1", "broker-a-0"]),
            _line("remove-toxic", "start", 900, ["consumer-1", "broker-a-0"]),
            _line("remove-toxic", "end", 901, ["consumer-1", "broker-a-0"]),
            _line("starve", "start", 1000, ["broker-a-0"], "f2"), _line("starve", "end", 1001, ["broker-a-0"], "f2"),
            _line("unstarve", "start", 1500, ["broker-a-0"], "f2"),
            _line("unstarve", "end", 1502, ["broker-a-0"], "f2"),
            _line("disk-fill", "start", 2000, ["broker-a-1"], "f3"),
            _line("disk-fill", "end", 2005, ["broker-a-1"], "f3")]
    toxic, starve, disk = fault_windows(rows, 5_000)
    assert (toxic.op, toxic.gray, toxic.end_ms, toxic.label) == ("partition", "link-toxic", 901,
                                                                 "link-toxic consumer-1,broker-a-0")
    assert (starve.op, starve.gray, starve.end_ms) == ("pause", "starve", 1502)
    assert (disk.op, disk.gray, disk.recovered, disk.end_ms) == ("disk-fill", None, False, 5_000)


def test_a_skew_past_rocketmqs_lock_margin_is_named_before_the_run():
    from chaos.skew import safe_ratio, unsafe_skews, window_ratio

    b = _bounds(0.05)
    assert safe_ratio(b.L_c, b.L_b) == pytest.approx(0.6)  # (1500 + 150 + 150) / 3000
    safe = [ClockFault("master", rate=0.75), ClockFault("lock-holder", rate=1.5), ClockFault("master", rate=1.5)]
    assert unsafe_skews(safe, b) == []  # 1.33, 1.5, 0.67: all above 0.6
    fast_master, slow_holder = ClockFault("master", rate=2.5), ClockFault("consumer-1", rate=0.5)
    lines = unsafe_skews([fast_master, slow_holder, Starve()], b)
    assert len(lines) == 2 and "r_c / r_b = 0.40" in lines[0] and "r_c / r_b = 0.50" in lines[1]
    assert window_ratio("clock broker-a-0 rate x2.5", ["broker-a-0"]) == pytest.approx(0.4)
    assert window_ratio("clock consumer-1 rate x0.5", ["consumer-1"]) == 0.5
    assert window_ratio("clock broker-a-0 wall -3000 ms", ["broker-a-0"]) is None
