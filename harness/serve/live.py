"""One running cluster as the live page shows it: its processes, its faults, and what its name
server and brokers answer.

Two speeds. What the harness knows locally (every node's process from cluster.json and the
process table, the nemesis history) is read on every request, so a node that exits shows down
on the next poll of the page. What the cluster answers (brokers and roles, topic routes, queue
offsets, the groups' lag, owners and orderly locks) comes from a collector thread that asks
through `harness.cluster_admin.ClusterAdmin` every `LIVE_POLL_INTERVAL_MS` while a page is
watching, with a short timeout and its queries side by side, so a paused or partitioned broker
costs one timeout per poll and shows as not answering; rates are the deltas of the master's max
queue offsets (sent) and the groups' consumer offsets (delivered) between two polls.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psutil

from harness.cluster_admin import BrokerAnswer, ClusterAdmin
from harness.errors import HarnessError
from harness.pids import is_node_process
from harness.serve.faults import NEMESIS_JSONL, FaultTail
from harness.serve.runs import CLUSTER_JSON, RUN_JSON, read_json
from nodes.common import constants as c
from nodes.common import names

log = logging.getLogger(__name__)

LIVE_POLL_INTERVAL_MS = 1_000  # how often the collector asks the cluster while a page watches
LIVE_RPC_TIMEOUT_MS = 800  # per call: a broker that does not answer within it is shown as such
LIVE_IDLE_STOP_MS = 30_000  # the collector stops when no page asked for this long
LIVE_QUERY_THREADS = 8  # queries asked side by side (one per topic, group and the runtime)
FAULT_WINDOWS_SHOWN = 200  # the page's timeline keeps the most recent windows

T = TypeVar("T")


@dataclass
class _Totals:
    wall_ms: int
    sent: dict[str, int]  # topic -> sum of the masters' max queue offsets
    queues_sent: dict[str, int]  # "topic/broker/queue" -> max offset
    delivered: dict[str, int]  # group -> sum of stored consumer offsets
    queues_delivered: dict[str, int]  # "group/topic/broker/queue" -> consumer offset


class LiveCluster:
    """The live view of the cluster whose run dir is `run_dir` (it holds cluster.json)."""

    def __init__(self, run_id: str, run_dir: Path, *, poll_interval_ms: int = LIVE_POLL_INTERVAL_MS,
                 rpc_timeout_ms: int = LIVE_RPC_TIMEOUT_MS) -> None:
        self.run_id = run_id
        self.run_dir = run_dir
        self.poll_interval_ms = poll_interval_ms
        self.rpc_timeout_ms = rpc_timeout_ms
        self.faults = FaultTail(run_dir / NEMESIS_JSONL)
        self._lock = threading.Lock()
        self._admin_snapshot: dict[str, Any] = {"collected_wall_ms": None, "error": "not asked yet"}
        self._last_request = time.monotonic()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._admin: ClusterAdmin | None = None
        self._namesrv: str | None = None
        self._prev: _Totals | None = None
        self._node_configs: dict[str, dict[str, Any]] = {}
        self.polls = 0

    # ---- what a request gets --------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Processes and faults as of now, and the collector's latest answers (its age is in them)."""
        self._touch()
        cluster = read_json(self.run_dir / CLUSTER_JSON)
        processes = self.processes(cluster)
        faults, fault_states = self.faults.view(FAULT_WINDOWS_SHOWN)
        for p in processes:
            p["fault"] = fault_states.get(p["id"])
        with self._lock:
            admin = dict(self._admin_snapshot)
        _mark_brokers(processes, admin)
        clients = _client_nodes(processes, admin)
        run = read_json(self.run_dir / RUN_JSON)
        return {
            "run": self.run_id, "run_dir": str(self.run_dir), "now_wall_ms": _wall_ms(),
            "time_scale": cluster.get("time_scale") if isinstance(cluster, dict) else None,
            "cluster_error": None if isinstance(cluster, dict) else f"no readable {CLUSTER_JSON} in {self.run_dir}",
            "run_info": {k: run.get(k) for k in ("suite", "seed", "time_scale", "topology", "client", "phases_s")}
            if isinstance(run, dict) else None,
            "processes": processes,
            "faults": faults,
            "admin": admin,
            "clients": clients,
        }

    def processes(self, cluster: Any) -> list[dict[str, Any]]:
        nodes = cluster.get("nodes") if isinstance(cluster, dict) else None
        rows = []
        for n in nodes if isinstance(nodes, list) else ():
            if not isinstance(n, dict) or not isinstance(n.get("id"), str):
                continue
            pid = n.get("pid") if isinstance(n.get("pid"), int) else None
            node_dir = n.get("run_dir") if isinstance(n.get("run_dir"), str) else ""
            config = self._node_config(n["id"], node_dir)
            row = {"id": n["id"], "role": n.get("role"), "addr": n.get("addr"), "remoting_addr": n.get("remoting_addr"),
                   "pid": pid, "state": _process_state(pid, node_dir),
                   "broker_name": config.get("broker_name"), "broker_id": config.get("broker_id")}
            if row["role"] == "broker" and isinstance(row["broker_id"], int):
                row["broker_role"] = "master" if row["broker_id"] == c.MASTER_ID else "slave"
            rows.append(row)
        return rows

    def _node_config(self, node_id: str, node_dir: str) -> dict[str, Any]:
        if node_id not in self._node_configs and node_dir:
            data = read_json(Path(node_dir) / "config.json")
            if isinstance(data, dict):
                self._node_configs[node_id] = data
        return self._node_configs.get(node_id, {})

    # ---- the collector -----------------------------------------------------------------------

    def _touch(self) -> None:
        with self._lock:
            self._last_request = time.monotonic()
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(target=self._run, name=f"live-{self.run_dir.name}", daemon=True)
                self._thread.start()

    def close(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=5 * self.rpc_timeout_ms / 1000 + 1)
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    def _run(self) -> None:
        with ThreadPoolExecutor(LIVE_QUERY_THREADS, thread_name_prefix=f"live-q-{self.run_dir.name}") as pool:
            while not self._stop.is_set():
                started = time.monotonic()
                with self._lock:
                    idle = started - self._last_request > LIVE_IDLE_STOP_MS / 1000
                if idle:
                    break
                try:
                    snap = self.collect(pool)
                except Exception as exc:  # the page must keep its processes and faults whatever this hits
                    log.exception("collecting %s failed", self.run_dir)
                    snap = {"collected_wall_ms": _wall_ms(), "error": f"{type(exc).__name__}: {exc}"}
                snap["took_ms"] = round((time.monotonic() - started) * 1000)
                with self._lock:
                    self._admin_snapshot = snap
                    self.polls += 1
                self._stop.wait(max(0.0, self.poll_interval_ms / 1000 - (time.monotonic() - started)))
        with self._lock:
            self._thread = None

    def _client(self) -> ClusterAdmin | None:
        cluster = read_json(self.run_dir / CLUSTER_JSON)
        namesrv = cluster.get("namesrv") if isinstance(cluster, dict) else None
        if not isinstance(namesrv, str):
            return None
        if namesrv != self._namesrv or self._admin is None:
            if self._admin is not None:
                self._admin.close()
            self._admin, self._namesrv = ClusterAdmin(namesrv, timeout_ms=self.rpc_timeout_ms), namesrv
        return self._admin

    def collect(self, pool: ThreadPoolExecutor) -> dict[str, Any]:
        """One round of questions to the cluster: brokers, topics, routes, offsets, groups, lag."""
        now = _wall_ms()
        admin = self._client()
        if admin is None:
            return {"collected_wall_ms": now, "error": f"no name server address in {self.run_dir / CLUSTER_JSON}"}
        snap: dict[str, Any] = {"collected_wall_ms": now, "error": None,
                                "namesrv": {"addr": admin.namesrv_addr, "ok": True, "error": None}}
        first = {name: pool.submit(_guard, fn) for name, fn in (
            ("topics", admin.topics), ("groups", admin.groups), ("runtime", admin.runtime))}
        topics_r, groups_r, runtime_r = (first[k].result() for k in ("topics", "groups", "runtime"))
        namesrv_errors = [r.error for r in (topics_r, runtime_r) if r.error]
        if namesrv_errors:
            snap["namesrv"].update(ok=False, error=namesrv_errors[0])
        snap["brokers"] = [_runtime_row(a) for a in runtime_r.value or ()]
        topics = [t for t in (topics_r.value[0] if topics_r.value else []) if not _system_topic(t)]
        group_names = sorted({row["group"] for a in groups_r.value or () for row in a.rows
                              if not _system_group(row["group"])})
        group_info = {row["group"]: row for a in groups_r.value or () for row in a.rows}
        topic_jobs = {t: (pool.submit(_guard, lambda t=t: admin.route(t)),
                          pool.submit(_guard, lambda t=t: admin.topic_status(t))) for t in topics}
        group_jobs = {g: pool.submit(_guard, lambda g=g: admin.consumer_progress(g)) for g in group_names}
        snap["topics"] = [_topic_view(t, route.result(), status.result()) for t, (route, status) in topic_jobs.items()]
        snap["groups"] = [_group_view(g, group_info.get(g, {}), job.result()) for g, job in group_jobs.items()]
        self._rates(snap, now)
        return snap

    def _rates(self, snap: dict[str, Any], now: int) -> None:
        totals = _Totals(now, {}, {}, {}, {})
        for t in snap["topics"]:
            for q in t["queues"]:
                if q["max_offset"] is not None:
                    totals.queues_sent[f"{t['topic']}/{q['broker_name']}/{q['queue_id']}"] = q["max_offset"]
            if t["queues"] and all(q["max_offset"] is not None for q in t["queues"]):
                totals.sent[t["topic"]] = sum(q["max_offset"] for q in t["queues"])
        for g in snap["groups"]:
            answered = [q for q in g["queues"] if q["consumer_offset"] is not None and q["consumer_offset"] >= 0]
            for q in answered:
                totals.queues_delivered[f"{g['group']}/{q['topic']}/{q['broker_name']}/{q['queue_id']}"] = q["consumer_offset"]
            if g["queues"] and not g["missing_brokers"]:
                totals.delivered[g["group"]] = sum(q["consumer_offset"] for q in answered)
        prev, self._prev = self._prev, totals
        dt_s = (now - prev.wall_ms) / 1000 if prev is not None else 0

        def rate(new: dict[str, int], old: dict[str, int], key: str) -> float | None:
            return _rate(new.get(key), old.get(key), dt_s)

        for t in snap["topics"]:
            t["send_rate"] = rate(totals.sent, prev.sent, t["topic"]) if prev else None
            for q in t["queues"]:
                key = f"{t['topic']}/{q['broker_name']}/{q['queue_id']}"
                q["send_rate"] = rate(totals.queues_sent, prev.queues_sent, key) if prev else None
        for g in snap["groups"]:
            g["deliver_rate"] = rate(totals.delivered, prev.delivered, g["group"]) if prev else None
            for q in g["queues"]:
                key = f"{g['group']}/{q['topic']}/{q['broker_name']}/{q['queue_id']}"
                q["deliver_rate"] = rate(totals.queues_delivered, prev.queues_delivered, key) if prev else None


