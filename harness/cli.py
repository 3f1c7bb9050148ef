"""`mqlab`: start, inspect and stop local clusters; quick produce / consume; the demo.

Owns argument parsing and presentation (rich tables and progress bars); the work is done
by `harness.cluster` and `harness.tools`. Every failure the user can fix prints one line
saying what to do next and exits 2; no traceback unless MQLAB_DEBUG=1.

Exit codes: 0 ok, 1 the command ran but found a problem (a node down, a lost message,
failed sends), 2 it could not run, 130 interrupted.
"""

from __future__ import annotations

import enum
import functools
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

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

from harness import tools
from harness.admin import describe_addr
from harness.bench.cli import app as bench_app
from harness.cluster import (
    CLUSTER_JSON,
    LATEST_LINK,
    RUNS_DIR,
    LocalCluster,
    read_cluster_json,
    write_json_atomic,
)
from harness.errors import HarnessError, NodeStartError
from harness.pids import is_node_process, pid_alive, session_pids, wait_gone
from harness.spec import ClusterSpec
from nodes.common import constants as c
from nodes.common.config import load_node_config
from nodes.common.errors import ConfigError, MqError, RouteNotFoundError
from nodes.common.types import ConsumeConcurrentlyStatus, ConsumeFromWhere, MessageQueue

EXIT_PROBLEM = 1
EXIT_CANNOT_RUN = 2
EXIT_INTERRUPTED = 130
DEFAULT_RUN_DIR = RUNS_DIR / LATEST_LINK
STATUS_DESCRIBE_TIMEOUT_MS = 1_500
DEMO_TOPIC = "DemoTopic"
CONSUME_POLL_S = 0.05  # how often `mqlab consume` looks at its counters
CONSUME_SETTLE_S = 2.0  # at the end, counted listener calls get this long to finish

app = typer.Typer(
    name="mqlab", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    help="Run a RocketMQ-style cluster locally, poke at it, and watch it work.")
console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)

F = TypeVar("F", bound=Callable[..., Any])


class CliError(Exception):
    """A problem the user can fix; the message says how."""


class FromOffset(enum.StrEnum):
    first = "first"
    committed = "committed"


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
            _error(exc.summary)
            err_console.print(escape(exc.log_tail), style="dim")
            raise typer.Exit(EXIT_CANNOT_RUN) from None
        except (CliError, HarnessError, MqError) as exc:
            _error(str(exc))
            raise typer.Exit(EXIT_CANNOT_RUN) from None
        except OSError as exc:
            _error(f"{exc}; check the path and permissions")
            raise typer.Exit(EXIT_CANNOT_RUN) from None
        except Exception as exc:
            if os.environ.get("MQLAB_DEBUG"):
                raise
            _error(f"internal error: {type(exc).__name__}: {exc} (rerun with MQLAB_DEBUG=1 for the traceback)")
            raise typer.Exit(EXIT_CANNOT_RUN) from None

    return wrapper  # type: ignore[return-value]


def _error(message: str) -> None:
    first, _, rest = message.partition("\n")
    err_console.print(f"[bold red]error:[/] {escape(first)}", soft_wrap=True)  # one line, never wrapped
    if rest:
        err_console.print(escape(rest), style="dim", soft_wrap=True)


# ---- cluster commands ----------------------------------------------------------------

RunDirOpt = Annotated[Path | None, typer.Option("--run-dir", help="Cluster run dir (holds cluster.json).")]


