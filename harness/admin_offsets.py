"""`mqlab admin reset-offset`: a consumer group's offsets back (or forward) to a time, as RocketMQ's
mqadmin resetOffsetByTime does.

Each master of the topic's route finds, per queue, the first message stored at or after the
time, stores that offset as the group's, and tells the group's online clients, which restart
those queues from it (mqlab's PushConsumer, and a RocketMQ 4.x client over remoting). An offline
group gets its stored offsets reset all the same and starts from them. The query is
`harness.cluster_admin.ClusterAdmin.reset_offset`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from harness import terminal
from harness.admin_commands import (
    GroupOpt,
    JsonOpt,
    TopicOpt,
    _admin,
    _emit_json,
    _finish,
    _table,
    _time,
)
from harness.client_commands import NamesrvOpt
from harness.terminal import RunDirOpt, cli_command


def register(admin_app: typer.Typer) -> None:
    """Mount `reset-offset` on `mqlab admin` (harness.cli does; this module imports admin_commands'
    helpers, so admin_commands cannot import it back)."""
    admin_app.command("reset-offset")(reset_offset)


@cli_command
def reset_offset(group: GroupOpt, topic: TopicOpt,
                 timestamp_ms: Annotated[int, typer.Option(
                     "--timestamp-ms", min=-1, help="Epoch milliseconds: each queue restarts at its first message "
                                                    "stored at or after it (-1: at its end, skipping everything).")],
                 namesrv: NamesrvOpt = None, run_dir: RunDirOpt = None, as_json: JsonOpt = False) -> None:
    """Reset GROUP's offsets of TOPIC to a time and tell its online clients (RocketMQ resetOffsetByTime)."""
    with _admin(namesrv, run_dir) as admin:
        answers = admin.reset_offset(group, topic, timestamp_ms)
    if as_json:
        _emit_json([a.to_json() for a in answers])
        _finish(answers)
        return
    rows = []
    for a in answers:
        told = ", ".join(a.extra.get("clients_told") or []) or "none (offline)"
        for r in a.rows:
            rows.append((a.broker.label, r["queue_id"], "-" if r["old_offset"] < 0 else f"{r['old_offset']:,}",
                         f"{r['new_offset']:,}", told))
    when = "the end of each queue" if timestamp_ms < 0 else f"{_time(timestamp_ms)} UTC ({timestamp_ms})"
    terminal.console.print(_table(f"reset {group} on {topic} to {when}",
                                  ("broker", "queue", "old offset", "new offset", "clients told"), rows,
                                  right=("queue", "old offset", "new offset")))
    _finish(answers)
