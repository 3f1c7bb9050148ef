"""`mqlab chaos selftest`: each case's run is caught only when its named check fails; the table and
exit codes; the seed drawn for a case carries the fault its bug needs (fake runs, no cluster)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from chaos import cli
from chaos import selftest as chaos_selftest
from chaos.cli import app
from chaos.nemesis_ops import describe_op
from chaos.runner import RunOptions, plan
from chaos.selftest import SELFTEST_JSON, case_phase_s, run_selftest, seed_for, selftest_exit_code
from chaos.selftest_cases import (
    NEEDED_FAULT,
    NEEDED_LAST,
    NEEDED_SWITCH_FAULT,
    SELFTEST_CASES,
    SELFTEST_FAULT_PHASE_S,
    SelftestCase,
)
from chaos.suites import SUITES

CASE_A = SelftestCase("failover", "consumer", "redeliver-consumed-batch", "duplicates")
CASE_B = SelftestCase("lock-takeover", "broker", "lock-slow-takeover", "takeover", masters_only=True)


def _fake(failing: dict[str, tuple[str, ...] | None]):
    """A run that writes a verdict failing `failing[case.switch]` (None: the run could not run)."""
    calls: list[tuple[str, int]] = []

    def run_case(case: SelftestCase, seed: int, run_dir: Path) -> int:
        calls.append((case.switch, seed))
        checks = failing.get(case.switch, ())
        run_dir.mkdir(parents=True)
        (run_dir / "run.json").write_text(json.dumps({"counts": {"acked": 10}}))
        if checks is None:
            return 2
        verdict = {"valid": not checks, "checks": {case.check: {"valid": case.check not in checks},
                                                   **{n: {"valid": False} for n in checks}}}
        (run_dir / "verdict.json").write_text(json.dumps(verdict))
        return 1 if checks else 0

    return run_case, calls


def test_a_case_is_caught_only_when_its_own_check_fails(tmp_path):
    run_case, calls = _fake({"redeliver-consumed-batch": ("duplicates",), "lock-slow-takeover": ("order",)})
    results = run_selftest([CASE_A, CASE_B], tmp_path, run_case, seed_of=lambda case: 7)
    assert calls == [("redeliver-consumed-batch", 7), ("lock-slow-takeover", 7)]
    assert [(r.case, r.verdict, r.caught) for r in results] == [
        ("failover/redeliver-consumed-batch", "INVALID", True), ("lock-takeover/lock-slow-takeover", "INVALID", False)]
    assert selftest_exit_code(results) == 1  # a different check failing does not prove this switch
    saved = json.loads((tmp_path / SELFTEST_JSON).read_text())
    assert saved["exit_code"] == 1 and saved["cases"][0]["run_dir"] == "failover-redeliver-consumed-batch"


def test_every_switch_caught_exits_0_and_a_case_that_could_not_run_exits_2(tmp_path):
    caught, _ = _fake({"redeliver-consumed-batch": ("duplicates",), "lock-slow-takeover": ("takeover",)})
    assert selftest_exit_code(run_selftest([CASE_A, CASE_B], tmp_path / "a", caught, seed_of=lambda _: 1)) == 0
    not_run, _ = _fake({"redeliver-consumed-batch": ("duplicates",), "lock-slow-takeover": None})
    results = run_selftest([CASE_A, CASE_B], tmp_path / "b", not_run, seed_of=lambda _: 1)
    assert [r.verdict for r in results] == ["INVALID", "not run"]
    assert selftest_exit_code(results) == 2
    valid, _ = _fake({"redeliver-consumed-batch": ("duplicates",)})  # the slow takeover run came out valid
    assert selftest_exit_code(run_selftest([CASE_A, CASE_B], tmp_path / "c", valid, seed_of=lambda _: 1)) == 1


@pytest.mark.slow
def test_the_seed_of_a_case_draws_the_fault_its_bug_needs():
    for case in SELFTEST_CASES:
        seed = seed_for(case, 0.05, SELFTEST_FAULT_PHASE_S)
        s = SUITES[case.suite]
        schedule, _ = plan(RunOptions(s, seed=seed, duration_s=case_phase_s(case, SELFTEST_FAULT_PHASE_S),
                                      topology=s.topologies[0], time_scale=case.time_scale(0.05),
                                      client=case.client))
        # a symbolic target is drawn pinned to a broker group on 2x2 (`group` -> `group:broker-b`)
        drawn = [(e.op.op, (getattr(e.op, "target", None) or "").split(":")[0], describe_op(e.op))
                 for e in schedule.entries]
        if case.switch in NEEDED_LAST:
            assert drawn[-1][:2] == NEEDED_LAST[case.switch], case  # nothing after it pushes the bound out
        else:
            needed = NEEDED_SWITCH_FAULT.get(case.switch, NEEDED_FAULT[case.suite])
            # a gray fault names its kind or size too (`stall`, `wall`, `to 100%`)
            assert any(d[:2] == needed[:2] and (len(needed) < 3 or needed[2] in d[2]) for d in drawn), case


def test_the_selftest_command_prints_the_table_and_fails_on_a_switch_not_caught(tmp_path, monkeypatch):
    run_case, calls = _fake({"lock-no-exclusion": ("lock-exclusivity",), "lock-slow-takeover": ("takeover",)})
    monkeypatch.setattr(chaos_selftest, "chaos_run_case", lambda **_: run_case)
    monkeypatch.setattr(cli, "console", Console(width=250, highlight=False))
    result = CliRunner().invoke(app, ["selftest", "--suites", "lock-takeover", "--out", str(tmp_path)])
    lock_cases = [case for case in SELFTEST_CASES if case.suite == "lock-takeover"]
    assert len(calls) == len(lock_cases)
    assert result.exit_code == 1, result.output  # orderly-take-newest came out valid here
    for header in ("case", "expected check", "verdict", "caught", "run dir"):
        assert header in result.output
    assert "lock-takeover/orderly-take-newest" in result.output and "NO" in result.output
    bad = CliRunner().invoke(app, ["selftest", "--suites", "no-such", "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "no selftest case" in bad.output
    calls.clear()
    one = CliRunner().invoke(app, ["selftest", "--switches", "lock-slow-takeover", "--out", str(tmp_path / "y")])
    assert one.exit_code == 0 and [switch for switch, _ in calls] == ["lock-slow-takeover"], one.output
