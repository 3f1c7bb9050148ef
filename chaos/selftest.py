"""`mqlab chaos selftest`: every fault switch on a real cluster; each must make its check fail.

Each case (chaos/selftest_cases.py) is one short chaos run with the switch on, at the first seed
whose schedule draws the fault the bug needs; it is *caught* when the verdict is invalid and the
case's check is among the failing ones. The table says, per case, what was expected and what
the run found, with its run dir.

    results = run_selftest(SELFTEST_CASES, out_dir, run_case)
    print(selftest_exit_code(results))

Exit 0 every switch caught; 1 any switch that ran was not caught; 2 a case could not run or be judged.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from chaos.checker.verdict import EXIT_INVALID, EXIT_UNKNOWN, EXIT_VALID
from chaos.matrix import Cell, Row, read_row
from chaos.nemesis_ops import describe_op
from chaos.selftest_cases import (
    NEEDED_FAULT,
    NEEDED_LAST,
    NEEDED_PHASE_S,
    NEEDED_SWITCH_FAULT,
    SEEDS_TRIED,
    SELFTEST_FAULT_PHASE_S,
    SelftestCase,
)

if TYPE_CHECKING:
    from chaos.judge import CheckerProcess

SELFTEST_JSON = "selftest.json"
EXIT_INTERRUPTED = 130

RunCase = Callable[[SelftestCase, int, Path], int]  # (case, seed, run dir) -> the run's exit code


@dataclass
class CaseResult:
    case: str
    suite: str
    switch: str
    expected_check: str
    seed: int
    verdict: str  # valid | INVALID | unknown | not run
    failing_checks: list[str]
    caught: bool
    run_dir: str
    error: str | None = None


def case_phase_s(case: SelftestCase, duration_s: float) -> float:
    """The fault phase a case runs with: `duration_s`, or longer when its needed fault needs it."""
    return max(duration_s, NEEDED_PHASE_S.get(case.switch, 0.0))


def _drawn(needed: tuple[str, ...], drawn: tuple[str, str | None, str]) -> bool:
    """A drawn (op, target, description) is the needed one; a symbolic target matches its pinned forms
    (`group` matches `group:broker-b`); a third part of `needed` must occur in the description."""
    return drawn[0] == needed[0] and drawn[1] is not None and (
        drawn[1] == needed[1] or drawn[1].startswith(f"{needed[1]}:")) and (
        len(needed) < 3 or needed[2] in drawn[2])


def seed_for(case: SelftestCase, time_scale: float, duration_s: float) -> int:
    """The first seed whose schedule draws the fault the case's bug needs (seed 1 if none is named)."""
    from chaos.runner import RunOptions, plan
    from chaos.suites import suite

    last = case.switch in NEEDED_LAST
    needed = (NEEDED_LAST.get(case.switch) or NEEDED_SWITCH_FAULT.get(case.switch)
              or NEEDED_FAULT.get(case.suite))
    if needed is None:
        return 1
    for seed in range(1, SEEDS_TRIED + 1):
        chosen = suite(case.suite)
        schedule, _ = plan(RunOptions(chosen, seed=seed, time_scale=case.time_scale(time_scale),
                                      duration_s=case_phase_s(case, duration_s), topology=chosen.topologies[0],
                                      client=case.client))
        drawn = [(e.op.op, getattr(e.op, "target", None), describe_op(e.op)) for e in schedule.entries]
        if (drawn[-1:] and _drawn(needed, drawn[-1])) if last else any(_drawn(needed, d) for d in drawn):
            return seed
    raise ValueError(f"no seed up to {SEEDS_TRIED} draws {' '.join(needed[:2])} for {case.suite}"
                     + (" as its last fault" if last else ""))


def run_selftest(cases: Sequence[SelftestCase], out_dir: Path, run_case: RunCase, *,
                 seed_of: Callable[[SelftestCase], int],
                 on_case: Callable[[SelftestCase, CaseResult | None], object] | None = None) -> list[CaseResult]:
    """Run every case one after another; selftest.json is rewritten after each."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results: list[CaseResult] = []
    for case in cases:
        if on_case is not None:
            on_case(case, None)
        seed = seed_of(case)
        run_dir = out_dir / case.name.replace("/", "-")
        started = time.monotonic()
        error = None
        try:
            exit_code = run_case(case, seed, run_dir)
        except KeyboardInterrupt:
            break
        except Exception as exc:  # one case that cannot run is a row, not the end of the selftest
            exit_code, error = EXIT_UNKNOWN, f"{type(exc).__name__}: {exc}"
        row = read_row(Cell(case.suite, seed, 0.0, case.mode), run_dir, out_dir, exit_code,
                       time.monotonic() - started, error)
        results.append(_result(case, seed, row))
        _write_json(results, out_dir)
        if on_case is not None:
            on_case(case, results[-1])
        if exit_code == EXIT_INTERRUPTED:
            break
    return results


def _result(case: SelftestCase, seed: int, row: Row) -> CaseResult:
    caught = row.verdict == "INVALID" and case.check in row.failing_checks
    return CaseResult(case.name, case.suite, case.switch, case.check, seed, row.verdict, row.failing_checks,
                      caught, row.run_dir, row.error)


def selftest_exit_code(results: Iterable[CaseResult]) -> int:
    results = list(results)
    if any(not r.caught and r.verdict in ("valid", "INVALID") for r in results):
        return EXIT_INVALID
    if any(not r.caught for r in results):
        return EXIT_UNKNOWN
    return EXIT_VALID


def selftest_table(results: Iterable[CaseResult], title: str = "chaos selftest") -> Table:
    table = Table(title=title)
    for col in ("case", "expected check", "verdict", "caught", "failing checks", "run dir"):
        table.add_column(col)
    for r in results:
        caught = "[green]yes[/]" if r.caught else "[bold red]NO[/]"
        table.add_row(r.case, r.expected_check, r.verdict, caught,
                      ", ".join(r.failing_checks) or (r.error or "")[:80], r.run_dir)
    return table


def _write_json(results: list[CaseResult], out_dir: Path) -> None:
    data: dict[str, Any] = {"exit_code": selftest_exit_code(results), "cases": [asdict(r) for r in results]}
    (out_dir / SELFTEST_JSON).write_text(json.dumps(data, indent=1) + "\n")


def chaos_run_case(*, time_scale: float, duration_s: float = SELFTEST_FAULT_PHASE_S,
                   spark_master: str | None = None, checker: CheckerProcess | None = None) -> RunCase:
    """The real run of a case: a short chaos run with the case's switch on, output in `<run dir>/run.log`."""
    from chaos.matrix import chaos_run_one

    def run_case(case: SelftestCase, seed: int, run_dir: Path) -> int:
        run_one = chaos_run_one(spark_master=spark_master, duration_s=case_phase_s(case, duration_s),
                                fault_switches=lambda _cell: case.switch_map(), checker=checker)
        from chaos.suites import suite

        return run_one(Cell(case.suite, seed, case.time_scale(time_scale), case.mode,
                            topology=suite(case.suite).topologies[0], client=case.client), run_dir)

    return run_case
