"""`mqlab up`, `mqlab status`, `mqlab down`: start, inspect and stop a local cluster.

`up` runs a `LocalCluster`; `status` and `down` work from the run dir's cluster.json alone, so
they also reach a cluster another `mqlab up --detach` left running.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from harness import terminal
from harness.admin import credential_of, describe_addr
from harness.cluster import LocalCluster
from harness.disk import (
    KINDS,
    STORE_DIR_NAME,
    StoreMount,
    disk_usage,
    mounted_at,
    parse_size,
    store_options_for,
    unmount_stores,
)
from harness.errors import HarnessError
from harness.pids import KILL_REAP_BUDGET_MS, is_node_process, pid_alive, session_pids, wait_gone
from harness.run_dir import CLUSTER_JSON, LATEST_RUN_DIR, read_cluster_json, write_json_atomic
from harness.spec import ClusterSpec
from harness.terminal import EXIT_PROBLEM, CliError, RunDirOpt, cli_command
from harness.topology import DEFAULT_TOPOLOGY, topology_spec
from nodes.common import constants as c

STATUS_DESCRIBE_TIMEOUT_MS = 1_500
UP_WATCH_INTERVAL_S = 0.5  # how often a foreground `mqlab up` looks for unexpected exits


@cli_command
def up(
    spec: Annotated[Path | None, typer.Option("--spec", help="Cluster spec TOML (default: namesrv-0 + broker-a).")] = None,
    run_dir: RunDirOpt = None,
    time_scale: Annotated[float | None, typer.Option("--time-scale", help="Multiply every timer by F.")] = None,
    detach: Annotated[bool, typer.Option("--detach", help="Leave the cluster running and return.")] = False,
    topology: Annotated[str | None, typer.Option(
        "--topology", help="single (namesrv-0 + broker-a, the default) or 2x2 (namesrv-0/1, broker-a and "
        "broker-b, each master + slave); not with --spec.")] = None,
    store_size: Annotated[str | None, typer.Option(
        "--store-size", help="Put every broker's store on a filesystem of its own of SIZE (e.g. 64MiB; "
        "needs root); segments are sized to fit.")] = None,
    store_fs: Annotated[str, typer.Option("--store-fs", help="tmpfs or ext4 (a loop-mounted image), with "
                                          "--store-size.")] = "tmpfs",
) -> None:
    """Start a local cluster; stays up until Ctrl-C unless --detach."""
    console, err_console = terminal.console, terminal.err_console
    if spec is not None and topology is not None:
        raise CliError("--spec and --topology both name the nodes; pass one of them")
    cluster_spec = ClusterSpec.from_toml(spec) if spec is not None else topology_spec(topology or DEFAULT_TOPOLOGY)
    if store_size is not None:
        cluster_spec = with_store_size(cluster_spec, parse_size(store_size), store_fs)
    elif store_fs != "tmpfs":
        raise CliError("--store-fs picks the kind of --store-size's filesystem; pass --store-size too")
    if run_dir is not None:
        _refuse_live_cluster(run_dir)
    with console.status("starting cluster…"):
        cluster = LocalCluster(cluster_spec, time_scale=time_scale, run_dir=run_dir, detach=detach)
    console.print(nodes_table(cluster.cluster_info()["nodes"], title=f"cluster in {cluster.run_dir}"))
    console.print(f"namesrv: [bold]{';'.join(cluster.namesrv_addrs)}[/]   RocketMQ namesrvAddr: "
                  f"[bold]{cluster.namesrv_remoting_addr}[/]   RocketMQ 5 endpoints: [bold]{cluster.rocketmq5_endpoints}[/]   "
                  f"time scale: {cluster.spec.time_scale:g}")
    if detach:
        cluster.detach()
        record_store_mounts(cluster)
        console.print(f"left running. `mqlab status --run-dir {cluster.run_dir}`; "
                      f"stop it with `mqlab down --run-dir {cluster.run_dir}`")
        return
    console.print("running; press Ctrl-C to stop")
    seen = 0
    try:
        while True:
            time.sleep(UP_WATCH_INTERVAL_S)
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


@cli_command
def status(run_dir: RunDirOpt = None) -> None:
    """Show each node of a running cluster (exit 1 if any is down)."""
    path = run_dir or LATEST_RUN_DIR
    data = read_cluster_json(path)
    caption = f"time scale {data['time_scale']:g}" if "time_scale" in data else None
    table = Table(title=f"cluster in {path}", caption=caption)
    stores = {n["id"]: store_usage(n) for n in data["nodes"] if n["role"] == "broker"}
    columns = ("id", "role", "state", "addr", "remoting", "rocketmq5", "pid", "alive", *(("store",) if any(stores.values()) else ()),
               "status")
    for col in columns:
        table.add_column(col)
    down = 0
    for node in data["nodes"]:
        pid = node["pid"]
        alive = bool(pid) and is_node_process(pid, node["run_dir"])
        state, line = "DOWN", ""
        if alive:
            try:
                info = describe_addr(node["addr"], STATUS_DESCRIBE_TIMEOUT_MS, name=node["id"],
                                     credential=credential_of(node["run_dir"]))
                state, line = info["state"], info["status_line"]
            except HarnessError:
                state = "UNREACHABLE"
        healthy = alive and state != "UNREACHABLE"
        down += not healthy
        store = (stores.get(node["id"]) or "-",) if "store" in columns else ()
        table.add_row(node["id"], node["role"], f"[{'green' if healthy else 'red'}]{state}[/]", node["addr"],
                      node.get("remoting_addr") or "-", node.get("rocketmq5_addr") or "-", str(pid or "-"),
                      "yes" if alive else "[red]no[/]",
                      *store, escape(line))
    terminal.console.print(table)
    if down:
        terminal.console.print(f"[red]{down} of {len(data['nodes'])} node(s) down[/]")
        raise typer.Exit(EXIT_PROBLEM)


@cli_command
def down(run_dir: RunDirOpt = None) -> None:
    """Stop every node of a cluster: SIGTERM, grace period, SIGKILL for stragglers."""
    path = run_dir or LATEST_RUN_DIR
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
    # the store filesystems `up --store-size` mounted, and any broker store a dead harness left mounted
    mounts = [StoreMount.from_dict(m) for m in data.pop("store_mounts", [])]
    errors = unmount_stores(mounts, also=[Path(n["run_dir"]) / STORE_DIR_NAME for n in data["nodes"]
                                          if n["role"] == "broker"])
    try:
        write_json_atomic(Path(path) / CLUSTER_JSON, data)
    except OSError as exc:  # a full disk under the run dir: the nodes are stopped all the same
        unrecorded = f"{CLUSTER_JSON} still names their old pids: it could not be rewritten ({exc})"
    else:
        unrecorded = ""
    terminal.console.print(table)
    for mount in mounts:
        terminal.console.print(f"{mount.node_id}: unmounted its {mount.kind} store {mount.mount_point}")
    if errors:
        raise CliError("; ".join(errors) + f"; stop what still uses them, then `mqlab down --run-dir {path}` again")
    if unrecorded:
        raise CliError(f"the nodes above are stopped, but {unrecorded}; `mqlab status` reads those pids as down")


def record_store_mounts(cluster: LocalCluster) -> None:
    """Note a detached cluster's store filesystems in its cluster.json (`store_mounts`), for `mqlab down`,
    which unmounts them after the brokers stopped."""
    if cluster.store_mounts():
        data = read_cluster_json(cluster.run_dir)
        data["store_mounts"] = [m.as_dict() for m in cluster.store_mounts()]
        write_json_atomic(cluster.run_dir / CLUSTER_JSON, data)


def with_store_size(spec: ClusterSpec, size_bytes: int, kind: str) -> ClusterSpec:
    """Every broker's store on a filesystem of its own of `size_bytes`, with segments that fit it
    (store settings the spec gives itself win)."""
    if kind not in KINDS:
        raise CliError(f"--store-fs must be one of {', '.join(KINDS)}, got {kind!r}")
    broker = dict(spec.defaults.get("broker", {}))
    broker["store"] = {**store_options_for(size_bytes)["store"], **broker.get("store", {})}
    spec = dataclasses.replace(spec, defaults={**spec.defaults, "broker": broker})
    return spec.with_store_filesystem("brokers", size_bytes, kind)


def store_usage(node: dict[str, Any]) -> str | None:
    """`87.5% (28.0 MiB of 32.0 MiB)` for a broker whose store has a filesystem of its own, else None."""
    store = Path(node["run_dir"]) / STORE_DIR_NAME
    if mounted_at(store) is None:
        return None
    try:
        return disk_usage(store).describe()
    except OSError:
        return None


def nodes_table(nodes: list[dict[str, Any]], *, title: str) -> Table:
    """cluster.json's nodes as a table (what `up` and `demo` print after starting a cluster)."""
    table = Table(title=title)
    for col in ("id", "role", "addr", "remoting", "rocketmq5", "pid", "run dir"):
        table.add_column(col)
    for n in nodes:
        table.add_row(n["id"], n["role"], n["addr"], n.get("remoting_addr") or "-", n.get("rocketmq5_addr") or "-",
                      str(n["pid"] or "-"), n["run_dir"])
    return table


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
    wait_gone(pids, KILL_REAP_BUDGET_MS)


def _refuse_live_cluster(run_dir: Path) -> None:
    if not (run_dir / CLUSTER_JSON).exists():
        return
    try:
        data = read_cluster_json(run_dir)
    except HarnessError:
        return
    if any(n["pid"] and is_node_process(n["pid"], n["run_dir"]) for n in data["nodes"]):
        raise CliError(f"a cluster is already running in {run_dir}: stop it with `mqlab down --run-dir {run_dir}`")
