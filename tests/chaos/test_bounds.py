"""The derived bounds table: values follow the formulas at every time scale, and broken ratios are named."""

from __future__ import annotations

import dataclasses
import json

import pytest

from chaos.bounds import Bounds, check_ratios, derive_bounds
from nodes.common.config import Timing

# RocketMQ's defaults (ms) as the bounds table reads them at time scale 1
DEFAULTS = {"L_b": 60_000, "L_c": 30_000, "R_l": 20_000, "R_b": 20_000, "P_c": 5_000, "F_b": 5_000,
            "S_s": 10_000, "H": 30_000, "X_c": 120_000, "K_c": 10_000, "N_r": 30_000, "X_b": 120_000,
            "K_b": 10_000, "G_r": 30_000, "W_p": 1_000, "U_d": 20_000, "A_h": 5_000, "T_s": 3_000, "I_p": 600_000,
            "D_c": 10_000}
UNSCALED = ("T_s",)  # an RPC budget, not a timer


def expected_derived(t: dict[str, int]) -> dict[str, int]:
    takeover_kill = t["L_b"] + max(t["R_b"], t["R_l"]) + t["W_p"]
    switch_back = t["G_r"] + t["N_r"] + t["W_p"]
    drain = max(takeover_kill, switch_back, t["H"] + t["R_b"] + t["W_p"], t["A_h"]) + t["P_c"]
    return {
        "takeover_after_kill_ms": takeover_kill,
        "takeover_after_stop_ms": t["R_b"] + t["W_p"],
        "takeover_after_rebalance_ms": t["U_d"] + t["R_b"] + t["W_p"],
        "takeover_after_lost_lock_ms": t["R_b"] + t["R_l"] + t["W_p"],
        "takeover_after_master_return_ms": t["N_r"] + t["H"] + t["R_b"] + t["R_l"] + t["W_p"],
        "first_consume_ms": t["R_l"] + t["W_p"],
        "expected_overlap_pause_ms": t["L_b"] - t["L_c"],
        "takeover_after_partition_ms": max(t["L_b"], t["X_c"] + t["K_c"]) + t["R_b"] + t["W_p"],
        "failover_read_kill_ms": t["N_r"] + t["W_p"],
        "failover_read_silent_ms": t["X_b"] + t["K_b"] + t["N_r"] + t["W_p"],
        "switch_back_ms": switch_back,
        "group_loss_ms": t["X_b"] + t["K_b"] + t["N_r"],
        "send_stall_ms": t["T_s"],
        "rebalance_after_route_ms": t["N_r"] + t["H"] + t["R_b"],
        "rebalance_after_join_ms": t["H"] + t["R_b"],
        "rebalance_after_silent_ms": t["X_c"] + t["K_c"] + t["R_b"],
        "rebalance_orderly_extra_ms": max(t["U_d"], t["L_b"]) + t["R_b"],
        "dup_window_consumer_kill_ms": t["P_c"],
        "dup_window_master_restart_ms": t["P_c"] + t["F_b"],
        "dup_window_failover_ms": t["P_c"] + t["S_s"],
        "dup_window_broker_fault_ms": t["P_c"] + max(t["F_b"], t["S_s"]),
        "warmup_ms": t["N_r"] + t["R_b"] + t["R_l"] + t["W_p"],
        "converge_ms": t["S_s"] + t["P_c"],
        "drain_ms": drain,
        "recovery_phase_ms": drain + t["S_s"],
    }


def test_timers_at_scale_1_are_rocketmqs_defaults_and_the_derived_values_the_anchor_numbers():
    b = derive_bounds(Timing().scaled(1.0))
    assert b.timers() == DEFAULTS
    assert b.derived() == expected_derived(DEFAULTS)
    # docs/chaos.md in seconds: kill takeover 60+20+1 from the holder's last lock, SIGTERM 21,
    # silent holder 120+10+20+1, failover 31 / 161
    assert (b.takeover_after_kill_ms, b.takeover_after_stop_ms, b.takeover_after_partition_ms) == (81_000, 21_000, 151_000)
    assert (b.failover_read_kill_ms, b.failover_read_silent_ms) == (31_000, 161_000)


def test_at_scale_0_05_every_timer_is_scaled_and_the_formulas_hold():
    b = derive_bounds(Timing().scaled(0.05))
    assert b.timers() == {k: v if k in UNSCALED else round(v * 0.05) for k, v in DEFAULTS.items()}
    assert b.derived() == expected_derived(b.timers())
    assert (b.L_b, b.L_c, b.W_p, b.takeover_after_kill_ms, b.drain_ms) == (3_000, 1_500, 50, 4_050, 4_300)


def test_bounds_follow_the_timing_not_the_defaults():
    t = dataclasses.replace(Timing().scaled(0.1), broker_lock_lease_ms=9_000, consumer_channel_expiry_ms=2_000)
    b = derive_bounds(t)
    assert b.L_b == 9_000 and b.X_c == 2_000
    assert b.takeover_after_partition_ms == 9_000 + b.R_b + b.W_p  # the lease outlasts the channel expiry


def test_rows_and_json_carry_every_timer_and_bound_with_its_formula():
    b = derive_bounds(Timing().scaled(0.05))
    rows = b.as_rows()
    names = [r[0] for r in rows]
    assert names[:len(DEFAULTS)] == list(DEFAULTS) and set(names[len(DEFAULTS):]) == set(b.derived())
    assert dict((r[0], r[1]) for r in rows) == {**b.timers(), **b.derived()}
    assert ("L_b", 3_000, "timing.broker_lock_lease_ms") in rows
    assert all(r[2] for r in rows)
    data = json.loads(b.to_json_text())
    assert data["timers"] == b.timers()
    assert data["derived"]["failover_read_kill_ms"] == {"ms": b.failover_read_kill_ms, "formula": "N_r + W_p  (master's sockets close)"}
    assert Bounds(**data["timers"]) == b


def test_dup_windows_by_fault_kind():
    b = derive_bounds(Timing())
    assert [b.dup_window_ms(k) for k in ("consumer-kill", "master-restart", "failover")] == [5_000, 10_000, 15_000]
    with pytest.raises(ValueError, match="unknown fault kind"):
        b.dup_window_ms("meteor")


@pytest.mark.parametrize("scale", [1.0, 0.1, 0.05])
def test_the_default_profiles_keep_every_safety_ratio(scale):
    assert check_ratios(Timing().scaled(scale)) == []


@pytest.mark.parametrize(("changes", "needle"), [
    ({"client_lock_lease_ms": 3_000}, "L_c=3000 ms must be below the broker lease L_b=3000"),
    ({"lock_renew_interval_ms": 1_500}, "R_l=1500 ms must be below the client lease"),
    ({"client_heartbeat_ms": 2_000}, "heartbeat H=2000 ms must be below X_c/3"),
    ({"consumer_offset_persist_ms": 500}, "offset persist P_c=500 ms must be at most R_b/4"),
    ({"pull_delay_when_exception_ms": 5}, "floor"),
])
def test_each_broken_ratio_is_reported(changes, needle):
    timing = dataclasses.replace(Timing().scaled(0.05), **changes)
    warnings = check_ratios(timing)
    assert len(warnings) == 1 and needle in warnings[0], warnings
