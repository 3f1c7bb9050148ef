"""Pure parts of the checker: three-valued verdicts, fault windows, bounds from timing."""

import dataclasses
import json

from chaos.checker.config import CheckerConfig, bounds_from_timing
from chaos.checker.faults import fault_windows
from chaos.checker.verdict import UNKNOWN, CheckResult, Verdict, combine_parts, worst


def test_worst_orders_false_over_unknown_over_true():
    assert worst([True, True]) is True
    assert worst([True, UNKNOWN]) == UNKNOWN
    assert worst([UNKNOWN, False, True]) is False
    assert worst([]) == UNKNOWN


def test_a_check_with_parts_fails_on_any_failure_and_is_unknown_only_when_nothing_ran():
    assert combine_parts({"a": True, "b": None}) is True
    assert combine_parts({"a": True, "b": False}) is False
    assert combine_parts({"a": None, "b": None}) == UNKNOWN


def test_verdict_exit_codes_and_json_shape():
    ok = CheckResult("lost", True, "d")
    bad = CheckResult("order", False, "d", examples=[{"x": float("nan")}])
    unk = CheckResult("takeover", UNKNOWN, "d", reason="no orderly consumption")
    assert Verdict.of([ok]).exit_code == 0
    assert Verdict.of([ok, unk]).exit_code == 2
    v = Verdict.of([ok, unk, bad], suite="s", seed=3)
    assert v.exit_code == 1
    data = json.loads(json.dumps(v.to_json()))
    assert data["valid"] is False and data["suite"] == "s" and data["seed"] == 3
    assert set(data["checks"]) == {"lost", "order", "takeover"}
    assert data["checks"]["takeover"]["valid"] == "unknown"
    assert data["checks"]["order"]["examples"] == [{"x": None}]


def test_fault_windows_pair_faults_with_their_recoveries():
    rows = [
        {"op": "kill", "phase": "start", "targets": ["consumer-1"], "mono_ms": 100},
        {"op": "kill", "phase": "end", "targets": ["consumer-1"], "mono_ms": 101},
        {"op": "partition", "phase": "start", "targets": ["broker-a-0", "consumer-2"], "mono_ms": 150},
        {"op": "restart", "phase": "start", "targets": ["consumer-1"], "mono_ms": 300},
        {"op": "restart", "phase": "end", "targets": ["consumer-1"], "mono_ms": 320},
        {"op": "heal", "phase": "end", "targets": [], "mono_ms": 400},
        {"op": "pause", "phase": "start", "targets": ["consumer-3"], "mono_ms": 500},
    ]
    windows = fault_windows(rows, end_of_history_ms=900)
    assert [(w.op, w.targets, w.start_ms, w.end_ms, w.recovered) for w in windows] == [
        ("kill", ("consumer-1",), 100, 320, True),
        ("partition", ("broker-a-0", "consumer-2"), 150, 400, True),
        ("pause", ("consumer-3",), 500, 900, False),
    ]


def test_bounds_come_from_timing_and_missing_timers_scale_with_the_run():
    b = bounds_from_timing({"rebalance_interval_ms": 2_000, "route_poll_ms": 3_000, "client_heartbeat_ms": 3_000,
                            "pull_delay_when_exception_ms": 100}, slack_ms=0, slack_ratio=0)
    assert b.scale == 0.1
    assert b.R_b == 2_000 and b.sources["R_b"].endswith("rebalance_interval_ms")
    assert b.L_b == 6_000 and b.sources["L_b"] == "default x0.1"  # not in this run's Timing yet
    assert b.takeover_kill() == 6_000 + 2_000 + 100


def test_config_reads_timing_and_run_json(tmp_path):
    (tmp_path / "timing.json").write_text(json.dumps({"rebalance_interval_ms": 1_000}))
    (tmp_path / "run.json").write_text(json.dumps({"suite": "kill-owner", "seed": 42,
                                                   "checker": {"duplicate_budget": 5, "bogus": 1}}))
    cfg = CheckerConfig.from_run_dir(tmp_path)
    assert (cfg.suite, cfg.seed, cfg.duplicate_budget) == ("kill-owner", 42, 5)
    assert cfg.bounds.R_b == 1_000


def test_config_falls_back_to_a_node_config_timing(tmp_path):
    (tmp_path / "broker-a-0").mkdir()
    (tmp_path / "broker-a-0" / "config.json").write_text(json.dumps({"timing": {"route_poll_ms": 1_500}}))
    cfg = CheckerConfig.from_run_dir(tmp_path)
    assert cfg.bounds.N_r == 1_500 and cfg.timing_origin == "broker-a-0/config.json"


