"""`mqlab chaos ...`: the chaos sub-commands, registered into `mqlab` as a plugin.

The harness's CLI never imports chaos (chaos sits above it, DESIGN §2); it loads this app
through the `mqlab.cli` entry-point group. Exit codes (DESIGN §8): 0 valid, 1 invalid,
2 unknown or could not run, 130 interrupted.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from chaos.checker.verdict import EXIT_UNKNOWN

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
    verdict = result.verdict
    table = Table(title=f"verdict for {run_dir}")
    for col in ("check", "verdict", "reason"):
        table.add_column(col)
    for c in verdict.checks.values():
        table.add_row(c.name, _STYLE.get(c.valid, "[yellow]unknown[/]"), escape(c.reason or ""))  # type: ignore[call-overload]
    console.print(table)
    console.print(f"overall: {_STYLE.get(verdict.valid, '[yellow]unknown[/]')}")  # type: ignore[call-overload]
    console.print(f"verdict: {result.verdict_path}")
    if result.report_path:
        console.print(f"report:  {result.report_path}")
    raise typer.Exit(verdict.exit_code)


def _fail(message: str) -> None:
    err_console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(EXIT_UNKNOWN)
