"""What every `mqlab` command shares: the consoles, exit codes, one-line errors, progress bars
and summary tables.

Every failure the user can fix prints one line saying what to do next and exits 2; no traceback
unless MQLAB_DEBUG=1. Exit codes: 0 ok, 1 the command ran but found a problem (a node down, a lost
message, failed sends), 2 it could not run, 130 interrupted.

Commands print through `terminal.console` / `terminal.err_console` (module attributes, so a test
can swap in a wide console for every command at once).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from harness.errors import HarnessError, NodeStartError
from nodes.common.errors import MqError

EXIT_PROBLEM = 1
EXIT_CANNOT_RUN = 2
EXIT_INTERRUPTED = 130

# Piped into a file, rich falls back to 80 columns and cuts wide tables (a matrix, a selftest, the
# benchmark's) into columns of ellipses; a log file has room. COLUMNS, when set, still wins.
PIPED_WIDTH_COLUMNS = 200


def make_console(*, stderr: bool = False) -> Console:
    """A console for CLI output: the terminal's width, or PIPED_WIDTH_COLUMNS when not a terminal."""
    plain = Console(stderr=stderr, highlight=False)
    if plain.is_terminal or os.environ.get("COLUMNS"):
        return plain
    return Console(stderr=stderr, highlight=False, width=PIPED_WIDTH_COLUMNS)


console = make_console()
err_console = make_console(stderr=True)

RunDirOpt = Annotated[Path | None, typer.Option("--run-dir", help="Cluster run dir (holds cluster.json).")]

F = TypeVar("F", bound=Callable[..., Any])


class CliError(Exception):
    """A problem the user can fix; the message says how."""


def cli_command(fn: F) -> F:
    """Turn known failures into one line + exit 2, Ctrl-C into exit 130, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except KeyboardInterrupt:
            err_console.print("interrupted")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except NodeStartError as exc:
            print_error(exc.summary)
            err_console.print(escape(exc.log_tail), style="dim")
            raise typer.Exit(EXIT_CANNOT_RUN) from None
        except (CliError, HarnessError, MqError) as exc:
            print_error(str(exc))
            raise typer.Exit(EXIT_CANNOT_RUN) from None
        except OSError as exc:
            print_error(f"{exc}; check the path and permissions")
            raise typer.Exit(EXIT_CANNOT_RUN) from None
        except Exception as exc:
            if os.environ.get("MQLAB_DEBUG"):
                raise
            print_error(f"internal error: {type(exc).__name__}: {exc} (rerun with MQLAB_DEBUG=1 for the traceback)")
            raise typer.Exit(EXIT_CANNOT_RUN) from None

    return wrapper  # type: ignore[return-value]


def print_error(message: str) -> None:
    first, _, rest = message.partition("\n")
    err_console.print(f"[bold red]error:[/] {escape(first)}", soft_wrap=True)  # one line, never wrapped
    if rest:
        err_console.print(escape(rest), style="dim", soft_wrap=True)


class _RateColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:>9,.0f} msg/s" if speed else "        - msg/s")


def progress() -> Progress:
    """A bar with done/total, msg/s and elapsed time, drawn on `console`."""
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), _RateColumn(),
                    TimeElapsedColumn(), console=console)


def summary_table(title: str, rows: list[tuple[str, Any]]) -> Table:
    table = Table(title=title, show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    for what, value in rows:
        table.add_row(what, str(value))
    return table


def mark(n: int) -> str:
    """`n` in bold red unless it is 0 (counts that should be 0: lost, corrupt)."""
    return f"[bold red]{n}[/]" if n else "0"


def print_errors(errors: Any) -> None:
    """The five most common error texts of a `Counter`, with their counts."""
    for text, n in errors.most_common(5):
        err_console.print(f"[yellow]{n} x[/] {escape(text)}")
