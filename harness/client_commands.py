"""`mqlab produce`, `mqlab consume`, `mqlab demo`: the client library against a cluster, with
progress bars and summary tables.

The work (message bodies, pull loops, the demo's verdict) is `harness.tools`; this module builds
the clients, draws the progress and prints the summaries.
"""

from __future__ import annotations

import enum
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.markup import escape
from rich.table import Table

from harness import terminal, tools
from harness.cluster import LocalCluster
from harness.cluster_commands import nodes_table
from harness.run_dir import LATEST_RUN_DIR, read_cluster_json
from harness.terminal import EXIT_PROBLEM, CliError, RunDirOpt, cli_command, mark, print_errors, summary_table
from nodes.client import Producer, PullConsumer, PushConsumer
from nodes.common import constants as c
from nodes.common.config import Timing, load_node_config
from nodes.common.errors import ConfigError, MqError, RouteNotFoundError
from nodes.common.types import ConsumeConcurrentlyStatus, ConsumeFromWhere, MessageExt, MessageQueue

DEMO_TOPIC = "DemoTopic"
CONSUME_POLL_S = 0.05  # how often `mqlab consume` looks at its counters
CONSUME_SETTLE_S = 2.0  # at the end, counted listener calls get this long to finish

NamesrvOpt = Annotated[str | None, typer.Option("--namesrv", help="Name server host:port (or use --run-dir).")]
TopicOpt = Annotated[str, typer.Option("--topic", help="Topic name.")]

ClientT = TypeVar("ClientT", Producer, PullConsumer, PushConsumer)


class FromOffset(enum.StrEnum):
    first = "first"
    committed = "committed"


@cli_command
def produce(
    topic: TopicOpt,
    namesrv: NamesrvOpt = None,
    run_dir: RunDirOpt = None,
    count: Annotated[int, typer.Option("--count", min=1, help="Messages to send.")] = 1000,
    body_bytes: Annotated[int, typer.Option("--body-bytes", min=1, help="Body size in bytes.")] = 1024,
    tags: Annotated[str | None, typer.Option("--tags", help="Tag for every message.")] = None,
    keys: Annotated[str | None, typer.Option("--keys", help="Key of every message, '{n}' replaced by its number (e.g. 'order-{n}'), so `mqlab admin message --key` finds it.")] = None,
    batch: Annotated[int, typer.Option("--batch", min=1, help="Send batches of K messages (send_batch).")] = 1,
    inflight: Annotated[int, typer.Option("--inflight", min=1, help="Async sends in flight (1 = synchronous).")] = 1,
    group: Annotated[str, typer.Option("--group", help="Producer group.")] = "mqlab_cli_producer",
) -> None:
    """Send COUNT messages to TOPIC and print throughput (exit 1 if any send failed)."""
    addr, timing = resolve_cluster(namesrv, run_dir)
    tag = f"p{time.time_ns() // 1_000_000:x}"
    with _started(Producer(addr, group=group, timing=timing)) as producer, terminal.progress() as bar:
        task = bar.add_task("sending", total=count)
        stats = tools.produce(producer, topic, count, body_bytes=body_bytes, tags=tags, keys=keys, batch=batch,
                              inflight=inflight, tag=tag, on_progress=lambda n: bar.advance(task, n))
    terminal.console.print(summary_table("produce", [
        ("sent", stats.attempted), ("SEND_OK", stats.ok),
        *((status, n) for status, n in sorted(stats.not_ok.items())),
        ("failed", stats.failed), ("msgs/s", f"{stats.msgs_per_s:,.0f}"), ("MB/s", f"{stats.mb_per_s:.2f}"),
        ("seconds", f"{stats.elapsed_s:.2f}")]))
    print_errors(stats.errors)
    refused = sum(n for text, n in stats.errors.items() if "SERVICE_NOT_AVAILABLE" in text)
    if refused:
        # the error lines are cut short: say plainly what code 14 means and what to do
        terminal.err_console.print(
            f"[bold red]{refused} message(s) refused with SERVICE_NOT_AVAILABLE (code 14)[/] by every broker tried: "
            "a broker refuses writes while its store's disk is used above its warning level (the remark names the "
            "CL/CQ ratios) or while it is not a master. Free space on that broker's store filesystem (writes "
            "resume within its disk check period) or send to another broker group.")
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
    addr, timing = resolve_cluster(namesrv, run_dir)
    where = (ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET if from_offset is FromOffset.first
             else ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET)
    tally = _PushTally()
    done, release = threading.Event(), threading.Event()

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
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

    consumer = PushConsumer(addr, group, consume_from_where=where, timing=timing, pull_batch_size=batch,
                            consume_thread_min=threads, await_termination_ms=0)
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


