"""Suites' coverage claims and the schedules shaped to reach them; the matrix's listing of claimed
paths no run reached and `--require-coverage` (with a fake run function, no cluster)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from chaos import cli
from chaos import matrix as chaos_matrix
from chaos.bounds import derive_bounds
from chaos.checker.coverage_paths import PATH_NAMES, unknown_paths
from chaos.cli import app
from chaos.matrix import MATRIX_JSON, Cell, plan_cells, run_matrix, with_clients
from chaos.matrix_report import INDEX_HTML, write_index
from chaos.nemesis_ops import Partition, PowerLoss
from chaos.runner import UNIT_TIME_SCALE, RunOptions, plan
from chaos.schedule import generate_schedule
from chaos.suites import SUITES


def test_every_suite_claims_paths_of_the_table():
    for suite in SUITES.values():
        assert suite.claims or suite.name == "broker-loss", suite.name
        assert unknown_paths(list(suite.claims)) == [], suite.name
    assert len(set(PATH_NAMES)) == len(PATH_NAMES)


@pytest.mark.parametrize("seed", range(1, 11))
def test_every_async_durability_seed_first_cuts_the_masters_tail_with_its_slave_kept_away(seed):
    """The lead: the master loses power, its slave (holding the unsynced tail) is cut from it at the
    same instant and kept away until well after the master's restart; the seed's own draws follow,
    unchanged, shifted by the lead."""
    suite = SUITES["durability"]
    schedule, bounds = plan(RunOptions(suite, seed=seed, time_scale=0.05, mode="async"))
    first, second, *drawn = schedule.entries
    assert isinstance(first.op, PowerLoss) and first.op.target == "master"
    assert isinstance(second.op, Partition) and (second.op.kind, second.op.target) == ("master-slave", "master")
    assert first.at_ms == second.at_ms
    restart_ms = first.op.restart_after_ms
    # away past the restart, the master's bounded wait for a slave (register + reconnects) and a slow start
    assert second.op.duration_ms >= restart_ms + bounds.N_r * 10
    unit = derive_bounds(suite.spec(UNIT_TIME_SCALE).scaled_timing())
    unshaped = generate_schedule(suite, bounds, seed=seed, duration_ms=suite.fault_phase_ms(bounds), unit_bounds=unit,
                                 unit_duration_ms=suite.fault_phase_ms(unit), spacing_ms=suite.fault_spacing_ms(bounds))
    shift = drawn[0].at_ms - unshaped.entries[0].at_ms
    assert shift == second.at_ms + second.op.duration_ms
    assert [(e.op.op, e.op.target, e.note) for e in drawn] == [(e.op.op, e.op.target, e.note) for e in unshaped.entries]
    assert [e.at_ms - shift for e in drawn] == pytest.approx([e.at_ms for e in unshaped.entries], abs=len(drawn))
    assert drawn[0].at_ms - (second.at_ms + second.op.duration_ms) >= suite.fault_spacing_ms(bounds) // 2
    assert schedule.fault_phase_ms == unshaped.fault_phase_ms + shift


def test_the_lead_is_played_only_in_the_modes_that_can_show_it():
    suite = SUITES["durability"]
    for mode in ("sync-flush", "sync-master", "sync"):
        schedule, _ = plan(RunOptions(suite, seed=1, time_scale=0.05, mode=mode))
        assert not any(e.note.endswith("lead") for e in schedule.entries), mode
    assert plan(RunOptions(suite, seed=1, time_scale=0.05))[0].entries[0].note.endswith("lead")  # async by default
    assert SUITES["failover"].lead_for("async") == ()


# ---- the matrix ---------------------------------------------------------------------------------


def _write(run_dir: Path, coverage: dict[str, int] | None, claims: list[str], valid: object = True) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.json").write_text(json.dumps({"counts": {"acked": 10}}))
    verdict: dict[str, object] = {"valid": valid, "checks": {}, "coverage_claims": claims}
    if coverage is not None:
        verdict["coverage"] = coverage
    (run_dir / "verdict.json").write_text(json.dumps(verdict))


class CoverageRuns:
    """A run function whose verdict counts `reached[(suite, seed)]` (every claimed path 0 otherwise)."""

    def __init__(self, reached: dict[tuple[str, int], dict[str, int]], uncounted: tuple[tuple[str, int], ...] = ()):
        self.reached, self.uncounted = reached, uncounted

    def __call__(self, cell: Cell, run_dir: Path) -> int:
        claims = list(SUITES[cell.suite].claims)
        counts = {p: 0 for p in PATH_NAMES} | self.reached.get((cell.suite, cell.seed), {})
        _write(run_dir, None if (cell.suite, cell.seed) in self.uncounted else counts, claims)
        return 0


def test_a_claimed_path_no_run_reached_is_listed_per_suite(tmp_path):
    cells = plan_cells(["failover", "read-routing"], [1, 2], [0.05])
    runs = CoverageRuns({("failover", 2): {"slave-fallback": 3},
                         ("read-routing", 1): {"slave-suggested": 1}, ("read-routing", 2): {"rebalance-moved": 4}})
    result = run_matrix(cells, tmp_path, runs)
    assert result.unreached_claims == {"read-routing": ["slave-fallback"]}  # failover's seed 2 reached its claim
    assert result.exit_code == 0  # every run valid: coverage alone changes nothing unless required
    saved = json.loads((tmp_path / MATRIX_JSON).read_text())
    assert saved["unreached_claims"] == {"read-routing": ["slave-fallback"]} and saved["exit_code"] == 0
    assert saved["runs"][1]["coverage"]["slave-fallback"] == 3
    assert saved["runs"][0]["claims"] == ["slave-fallback"]
    assert "read-routing: claimed but reached by no run: slave-fallback" in write_index(result, tmp_path).read_text()
    required = run_matrix(cells, tmp_path / "req", runs, require_coverage=True)
    assert required.exit_code == 1
    reached = CoverageRuns({("failover", 1): {"slave-fallback": 1},
                            ("read-routing", 2): {"slave-fallback": 2, "slave-suggested": 5}})
    assert run_matrix(cells, tmp_path / "all", reached, require_coverage=True).exit_code == 0


def test_runs_whose_coverage_was_not_counted_claim_nothing(tmp_path):
    cells = plan_cells(["failover"], [1, 2], [0.05])
    runs = CoverageRuns({("failover", 2): {"slave-fallback": 1}}, uncounted=(("failover", 2),))
    assert run_matrix(cells, tmp_path, runs).unreached_claims == {"failover": ["slave-fallback"]}
    none = CoverageRuns({}, uncounted=(("failover", 1), ("failover", 2)))
    assert run_matrix(cells, tmp_path / "none", none, require_coverage=True).exit_code == 0


def test_the_matrix_command_prints_unreached_claims_and_fails_on_them_only_when_asked(tmp_path, monkeypatch):
    runs = CoverageRuns({("lock-takeover", 1): {"lock-taken-over": 2}})
    monkeypatch.setattr(chaos_matrix, "chaos_run_one", lambda **_: runs)
    monkeypatch.setattr(cli, "console", Console(width=250, highlight=False))
    args = ["matrix", "--suites", "lock-takeover", "--seeds", "1-2"]
    plain = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "a")])
    assert plain.exit_code == 0, plain.output
    assert "lock-takeover: claimed but reached by no run: lock-lease-expired, rebalance-moved" in plain.output
    assert (tmp_path / "a" / INDEX_HTML).is_file()
    strict = CliRunner().invoke(app, [*args, "--require-coverage", "--out", str(tmp_path / "b")])
    assert strict.exit_code == 1, strict.output
    assert json.loads((tmp_path / "b" / MATRIX_JSON).read_text())["require_coverage"] is True


def test_the_coverage_section_of_the_docs_lists_every_path_and_every_suites_claims():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "chaos.md").read_text()
    section = doc[doc.index("## Coverage"):]
    section = section[:section.index("\n## ")]
    for name in PATH_NAMES:
        assert f"| `{name}` |" in section, name
    for suite in SUITES.values():
        listed = ", ".join(f"`{c}`" for c in suite.claims) if suite.claims else "none: "
        assert f"| `{suite.name}` | {listed}" in section, suite.name


# the faults that open each claimed path: (op, partition kind or "", symbolic target)
_OPENS = {
    ("lock-takeover", "lock-lease-expired"): {("kill", "", "lock-holder")},  # a lease left to run out
    ("lock-takeover", "lock-taken-over"): {("kill", "", "lock-holder")},
    ("lock-takeover", "rebalance-moved"): {("kill", "", "lock-holder"), ("stop", "", "lock-holder")},
    ("offset-resync", "offset-resynced"): {("kill", "", "random-consumer"), ("stop", "", "random-consumer")},
    ("offset-resync", "rebalance-moved"): {("kill", "", "random-consumer"), ("stop", "", "random-consumer")},
    ("read-routing", "slave-suggested"): {("pause", "", "all-consumers")},  # a backlog past the memory budget
    ("read-routing", "slave-fallback"): {("kill", "", "master"), ("partition", "consumer-master", "random-consumer")},
    ("failover", "slave-fallback"): {("kill", "", "master"), ("partition", "isolate", "master")},
    ("mixed", "lock-taken-over"): {("kill", "", "lock-holder")},
    ("mixed", "rebalance-moved"): {("kill", "", "lock-holder"), ("kill", "", "random-consumer")},
    ("durability", "torn-tail-cut"): {("power-loss", "", "master")},
    ("durability", "cq-rebuilt"): {("power-loss", "", "master")},
    ("durability", "replica-refused"): {("partition", "master-slave", "master")},
    ("durability", "replica-cut-back"): {("partition", "master-slave", "master")},
    # gray: every seed draws a toxic; its lead skews the holder's clock and starves the master
    ("gray", "link-toxic"): {("link-toxic", "consumer-master", "lock-holder"),
                             ("link-toxic", "consumer-master", "random-consumer"),
                             ("link-toxic", "master-slave", "master")},
    ("gray", "clock-skewed"): {("clock", "", "lock-holder")},
    ("gray", "cpu-starved"): {("starve", "", "master")},
    # disk-full: a master filled past the guard refuses, is freed, and forced cleaning deletes
    ("disk-full", "disk-guard-on"): {("disk-fill", "", "master"), ("disk-fill", "", "group")},
    ("disk-full", "disk-guard-off"): {("disk-fill", "", "master"), ("disk-fill", "", "group")},
    ("disk-full", "send-refused-disk-full"): {("disk-fill", "", "master"), ("disk-fill", "", "group")},
    ("disk-full", "retention-delete"): {("disk-fill", "", "master"), ("disk-fill", "", "group"),
                                        ("disk-fill", "", "slave")},
}


@pytest.mark.parametrize("suite_name", list(SUITES))
def test_every_seed_draws_a_fault_that_opens_each_claimed_path(suite_name):
    suite = SUITES[suite_name]
    assert {c for s, c in _OPENS if s == suite_name} == set(suite.claims)
    for seed in range(1, 11):
        schedule, _ = plan(RunOptions(suite, seed=seed, time_scale=0.05, topology=suite.topologies[0]))
        drawn = {(e.op.op, getattr(e.op, "kind", "") or "", e.op.target.split(":")[0]) for e in schedule.entries}
        for claim in suite.claims:
            assert drawn & _OPENS[(suite_name, claim)], (suite_name, seed, claim)


def test_a_real_clients_run_is_asked_for_no_claim_but_counts_what_it_reached(tmp_path):
    claims = list(SUITES["offset-resync"].claims)

    def runs(reached_by: str):
        def run_one(cell: Cell, run_dir: Path) -> int:
            counts = {p: 0 for p in PATH_NAMES} | ({p: 1 for p in claims} if cell.client == reached_by else {})
            _write(run_dir, counts, claims)
            return 0
        return run_one

    cells = plan_cells(["offset-resync"], [1], [0.05])
    real, _ = with_clients(cells, ["ons"])
    # alone, a real client's run that reached none of the suite's paths is not held to them
    assert run_matrix(real, tmp_path / "real", runs("nobody"), require_coverage=True).exit_code == 0
    both, _ = with_clients(cells, ["mqlab", "ons"])
    assert run_matrix(both, tmp_path / "mqlab-only", runs("nobody")).unreached_claims == {"offset-resync": claims}
    # what the real client's run reached counts for the suite
    assert run_matrix(both, tmp_path / "ons", runs("ons"), require_coverage=True).unreached_claims == {}
