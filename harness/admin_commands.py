"""`mqlab admin ...`: an operator's everyday commands against a running cluster (RocketMQ's mqadmin:
updateTopic, deleteTopic, topicList, topicRoute, topicStatus, consumerProgress,
consumerConnection, clusterList / brokerStatus).

Each command takes `--run-dir` (default: the latest `mqlab up`) or `--namesrv`, prints a table,
and with `--json` prints the same data as JSON instead. Exit 0 when every broker answered, 1 when
one answered an error or could not be reached (its row says which), 2 when the command could not
run. The queries themselves are `harness.cluster_admin`.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from harness import admin_message, terminal
from harness.client_commands import NamesrvOpt, resolve_cluster
from harness.cluster_admin import (
    DEFAULT_CREATE_QUEUES,
    PERM_KEEP,
    PERMS,
    TOPIC_TYPES,
    BrokerAnswer,
    ClusterAdmin,
    real_client_margins,
)
from harness.terminal import EXIT_PROBLEM, CliError, RunDirOpt, cli_command
from nodes.common import constants as c

app = typer.Typer(name="admin", no_args_is_help=True, help="Operate a running cluster: topics, consumer groups, "
                                                              "brokers (RocketMQ's mqadmin).")
topic_app = typer.Typer(name="topic", no_args_is_help=True, help="Create, delete, list and inspect topics.")
group_app = typer.Typer(name="group", no_args_is_help=True, help="Consumer groups the brokers know.")
consumer_app = typer.Typer(name="consumer", no_args_is_help=True, help="A consumer group's progress and clients.")
app.add_typer(topic_app)
app.add_typer(group_app)
app.add_typer(consumer_app)
admin_message.register(app)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
TopicOpt = Annotated[str, typer.Option("--topic", help="Topic name.")]
GroupOpt = Annotated[str, typer.Option("--group", help="Consumer group.")]
BrokerOpt = Annotated[str | None, typer.Option("--broker", help="Only this broker group's master (default: every "
                                                                 "master).")]


def _admin(namesrv: str | None, run_dir: Path | None) -> ClusterAdmin:
    addr, _ = resolve_cluster(namesrv, run_dir)
    return ClusterAdmin(addr)


def _emit_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=1, sort_keys=False))


def _finish(answers: Iterable[BrokerAnswer]) -> None:
    """Print each broker that did not answer SUCCESS; exit 1 if there was one."""
    failed = [a for a in answers if not a.ok]
    for a in failed:
        terminal.err_console.print(f"[yellow]{escape(a.broker.label)}[/] ({escape(a.broker.addr)}): "
                                   f"{escape(a.code)}" + (f" - {escape(a.remark)}" if a.remark else ""))
    if failed:
        raise typer.Exit(EXIT_PROBLEM)


def _time(ms: int) -> str:
    """A store time for a table: UTC time of day (the JSON keeps the epoch ms)."""
    if ms <= 0:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%H:%M:%S.%f")[:-3]


def _age(ms: int) -> str:
    return "-" if ms < 0 else f"{ms / 1000:.1f} s ago"


def _table(title: str, columns: Iterable[str], rows: Iterable[Iterable[Any]], right: Iterable[str] = ()) -> Table:
    right = set(right)
    table = Table(title=title)
    for col in columns:
        table.add_column(col, justify="right" if col in right else "left")
    for row in rows:
        table.add_row(*(escape(str(v)) for v in row))
    return table


def _results_table(title: str, answers: Iterable[BrokerAnswer]) -> Table:
    return _table(title, ("broker", "addr", "result"),
                  [(a.broker.label, a.broker.addr, a.code + (f": {a.remark}" if a.remark else "")) for a in answers])


# ---- topics -------------------------------------------------------------------------------------


@topic_app.command("create")
@cli_command
def topic_create(
    topic: TopicOpt,
    queues: Annotated[int, typer.Option("--queues", min=1, max=1024, help="Read and write queues per broker.")
                      ] = DEFAULT_CREATE_QUEUES,
    topic_type: Annotated[str, typer.Option("--type", help=f"Topic type: {' | '.join(TOPIC_TYPES)}.")] = "NORMAL",
    broker: BrokerOpt = None,
    namesrv: NamesrvOpt = None, run_dir: RunDirOpt = None, as_json: JsonOpt = False,
) -> None:
    """Create TOPIC (or replace its config) on every master (RocketMQ updateTopic); it is routable once this returns."""
    with _admin(namesrv, run_dir) as admin:
        answers = admin.create_topic(topic, queues=queues, topic_type=topic_type.upper(), broker_name=broker)
    if as_json:
        _emit_json([a.to_json() for a in answers])
    else:
        terminal.console.print(_results_table(f"topic {topic}: {queues} queues, {topic_type.upper()}", answers))
    _finish(answers)


@topic_app.command("update")
@cli_command
def topic_update(
    topic: TopicOpt,
    read_queues: Annotated[int | None, typer.Option("--read-queues", min=1, max=1024, help="Read queues per broker.")
                           ] = None,
    write_queues: Annotated[int | None, typer.Option("--write-queues", min=1, max=1024,
                                                     help="Write queues per broker.")] = None,
    perm: Annotated[str | None, typer.Option("--perm", help=f"Permission: {' | '.join(PERMS)}.")] = None,
    namesrv: NamesrvOpt = None, run_dir: RunDirOpt = None, as_json: JsonOpt = False,
) -> None:
    """Change an existing TOPIC on every master of its route (RocketMQ updateTopic); what is not given stays."""
    if perm is not None and perm.upper() not in PERMS:
        raise CliError(f"--perm {perm!r} is not one of {', '.join(PERMS)} (read and write, read only, write only, "
                       "neither)")
    if read_queues is None and write_queues is None and perm is None:
        raise CliError("nothing to update: give --read-queues, --write-queues or --perm")
    with _admin(namesrv, run_dir) as admin:
        answers = admin.update_topic(topic, read_queues=read_queues or 0, write_queues=write_queues or 0,
                                     perm=PERM_KEEP if perm is None else PERMS[perm.upper()])
    if as_json:
        _emit_json([a.to_json() for a in answers])
    else:
        changes = ", ".join(f"{name} {value}" for name, value in (
            ("read queues", read_queues), ("write queues", write_queues), ("perm", perm and perm.upper()))
            if value is not None)
        terminal.console.print(_results_table(f"update topic {topic}", answers))
        terminal.console.print(f"changed: {escape(changes)}; the rest as it was")
    _finish(answers)


@topic_app.command("delete")
@cli_command
def topic_delete(topic: TopicOpt, broker: BrokerOpt = None, namesrv: NamesrvOpt = None, run_dir: RunDirOpt = None,
                 as_json: JsonOpt = False) -> None:
    """Delete TOPIC from every master (RocketMQ deleteTopic): its route goes away."""
    with _admin(namesrv, run_dir) as admin:
        answers = admin.delete_topic(topic, broker_name=broker)
    if as_json:
        _emit_json([a.to_json() for a in answers])
    else:
        terminal.console.print(_results_table(f"delete topic {topic}", answers))
    _finish(answers)


@topic_app.command("list")
@cli_command
def topic_list(namesrv: NamesrvOpt = None, run_dir: RunDirOpt = None, as_json: JsonOpt = False) -> None:
    """Every topic with a live route (RocketMQ topicList)."""
    with _admin(namesrv, run_dir) as admin:
        topics, time_scale = admin.topics()
        types = admin.topic_types(topics)
    if as_json:
        _emit_json({"topics": topics, "types": types, "time_scale": time_scale})
        return
    terminal.console.print(_table(f"{len(topics)} topics", ("topic", "type"),
                                  [(t, types.get(t) or "-") for t in topics]))
    terminal.console.print(f"name server time scale: {time_scale:g}")


@topic_app.command("route")
@cli_command
def topic_route(topic: TopicOpt, namesrv: NamesrvOpt = None, run_dir: RunDirOpt = None,
                as_json: JsonOpt = False) -> None:
    """TOPIC's route as a client gets it from the name server (RocketMQ topicRoute)."""
    with _admin(namesrv, run_dir) as admin:
        route = admin.route(topic)
    if as_json:
        _emit_json({"topic": route.topic, "order_topic_conf": route.order_topic_conf,
                    "queue_datas": [{"broker_name": q.broker_name, "read_queue_nums": q.read_queue_nums,
                                     "write_queue_nums": q.write_queue_nums, "perm": q.perm,
                                     "broker_addrs": q.addrs, "remoting_addrs": q.remoting_addrs}
                                    for q in route.queues]})
        return
    rows = [(q.broker_name, q.read_queue_nums, q.write_queue_nums, _perm(q.perm),
             ", ".join(f"{bid}={addr}" for bid, addr in sorted(q.addrs.items())),
             ", ".join(f"{bid}={addr}" for bid, addr in sorted(q.remoting_addrs.items())) or "-")
            for q in route.queues]
    terminal.console.print(_table(f"route of {topic}" + (f" (orderly: {route.order_topic_conf})"
                                                         if route.order_topic_conf else ""),
                                  ("broker", "read queues", "write queues", "perm", "gRPC", "remoting"), rows,
                                  right=("read queues", "write queues")))


