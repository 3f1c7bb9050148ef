"""`mqlab admin message`: find one message by key, by id or by queue offset (RocketMQ mqadmin's
queryMsgByKey, queryMsgById, queryMsgByOffset) and show what it is and who consumed it.

Asks each broker group of the topic's route (or every registered group) for the message: its
master, or, when the master is not registered or does not answer, its slave (a slave builds its
own index from the replicated commitlog and holds the same records at the same phys offsets).
Each match is a panel: where it is (queue, queue offset, phys offset), both ids, tags, keys, user
properties, born and store host and time, reconsume times, body size and a short preview, and
every consumer group with an offset on its queue, consumed (offset past it) or not.

Exit 0 with at least one match, 1 when nothing matched (it says what to try next) or a broker
could not answer, 2 when the command could not run.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from harness import terminal
from harness.client_commands import NamesrvOpt, resolve_cluster
from harness.cluster_admin import BrokerRef, ClusterAdmin
from harness.errors import HarnessError
from harness.terminal import EXIT_PROBLEM, CliError, RunDirOpt, cli_command
from nodes.common import constants as c
from proto import broker_pb2

# properties the store and client set themselves: shown in their own rows, not as user properties
_SYSTEM_PROPERTIES = frozenset({c.PROPERTY_TAGS, c.PROPERTY_KEYS, c.PROPERTY_UNIQ_KEY, "WAIT", "DELAY",
                                "REAL_TOPIC", "REAL_QID", "RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "MIN_OFFSET",
                                "MAX_OFFSET", "CLUSTER", "TRAN_MSG"})
PREVIEW_CHARS = 80


@dataclass
class LookupAnswer:
    """One broker's answer: its matches, or why there are none."""

    broker: BrokerRef
    code: str = "SUCCESS"
    remark: str = ""
    messages: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.code == "SUCCESS"

    def to_json(self) -> dict[str, Any]:
        return {"broker_name": self.broker.broker_name, "broker_id": self.broker.broker_id,
                "addr": self.broker.addr, "code": self.code, "remark": self.remark, "found": len(self.messages)}


def message_to_json(broker: BrokerRef, pb: broker_pb2.FoundMessage) -> dict[str, Any]:
    return {
        "broker_name": broker.broker_name, "broker_id": broker.broker_id,
        "topic": pb.topic, "queue_id": pb.queue_id, "queue_offset": pb.queue_offset, "phys_offset": pb.phys_offset,
        "offset_msg_id": pb.offset_msg_id, "msg_id": pb.msg_id, "tags": pb.tags, "keys": pb.keys,
        "user_properties": {k: v for k, v in sorted(pb.properties.items()) if k not in _SYSTEM_PROPERTIES},
        "properties": dict(sorted(pb.properties.items())),
        "born_host": pb.born_host, "born_timestamp_ms": pb.born_timestamp_ms,
        "store_host": pb.store_host, "store_timestamp_ms": pb.store_timestamp_ms,
        "reconsume_times": pb.reconsume_times, "flag": pb.flag, "sys_flag": pb.sys_flag,
        "body_size": pb.body_size, "body_preview": pb.body_preview.decode("utf-8", "replace"),
        "progress": [{"group": p.group, "consumer_offset": p.consumer_offset, "consumed": p.consumed}
                     for p in pb.progress],
    }


def find_messages(admin: ClusterAdmin, topic: str, *, key: str = "", msg_id: str = "", queue_id: int = -1,
                  queue_offset: int = -1, broker_name: str | None = None) -> list[LookupAnswer]:
    """Ask one broker of each group (its master, else a slave) for the message."""
    if key:
        method, request = "QueryMessage", broker_pb2.QueryMessageRequest(topic=topic, key=key)
    elif msg_id:
        method, request = "ViewMessage", broker_pb2.ViewMessageRequest(topic=topic, msg_id=msg_id)
    else:
        method, request = "ViewQueueMessage", broker_pb2.ViewQueueMessageRequest(
            topic=topic, queue_id=queue_id, queue_offset=queue_offset)
    groups = _broker_groups(admin, topic, broker_name)
    answers = []
    for refs in groups.values():
        answer = None
        for ref in refs:  # master first; the next one only when it did not answer
            answer = _ask(admin, ref, method, request)
            if answer.code != "UNREACHABLE":
                break
        if answer is not None:
            answers.append(answer)
    return answers


def _broker_groups(admin: ClusterAdmin, topic: str, broker_name: str | None) -> dict[str, list[BrokerRef]]:
    """The registered brokers of each group of the topic's route, master first."""
    registered = admin.brokers()
    try:
        names = {q.broker_name for q in admin.route(topic).queues}
    except HarnessError:
        names = {b.broker_name for b in registered}  # a topic whose route is gone may still have messages
    if broker_name is not None:
        if broker_name not in {b.broker_name for b in registered}:
            raise CliError(f"no broker of group {broker_name!r} is registered; the groups are "
                           f"{', '.join(sorted({b.broker_name for b in registered})) or 'none'} (`mqlab admin cluster`)")
        names = {broker_name}
    groups: dict[str, list[BrokerRef]] = {}
    for ref in sorted(registered, key=lambda r: (r.broker_name, r.broker_id)):
        if ref.broker_name in names:
            groups.setdefault(ref.broker_name, []).append(ref)
    if not groups:
        raise CliError("no broker of the topic's route is registered with the name server: is the cluster up "
                       "(`mqlab status`)?")
    return groups