# ---- shaping answers --------------------------------------------------------------------------


@dataclass
class _Guarded:
    value: Any = None
    error: str | None = None


def _guard(fn: Callable[[], T]) -> _Guarded:
    """A query's value, or what went wrong (a name server that did not answer, no route...)."""
    try:
        return _Guarded(fn())
    except HarnessError as exc:
        return _Guarded(error=str(exc))


def _answer_state(a: BrokerAnswer) -> dict[str, Any]:
    return {"broker_name": a.broker.broker_name, "broker_id": a.broker.broker_id, "addr": a.broker.addr,
            "code": a.code, "remark": a.remark, "answered": a.code != "UNREACHABLE"}


def _runtime_row(a: BrokerAnswer) -> dict[str, Any]:
    row = _answer_state(a)
    row["ok"] = a.ok
    if a.rows:
        r = a.rows[0]
        row.update({k: r.get(k) for k in ("role", "max_phys_offset", "slave_lag_bytes", "disk_used_ratio",
                                          "writes_refused", "writes_refused_reason", "master_addr", "store_errors")})
    return row


def _topic_view(topic: str, route: _Guarded, status: _Guarded) -> dict[str, Any]:
    view: dict[str, Any] = {"topic": topic, "route": [], "queues": [], "brokers": [], "error": route.error or status.error}
    if route.value is not None:
        view["order"] = bool(route.value.order_topic_conf)
        view["route"] = [{"broker_name": q.broker_name, "read_queue_nums": q.read_queue_nums,
                          "write_queue_nums": q.write_queue_nums, "perm": q.perm,
                          "brokers": {str(k): v for k, v in sorted(q.addrs.items())}} for q in route.value.queues]
    answers: list[BrokerAnswer] = status.value or []
    view["brokers"] = [_answer_state(a) for a in answers]
    # per queue: the master's offsets when it answered, else the first slave that did
    best: dict[tuple[str, int], tuple[int, dict[str, Any]]] = {}
    for a in answers:
        if not a.ok:
            continue
        for r in a.rows:
            key = (a.broker.broker_name, r["queue_id"])
            if key not in best or a.broker.broker_id < best[key][0]:
                best[key] = (a.broker.broker_id, r)
    for q in view["route"]:
        for qid in range(q["read_queue_nums"]):
            found = best.get((q["broker_name"], qid))
            view["queues"].append({"broker_name": q["broker_name"], "queue_id": qid,
                                   "answered_by": found[0] if found else None,
                                   "min_offset": found[1]["min_offset"] if found else None,
                                   "max_offset": found[1]["max_offset"] if found else None})
    return view


