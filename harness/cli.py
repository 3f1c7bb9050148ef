"""`mqlab`: start, inspect and stop local clusters; quick produce / consume; the demo; the benchmark.

Owns the command tree and the process's signal handling. The commands live in
`harness.cluster_commands` (up, status, down), `harness.client_commands` (produce, consume, demo),
`harness.admin_commands` (admin), `harness.bench.cli` (bench) and `harness.serve.command` (serve);
what they share (consoles, exit codes, one-line errors) is `harness.terminal`. Imports point one
way: this module imports the command modules, none of them imports this one.
"""

from __future__ import annotations

import os
import signal
from importlib.metadata import entry_points
from typing import NoReturn

import typer

from harness import admin_commands, admin_offsets, client_commands, cluster_commands
from harness.bench.cli import app as bench_app
from harness.serve.command import serve

app = typer.Typer(
    name="mqlab", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    help="Run a RocketMQ-style cluster locally, poke at it, and watch it work.")

for _command in (cluster_commands.up, cluster_commands.status, cluster_commands.down,
                 client_commands.produce, client_commands.consume, client_commands.demo, serve):
    app.command()(_command)
app.add_typer(bench_app, name="bench")  # `mqlab bench pull`
admin_offsets.register(admin_commands.app)  # `mqlab admin reset-offset`
app.add_typer(admin_commands.app, name="admin")  # `mqlab admin topic create ...`


def _add_plugin_apps() -> None:
    """Sub-apps of the layers above the harness (`mqlab chaos`, from chaos.cli) come in through the
    `mqlab.cli` entry-point group, so the harness never imports them."""
    for ep in entry_points(group="mqlab.cli"):
        try:
            app.add_typer(ep.load(), name=ep.name)
        except Exception:  # a broken plugin must not take the cluster commands down with it
            if os.environ.get("MQLAB_DEBUG"):
                raise


_add_plugin_apps()


def _raise_keyboard_interrupt(signum: int, frame: object) -> NoReturn:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> None:
    """Console-script entry point: SIGTERM (and SIGHUP, unless nohup ignores it) stop like Ctrl-C."""
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        signal.signal(signal.SIGHUP, _raise_keyboard_interrupt)
    app()


if __name__ == "__main__":
    main()
