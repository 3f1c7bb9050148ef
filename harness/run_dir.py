"""A cluster's run dir and its `cluster.json`: making a fresh run dir (and the `runs/latest`
link), the file every `mqlab` command reads to find a running cluster, and reading it back.

Run dir layout: `<run_dir>/cluster.json` and one dir per node (`config.json`, `node.log`,
`stderr.log`, `stdout.log`, `store/`). With no run dir given, a fresh `./runs/<utc>-<pid>/` is
made and `./runs/latest` points at it.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.process import LIVE_STATES, NodeProcess
from harness.spec import REMOTING_ROLES

CLUSTER_JSON = "cluster.json"
RUNS_DIR = Path("runs")
LATEST_LINK = "latest"
LATEST_RUN_DIR = RUNS_DIR / LATEST_LINK  # the run dir `mqlab` commands use without --run-dir


def cluster_json(namesrv_addr: str, time_scale: float, procs: Iterable[NodeProcess]) -> dict[str, Any]:
    """`{"namesrv": addr, "namesrv_remoting": "addr;addr", "rocketmq5_endpoints": "addr;addr",
    "time_scale": f, "nodes": [{"id","role","addr","pid","run_dir"[,"remoting_addr"][,"rocketmq5_addr"]}...]}`;
    pid is null for a node that is not running; `remoting_addr` is on name servers and brokers,
    `rocketmq5_addr` on brokers; every timer of the run is scaled by time_scale."""
    procs = list(procs)
    return {
        "namesrv": namesrv_addr,
        "namesrv_remoting": namesrv_remoting(procs),
        "rocketmq5_endpoints": rocketmq5_endpoints(procs),
        "time_scale": time_scale,
        "nodes": [_node_entry(p) for p in procs],
    }


def namesrv_remoting(procs: Iterable[NodeProcess]) -> str:
    """The name servers' remoting addresses as a RocketMQ client's namesrvAddr: `;`-joined."""
    return ";".join(p.remoting_addr for p in procs if p.role == "namesrv" and p.remoting_addr)


def rocketmq5_endpoints(procs: Iterable[NodeProcess]) -> str:
    """The masters' RocketMQ 5 endpoints as a 5.x client's `endpoints`: `;`-joined (any one
    answers QueryRoute for the whole cluster; the client tries them in turn)."""
    return ";".join(p.rocketmq5_addr for p in procs
                    if p.role == "broker" and p.rocketmq5_addr and getattr(p.config, "broker_id", 0) == 0)


def _node_entry(proc: NodeProcess) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": proc.node_id, "role": proc.role, "addr": proc.addr,
                             "pid": proc.pid if proc.state in LIVE_STATES and proc.alive else None,
                             "run_dir": str(proc.run_dir)}
    if proc.role in REMOTING_ROLES:
        entry["remoting_addr"] = proc.remoting_addr
    if proc.rocketmq5_addr:
        entry["rocketmq5_addr"] = proc.rocketmq5_addr
    return entry


def read_cluster_json(run_dir: str | Path) -> dict[str, Any]:
    """Load and check `<run_dir>/cluster.json`.

    Raises:
        HarnessError: missing or malformed, with what to do next.
    """
    path = Path(run_dir) / CLUSTER_JSON
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise HarnessError(f"no {CLUSTER_JSON} in {run_dir}: start a cluster with "
                           f"`mqlab up --detach` or pass --run-dir") from None
    except (OSError, ValueError) as exc:
        raise HarnessError(f"{path} is unreadable ({exc}); remove it or point --run-dir elsewhere") from exc
    nodes = data.get("nodes") if isinstance(data, dict) else None
    if not isinstance(nodes, list) or not isinstance(data.get("namesrv"), str) or not all(
            isinstance(n, dict) and {"id", "role", "addr", "pid", "run_dir"} <= set(n) for n in nodes):
        raise HarnessError(f"{path} is not a cluster.json (needs namesrv and nodes[id, role, addr, pid, run_dir])")
    return data


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def make_run_dir(run_dir: str | Path | None, runs: Path = RUNS_DIR) -> Path:
    """Create the run dir; with None, a fresh `runs/<utc>-<pid>` plus the `runs/latest` link."""
    if run_dir is not None:
        path = Path(run_dir).absolute()
        path.mkdir(parents=True, exist_ok=True)
        return path
    runs.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for attempt in range(1, 1000):
        name = f"{stamp}-{os.getpid()}" + (f"-{attempt}" if attempt > 1 else "")
        path = runs / name
        try:
            path.mkdir()
            break
        except FileExistsError:
            continue
    else:
        raise HarnessError(f"cannot make a fresh run dir under {runs}; clean it up")
    link_tmp = runs / f".{LATEST_LINK}.{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        link_tmp.unlink()
    link_tmp.symlink_to(name)
    os.replace(link_tmp, runs / LATEST_LINK)
    return path.absolute()