def _group_view(group: str, info: dict[str, Any], progress: _Guarded) -> dict[str, Any]:
    view: dict[str, Any] = {"group": group, "online_clients": info.get("online_clients"),
                            "consume_type": info.get("consume_type"), "message_model": info.get("message_model"),
                            "queues": [], "error": progress.error, "missing_brokers": []}
    answers: list[BrokerAnswer] = progress.value or []
    masters_ok = {a.broker.broker_name for a in answers if a.ok and a.broker.is_master}
    for a in answers:
        if not a.ok:
            if a.broker.is_master or a.broker.broker_name not in masters_ok:
                view["missing_brokers"].append(_answer_state(a))
            continue
        if not a.broker.is_master and a.broker.broker_name in masters_ok:
            continue  # the master's table is the one its consumers commit to
        for r in a.rows:
            view["queues"].append({**r, "broker_name": a.broker.broker_name, "answered_by": a.broker.broker_id})
    view["queues"].sort(key=lambda q: (q["topic"], q["broker_name"], q["queue_id"]))
    lags = [q["lag"] for q in view["queues"] if q["lag"] is not None]
    view["lag_total"] = sum(lags) if lags else None
    return view


def _mark_brokers(processes: list[dict[str, Any]], admin: dict[str, Any]) -> None:
    """Each broker process gets what its runtime answer said (role, or that it did not answer)."""
    by_addr = {b["addr"]: b for b in admin.get("brokers") or ()}
    for p in processes:
        b = by_addr.get(p.get("addr"))
        if p.get("role") == "broker" and b is not None:
            p["answered"] = bool(b.get("ok"))
            p["runtime_role"] = b.get("role")
            p["answer"] = b.get("code") if not b.get("ok") else None