@app.command()
@cli_command
def up(
    spec: Annotated[Path | None, typer.Option("--spec", help="Cluster spec TOML (default: namesrv-0 + broker-a).")] = None,
    run_dir: RunDirOpt = None,
    time_scale: Annotated[float | None, typer.Option("--time-scale", help="Multiply every timer by F.")] = None,
    detach: Annotated[bool, typer.Option("--detach", help="Leave the cluster running and return.")] = False,
) -> None:
    """Start a local cluster; stays up until Ctrl-C unless --detach."""
    cluster_spec = ClusterSpec.from_toml(spec) if spec is not None else ClusterSpec.default()
    if run_dir is not None:
        _refuse_live_cluster(run_dir)
    with console.status("starting cluster…"):
        cluster = LocalCluster(cluster_spec, time_scale=time_scale, run_dir=run_dir, detach=detach)
    console.print(_nodes_table(cluster.cluster_info()["nodes"], title=f"cluster in {cluster.run_dir}"))
    console.print(f"namesrv: [bold]{cluster.namesrv_addr}[/]   time scale: {cluster.spec.time_scale:g}")
    if detach:
        cluster.detach()
        console.print(f"left running. `mqlab status --run-dir {cluster.run_dir}`; "
                      f"stop it with `mqlab down --run-dir {cluster.run_dir}`")
        return
    console.print("running; press Ctrl-C to stop")
    seen = 0
    try:
        while True:
            time.sleep(0.5)
            exits = cluster.unexpected_exits
            for record in exits[seen:]:
                err_console.print(f"[bold red]unexpected exit:[/] {escape(str(record))}")
                err_console.print(escape(record.log_tail), style="dim")
            seen = len(exits)
    except KeyboardInterrupt:
        console.print("stopping…")
    finally:
        cluster.close()
    console.print("stopped")


@app.command()
@cli_command
def status(run_dir: RunDirOpt = None) -> None:
    """Show each node of a running cluster (exit 1 if any is down)."""
    path = run_dir or DEFAULT_RUN_DIR
    data = read_cluster_json(path)
    table = Table(title=f"cluster in {path}")
    for col in ("id", "role", "state", "addr", "pid", "alive", "status"):
        table.add_column(col)
    down = 0
    for node in data["nodes"]:
        pid = node["pid"]
        alive = bool(pid) and is_node_process(pid, node["run_dir"])
        state, line = "DOWN", ""
        if alive:
            try:
                info = describe_addr(node["addr"], STATUS_DESCRIBE_TIMEOUT_MS, name=node["id"])
                state, line = info["state"], info["status_line"]
            except HarnessError:
                state = "UNREACHABLE"
        healthy = alive and state != "UNREACHABLE"
        down += not healthy
        table.add_row(node["id"], node["role"], f"[{'green' if healthy else 'red'}]{state}[/]", node["addr"],
                      str(pid or "-"), "yes" if alive else "[red]no[/]", escape(line))
    console.print(table)
    if down:
        console.print(f"[red]{down} of {len(data['nodes'])} node(s) down[/]")
        raise typer.Exit(EXIT_PROBLEM)


@app.command()
@cli_command
def down(run_dir: RunDirOpt = None) -> None:
    """Stop every node of a cluster: SIGTERM, grace period, SIGKILL for stragglers."""
    path = run_dir or DEFAULT_RUN_DIR
    data = read_cluster_json(path)
    results: dict[str, str] = {}
    # Consumers first (they persist offsets to the brokers), then brokers, name servers last:
    # a stopping broker still talks to its name server.
    results |= _stop_nodes([n for n in data["nodes"] if n["role"] == "consumer"])
    results |= _stop_nodes([n for n in data["nodes"] if n["role"] not in ("namesrv", "consumer")])
    results |= _stop_nodes([n for n in data["nodes"] if n["role"] == "namesrv"])
    table = Table(title=f"cluster in {path}")
    for col in ("id", "role", "pid", "result"):
        table.add_column(col)
    for node in data["nodes"]:
        table.add_row(node["id"], node["role"], str(node["pid"] or "-"), results[node["id"]])
        node["pid"] = None
    write_json_atomic(Path(path) / CLUSTER_JSON, data)
    console.print(table)


