"""`mqlab chaos ...`: the chaos sub-commands, registered into `mqlab` as a plugin.

The harness's CLI never imports chaos (chaos sits above it); it loads this app
through the `mqlab.cli` entry-point group. Exit codes: 0 valid, 1 invalid,
2 unknown or could not run, 130 interrupted.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from chaos.checker.verdict import EXIT_UNKNOWN
from chaos.judge import CheckerProcess
from harness.terminal import console, err_console

if TYPE_CHECKING:
    from chaos.checker.pipeline import CheckOutput
    from chaos.matrix import Cell, MatrixResult, Row, RunOne
    from chaos.selftest import CaseResult
    from chaos.selftest_cases import SelftestCase
    from chaos.suites import Suite

app = typer.Typer(name="chaos", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Chaos runs and their checker.")

_STYLE = {True: "[green]valid[/]", False: "[bold red]INVALID[/]"}


@app.callback()
def chaos() -> None:
    """Chaos runs and their checker."""


@app.command()
def check(
    run_dir: Annotated[Path, typer.Argument(help="A chaos run dir: one directory per process with JSONL histories.")],
    spark_master: Annotated[str | None, typer.Option(
        "--spark-master", help="Spark master URL (default local[*]; e.g. spark://host:7077).")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write verdict.json and report.html here (default: RUN_DIR).")] = None,
    no_report: Annotated[bool, typer.Option("--no-report", help="Only verdict.json.")] = False,
) -> None:
    """Check a run's histories on Spark; writes verdict.json and report.html (exit 0 valid, 1 invalid, 2 unknown)."""
    from chaos.checker.pipeline import check_run
    from chaos.checker.session import SparkUnavailable

    if not run_dir.is_dir():
        _fail(f"{run_dir} is not a directory; pass a chaos run dir (one sub-directory per process)")
    try:
        with console.status("checking (Spark starts in a few seconds)…"):
            result = check_run(run_dir, spark_master=spark_master, out_dir=out, report=not no_report)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        raise typer.Exit(130) from None
    except SparkUnavailable as exc:
        _fail(str(exc))
    except Exception as exc:
        if os.environ.get("MQLAB_DEBUG"):
            raise
        _fail(f"the checker failed: {type(exc).__name__}: {exc} (rerun with MQLAB_DEBUG=1 for the traceback)")
    _print_verdict(result, f"verdict for {run_dir}")
    raise typer.Exit(result.verdict.exit_code)


@app.command("list")
def list_suites() -> None:
    """Show every suite with its faults, checks, and the fault switch that must make it fail."""
    from chaos.suites import MODES, SUITES

    table = Table(title="chaos suites")
    for col in ("suite", "what it does", "faults", "checks", "fails with switch", "mode", "topologies"):
        table.add_column(col)
    for s in SUITES.values():
        faults = "\n".join(f"{f.op} {f.target}" + (f" ({f.partition})" if f.partition else "")
                           + f" {f.duration_x:g}x{f.duration_of}" for f in s.faults)
        b = s.breaking_switch
        table.add_row(s.name, s.summary, faults, "\n".join(s.checks), f"{b.role}: {b.switch}\n→ {b.check}",
                      s.default_mode, ", ".join(s.topologies))
    console.print(table)
    modes = Table(title="durability modes (--mode)")
    for col in ("mode", "flush", "replication", "acknowledged messages"):
        modes.add_column(col)
    for m in MODES.values():
        modes.add_row(m.name, m.flush_disk_type, m.broker_role, m.promise)
    console.print(modes)