def _client_nodes(processes: list[dict[str, Any]], admin: dict[str, Any]) -> dict[str, str]:
    """Client id -> the consumer node it runs in: a client id is `ip@pid#nanos`, and cluster.json
    names each consumer process's pid."""
    by_pid = {p["pid"]: p["id"] for p in processes if p.get("pid") is not None}
    out = {}
    for g in admin.get("groups") or ():
        for q in g.get("queues") or ():
            for cid in (q.get("lock_holder_client_id"), q.get("last_puller_client_id")):
                if cid and cid not in out:
                    pid = _pid_of_client_id(cid)
                    if pid in by_pid:
                        out[cid] = by_pid[pid]
    return out


def _pid_of_client_id(client_id: str) -> int | None:
    _, _, name = client_id.partition("@")
    head = name.split("#", 1)[0]
    return int(head) if head.isdigit() else None


def _process_state(pid: int | None, node_dir: str) -> str:
    """up, paused (SIGSTOP), or down (no pid, or the pid is no longer that node)."""
    if pid is None or not node_dir or not is_node_process(pid, node_dir):
        return "down"
    with contextlib.suppress(psutil.Error):
        if psutil.Process(pid).status() == psutil.STATUS_STOPPED:
            return "paused"
    return "up"


def _rate(new: int | None, old: int | None, dt_s: float) -> float | None:
    if new is None or old is None or dt_s <= 0 or new < old:
        return None  # unknown, or offsets went back (a broker restarted from an older store)
    return round((new - old) / dt_s, 1)