def _perm(perm: int) -> str:
    return "".join(flag if perm & bit else "-" for flag, bit in (("R", 4), ("W", 2), ("X", 1)))


@topic_app.command("status")
@cli_command
def topic_status(topic: TopicOpt, namesrv: NamesrvOpt = None, run_dir: RunDirOpt = None,
                 as_json: JsonOpt = False) -> None:
    """Per queue on master and slave: min and max queue offset, last store time (RocketMQ topicStatus)."""
    with _admin(namesrv, run_dir) as admin:
        answers = admin.topic_status(topic)
    if as_json:
        _emit_json([a.to_json() for a in answers])
    else:
        rows = [(a.broker.label, r["queue_id"], f"{r['min_offset']:,}", f"{r['max_offset']:,}",
                 _time(r["last_store_timestamp_ms"])) for a in answers for r in a.rows]
        kinds = sorted({a.extra["message_type"] for a in answers if "message_type" in a.extra})
        terminal.console.print(_table(f"status of {topic} ({', '.join(kinds) or '-'})", ("broker", "queue", "min offset", "max offset",
                                                             "last store time (UTC)"), rows,
                                      right=("queue", "min offset", "max offset")))
    _finish(answers)


# ---- groups and consumers ----------------------------------------------------------------------


@group_app.command("list")
@cli_command
def group_list(namesrv: NamesrvOpt = None, run_dir: RunDirOpt = None, as_json: JsonOpt = False) -> None:
    """Every consumer group a broker knows: online clients, topics."""
    with _admin(namesrv, run_dir) as admin:
        answers = admin.groups()
    if as_json:
        _emit_json([a.to_json() for a in answers])
    else:
        rows = [(r["group"], a.broker.label, r["online_clients"], r["consume_type"] or "-",
                 r["message_model"] or "-", ", ".join(r["topics"])) for a in answers for r in a.rows]
        terminal.console.print(_table("consumer groups", ("group", "broker", "online clients", "consume type",
                                                          "model", "topics"), sorted(rows),
                                      right=("online clients",)))
    _finish(answers)


