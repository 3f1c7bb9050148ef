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
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from chaos.checker.verdict import EXIT_UNKNOWN

if TYPE_CHECKING:
    from chaos.checker.pipeline import CheckOutput

app = typer.Typer(name="chaos", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Chaos runs and their checker.")
console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)

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
    for col in ("suite", "what it does", "faults", "checks", "fails with switch", "mode"):
        table.add_column(col)
    for s in SUITES.values():
        faults = "\n".join(f"{f.op} {f.target}" + (f" ({f.partition})" if f.partition else "")
                           + f" {f.duration_x:g}x{f.duration_of}" for f in s.faults)
        b = s.breaking_switch
        table.add_row(s.name, s.summary, faults, "\n".join(s.checks), f"{b.role}: {b.switch}\n→ {b.check}",
                      s.default_mode)
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
    time_scale: Annotated[float, typer.Option("--time-scale", help="Multiplies every RocketMQ timer.")] = 0.05,
    duration: Annotated[float | None, typer.Option("--duration", help="Seconds of the fault phase (default: the suite's).")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Run dir (default: runs/<utc>-<suite>-s<seed>).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the bounds and the schedule; start nothing.")] = False,
    replay: Annotated[Path | None, typer.Option("--replay", help="Play this schedule.json instead of drawing one.")] = None,
    mode: Annotated[str | None, typer.Option("--mode", help="Durability mode: async, sync-flush, sync-master or sync "
                                             "(flush x replication; default: the suite's).")] = None,
    no_check: Annotated[bool, typer.Option("--no-check", help="Run and record, but do not start the checker.")] = False,
    spark_master: Annotated[str | None, typer.Option("--spark-master", help="Spark master URL for the check.")] = None,
    broken: Annotated[bool, typer.Option("--broken", hidden=True,
                                         help="Turn on the suite's test-only fault switch (the run must fail).")] = False,
) -> None:
    """Run a suite on a fresh cluster, then check it (exit 0 valid, 1 invalid, 2 could not run)."""
    from chaos.runner import ChaosRun, RunOptions, plan, show_plan
    from chaos.suites import mode as find_mode
    from chaos.suites import suite as find_suite

    try:
        chosen = find_suite(suite)
        if mode is not None:
            find_mode(mode)
    except KeyError as exc:
        _fail(str(exc.args[0]))
    options = RunOptions(chosen, seed=seed, time_scale=time_scale, duration_s=duration, out_dir=out,
                         check=not no_check, spark_master=spark_master, schedule_file=replay,
                         fault_switches=chosen.switch_map() if broken else {}, mode=mode)
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


def _print_verdict(result: CheckOutput, title: str) -> None:
    verdict = result.verdict
    table = Table(title=title)
    for col in ("check", "verdict", "reason"):
        table.add_column(col)
    for c in verdict.checks.values():
        table.add_row(c.name, _STYLE.get(c.valid, "[yellow]unknown[/]"), escape(c.reason or ""))  # type: ignore[call-overload]
    console.print(table)
    console.print(f"overall: {_STYLE.get(verdict.valid, '[yellow]unknown[/]')}")  # type: ignore[call-overload]
    console.print(f"verdict: {result.verdict_path}")
    if result.report_path:
        console.print(f"report:  {result.report_path}")


def _fail(message: str) -> None:
    err_console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(EXIT_UNKNOWN)