def _stop_nodes(nodes: list[dict[str, Any]]) -> dict[str, str]:
    """SIGTERM each live node, wait NODE_STOP_GRACE_MS, SIGKILL what is left; id -> result."""
    results: dict[str, str] = {}
    targets: dict[str, int] = {}
    for node in nodes:
        pid = node["pid"]
        if not pid or not is_node_process(pid, node["run_dir"]):
            results[node["id"]] = "not running"
            continue
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            results[node["id"]] = "not running"
            continue
        targets[node["id"]] = pid
    started = time.monotonic()
    stragglers = set(wait_gone(list(targets.values()), c.NODE_STOP_GRACE_MS))
    for node_id, pid in targets.items():
        if pid in stragglers:
            results[node_id] = f"[yellow]killed[/]: no exit {c.NODE_STOP_GRACE_MS / 1000:g} s after SIGTERM"
        else:
            results[node_id] = f"[green]stopped[/] in {time.monotonic() - started:.1f} s"
        _kill_session(pid)  # the straggler, or anything a stopped node left behind
    return results


def _kill_session(sid: int) -> None:
    pids = [p for p in (sid, *session_pids(sid)) if pid_alive(p)]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
    wait_gone(pids, 5_000)


def _refuse_live_cluster(run_dir: Path) -> None:
    if not (run_dir / CLUSTER_JSON).exists():
        return
    try:
        data = read_cluster_json(run_dir)
    except HarnessError:
        return
    if any(n["pid"] and is_node_process(n["pid"], n["run_dir"]) for n in data["nodes"]):
        raise CliError(f"a cluster is already running in {run_dir}: stop it with `mqlab down --run-dir {run_dir}`")


def _nodes_table(nodes: list[dict[str, Any]], *, title: str) -> Table:
    table = Table(title=title)
    for col in ("id", "role", "addr", "pid", "run dir"):
        table.add_column(col)
    for n in nodes:
        table.add_row(n["id"], n["role"], n["addr"], str(n["pid"] or "-"), n["run_dir"])
    return table


# ---- client commands -----------------------------------------------------------------

NamesrvOpt = Annotated[str | None, typer.Option("--namesrv", help="Name server host:port (or use --run-dir).")]
TopicOpt = Annotated[str, typer.Option("--topic", help="Topic name.")]


@app.command()
@cli_command
def produce(
    topic: TopicOpt,
    namesrv: NamesrvOpt = None,
    run_dir: RunDirOpt = None,
    count: Annotated[int, typer.Option("--count", min=1, help="Messages to send.")] = 1000,
    body_bytes: Annotated[int, typer.Option("--body-bytes", min=1, help="Body size in bytes.")] = 1024,
    tags: Annotated[str | None, typer.Option("--tags", help="Tag for every message.")] = None,
    batch: Annotated[int, typer.Option("--batch", min=1, help="Send batches of K messages (send_batch).")] = 1,
    inflight: Annotated[int, typer.Option("--inflight", min=1, help="Async sends in flight (1 = synchronous).")] = 1,
    group: Annotated[str, typer.Option("--group", help="Producer group.")] = "mqlab_cli_producer",
) -> None:
    """Send COUNT messages to TOPIC and print throughput (exit 1 if any send failed)."""
    addr, options = _resolve_cluster(namesrv, run_dir)
    producer_cls = _client_class("Producer")
    tag = f"p{time.time_ns() // 1_000_000:x}"
    producer_obj = producer_cls(addr, group=group, **tools.client_kwargs(producer_cls, **options))
    with _started(producer_obj) as producer, _progress() as bar:
        task = bar.add_task("sending", total=count)
        stats = tools.produce(producer, topic, count, body_bytes=body_bytes, tags=tags, batch=batch,
                              inflight=inflight, tag=tag, on_progress=lambda n: bar.advance(task, n))
    table = _summary_table("produce", [
        ("sent", stats.attempted), ("SEND_OK", stats.ok),
        *((status, n) for status, n in sorted(stats.not_ok.items())),
        ("failed", stats.failed), ("msgs/s", f"{stats.msgs_per_s:,.0f}"), ("MB/s", f"{stats.mb_per_s:.2f}"),
        ("seconds", f"{stats.elapsed_s:.2f}")])
    console.print(table)
    _print_errors(stats.errors)
    if stats.failed:
        raise typer.Exit(EXIT_PROBLEM)


@dataclass
class _PushTally:
    """What `mqlab consume`'s listener saw (guarded by `lock`)."""

    received: int = 0
    bytes: int = 0
    retries: int = 0  # deliveries with reconsume_times > 0
    active: int = 0  # listener calls counting right now (held calls past --count are not active)
    ids: Counter[str] = field(default_factory=Counter)
    queues: Counter[MessageQueue] = field(default_factory=Counter)
    last_delivery: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)