@group_app.command("update")
@cli_command
def group_update(
    group: GroupOpt,
    orderly: Annotated[bool | None, typer.Option(
        "--orderly/--concurrently", help="Consume in order (RocketMQ's consumeMessageOrderly, updateSubGroup -o): "
                                         "the group pops FIFO and RocketMQ 5 consumers are told `fifo`. "
                                         "Default: unchanged.")] = None,
    retry_max_times: Annotated[int | None, typer.Option(
        "--retry-max-times", min=0, max=c.GROUP_RETRY_MAX_TIMES_LIMIT,
        help="Redeliveries before the DLQ (updateSubGroup -r). Default: unchanged (16 for a new group).")] = None,
    broker: BrokerOpt = None,
    namesrv: NamesrvOpt = None, run_dir: RunDirOpt = None, as_json: JsonOpt = False,
) -> None:
    """Create GROUP or change its FIFO flag and retries on every master (RocketMQ updateSubGroup).
    A RocketMQ 5 PushConsumer reads the flag when it starts: update the group before its consumers start."""
    with _admin(namesrv, run_dir) as admin:
        answers = admin.update_group(group, orderly=orderly, retry_max_times=retry_max_times, broker_name=broker)
    if as_json:
        _emit_json([a.to_json() for a in answers])
    else:
        rows = [(a.broker.label, a.broker.addr, "yes" if r["orderly"] else "no", r["retry_max_times"])
                for a in answers for r in a.rows]
        terminal.console.print(_table(f"group {group}", ("broker", "addr", "orderly", "retry max times"), rows,
                                      right=("retry max times",)))
    _finish(answers)


