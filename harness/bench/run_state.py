"""One benchmark run's configuration and state: `BenchConfig`, `Hooks`, `Run` (the cluster, the
child processes, the report) and `Run.run_workers`, which starts a case's workers, lines up
their windows and reads where the CPU went. The order of a run is `harness.bench.runner`'s;
what each measurement starts is `harness.bench.stages`'.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from harness.bench.peers import PEERS, RedisPeer, redis_missing
from harness.bench.processes import BROKER_NODES, BenchError, BrokerCpu, Child
from harness.bench.profile import RowProfile, py_spy_missing
from harness.bench.real_client_install import client_missing as real_client_missing
from harness.bench.results import (
    DEFAULT_SEND_BATCHES,
    DEFAULT_SEND_WINDOW,
    BenchReport,
    CaseResult,
    Measured,
    cpu_per_message,
    median_window,
)
from harness.cluster import LocalCluster
from nodes.common import constants as c

WORKER_READY_BUDGET_S = 60.0
WORKER_RESULT_SLACK_S = 60.0  # beyond the case's own seconds
ROUNDS_MAX = 9  # --rounds: the whole matrix at most this many times in one run

# Let one pull carry a whole batch of 1024 messages of up to ~16 KiB (RocketMQ's defaults cap a
# pull at 32 messages / 256 KiB in memory: maxTransfer{Count,Bytes}OnMessageInMemory).
TRANSFER_CAPS = {"transfer_count_max_in_memory": c.PULL_BATCH_COUNT_MAX,
                 "transfer_bytes_max_in_memory": 16 * 1024 * 1024}


# --tune-malloc: every process of the run (the clients, the references' processes, the limits
# server) gets the allocator thresholds the nodes always set for themselves
# (nodes.common.allocator; the nodes then keep these, set by the same values in the environment).
MALLOC_TUNING = {"MALLOC_MMAP_THRESHOLD_": str(c.MALLOC_MMAP_THRESHOLD_BYTES),
                 "MALLOC_TRIM_THRESHOLD_": str(c.MALLOC_TRIM_THRESHOLD_BYTES)}


BENCH_MODES = {"async": "ASYNC_MASTER", "sync-master": "SYNC_MASTER"}  # --mode: the master's broker_role


@dataclass(frozen=True)
class BenchConfig:
    messages: int = 100_000
    body_bytes: int = 1024
    queues: int = 8
    batches: tuple[int, ...] = (32, 1024)
    consumers: tuple[int, ...] = (1, 4)
    sources: tuple[str, ...] = ("master", "slave")
    seconds: float = 2.0  # one measuring window
    windows: int = 3  # windows per case and reference; the median one counts
    rounds: int = 1  # the whole matrix measured this many times; ratios and targets: the rounds' median
    window: int = 8  # pulls in flight per consumer process (and in the stream references)
    send_batches: tuple[int, ...] = DEFAULT_SEND_BATCHES  # messages per send_batch call
    send_window: int = DEFAULT_SEND_WINDOW  # send_async's bounded window
    pull: bool = True
    push: bool = True
    send: bool = True
    peers: tuple[str, ...] = ()  # "redis": Redis Streams rows beside the references
    # the master's role: ASYNC_MASTER ("async") or SYNC_MASTER ("sync-master": a send is answered
    # once the slave has it, and its Redis reference waits for the replica the same way)
    mode: str = "async"
    clients: tuple[str, ...] = ()  # real RocketMQ clients' rows beside mqlab's ("cpp", "ons")
    tune_malloc: bool = False  # run every process with MALLOC_TUNING
    message_index: bool = True  # the brokers' store.message_index_enable
    time_scale: float = 1.0
    keep_store: bool = False  # keep the brokers' stores in the run dir (deleted by default)
    profile: Path | None = None  # py-spy profiles of every row's processes into this dir
    run_dir: Path | None = None

    @classmethod
    def quick(cls, **overrides: Any) -> BenchConfig:
        """--quick: 1 KiB bodies, batch 32 and 1024, master and slave, one consumer."""
        base = cls(messages=20_000, body_bytes=1024, batches=(32, 1024), consumers=(1,), seconds=1.0, windows=3)
        return dataclasses.replace(base, **overrides)

    @property
    def measuring_seconds(self) -> float:
        return self.seconds * self.windows

    def validate(self) -> None:
        if not 1 <= self.rounds <= ROUNDS_MAX:
            raise BenchError(f"--rounds {self.rounds} is outside 1..{ROUNDS_MAX}")
        if self.messages < self.queues:
            raise BenchError(f"--messages {self.messages} is fewer than --queues {self.queues}")
        for batch in self.batches:
            if not 1 <= batch <= c.PULL_BATCH_COUNT_MAX:
                raise BenchError(f"batch {batch} is outside 1..{c.PULL_BATCH_COUNT_MAX}")
        if any(k < 1 or k > self.queues for k in self.consumers):
            raise BenchError(f"consumer counts must be in 1..{self.queues} (each consumer reads whole queues)")
        for send_batch in self.send_batches:
            if self.body_bytes < 1 or self.body_bytes * send_batch > c.MESSAGE_BODY_BYTES_MAX:
                raise BenchError(f"--body-bytes {self.body_bytes} x send batch {send_batch} must fit in "
                                 f"{c.MESSAGE_BODY_BYTES_MAX} bytes")
        if not set(self.sources) <= {"master", "slave"}:
            raise BenchError("sources are 'master' and 'slave'")
        if self.mode not in BENCH_MODES:
            raise BenchError(f"unknown --mode {self.mode!r}: modes are {', '.join(BENCH_MODES)}")
        unknown = set(self.peers) - set(PEERS)
        if unknown:
            raise BenchError(f"unknown peer(s) {sorted(unknown)}: --peers takes {', '.join(PEERS)}")
        if self.profile is not None and py_spy_missing():
            raise BenchError(py_spy_missing() or "")
        for name in dict.fromkeys(self.clients):
            missing = real_client_missing(name)
            if missing:
                raise BenchError(missing)
        if "redis" in self.peers:
            missing = redis_missing()
            if missing:
                raise BenchError(missing)


@dataclass
class Hooks:
    """How the run reports progress (the CLI draws; tests pass nothing)."""

    stage: Callable[[str], None] = lambda text: None
    preloaded: Callable[[int, int], None] = lambda done, total: None  # (sent so far, total)
    case_done: Callable[[CaseResult], None] = lambda case: None


# ---- child processes --------------------------------------------------------------------------

def _worker_argv(job: dict[str, Any]) -> list[str]:
    return [sys.executable, "-m", "harness.bench.worker", json.dumps(job)]


class WorkersRun(NamedTuple):
    measured: Measured
    error_samples: list[str]
    cpu_us_per_msg: dict[str, float]  # see CaseResult.cpu_us_per_msg


class Run:
    """One benchmark run's state: cluster, children, report."""

    def __init__(self, config: BenchConfig, hooks: Hooks, cluster: LocalCluster) -> None:
        self.config = config
        self.hooks = hooks
        self.cluster = cluster
        self.report = BenchReport()
        self.log_dir = cluster.run_dir / "bench"
        self.timing = dataclasses.asdict(cluster.timing)
        self._children: list[Child] = []
        self._names = iter(range(1, 1 << 30))
        self.redis: RedisPeer | None = None  # alone: the pull references and redis-xadd
        self.redis_replicated: RedisPeer | None = None  # with redis_replica attached: the replicated sends
        self.redis_replica: RedisPeer | None = None
        self.limits_addr = ""  # the limits server's gRPC address, once started
        self.tcp_port = 0  # its TCP reference port
        self.round_number = 1  # of config.rounds

    def fresh_group(self, name: str) -> str:
        """A consumer group no earlier round used: a push consumer that starts from the first
        offset must find no offsets committed by the last round's."""
        return name if self.round_number == 1 else f"{name}_r{self.round_number}"

    def child(self, argv: Sequence[str], name: str) -> Child:
        proc = Child(argv, f"{name}-{next(self._names)}", self.log_dir,
                     MALLOC_TUNING if self.config.tune_malloc else None)
        self._children.append(proc)
        return proc

    def close_children(self) -> None:
        children, self._children = self._children, []
        for proc in children:
            proc.close()

    # ---- running workers ---------------------------------------------------------------
    def run_workers(self, name: str, jobs: list[dict[str, Any]], seconds: float, *,
                    servers: dict[str, int] | None = None,
                    argv: Callable[[dict[str, Any]], list[str]] = _worker_argv,
                    raw_results: list[dict[str, Any]] | None = None) -> WorkersRun:
        """Start one worker per job, wait until all are READY, GO, and combine their results
        (`seconds`: how long they measure in all). The brokers' CPU (and that of the peer
        `servers`, pids by role) is read at GO and when the windows end, the workers' own over their windows:
        per message, where the cost is paid. `argv`: a job's command (a real client's worker);
        `raw_results`: also gets each worker's RESULT object."""
        workers = [self.child(argv(job), name) for job in jobs]
        brokers = BrokerCpu(self.cluster, servers)
        profile: RowProfile | None = None
        try:
            for worker in workers:
                worker.expect("READY", WORKER_READY_BUDGET_S)
            for worker in workers:
                worker.go()
            brokers.start(seconds)
            if self.config.profile is not None:
                pids = {f"client{i}": w.proc.pid for i, w in enumerate(workers)}
                pids.update({role: pid for role, pid in self._broker_pids().items()})
                row = name if self.config.rounds == 1 else f"{name}-round{self.round_number}"
                profile = RowProfile(self.config.profile, row, pids, seconds)
            results = [json.loads(w.expect("RESULT", seconds + WORKER_RESULT_SLACK_S)) for w in workers]
            brokers.finish()  # the work ended before `seconds` (one pass, push): read the brokers now
            if profile is not None:
                profile.finish(sum(sum(r["windows"]) for r in results))
                profile = None
        finally:
            if profile is not None:
                profile.cancel()
            brokers.cancel()
            for worker in workers:
                worker.close()
                self._children.remove(worker)
        if raw_results is not None:
            raw_results.extend(results)
        samples = [s for r in results for s in r.get("error_samples", [])]
        measured = median_window([(r["windows"], r["window_seconds"]) for r in results], self.config.body_bytes,
                               sum(r["errors"] for r in results))
        worker_cpu = [r.get("cpu_s") for r in results]
        cpu_s = {"clients": None if None in worker_cpu else sum(worker_cpu), **brokers.used_s()}
        cpu = cpu_per_message(cpu_s, sum(sum(r["windows"]) for r in results))
        return WorkersRun(measured, samples, cpu)

    def _broker_pids(self) -> dict[str, int]:
        pids = {}
        for role, node_id in BROKER_NODES.items():
            pid = self.cluster.node(node_id).pid
            if pid is not None:
                pids[role] = pid
        return pids

    def record(self, case: CaseResult, samples: list[str]) -> None:
        self.report.results.append(case)
        if case.measured.errors:
            self.report.problems.append(f"{case.label}: {case.measured.errors} errors, e.g. {samples[:2]}")
        self.hooks.case_done(case)