@app.command()
@cli_command
def consume(
    topic: TopicOpt,
    namesrv: NamesrvOpt = None,
    run_dir: RunDirOpt = None,
    group: Annotated[str, typer.Option("--group", help="Consumer group (offsets are committed for it).")] = "mqlab_cli_consumer",
    count: Annotated[int | None, typer.Option("--count", min=1, help="Stop after N messages (later deliveries stay uncommitted).")] = None,
    from_offset: Annotated[FromOffset, typer.Option("--from-offset", help="Where queues without a committed offset start: 'first' message (CONSUME_FROM_FIRST_OFFSET) or 'committed' (CONSUME_FROM_LAST_OFFSET, RocketMQ's default).")] = FromOffset.committed,
    batch: Annotated[int, typer.Option("--batch", min=1, max=c.PULL_BATCH_COUNT_MAX, help="Messages per pull.")] = 32,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Stop after S seconds without a message.")] = 5.0,
    threads: Annotated[int, typer.Option("--threads", min=1, max=1000, help="Consume threads.")] = c.CONSUME_THREAD_MIN,
) -> None:
    """Consume TOPIC with a push consumer (clustering, in this process); offsets are committed as it goes."""
    addr, options = _resolve_cluster(namesrv, run_dir)
    consumer_cls = _client_class("PushConsumer")
    where = (ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET if from_offset is FromOffset.first
             else ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET)
    tally = _PushTally()
    done, release = threading.Event(), threading.Event()

    def listener(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        with tally.lock:
            tally.active += 1
            room = len(msgs) if count is None else count - tally.received
            for msg in msgs[:max(room, 0)]:
                tally.received += 1
                tally.bytes += len(msg.body)
                tally.retries += msg.reconsume_times > 0
                tally.ids[msg.msg_id] += 1
                tally.queues[ctx.message_queue] += 1
            tally.last_delivery = time.monotonic()
            if count is not None and tally.received >= count:
                done.set()
            tally.active -= 1
        if room >= len(msgs):
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        # Past --count: hold the call until the consumer has shut down (it does not wait for
        # running calls), so its result is dropped and the messages stay uncommitted.
        release.wait()
        return ConsumeConcurrentlyStatus.RECONSUME_LATER

    consumer = consumer_cls(addr, group, consume_from_where=where, **tools.client_kwargs(
        consumer_cls, pull_batch_size=batch, consume_thread_min=threads, await_termination_ms=0, **options))
    consumer.subscribe(topic)
    consumer.register_listener(listener)
    try:
        with _started(consumer):
            try:
                queues = consumer.fetch_subscribe_message_queues(topic)
            except RouteNotFoundError:
                queues = []
            if not queues:
                raise CliError(f"topic {topic} has no queues; send to it first (`mqlab produce --topic {topic}`)")
            stopped_by, elapsed_s, offsets = _watch_push(consumer, tally, done, count, timeout)
    finally:
        release.set()
    _print_push_summary(topic, tally, stopped_by, elapsed_s, offsets)


def _watch_push(consumer: Any, tally: _PushTally, done: threading.Event, count: int | None,
                idle_timeout_s: float) -> tuple[str, float, dict[MessageQueue, int]]:
    """Show progress until the count is reached or the consumer idles; returns why it stopped,
    the elapsed seconds and the committed offsets it holds."""
    start = time.monotonic()
    with tally.lock:
        tally.last_delivery = start
    with _progress() as bar:
        task = bar.add_task("receiving", total=count)
        while True:
            stop = done.wait(CONSUME_POLL_S)
            with tally.lock:
                received, idle_s = tally.received, time.monotonic() - tally.last_delivery
            bar.update(task, completed=received)
            if stop:
                stopped_by = "count"
                break
            if idle_s >= idle_timeout_s:
                stopped_by = f"idle {idle_timeout_s:g} s"
                break
    elapsed_s = time.monotonic() - start
    settle_until = time.monotonic() + CONSUME_SETTLE_S
    while time.monotonic() < settle_until:  # counted calls finish, so their offsets are committed
        with tally.lock:
            if not tally.active:
                break
        time.sleep(CONSUME_POLL_S)
    offsets: dict[MessageQueue, int] = {}
    try:
        for q in consumer.describe().get("queues", []):
            offsets[MessageQueue(q["topic"], q["broker_name"], q["queue_id"])] = q["offset"]
    except MqError:
        pass  # the summary shows '-' for the committed offsets
    return stopped_by, elapsed_s, offsets


def _print_push_summary(topic: str, tally: _PushTally, stopped_by: str, elapsed_s: float,
                        offsets: dict[MessageQueue, int]) -> None:
    duplicates = sum(n - 1 for n in tally.ids.values())
    rate = tally.received / elapsed_s if elapsed_s > 0 else 0.0
    mb_rate = tally.bytes / elapsed_s / 1e6 if elapsed_s > 0 else 0.0
    console.print(_summary_table("consume", [
        ("received", tally.received), ("unique", len(tally.ids)), ("duplicates", duplicates),
        ("retries", tally.retries), ("msgs/s", f"{rate:,.0f}"), ("MB/s", f"{mb_rate:.2f}"),
        ("seconds", f"{elapsed_s:.2f}"), ("stopped by", stopped_by)]))
    table = Table(title="queues")
    for col in ("topic", "broker", "queue", "received", "committed"):
        table.add_column(col, justify="left" if col in ("topic", "broker") else "right")
    for mq in sorted(set(tally.queues) | {mq for mq in offsets if mq.topic == topic}):
        table.add_row(mq.topic, mq.broker_name, str(mq.queue_id), str(tally.queues.get(mq, 0)),
                      str(offsets.get(mq, "-")))
    console.print(table)


@app.command()
@cli_command
def demo(
    messages: Annotated[int, typer.Option("--messages", min=1, help="Messages to send and read back.")] = 10_000,
    body_bytes: Annotated[int, typer.Option("--body-bytes", min=32, help="Body size in bytes.")] = 1024,
    time_scale: Annotated[float, typer.Option("--time-scale", help="Multiply every timer by F.")] = 1.0,
    run_dir: RunDirOpt = None,
    inflight: Annotated[int, typer.Option("--inflight", min=1, help="Async sends in flight.")] = 64,
) -> None:
    """Start a fresh cluster, send N unique messages, read them all back, check nothing was lost."""
    wall_start = time.monotonic()
    producer_cls, consumer_cls = _client_class("Producer"), _client_class("PullConsumer")
    tag = f"demo{time.time_ns() // 1_000_000:x}"
    with console.status("starting cluster…"):
        cluster = LocalCluster(time_scale=time_scale, run_dir=run_dir)
    try:
        console.print(_nodes_table(cluster.cluster_info()["nodes"], title=f"cluster in {cluster.run_dir}"))
        client_opts = {"timing": cluster.timing}
        with _started(producer_cls(cluster.namesrv_addr, group="demo_producer",
                                   **tools.client_kwargs(producer_cls, **client_opts))) as producer, _progress() as bar:
            task = bar.add_task("sending", total=messages)
            sent = tools.produce(producer, DEMO_TOPIC, messages, body_bytes=body_bytes, inflight=inflight, tag=tag,
                                 on_progress=lambda n: bar.advance(task, n))
        _print_errors(sent.errors)
        with console.status(f"waiting for {DEMO_TOPIC}'s route…"):
            cluster.wait_until_routable(DEMO_TOPIC)
        deliveries = tools.DeliveryLog(tag, body_bytes)
        with _started(consumer_cls(cluster.namesrv_addr, "demo_consumer",
                                   **tools.client_kwargs(consumer_cls, **client_opts))) as consumer:
            queues = sorted(consumer.fetch_queues(DEMO_TOPIC))
            offsets = tools.start_offsets(consumer, queues, "first")
            targets = {mq: consumer.max_offset(mq) for mq in queues}
            with _progress() as bar:
                task = bar.add_task("receiving", total=sum(targets[q] - offsets[q] for q in queues))
                pulled = tools.consume(consumer, queues, offsets, batch=32, targets=targets,
                                       idle_timeout_s=max(10.0, 4 * cluster.timing.broker_suspend_max_ms / 1000),
                                       on_message=deliveries, on_progress=lambda n: bar.advance(task, n))
        _print_errors(pulled.errors)
        died = cluster.unexpected_exits
    finally:
        with console.status("stopping cluster…"):
            cluster.close()
    verdict = deliveries.verdict(sent.attempted, sent.acked)
    console.print(_summary_table("demo", [
        ("sent", verdict.sent), ("acked", verdict.acked), ("received", verdict.received),
        ("lost", _mark(len(verdict.lost))), ("duplicates", verdict.duplicates),
        ("corrupt", _mark(len(verdict.corrupt))), ("unexpected", _mark(verdict.unexpected)),
        ("send msgs/s", f"{sent.msgs_per_s:,.0f}"), ("pull msgs/s", f"{pulled.msgs_per_s:,.0f}"),
        ("wall time", f"{time.monotonic() - wall_start:.1f} s"), ("run dir", str(cluster.run_dir))]))
    if verdict.lost:
        err_console.print(f"lost seqs (first 20): {verdict.lost[:20]}")
    for record in died:
        err_console.print(f"[bold red]unexpected exit:[/] {escape(str(record))}; logs in {cluster.run_dir}")
    if not verdict.ok or died:
        raise typer.Exit(EXIT_PROBLEM)
    console.print("[green]every acknowledged message came back exactly as sent[/]")


# ---- helpers -------------------------------------------------------------------------

def _resolve_cluster(namesrv: str | None, run_dir: Path | None) -> tuple[str, dict[str, Any]]:
    """(namesrv address, client options): with a run dir the clients use the cluster's timing."""
    if namesrv and run_dir:
        raise CliError("give either --namesrv or --run-dir, not both")
    if namesrv:
        return namesrv, {}
    data = read_cluster_json(run_dir or DEFAULT_RUN_DIR)
    options: dict[str, Any] = {}
    try:
        _, config = load_node_config(Path(data["nodes"][0]["run_dir"]) / "config.json")
        options["timing"] = config.timing
    except (ConfigError, IndexError):
        pass  # the clients' default timing still works, just with production timers
    return data["namesrv"], options


def _client_class(name: str) -> Any:
    try:
        import nodes.client as client
    except ImportError as exc:
        raise CliError(f"the client library cannot be imported ({exc}); reinstall mqlab") from exc
    cls = getattr(client, name, None)
    if cls is None:
        raise CliError(f"nodes.client has no {name} in this checkout yet; update it")
    return cls


@contextmanager
def _started(client: Any) -> Iterator[Any]:
    client.start()
    try:
        yield client
    finally:
        tools.stop_quietly(client)


class _RateColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:>9,.0f} msg/s" if speed else "        - msg/s")


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), _RateColumn(),
                    TimeElapsedColumn(), console=console)


def _summary_table(title: str, rows: list[tuple[str, Any]]) -> Table:
    table = Table(title=title, show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    for what, value in rows:
        table.add_row(what, str(value))
    return table


def _mark(n: int) -> str:
    return f"[bold red]{n}[/]" if n else "0"


def _print_errors(errors: Any) -> None:
    for text, n in errors.most_common(5):
        err_console.print(f"[yellow]{n} x[/] {escape(text)}")


def _add_plugin_apps() -> None:
    """Sub-apps of the layers above the harness (`mqlab chaos`, from chaos.cli) come in through the
    `mqlab.cli` entry-point group, so this module never imports them (DESIGN §2)."""
    for ep in entry_points(group="mqlab.cli"):
        try:
            app.add_typer(ep.load(), name=ep.name)
        except Exception:  # a broken plugin must not take the cluster commands down with it
            if os.environ.get("MQLAB_DEBUG"):
                raise


app.add_typer(bench_app, name="bench")  # `mqlab bench pull` (harness.bench)
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
