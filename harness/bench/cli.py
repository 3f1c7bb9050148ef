"""`mqlab bench pull`: the pull benchmark's command line (registered by `harness.cli`).

Owns option parsing and what the run prints; the run itself is `harness.bench.runner`. It shares
`mqlab`'s consoles, error handling and exit codes (0 ran, 1 ran with failed cases or a node that
died, 2 could not run, 130 interrupted) through `harness.terminal`; it never imports `harness.cli`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from harness import terminal
from harness.bench import report as bench_report
from harness.bench.results import DEFAULT_SEND_BATCHES, DEFAULT_SEND_WINDOW, evaluate_targets, report_json
from harness.bench.run_state import ROUNDS_MAX
from harness.bench.runner import BenchConfig, Hooks, run_bench
from harness.terminal import EXIT_PROBLEM, CliError, cli_command

app = typer.Typer(name="bench", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Benchmarks against a fresh local cluster.")

PLOT_NAME = "bench-pull.png"
JSON_NAME = "bench-pull.json"
TABLE_WIDTH_MIN = 170
# --check judges on the median of three rounds unless told otherwise: on a shared machine the
# speed of a case and of its reference moves by tens of percent between runs minutes apart
CHECK_ROUNDS = 3


def _int_list(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        values = ()
    if not values or any(v <= 0 for v in values):
        raise typer.BadParameter(f"{option} takes positive integers separated by commas, e.g. 32,1024")
    return values


@app.command("pull")
@cli_command
def pull(
    messages: Annotated[int | None, typer.Option("--messages", min=1, help="Messages to preload (default 100000; --quick 20000).")] = None,
    body_bytes: Annotated[int, typer.Option("--body-bytes", min=1, help="Body size of every message.")] = 1024,
    queues: Annotated[int, typer.Option("--queues", min=1, max=1024, help="Queues of the benchmark topic.")] = 8,
    batches: Annotated[str, typer.Option("--batches", help="Pull batch sizes, comma-separated.")] = "32,1024",
    consumers: Annotated[str | None, typer.Option("--consumers", help="Consumer process counts, comma-separated (default 1,4; --quick 1).")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Reduced matrix: 1 KiB bodies, batch 32 and 1024, master and slave, one consumer; two to six minutes on two cores (with --check, three rounds: about five).")] = False,
    json_path: Annotated[Path | None, typer.Option("--json", help="Also write the results as JSON to FILE.")] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help=f"PNG bar plot (default: <run dir>/{PLOT_NAME}).")] = None,
    time_scale: Annotated[float, typer.Option("--time-scale", help="Multiply every cluster timer by F.")] = 1.0,
    seconds: Annotated[float | None, typer.Option("--seconds", min=0.2, help="Length of one measuring window (default 2; --quick 1).")] = None,
    windows: Annotated[int | None, typer.Option("--windows", min=1, max=20, help="Windows per case and limit; the median counts, the slowest and fastest give the range (default 3; --quick 3).")] = None,
    rounds: Annotated[int | None, typer.Option("--rounds", min=1, max=ROUNDS_MAX, help=f"Measure every row and reference this many times in one run (one cluster, one preload); each ratio and target is the median of the per-round ratios, each row shows its median round (default 1; with --check {CHECK_ROUNDS}).")] = None,
    window: Annotated[int, typer.Option("--window", min=1, max=256, help="Pulls in flight per consumer process.")] = 8,
    pull: Annotated[bool, typer.Option("--pull/--no-pull", help="Measure the pull consumer and the pull loop (with the mmap scan and loopback TCP ceilings).")] = True,
    push: Annotated[bool, typer.Option("--push/--no-push", help="Measure the push consumer.")] = True,
    send: Annotated[bool, typer.Option("--send/--no-send", help="Measure one producer's sends.")] = True,
    send_batch: Annotated[str, typer.Option("--send-batch", help="Messages per send_batch call, comma-separated (one send case each).")] = ",".join(map(str, DEFAULT_SEND_BATCHES)),
    send_window: Annotated[int, typer.Option("--send-window", min=1, help="send_async's window: messages submitted and not yet answered.")] = DEFAULT_SEND_WINDOW,
    no_message_index: Annotated[bool, typer.Option("--no-index", help="Both brokers run without the message index by key (store.message_index_enable false): what it costs the sends.")] = False,
    tune_malloc: Annotated[bool, typer.Option("--tune-malloc", help="Run the client and reference processes too with the allocator thresholds the nodes set for themselves (glibc's mmap threshold raised), so ~1 MiB pull buffers reuse heap memory instead of page-faulting fresh mappings.")] = False,
    peers: Annotated[str, typer.Option("--peers", help="Peer systems measured in the same run, comma-separated: redis (Redis Streams; needs redis-server on PATH).")] = "",
    mode: Annotated[str, typer.Option("--mode", help="The master's role: async (ASYNC_MASTER, the default) or sync-master (SYNC_MASTER: a send is answered once the slave has it; the sends are then judged against Redis XADD + WAIT 1).")] = "async",
    clients: Annotated[str, typer.Option("--clients", help="Real RocketMQ clients measured beside mqlab's own rows, comma-separated: cpp (Apache's C++ client, PyPI rocketmq 0.4.4), ons (ali-ons 3.12.0 under node), py5 (Apache's RocketMQ 5 Python client, rocketmq-python-client 5.1.2 in .venv-py5, over the brokers' gRPC endpoints: sync and async sends, a SimpleConsumer's receive + ack); installed by ./scripts/bootstrap.sh.")] = "",
    check: Annotated[bool, typer.Option("--check", help="Exit 1 when a target is missed or could not be judged (printed).")] = False,
    keep_store: Annotated[bool, typer.Option("--keep-store", help="Keep the brokers' stores in the run dir (deleted by default; results, logs and the plot stay).")] = False,
    profile: Annotated[Path | None, typer.Option("--profile", help="Record py-spy profiles (no native frames) of every row's client processes, master and slave into DIR, with a text summary per row.")] = None,
    run_dir: Annotated[Path | None, typer.Option("--run-dir", help="Cluster run dir (default: a fresh ./runs/<utc>-<pid>/).")] = None,
) -> None:
    """Pull (master, slave; batch sizes; consumer processes), the pull loop, push and send, each
    consumer reading every message, as ratios of same-run references: plain gRPC stream and
    unary calls of the same bytes, loopback TCP, an mmap scan and (--peers redis) Redis Streams."""
    try:
        bench_report.require_matplotlib()  # fail before a long run, not after it
    except ImportError as exc:
        raise CliError(str(exc)) from None
    base = BenchConfig.quick() if quick else BenchConfig()
    overrides: dict[str, Any] = {"body_bytes": body_bytes, "queues": queues, "batches": _int_list(batches, "--batches"),
                                 "window": window, "pull": pull, "push": push, "send": send,
                                 "send_batches": _int_list(send_batch, "--send-batch"),
                                 "peers": tuple(p.strip() for p in peers.split(",") if p.strip()),
                                 "clients": tuple(n.strip() for n in clients.split(",") if n.strip()),
                                 "keep_store": keep_store, "profile": profile,
                                 "send_window": send_window, "tune_malloc": tune_malloc, "message_index": not no_message_index,
                                 "time_scale": time_scale, "run_dir": run_dir, "mode": mode}
    if messages is not None:
        overrides["messages"] = messages
    if consumers is not None:
        overrides["consumers"] = _int_list(consumers, "--consumers")
    if seconds is not None:
        overrides["seconds"] = seconds
    if windows is not None:
        overrides["windows"] = windows
    overrides["rounds"] = rounds if rounds is not None else (CHECK_ROUNDS if check else 1)
    config = dataclasses.replace(base, **overrides)
    console = terminal.console
    hooks = _Hooks()
    try:
        report = run_bench(config, hooks.as_hooks())
    finally:
        hooks.close_bar()
    saved_width = console.width
    if not console.is_terminal:  # a log or a pipe gets whole rows, not ellipses
        console.width = max(saved_width, TABLE_WIDTH_MIN)
    try:
        for table in (bench_report.results_table(report), bench_report.cpu_table(report),
                      bench_report.references_table(report), bench_report.targets_table(report)):
            console.print(table)
    finally:
        console.width = saved_width
    data = report_json(report)
    bench_dir = Path(report.run["run_dir"])
    (bench_dir / JSON_NAME).write_text(json.dumps(data, indent=2))
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(data, indent=2))
    plot_path = bench_report.write_plot(report, plot if plot is not None else bench_dir / PLOT_NAME)
    console.print(f"json: {json_path or bench_dir / JSON_NAME}   plot: {plot_path}   run dir: {bench_dir}")
    for problem in report.problems:
        terminal.err_console.print(f"[bold red]problem:[/] {problem}", soft_wrap=True)
    if report.problems:
        raise typer.Exit(EXIT_PROBLEM)
    if check:
        unmet = [v for v in evaluate_targets(report) if v.met is not True]
        for verdict in unmet:
            what = "not judged" if verdict.met is None else "missed"
            terminal.err_console.print(f"[bold red]target {what}:[/] {verdict.name}: {verdict.detail}", soft_wrap=True)
        if unmet:
            raise typer.Exit(EXIT_PROBLEM)


class _Hooks:
    """Stage lines, and a progress bar while preloading."""

    def __init__(self) -> None:
        self._bar: Any = None
        self._task: Any = None

    def as_hooks(self) -> Hooks:
        return Hooks(stage=self.stage, preloaded=self.preloaded)

    def stage(self, text: str) -> None:
        self.close_bar()
        terminal.console.print(f"[dim]·[/] {text}")

    def preloaded(self, done: int, total: int) -> None:
        if self._bar is None:
            self._bar = terminal.progress()
            self._bar.start()
            self._task = self._bar.add_task("preloading", total=total)
        self._bar.update(self._task, completed=done)

    def close_bar(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
