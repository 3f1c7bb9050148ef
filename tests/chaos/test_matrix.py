"""The seed matrix: cells planned in order, each run's row read back from its run dir, exit codes,
seeds whose verdict differs between time scales flagged, matrix.json and the HTML index; the
orchestration runs a fake run function, one short real matrix runs a real cluster and checker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from chaos import cli
from chaos import matrix as chaos_matrix
from chaos.cli import app
from chaos.matrix import (
    DURABILITY_MODES,
    MATRIX_JSON,
    Cell,
    parse_scales,
    parse_seeds,
    plan_cells,
    read_row,
    run_matrix,
    with_clients,
)
from chaos.matrix_report import INDEX_HTML, write_index


def test_seeds_and_scales_parse_ranges_and_lists_and_refuse_nonsense():
    assert parse_seeds("1-10") == list(range(1, 11))
    assert parse_seeds("1-3,7,2") == [1, 2, 3, 7]
    assert parse_scales("0.05,0.1") == [0.05, 0.1]
    for bad in ("", "a-b", "5-1"):
        with pytest.raises(ValueError):
            parse_seeds(bad)
    for bad in ("", "0", "x", "-0.1"):
        with pytest.raises(ValueError):
            parse_scales(bad)


def test_cells_nest_suite_seed_scale_and_a_durability_suite_runs_once_per_mode():
    cells = plan_cells(["failover", "durability"], [1, 2], [0.05, 0.1])
    fail = [c for c in cells if c.suite == "failover"]
    assert [(c.seed, c.time_scale) for c in fail] == [(1, 0.05), (1, 0.1), (2, 0.05), (2, 0.1)]
    assert all(c.mode is None for c in fail)
    dur = [c for c in cells if c.suite == "durability"]
    assert len(dur) == 2 * 2 * len(DURABILITY_MODES)
    assert {c.mode for c in dur} == set(DURABILITY_MODES)
    assert len({c.name for c in cells}) == len(cells)  # one run dir per cell


# ---- orchestration with a fake run ----------------------------------------------------------


def _write_run(run_dir: Path, *, valid: object, failing: tuple[str, ...] = (), acked: int = 500, faults: int = 3,
               lost: int = 0, allowed: int | None = None, write_verdict: bool = True) -> None:
    """The files a real run leaves: run.json, nemesis history, and (when judged) verdict.json and report.html."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.json").write_text(json.dumps({"counts": {"acked": acked}, "error": None}))
    lines = []
    for i in range(faults):
        lines += [{"op": "kill", "phase": "start", "fault_id": f"f{i}"}, {"op": "kill", "phase": "end", "fault_id": f"f{i}"},
                  {"op": "restart", "phase": "end", "fault_id": f"f{i}"}]
    lines.append({"op": "pause", "phase": "end", "error": "no such node"})  # a failed fault is not injected
    (run_dir / "nemesis").mkdir(exist_ok=True)
    (run_dir / "nemesis" / "nemesis.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"cut')
    if not write_verdict:
        return
    lost_counts: dict[str, int] = {"acknowledged": acked, "lost": lost}
    if allowed is not None:
        lost_counts.update(lost_allowed=allowed, lost_unallowed=lost - allowed)  # as the `lost` check writes them
    checks = {"lost": {"valid": "lost" not in failing, "counts": lost_counts},
              **{name: {"valid": False, "counts": {}} for name in failing if name != "lost"}}
    (run_dir / "verdict.json").write_text(json.dumps({"valid": valid, "checks": checks}))
    (run_dir / "report.html").write_text("<html>report</html>")


class FakeRuns:
    """A run function that writes what `outcomes[(suite, seed, scale)]` says and returns its exit code."""

    def __init__(self, outcomes: dict[tuple[str, int, float], dict[str, object]]) -> None:
        self.outcomes = outcomes
        self.calls: list[Cell] = []

    def __call__(self, cell: Cell, run_dir: Path) -> int:
        self.calls.append(cell)
        spec = dict(self.outcomes.get((cell.suite, cell.seed, cell.time_scale), {"valid": True}))
        if spec.pop("raise", False):
            raise RuntimeError("the cluster could not start (test)")
        exit_code = int(spec.pop("exit_code", {True: 0, False: 1}.get(spec["valid"], 2)))  # type: ignore[call-overload]
        _write_run(run_dir, **spec)  # type: ignore[arg-type]
        return exit_code


def test_every_fault_the_nemesis_injected_counts_gray_ones_too(tmp_path):
    lines = [{"op": op, "phase": phase, **({"error": "no such node"} if op == "pause" else {})}
             for op in ("kill", "pause", "link-toxic", "clock", "starve", "disk-fill", "heal", "remove-toxic")
             for phase in ("start", "end")]
    (tmp_path / "nemesis").mkdir()
    (tmp_path / "nemesis" / "nemesis.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines) + '{"op": "kil')
    # kill and the four gray faults; not the failed pause, the recoveries, or a torn last line
    assert chaos_matrix.count_faults(tmp_path) == 5
    assert chaos_matrix.count_faults(tmp_path / "nowhere") is None


def test_every_cell_runs_in_order_and_its_row_is_read_back_from_its_run_dir(tmp_path):
    cells = plan_cells(["failover", "read-routing"], [1, 2], [0.05])
    fake = FakeRuns({("read-routing", 2, 0.05): {"valid": False, "failing": ("lost", "read-routing"), "lost": 4,
                                                  "acked": 900, "faults": 5}})
    result = run_matrix(cells, tmp_path, fake)
    assert fake.calls == cells
    assert result.exit_code == 1
    rows = {(r.suite, r.seed): r for r in result.rows}
    bad = rows[("read-routing", 2)]
    assert (bad.verdict, bad.failing_checks, bad.acked, bad.faults_injected) == ("INVALID", ["lost", "read-routing"],
                                                                                 900, 5)
    assert (bad.allowed_loss, bad.unallowed_loss) == (0, 4)  # no durability judgement: every loss unallowed
    good = rows[("failover", 1)]
    assert (good.verdict, good.failing_checks, good.faults_injected, good.report) == (
        "valid", [], 3, "failover-s1-x0.05/report.html")
    saved = json.loads((tmp_path / MATRIX_JSON).read_text())
    assert saved["exit_code"] == 1 and len(saved["runs"]) == 4
    assert saved["runs"][3]["failing_checks"] == ["lost", "read-routing"]


def test_allowed_and_unallowed_loss_come_from_the_verdict_when_it_judges_durability(tmp_path):
    _write_run(tmp_path / "r", valid=True, lost=7, allowed=7)
    row = read_row(Cell("durability", 1, 0.05, "async"), tmp_path / "r", tmp_path, 0, 61.2)
    assert (row.allowed_loss, row.unallowed_loss, row.duration_s, row.mode) == (7, 0, 61.2, "async")


def test_a_run_that_could_not_run_exits_2_but_an_invalid_run_wins(tmp_path):
    cells = plan_cells(["failover"], [1, 2, 3], [0.05])
    broken = FakeRuns({("failover", 2, 0.05): {"valid": None, "exit_code": 2, "write_verdict": False},
                       ("failover", 3, 0.05): {"raise": True}})
    result = run_matrix(cells, tmp_path / "a", broken)
    assert result.exit_code == 2
    assert [r.verdict for r in result.rows] == ["valid", "not run", "not run"]
    assert "could not start" in (result.rows[2].error or "")
    mixed = FakeRuns({("failover", 1, 0.05): {"valid": False, "failing": ("lost",)},
                      ("failover", 2, 0.05): {"raise": True}})
    assert run_matrix(cells, tmp_path / "b", mixed).exit_code == 1
    assert run_matrix(cells, tmp_path / "c", FakeRuns({})).exit_code == 0


def test_a_seed_whose_verdict_differs_between_scales_is_flagged(tmp_path):
    cells = plan_cells(["read-routing"], [1, 2], [0.05, 0.1])
    fake = FakeRuns({("read-routing", 2, 0.1): {"valid": False, "failing": ("read-routing",)}})
    result = run_matrix(cells, tmp_path, fake)
    assert result.scale_disagreements == [{"suite": "read-routing", "seed": 2, "mode": None, "topology": "single",
                                           "client": "mqlab", "verdicts": {"0.05": "valid", "0.1": "INVALID"}}]
    index = write_index(result, tmp_path).read_text()
    assert "read-routing seed 2" in index and "differs between time scales" in index


def test_an_interrupted_run_stops_the_matrix_with_the_rows_so_far(tmp_path):
    cells = plan_cells(["failover"], [1, 2, 3], [0.05])
    fake = FakeRuns({("failover", 2, 0.05): {"valid": None, "exit_code": 130, "write_verdict": False}})
    result = run_matrix(cells, tmp_path, fake)
    assert result.exit_code == 130 and result.interrupted
    assert len(fake.calls) == 2 and len(json.loads((tmp_path / MATRIX_JSON).read_text())["runs"]) == 2


def test_the_index_links_each_run_report_or_its_run_dir(tmp_path):
    cells = plan_cells(["failover"], [1, 2], [0.05])
    result = run_matrix(cells, tmp_path, FakeRuns({("failover", 2, 0.05): {"valid": None, "exit_code": 2,
                                                                           "write_verdict": False}}))
    index = write_index(result, tmp_path)
    assert index.name == INDEX_HTML
    text = index.read_text()
    assert '<a href="failover-s1-x0.05/report.html">' in text
    assert '<a href="failover-s2-x0.05">' in text
    assert (tmp_path / "failover-s1-x0.05" / "report.html").is_file()


def test_the_matrix_command_prints_the_table_and_exits_with_the_worst_verdict(tmp_path, monkeypatch):
    fake = FakeRuns({("lock-takeover", 2, 0.1): {"valid": False, "failing": ("order",)}})
    monkeypatch.setattr(chaos_matrix, "chaos_run_one", lambda **_: fake)
    monkeypatch.setattr(cli, "console", Console(width=250, highlight=False))
    out = tmp_path / "m"
    result = CliRunner().invoke(app, ["matrix", "--suites", "lock-takeover", "--seeds", "1-2", "--time-scales",
                                      "0.05,0.1", "--out", str(out)])
    assert result.exit_code == 1, result.output
    assert len(fake.calls) == 4
    assert "INVALID" in result.output and "order" in result.output
    assert "lock-takeover seed 2: verdict differs between time scales" in result.output
    assert (out / MATRIX_JSON).is_file() and (out / INDEX_HTML).is_file()
    bad = CliRunner().invoke(app, ["matrix", "--suites", "no-such", "--out", str(out)])
    assert bad.exit_code == 2 and "no suite no-such" in bad.output


def test_clients_are_a_dimension_a_real_client_at_real_scale_and_a_suite_it_cannot_run_left_out():
    cells = plan_cells(["lock-takeover", "offset-resync"], [1], [0.05, 0.1])
    planned, left_out = with_clients(cells, ["mqlab", "cpp", "ons"])
    got = [(c.suite, c.client, c.time_scale) for c in planned]
    assert got == [("lock-takeover", "mqlab", 0.05), ("lock-takeover", "mqlab", 0.1),
                   ("offset-resync", "mqlab", 0.05), ("offset-resync", "mqlab", 0.1),
                   # a real client's timers cannot be scaled: one cell per seed, at scale 1
                   ("lock-takeover", "cpp", 1.0), ("offset-resync", "cpp", 1.0), ("offset-resync", "ons", 1.0)]
    assert len({c.name for c in planned}) == len(planned)
    assert next(c.name for c in planned if c.client == "cpp") == "lock-takeover-s1-x1-cpp"
    assert len(left_out) == 1 and left_out[0].startswith("lock-takeover (single) with ons:")
    assert "no orderly consumer" in left_out[0]
    with pytest.raises(ValueError, match="clients are mqlab, cpp, ons"):
        with_clients(cells, ["java"])
    with pytest.raises(ValueError, match="no chosen suite can run with ons"):
        with_clients(plan_cells(["lock-takeover"], [1], [0.05]), ["ons"])


def test_the_matrix_command_runs_each_client_and_names_it_in_the_table(tmp_path, monkeypatch):
    fake = FakeRuns({})
    monkeypatch.setattr(chaos_matrix, "chaos_run_one", lambda **_: fake)
    monkeypatch.setattr(cli, "console", Console(width=250, highlight=False))
    result = CliRunner().invoke(app, ["matrix", "--suites", "lock-takeover", "--seeds", "1", "--clients",
                                      "mqlab,cpp,ons", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert [(c.client, c.time_scale) for c in fake.calls] == [("mqlab", 0.05), ("cpp", 1.0)]
    assert "left out: lock-takeover (single) with ons" in result.output
    assert "lock-takeover (cpp)" in result.output
    rows = json.loads((tmp_path / MATRIX_JSON).read_text())["runs"]
    assert [r["client"] for r in rows] == ["mqlab", "cpp"]


# ---- one real run ----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.cluster
def test_a_real_one_run_matrix_judges_its_run_and_links_the_report(tmp_path):
    result = CliRunner().invoke(app, ["matrix", "--suites", "failover", "--seeds", "1", "--duration", "8",
                                      "--out", str(tmp_path)])
    saved = json.loads((tmp_path / MATRIX_JSON).read_text())
    row = saved["runs"][0]
    assert result.exit_code == 0, (result.output, row)
    assert row["verdict"] == "valid" and row["acked"] > 0 and row["faults_injected"] >= 1
    assert row["report"] == "failover-s1-x0.05/report.html"
    assert (tmp_path / row["report"]).stat().st_size > 10_000
    assert (tmp_path / "failover-s1-x0.05" / "run.log").is_file()