@consumer_app.command("progress")
@cli_command
def consumer_progress(group: GroupOpt, topic: Annotated[str, typer.Option("--topic", help="Only this topic.")] = "",
                      namesrv: NamesrvOpt = None, run_dir: RunDirOpt = None, as_json: JsonOpt = False) -> None:
    """GROUP's progress per queue: broker offset, consumer offset, lag, who pulls it and who holds its
    lock (RocketMQ consumerProgress)."""
    with _admin(namesrv, run_dir) as admin:
        answers = admin.consumer_progress(group, topic)
    if as_json:
        _emit_json([a.to_json() for a in answers])
        _finish(answers)
        return
    rows, total = [], 0
    for a in _progress_sources(answers):
        for r in a.rows:
            total += r["lag"] or 0
            holder = r["lock_holder_client_id"]
            rows.append((r["topic"], a.broker.label, r["queue_id"], f"{r['broker_offset']:,}",
                         "-" if r["consumer_offset"] < 0 else f"{r['consumer_offset']:,}",
                         "-" if r["lag"] is None else f"{r['lag']:,}", _time(r["last_consumed_store_timestamp_ms"]),
                         r["last_puller_client_id"] or "-", _age(r["last_pull_age_ms"]),
                         f"{holder} ({r['lock_lease_left_ms'] / 1000:.1f} s left)" if holder else "-"))
    terminal.console.print(_table(f"progress of {group}: lag {total:,}",
                                  ("topic", "broker", "queue", "broker offset", "consumer offset", "lag",
                                   "last consumed (UTC)", "last pulled by", "pulled", "lock held by"), rows,
                                  right=("queue", "broker offset", "consumer offset", "lag")))
    terminal.console.print("[dim]per broker group its master's view (a slave's when the master did not answer); "
                           "--json has every broker's[/]")
    _finish(answers)


def _progress_sources(answers: list[BrokerAnswer]) -> list[BrokerAnswer]:
    """Per broker group the master's answer, else its slaves' (a consumer commits to the master; a
    slave holds a copy that lags by one sync)."""
    masters = {a.broker.broker_name for a in answers if a.ok and a.broker.is_master}
    return [a for a in answers if a.ok and (a.broker.is_master or a.broker.broker_name not in masters)]