@app.command()
def run(
    suite: Annotated[str, typer.Argument(help="Suite name (see `mqlab chaos list`).")],
    seed: Annotated[int, typer.Option("--seed", help="Seed of the schedule and target choices (same seed, same run).")] = 0,
    time_scale: Annotated[float | None, typer.Option("--time-scale", help="Multiplies every RocketMQ timer "
                                                     "(default 0.05; real clients run at 1).")] = None,
    duration: Annotated[float | None, typer.Option("--duration", help="Seconds of the fault phase (default: the suite's, in timer units: the same run at every time scale).")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Run dir (default: runs/<utc>-<suite>-s<seed>).")] = None,
    client: Annotated[str, typer.Option("--client", help="The consumers: mqlab (its own), cpp (Apache's C++ client), "
                                        "ons (ali-ons), py5 (Apache's RocketMQ 5 Python client's PushConsumer, POP), py5-simple (its "
                                        "SimpleConsumer) or node5 (the Node.js 5.x PushConsumer), or cpp+mqlab / ons+mqlab (a mixed group); real "
                                        "clients run at real scale, for minutes.")] = "mqlab",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the bounds and the schedule; start nothing.")] = False,
    replay: Annotated[Path | None, typer.Option("--replay", help="Play this schedule.json instead of drawing one.")] = None,
    mode: Annotated[str | None, typer.Option("--mode", help="Durability mode: async, sync-flush, sync-master or sync "
                                             "(flush x replication; default: the suite's).")] = None,
    no_check: Annotated[bool, typer.Option("--no-check", help="Run and record, but do not start the checker.")] = False,
    spark_master: Annotated[str | None, typer.Option("--spark-master", help="Spark master URL for the check.")] = None,
    topology: Annotated[str, typer.Option("--topology", help="single (namesrv-0, broker-a) or 2x2 (two name "
                                          "servers, broker groups a and b).")] = "single",
    faults: Annotated[str | None, typer.Option("--faults", help="gray: mix the gray faults (slow, stalled and lossy "
                                               "links, clock jumps and skew, starved CPUs) into the suite's own "
                                               "(the suite runs as <suite>+gray).")] = None,
    broken: Annotated[bool, typer.Option("--broken", hidden=True,
                                         help="Turn on the suite's test-only fault switch (the run must fail).")] = False,
) -> None:
    """Run a suite on a fresh cluster, then check it (exit 0 valid, 1 invalid, 2 could not run)."""
    from chaos.bounds import REAL_CLIENT_TIME_SCALE
    from chaos.real_clients import RealClientError, client_for_suite
    from chaos.runner import ChaosRun, RunOptions, plan, show_plan
    from chaos.suites import mode as find_mode
    from chaos.suites import suite as find_suite
    from chaos.suites import with_gray_faults

    try:
        chosen = find_suite(suite)
        if faults not in (None, "gray"):
            raise KeyError(f"--faults takes gray (the gray faults mixed into the suite's), not {faults!r}")
        if faults == "gray":
            chosen = with_gray_faults(chosen)
        if mode is not None:
            find_mode(mode)
        _check_topology(chosen, topology)
        real = client_for_suite(client, chosen, topology)
        if real is not None:
            real.check_installed()
    except KeyError as exc:
        _fail(str(exc.args[0]))
    except RealClientError as exc:
        _fail(str(exc))
    if real is not None and time_scale not in (None, REAL_CLIENT_TIME_SCALE):
        _fail(f"--client {client} runs at time scale {REAL_CLIENT_TIME_SCALE:g}: a real client's timers cannot be "
              "scaled; drop --time-scale")
    scale = time_scale if time_scale is not None else (REAL_CLIENT_TIME_SCALE if real is not None else 0.05)
    options = RunOptions(chosen, seed=seed, time_scale=scale, duration_s=duration, out_dir=out,
                         check=not no_check, spark_master=spark_master, schedule_file=replay,
                         fault_switches=chosen.switch_map() if broken else {}, mode=mode, topology=topology,
                         client=client)
    if dry_run:
        schedule, bounds = plan(options)
        show_plan(console, options, schedule, bounds)
        raise typer.Exit(0)
    outcome = ChaosRun(options, console).execute()
    if outcome.check is not None:
        _print_verdict(outcome.check, f"{chosen.name} seed {seed}")
    elif outcome.error:
        err_console.print(f"[bold red]error:[/] {escape(outcome.error)} (run dir {outcome.run_dir})")
    console.print(f"run dir: {outcome.run_dir}")
    raise typer.Exit(outcome.exit_code)


@app.command()
def matrix(
    suites: Annotated[str | None, typer.Option("--suites", help="Comma-separated suites (default: every suite).")] = None,
    seeds: Annotated[str, typer.Option("--seeds", help="Seeds: ranges and lists, e.g. 1-10 or 1,4,7.")] = "1-10",
    time_scales: Annotated[str, typer.Option("--time-scales", help="Comma-separated time scales, e.g. 0.05,0.1.")
                           ] = "0.05",
    out: Annotated[Path | None, typer.Option("--out", help="Matrix dir (default: runs/<utc>-matrix).")] = None,
    duration: Annotated[float | None, typer.Option("--duration", help="Seconds of every fault phase (default: each suite's).")
                        ] = None,
    spark_master: Annotated[str | None, typer.Option("--spark-master", help="Spark master URL for the checks.")] = None,
    topologies: Annotated[str, typer.Option("--topologies", help="Comma-separated topologies, e.g. single,2x2 "
                                            "(a suite runs only on the topologies it supports).")] = "single",
    require_coverage: Annotated[bool, typer.Option(
        "--require-coverage", help="Exit 1 when a path a suite claims was reached by none of its runs.")] = False,
    clients: Annotated[str, typer.Option("--clients", help="Comma-separated consumers: mqlab, cpp, ons, py5, py5-simple, node5 (a suite "
                                         "runs with the clients that can run it; real clients at real scale, for "
                                         "minutes each).")] = "mqlab",
) -> None:
    """Run suites x seeds (x time scales x topologies x clients) one after another; summary table, matrix.json
    and index.html (exit 0 all valid, 1 any invalid, 2 any run could not run or be judged; with
    --require-coverage also 1 when a suite's claimed path was reached by no run)."""
    from chaos.matrix import chaos_run_one, with_clients, with_topologies
    from chaos.real_clients import RealClientError, real_client

    cells, out_dir = _matrix_plan(suites, seeds, time_scales, out, "matrix")
    names = [n.strip() for n in clients.split(",") if n.strip()]
    try:
        cells = with_topologies(cells, [t.strip() for t in topologies.split(",") if t.strip()])
        cells, left_out = with_clients(cells, names)
        for name in names:
            real = real_client(name)
            if real is not None:
                real.check_installed()
    except (ValueError, RealClientError) as exc:
        _fail(str(exc))
    for line in left_out:
        console.print(f"[yellow]left out:[/] {escape(line)}")
    with CheckerProcess(spark_master=spark_master) as checker:  # one warm checker judges every run
        result = _run_cells(cells, out_dir, chaos_run_one(spark_master=spark_master, duration_s=duration,
                                                          checker=checker), require_coverage=require_coverage)
    raise typer.Exit(result.exit_code)


@app.command()
def selftest(
    suites: Annotated[str | None, typer.Option("--suites", help="Only the cases of these suites (comma-separated).")
                      ] = None,
    switches: Annotated[str | None, typer.Option("--switches", help="Only the cases of these fault switches "
                                                 "(comma-separated).")] = None,
    time_scale: Annotated[float, typer.Option("--time-scale", help="Multiplies every RocketMQ timer.")] = 0.05,
    duration: Annotated[float | None, typer.Option("--duration", help="Seconds of each fault phase (default: a short one).")
                        ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Selftest dir (default: runs/<utc>-selftest).")] = None,
    spark_master: Annotated[str | None, typer.Option("--spark-master", help="Spark master URL for the checks.")] = None,
) -> None:
    """Run every fault switch on a real cluster and expect its check to fail (exit 0 every switch caught,
    1 a switch not caught, 2 a case could not run)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from chaos.selftest import (
        SELFTEST_JSON,
        chaos_run_case,
        run_selftest,
        seed_for,
        selftest_exit_code,
        selftest_table,
    )
    from chaos.selftest_cases import SELFTEST_CASES, SELFTEST_FAULT_PHASE_S

    cases = list(SELFTEST_CASES)
    if suites:
        wanted = {n.strip() for n in suites.split(",") if n.strip()}
        cases = [case for case in cases if case.suite in wanted]
        if not cases:
            _fail(f"no selftest case for {', '.join(sorted(wanted))}; cases cover "
                  f"{', '.join(sorted({case.suite for case in SELFTEST_CASES}))}")
    if switches:
        wanted = {n.strip() for n in switches.split(",") if n.strip()}
        cases = [case for case in cases if case.switch in wanted]
        if not cases:
            _fail(f"no selftest case for switch {', '.join(sorted(wanted))}; switches are "
                  f"{', '.join(sorted({case.switch for case in SELFTEST_CASES}))}")
    out_dir = _out_dir(out, "selftest")
    phase_s = duration if duration is not None else SELFTEST_FAULT_PHASE_S
    checker = CheckerProcess(spark_master=spark_master)  # one warm checker judges every case
    run_case = chaos_run_case(time_scale=time_scale, duration_s=phase_s, spark_master=spark_master, checker=checker)
    console.print(f"{len(cases)} cases into {out_dir}")
    with checker, Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                           console=console) as bar:
        task = bar.add_task("starting", total=len(cases))

        def on_case(case: SelftestCase, result: CaseResult | None) -> None:
            if result is None:
                bar.update(task, description=f"running {case.name}")
                return
            bar.advance(task)
            bar.console.print(f"{case.name}: {'caught' if result.caught else 'NOT caught'} ({result.verdict})")

        results = run_selftest(cases, out_dir, run_case, seed_of=lambda case: seed_for(case, time_scale, phase_s),
                               on_case=on_case)
    console.print(selftest_table(results))
    console.print(f"summary: {out_dir / SELFTEST_JSON}")
    raise typer.Exit(selftest_exit_code(results))


def _matrix_plan(suites: str | None, seeds: str, time_scales: str, out: Path | None,
                 kind: str) -> tuple[list[Cell], Path]:
    from chaos.matrix import parse_scales, parse_seeds, plan_cells
    from chaos.suites import SUITES

    names = [n.strip() for n in suites.split(",") if n.strip()] if suites else list(SUITES)
    unknown = [n for n in names if n not in SUITES]
    if unknown:
        _fail(f"no suite {', '.join(unknown)}; suites are {', '.join(SUITES)} (see `mqlab chaos list`)")
    try:
        cells = plan_cells(names, parse_seeds(seeds), parse_scales(time_scales))
    except ValueError as exc:
        _fail(str(exc))
    return cells, _out_dir(out, kind)


def _out_dir(out: Path | None, kind: str) -> Path:
    """`out`, or a fresh `runs/<utc>-<kind>`."""
    import time

    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return (out if out is not None else Path("runs") / f"{stamp}-{kind}").absolute()


def _run_cells(cells: list[Cell], out_dir: Path, run_one: RunOne, *, require_coverage: bool = False) -> MatrixResult:
    """Run the cells under one progress bar, then print the summary, the claimed coverage paths no
    run reached, and write matrix.json and index.html."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from chaos.matrix import MATRIX_JSON, run_matrix
    from chaos.matrix_report import disagreement_lines, summary_table, unreached_lines, write_index

    console.print(f"{len(cells)} runs into {out_dir}")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as bar:
        task = bar.add_task("starting", total=len(cells))

        def on_row(cell: Cell, row: Row | None) -> None:
            if row is None:
                bar.update(task, description=f"running {cell.name}")
                return
            bar.advance(task)
            bar.console.print(f"{cell.name}: {row.verdict}"
                              + (f" ({', '.join(row.failing_checks)})" if row.failing_checks else "")
                              + (f" - {escape(row.error)}" if row.error and row.verdict != "valid" else ""))

        result = run_matrix(cells, out_dir, run_one, on_row, require_coverage=require_coverage)
    console.print(summary_table(result))
    for line in disagreement_lines(result):
        console.print(f"[bold yellow]flag:[/] {escape(line)}")
    style = "[bold red]coverage:[/]" if require_coverage else "[bold yellow]coverage:[/]"
    for line in unreached_lines(result):
        console.print(f"{style} {escape(line)}")
    console.print(f"summary: {out_dir / MATRIX_JSON}")
    console.print(f"index:   {write_index(result, out_dir)}")
    return result


def _print_verdict(result: CheckOutput, title: str) -> None:
    verdict = result.verdict
    table = Table(title=title)
    for col in ("check", "verdict", "reason"):
        table.add_column(col)
    for c in verdict.checks.values():
        table.add_row(c.name, _STYLE.get(c.valid, "[yellow]unknown[/]"), escape(c.reason or ""))  # type: ignore[call-overload]
    for name, why in (verdict.info.get("checks_set_aside") or {}).items():
        table.add_row(name, "[dim]set aside[/]", escape(why))
    console.print(table)
    console.print(f"overall: {_STYLE.get(verdict.valid, '[yellow]unknown[/]')}")  # type: ignore[call-overload]
    found = verdict.info.get("client_findings")
    if isinstance(found, dict):
        kinds = ", ".join(f"{k} {n}" for k, n in (found.get("by_kind") or {}).items() if n)
        console.print(f"broker verdict: {_STYLE.get(verdict.valid, '[yellow]unknown[/]')}; "  # type: ignore[call-overload]
                      f"client findings: {found.get('count', 0)}" + (f" ({escape(kinds)})" if kinds else ""))
    console.print(f"verdict: {result.verdict_path}")
    if result.report_path:
        console.print(f"report:  {result.report_path}")


def _check_topology(chosen: Suite, topology: str) -> None:
    """KeyError naming the choices when `topology` is unknown or the suite does not run on it."""
    from harness.topology import TOPOLOGIES

    if topology not in TOPOLOGIES:
        raise KeyError(f"no topology {topology!r}; topologies are {', '.join(TOPOLOGIES)}")
    if topology not in chosen.topologies:
        raise KeyError(f"suite {chosen.name} runs on {', '.join(chosen.topologies)} only, not {topology}")


def _fail(message: str) -> None:
    err_console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(EXIT_UNKNOWN)