def _system_topic(topic: str) -> bool:
    """Topics a broker keeps for itself: retries and dead letters stay in the groups' rows."""
    return (topic.startswith((c.RETRY_GROUP_TOPIC_PREFIX, c.DLQ_GROUP_TOPIC_PREFIX)) or topic == c.AUTO_CREATE_TOPIC_KEY
            or names.is_send_forbidden(topic))


def _system_group(group: str) -> bool:
    return group.startswith("CID_RMQ_SYS_") or group in ("TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP",
                                                         "CID_ONSAPI_OWNER", "CID_ONSAPI_PERMISSION",
                                                         "CID_ONSAPI_PULL", "CID_ONS-HTTP-PROXY")


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class LiveRegistry:
    """One `LiveCluster` per watched run dir: `--run-dir`'s, or any under the runs dir."""

    def __init__(self, runs_root: Path, run_dir: Path | None = None) -> None:
        self.runs_root = runs_root
        self.run_dir = run_dir
        self._lock = threading.Lock()
        self._clusters: dict[str, LiveCluster] = {}

    def resolve(self, run_id: str) -> tuple[str, Path]:
        """The run dir a page asks for by id; `--run-dir`'s when the id is empty.

        Raises:
            LookupError: no such run dir with a cluster.json (the message says where to look).
        """
        if not run_id:
            if self.run_dir is None:
                raise LookupError("no cluster picked: pass ?run=ID (a run under the runs dir) or start "
                                  "`mqlab serve --run-dir DIR`")
            return "", self.run_dir
        root = self.runs_root.resolve()
        path = (root / run_id).resolve()
        if root not in path.parents or not (path / CLUSTER_JSON).is_file():
            raise LookupError(f"no cluster run dir {run_id!r} under {self.runs_root}: the runs page lists them")
        return run_id, path

    def get(self, run_id: str) -> LiveCluster:
        key, path = self.resolve(run_id)
        with self._lock:
            live = self._clusters.get(key)
            if live is None:
                live = self._clusters[key] = LiveCluster(key, path)
            return live

    def close(self) -> None:
        with self._lock:
            clusters, self._clusters = list(self._clusters.values()), {}
        for live in clusters:
            live.close()