@consumer_app.command("connections")
@cli_command
def consumer_connections(group: GroupOpt, namesrv: NamesrvOpt = None, run_dir: RunDirOpt = None,
                         as_json: JsonOpt = False) -> None:
    """GROUP's connected clients and subscriptions as each broker sees them (RocketMQ consumerConnection)."""
    with _admin(namesrv, run_dir) as admin:
        answers = admin.consumer_connections(group)
        real = not as_json and any(r["protocol"] == "remoting" for a in answers if a.ok for r in a.rows)
        runtime = admin.runtime() if real else []
    # a RocketMQ client over remoting keeps its own timers whatever the cluster's time scale
    _warn_margins(runtime, "[yellow]warning: a RocketMQ client is connected and[/]")
    if as_json:
        _emit_json([a.to_json() for a in answers])
    else:
        online = [a for a in answers if a.ok]
        if not online and not any(a.code == "UNREACHABLE" for a in answers):
            raise CliError(f"no client of group {group!r} is connected to any broker: is it running, and is the "
                           "name right (`mqlab admin group list`)?")
        rows = [(a.broker.label, r["client_id"], r["peer"] or "-", _client_kind(r),
                 _age(r["last_heartbeat_age_ms"])) for a in online for r in a.rows]
        terminal.console.print(_table(f"clients of {group}", ("broker", "client id", "peer", "client",
                                                              "last heartbeat"), rows))
        if online:
            a = online[0]
            subs = a.extra.get("subscriptions") or []
            terminal.console.print(f"{escape(a.extra.get('consume_type', ''))}, {escape(a.extra.get('message_model', ''))}, "
                                   f"from {escape(a.extra.get('consume_from_where', '') or '-')}; subscriptions: "
                                   + (", ".join(escape(f"{s['topic']} ({s['expression']})") for s in subs) or "none"))
    if any(a.ok for a in answers):
        # a broker none of the group's clients talks to answers CONSUMER_NOT_ONLINE: not a problem
        _finish(a for a in answers if a.code != "CONSUMER_NOT_ONLINE")
    else:
        _finish(answers)


def _warn_margins(runtime: Iterable[BrokerAnswer], prefix: str) -> None:
    """One line per margin some broker's timers leave a RocketMQ client too small (each said once)."""
    lines = dict.fromkeys(line for a in runtime for r in a.rows
                          for line in real_client_margins(r["broker_lock_lease_ms"], r["consumer_channel_expiry_ms"]))
    for line in lines:
        terminal.err_console.print(f"{prefix} {escape(line)}")


def _client_kind(r: dict[str, Any]) -> str:
    if r["protocol"] == "grpc":
        return "mqlab (gRPC)"
    return f"{r['language'] or '?'} v{r['version']} (remoting)"


# ---- brokers ------------------------------------------------------------------------------------


@app.command("cluster")
@cli_command
def cluster(namesrv: NamesrvOpt = None, run_dir: RunDirOpt = None, as_json: JsonOpt = False) -> None:
    """Every registered broker: role, offsets, slave lag, disk, time scale (RocketMQ clusterList, brokerStatus)."""
    with _admin(namesrv, run_dir) as admin:
        answers = admin.runtime()
    if as_json:
        _emit_json([a.to_json() for a in answers])
        _finish(answers)
        return
    rows = []
    for a in answers:
        if not a.rows:
            rows.append((a.broker.label, a.broker.addr, a.code, "-", "-", "-", "-", "-", "-"))
            continue
        r = a.rows[0]
        if r["role"] == "SLAVE":
            writes = "-"  # a slave never takes sends: nothing to report
        else:
            writes = "refused: " + r["writes_refused_reason"] if r["writes_refused"] else "ok"
        rows.append((a.broker.label, a.broker.addr, r["role"], f"{r['max_phys_offset']:,}",
                     "-" if r["slave_lag_bytes"] < 0 else f"{r['slave_lag_bytes']:,}",
                     f"{r['disk_used_ratio'] * 100:.1f}%", f"{r['disk_free_bytes'] / 2**20:,.0f}", writes,
                     f"{r['time_scale']:g}"))
    clusters = sorted({a.broker.cluster for a in answers})
    terminal.console.print(_table(f"brokers of {', '.join(clusters)}", (
        "broker", "addr", "role", "max phys offset", "slave lag bytes", "disk used", "disk free MiB", "writes",
        "time scale"), rows, right=("max phys offset", "slave lag bytes", "disk used", "disk free MiB")))
    _warn_margins(answers, "[dim]for RocketMQ clients (their timers are not scaled):[/]")
    _finish(answers)