def _watch_push(consumer: PushConsumer, tally: _PushTally, done: threading.Event, count: int | None,
                idle_timeout_s: float) -> tuple[str, float, dict[MessageQueue, int]]:
    """Show progress until the count is reached or the consumer idles; returns why it stopped,
    the elapsed seconds and the committed offsets it holds."""
    start = time.monotonic()
    with tally.lock:
        tally.last_delivery = start
    with terminal.progress() as bar:
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
    terminal.console.print(summary_table("consume", [
        ("received", tally.received), ("unique", len(tally.ids)), ("duplicates", duplicates),
        ("retries", tally.retries), ("msgs/s", f"{rate:,.0f}"), ("MB/s", f"{mb_rate:.2f}"),
        ("seconds", f"{elapsed_s:.2f}"), ("stopped by", stopped_by)]))
    table = Table(title="queues")
    for col in ("topic", "broker", "queue", "received", "committed"):
        table.add_column(col, justify="left" if col in ("topic", "broker") else "right")
    for mq in sorted(set(tally.queues) | {mq for mq in offsets if mq.topic == topic}):
        table.add_row(mq.topic, mq.broker_name, str(mq.queue_id), str(tally.queues.get(mq, 0)),
                      str(offsets.get(mq, "-")))
    terminal.console.print(table)


@cli_command
def demo(
    messages: Annotated[int, typer.Option("--messages", min=1, help="Messages to send and read back.")] = 10_000,
    body_bytes: Annotated[int, typer.Option("--body-bytes", min=32, help="Body size in bytes.")] = 1024,
    time_scale: Annotated[float, typer.Option("--time-scale", help="Multiply every timer by F.")] = 1.0,
    run_dir: RunDirOpt = None,
    inflight: Annotated[int, typer.Option("--inflight", min=1, help="Async sends in flight.")] = 64,
) -> None:
    """Start a fresh cluster, send N unique messages, read them all back, check nothing was lost."""
    console, err_console = terminal.console, terminal.err_console
    wall_start = time.monotonic()
    tag = f"demo{time.time_ns() // 1_000_000:x}"
    with console.status("starting cluster…"):
        cluster = LocalCluster(time_scale=time_scale, run_dir=run_dir)
    try:
        console.print(nodes_table(cluster.cluster_info()["nodes"], title=f"cluster in {cluster.run_dir}"))
        producer_client = Producer(cluster.namesrv_addr, group="demo_producer", timing=cluster.timing)
        with _started(producer_client) as producer, terminal.progress() as bar:
            task = bar.add_task("sending", total=messages)
            sent = tools.produce(producer, DEMO_TOPIC, messages, body_bytes=body_bytes, inflight=inflight, tag=tag,
                                 on_progress=lambda n: bar.advance(task, n))
        print_errors(sent.errors)
        with console.status(f"waiting for {DEMO_TOPIC}'s route…"):
            cluster.wait_until_routable(DEMO_TOPIC)
        deliveries = tools.DeliveryLog(tag, body_bytes)
        with _started(PullConsumer(cluster.namesrv_addr, "demo_consumer", timing=cluster.timing)) as consumer:
            queues = sorted(consumer.fetch_queues(DEMO_TOPIC))
            offsets = tools.start_offsets(consumer, queues, "first")
            targets = {mq: consumer.max_offset(mq) for mq in queues}
            with terminal.progress() as bar:
                task = bar.add_task("receiving", total=sum(targets[q] - offsets[q] for q in queues))
                pulled = tools.consume(consumer, queues, offsets, batch=32, targets=targets,
                                       idle_timeout_s=max(10.0, 4 * cluster.timing.broker_suspend_max_ms / 1000),
                                       on_message=deliveries, on_progress=lambda n: bar.advance(task, n))
        print_errors(pulled.errors)
        died = cluster.unexpected_exits
    finally:
        with console.status("stopping cluster…"):
            cluster.close()
    verdict = deliveries.verdict(sent.attempted, sent.acked)
    console.print(summary_table("demo", [
        ("sent", verdict.sent), ("acked", verdict.acked), ("received", verdict.received),
        ("lost", mark(len(verdict.lost))), ("duplicates", verdict.duplicates),
        ("corrupt", mark(len(verdict.corrupt))), ("unexpected", mark(verdict.unexpected)),
        ("send msgs/s", f"{sent.msgs_per_s:,.0f}"), ("pull msgs/s", f"{pulled.msgs_per_s:,.0f}"),
        ("wall time", f"{time.monotonic() - wall_start:.1f} s"), ("run dir", str(cluster.run_dir))]))
    if verdict.lost:
        err_console.print(f"lost seqs (first 20): {verdict.lost[:20]}")
    for record in died:
        err_console.print(f"[bold red]unexpected exit:[/] {escape(str(record))}; logs in {cluster.run_dir}")
    if not verdict.ok or died:
        raise typer.Exit(EXIT_PROBLEM)
    console.print("[green]every acknowledged message came back exactly as sent[/]")


def resolve_cluster(namesrv: str | None, run_dir: Path | None) -> tuple[str, Timing | None]:
    """(namesrv address, client timing): with a run dir the clients use the cluster's timing (the
    spec's [timing] included); with only --namesrv, None: the clients take the cluster's time scale
    from the name server at start."""
    if namesrv and run_dir:
        raise CliError("give either --namesrv or --run-dir, not both")
    if namesrv:
        return namesrv, None
    data = read_cluster_json(run_dir or LATEST_RUN_DIR)
    try:
        _, config = load_node_config(Path(data["nodes"][0]["run_dir"]) / "config.json")
    except (ConfigError, IndexError):
        return data["namesrv"], None  # the clients take the cluster's time scale from the name server
    return data["namesrv"], config.timing


@contextmanager
def _started(client: ClientT) -> Iterator[ClientT]:
    client.start()
    try:
        yield client
    finally:
        tools.stop_quietly(client)