def _ask(admin: ClusterAdmin, ref: BrokerRef, method: str, request: Any) -> LookupAnswer:
    broker_answer, pb = admin._ask(ref, method, request)
    answer = LookupAnswer(ref, broker_answer.code, broker_answer.remark)
    if pb is not None:
        answer.messages = [message_to_json(ref, m) for m in pb.messages]
    return answer


# ---- the command --------------------------------------------------------------------------------


def message(
    topic: Annotated[str, typer.Option("--topic", help="Topic of the message.")],
    key: Annotated[str, typer.Option("--key", help="One of the message's KEYS.")] = "",
    msg_id: Annotated[str, typer.Option("--id", help="Its offset message id or its client message id "
                                                     "(UNIQ_KEY, the msg id a send returns).")] = "",
    queue: Annotated[int | None, typer.Option("--queue", min=0, help="Queue id (with --offset).")] = None,
    offset: Annotated[int | None, typer.Option("--offset", min=0, help="Queue offset (with --queue).")] = None,
    broker: Annotated[str | None, typer.Option("--broker", help="Only this broker group (default: every group "
                                                                "of the topic's route).")] = None,
    namesrv: NamesrvOpt = None, run_dir: RunDirOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of panels.")] = False,
) -> None:
    """Find a message by key, id or queue offset: where it is, what it holds, which groups consumed it
    (RocketMQ queryMsgByKey / queryMsgById / queryMsgByOffset)."""
    by_queue = queue is not None or offset is not None
    if sum((bool(key), bool(msg_id), by_queue)) != 1:
        raise CliError("give exactly one of --key K, --id ID, or --queue Q --offset O")
    if by_queue and (queue is None or offset is None):
        raise CliError("--queue and --offset go together: the queue id and the queue offset in it")
    addr, _ = resolve_cluster(namesrv, run_dir)
    with ClusterAdmin(addr) as admin:
        answers = find_messages(admin, topic, key=key, msg_id=msg_id, queue_id=-1 if queue is None else queue,
                                queue_offset=-1 if offset is None else offset, broker_name=broker)
    found = [m for a in answers for m in a.messages]
    if as_json:
        typer.echo(json.dumps({"messages": found, "brokers": [a.to_json() for a in answers]}, indent=1))
    else:
        for m in found:
            terminal.console.print(_panel(m))
    _finish(answers, found, topic, key=key, msg_id=msg_id)


def _finish(answers: list[LookupAnswer], found: list[dict[str, Any]], topic: str, *, key: str, msg_id: str) -> None:
    failed = [a for a in answers if not a.ok and a.code != "QUERY_NOT_FOUND"]
    for a in failed:
        terminal.err_console.print(f"[yellow]{escape(a.broker.label)}[/] ({escape(a.broker.addr)}): "
                                   f"{escape(a.code)}" + (f" - {escape(a.remark)}" if a.remark else ""))
    if not found:
        what = f"key {key!r}" if key else f"id {msg_id!r}" if msg_id else "that queue offset"
        asked = ", ".join(a.broker.label for a in answers)
        terminal.err_console.print(
            f"no message of topic {escape(topic)!r} with {escape(what)} on {escape(asked) or 'any broker'}: check the "
            f"{'key' if key else 'id' if msg_id else 'queue and offset'} and the topic; `mqlab admin topic status "
            f"--topic {escape(topic)}` shows each queue's offsets")
        raise typer.Exit(EXIT_PROBLEM)
    if failed:
        raise typer.Exit(EXIT_PROBLEM)


def _time(ms: int) -> str:
    if ms <= 0:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _panel(m: dict[str, Any]) -> Panel:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    preview = m["body_preview"][:PREVIEW_CHARS] + ("…" if m["body_size"] > PREVIEW_CHARS else "")
    rows = [
        ("queue", f"{m['topic']} queue {m['queue_id']}, queue offset {m['queue_offset']:,}"),
        ("phys offset", f"{m['phys_offset']:,}"),
        ("offset msg id", m["offset_msg_id"]),
        ("msg id", m["msg_id"] or "-"),
        ("tags", m["tags"] or "-"),
        ("keys", m["keys"] or "-"),
        ("user properties", ", ".join(f"{k}={v}" for k, v in m["user_properties"].items()) or "-"),
        ("born", f"{m['born_host']} at {_time(m['born_timestamp_ms'])}"),
        ("stored", f"{m['store_host']} at {_time(m['store_timestamp_ms'])}"),
        ("reconsume times", str(m["reconsume_times"])),
        ("body", f"{m['body_size']:,} bytes: {preview!r}"),
    ]
    for name, value in rows:
        grid.add_row(name, escape(value))
    progress = Table(title="consumer groups on this queue", title_justify="left", box=None, padding=(0, 2))
    for col in ("group", "consumer offset", "consumed"):
        progress.add_column(col, justify="right" if col == "consumer offset" else "left")
    for p in m["progress"]:
        progress.add_row(escape(p["group"]), f"{p['consumer_offset']:,}",
                         "[green]yes[/]" if p["consumed"] else "[yellow]not yet[/]")
    body: Any = Group(grid, "", progress) if m["progress"] else Group(grid, "", "[dim]no group has an offset on "
                                                                                "this queue[/]")
    return Panel(body, title=f"{escape(m['broker_name'])}/{m['broker_id']}", title_align="left")


def register(app: typer.Typer) -> None:
    """Add `message` to `mqlab admin`."""
    app.command("message")(cli_command(message))