def test_the_run_bounds_json_wins_over_timing_and_its_recorded_values_are_used(tmp_path):
    from chaos.bounds import derive_bounds
    from nodes.common.config import Timing

    recorded = derive_bounds(Timing().scaled(0.05)).to_json()
    # an older formula recorded a looser kill takeover: re-checking must judge with what the run had
    recorded["derived"]["takeover_after_kill_ms"]["ms"] = 5_050
    (tmp_path / "bounds.json").write_text(json.dumps(recorded))
    (tmp_path / "timing.json").write_text(json.dumps({"rebalance_interval_ms": 9_999}))
    cfg = CheckerConfig.from_run_dir(tmp_path)
    b = cfg.bounds
    assert b.R_b == 1_000 and b.sources["R_b"] == "bounds.json:R_b"
    assert b.takeover_kill() == 5_050
    assert b.failover_kill() == b.N_r + b.W_p == 1_550  # not recorded differently: the formula's value
    assert b.derived()["takeover_after_kill_ms"][0] == 5_050


def test_checker_and_runner_read_one_bounds_source():
    from chaos.bounds import derive_bounds
    from nodes.common.config import Timing

    timing = Timing().scaled(0.05)
    runner = derive_bounds(timing)
    checker = bounds_from_timing(dataclasses.asdict(timing), slack_ms=0, slack_ratio=0)
    assert checker.timers == runner.timers()
    assert {k: v for k, (v, _) in checker.derived().items()} == runner.derived()
    assert checker.takeover_kill() == runner.takeover_after_kill_ms == 3_000 + 1_000 + 50


def test_a_measurement_shows_its_bound_and_slack_and_a_late_failover_is_slow():
    b = bounds_from_timing({"route_poll_ms": 1_500, "pull_delay_when_exception_ms": 50}, slack_ms=150, slack_ratio=0.1)
    ok = b.judge("failover", 1_327, b.failover_kill())
    assert (ok["verdict"], ok["bound_ms"], ok["slack_ms"], ok["limit_ms"]) == ("ok", 1_550, 305, 1_855)
    slow = b.judge("failover", 2_049, b.failover_kill())
    assert slow["verdict"] == "slow"
    assert slow["judged"] == "failover 2,049 ms > bound 1,550 ms + slack 305 ms"
    # the defaults: a fixed second of slack plus a quarter hid this one; they no longer do
    default = CheckerConfig(timing={"route_poll_ms": 1_500, "pull_delay_when_exception_ms": 50}).bounds
    assert default.judge("failover", 2_049, default.failover_kill())["verdict"] == "slow"


def test_a_power_loss_is_a_kill_window_and_a_storage_fault_with_its_cut():
    from chaos.checker.faults import storage_faults

    detail = json.dumps({"store": {"commitlog": {"flushed_phys_offset": 10, "written_phys_offset": 20,
                                                 "torn_bytes": 5}}, "flush_disk_type": "ASYNC_FLUSH"})
    rows = [{"op": "power-loss", "phase": "start", "targets": ["broker-a-0"], "mono_ms": 100, "detail": "SIGKILL"},
            {"op": "power-loss", "phase": "end", "targets": ["broker-a-0"], "mono_ms": 105, "detail": detail},
            {"op": "restart", "phase": "start", "targets": ["broker-a-0"], "mono_ms": 200},
            {"op": "restart", "phase": "end", "targets": ["broker-a-0"], "mono_ms": 210},
            {"op": "corrupt", "phase": "start", "targets": ["broker-a-1"], "mono_ms": 300},
            {"op": "corrupt", "phase": "end", "targets": ["broker-a-1"], "mono_ms": 301,
             "detail": json.dumps({"phys_offset": 7, "bytes": 3, "msg_ids": ["m"]})}]
    [w] = fault_windows(rows, 1_000)  # the corruption opens no window: nothing is down
    assert (w.op, w.storage, w.label, w.start_ms, w.end_ms) == ("kill", "power-loss", "power-loss broker-a-0", 100, 210)
    pl, co = storage_faults(rows)
    assert (pl.op, pl.node, pl.detail["store"]["commitlog"]["torn_bytes"]) == ("power-loss", "broker-a-0", 5)
    assert (co.op, co.node, co.detail["msg_ids"]) == ("corrupt", "broker-a-1", ["m"])


def test_config_reads_the_durability_mode_and_the_runs_checks(tmp_path):
    (tmp_path / "broker-a-0").mkdir()
    (tmp_path / "broker-a-0" / "config.json").write_text(json.dumps(
        {"role": "broker", "node_id": "broker-a-0", "broker_name": "broker-a", "broker_id": 0,
         "broker_role": "SYNC_MASTER", "store": {"flush_disk_type": "SYNC_FLUSH"}}))
    (tmp_path / "run.json").write_text(json.dumps({"suite": "failover", "checks": ["lost", "integrity"]}))
    cfg = CheckerConfig.from_run_dir(tmp_path)
    assert cfg.store_modes["broker-a-0"] == {"broker_name": "broker-a", "broker_id": 0, "broker_role": "SYNC_MASTER",
                                             "flush_disk_type": "SYNC_FLUSH"}
    assert cfg.checks == ("lost", "integrity")
