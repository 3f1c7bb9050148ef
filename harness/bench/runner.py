"""The pull benchmark's run: a fresh cluster, a preload, the case matrix, the same-run limits.

Owns the order of a run and the client processes it starts (`harness.bench.worker`, the
limits server); draws nothing (the CLI passes callbacks). Every process it starts is stopped
before `run_bench` returns, on failure and Ctrl-C too.

Order: start the cluster (master + slave; both brokers may hand out whole batches of 1024,
see `TRANSFER_CAPS`), create the topics, preload, wait for the slave, scan the master's
commitlog (the mmap limit and the record size), read every queue once from each broker (a
broker checks a record's CRC the first time it hands it out: these "first read" rows show
that cost, and leave the timed cases measuring re-reads), then per batch size: the gRPC
stream limit, then every pull case; then push; then the unary limits and the send cases (last:
they grow the commitlog). Every limit and case counts `windows` windows and keeps its best,
so each side gets the same number of tries at a quiet moment of a shared machine.

Slave cases pin the PullConsumer to broker id 1 (`PullConsumer(pull_from_broker_id=1)`, a
bench-only option): with RocketMQ's defaults a slave answers and then suggests the master, so
following the suggestion would measure the master again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import platform
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import grpc
import psutil

from harness.bench.limits import scan_commitlog
from harness.bench.processes import BenchError, BrokerCpu, Child
from harness.bench.results import (
    DEFAULT_SEND_BATCH,
    DEFAULT_SEND_WINDOW,
    PUSH_PULL_BATCH,
    BenchReport,
    CaseResult,
    Measured,
    StreamLimit,
    UnaryLimit,
    best_window,
    cpu_per_message,
)
from harness.cluster import LocalCluster
from harness.spec import ClusterSpec
from nodes.common import constants as c
from nodes.common.rpc import make_sync_channel
from proto import broker_pb2, broker_pb2_grpc, common_pb2

PULL_TOPIC = "BenchPull"
SEND_TOPIC = "BenchSend"
PRELOAD_BATCH = 100  # messages per send_batch while preloading
PRELOAD_THREADS = 4
WORKER_READY_BUDGET_S = 60.0
WORKER_RESULT_SLACK_S = 60.0  # beyond the case's own seconds
SLAVE_CATCH_UP_BUDGET_S = 120.0
RPC_TIMEOUT_S = 10.0
# Let one pull carry a whole batch of 1024 messages of up to ~16 KiB (RocketMQ's defaults cap a
# pull at 32 messages / 256 KiB in memory: maxTransfer{Count,Bytes}OnMessageInMemory).
TRANSFER_CAPS = {"transfer_count_max_in_memory": c.PULL_BATCH_COUNT_MAX,
                 "transfer_bytes_max_in_memory": 16 * 1024 * 1024}


# --tune-malloc: glibc serves allocations of 128 KiB and more with a fresh mmap, so every ~1 MiB
# pull buffer (records, protobuf fields, grpc frames) costs page faults and zeroing in the
# kernel; raising the threshold keeps such buffers in the reused heap.
MALLOC_TUNING = {"MALLOC_MMAP_THRESHOLD_": str(32 * 1024 * 1024), "MALLOC_TRIM_THRESHOLD_": str(256 * 1024 * 1024)}


@dataclass(frozen=True)
class BenchConfig:
    messages: int = 100_000
    body_bytes: int = 1024
    queues: int = 8
    batches: tuple[int, ...] = (32, 1024)
    consumers: tuple[int, ...] = (1, 4)
    sources: tuple[str, ...] = ("master", "slave")
    seconds: float = 2.0  # one measuring window
    windows: int = 3  # windows per case and limit; the best one counts
    window: int = 8  # pulls in flight per consumer process (and in the stream limit)
    send_batch: int = DEFAULT_SEND_BATCH  # messages per send_batch call
    send_window: int = DEFAULT_SEND_WINDOW  # send_async's bounded window
    push: bool = True
    send: bool = True
    tune_malloc: bool = False  # run every process with MALLOC_TUNING
    time_scale: float = 1.0
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
        if self.messages < self.queues:
            raise BenchError(f"--messages {self.messages} is fewer than --queues {self.queues}")
        for batch in self.batches:
            if not 1 <= batch <= c.PULL_BATCH_COUNT_MAX:
                raise BenchError(f"batch {batch} is outside 1..{c.PULL_BATCH_COUNT_MAX}")
        if any(k < 1 or k > self.queues for k in self.consumers):
            raise BenchError(f"consumer counts must be in 1..{self.queues} (each consumer reads whole queues)")
        if self.body_bytes < 1 or self.body_bytes * self.send_batch > c.MESSAGE_BODY_BYTES_MAX:
            raise BenchError(f"--body-bytes {self.body_bytes} x send batch {self.send_batch} must fit in "
                             f"{c.MESSAGE_BODY_BYTES_MAX} bytes")
        if not set(self.sources) <= {"master", "slave"}:
            raise BenchError("sources are 'master' and 'slave'")


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
    def run_workers(self, name: str, jobs: list[dict[str, Any]], seconds: float) -> WorkersRun:
        """Start one worker per job, wait until all are READY, GO, and combine their results
        (`seconds`: how long they measure in all). The brokers' CPU is read at GO and when the
        windows end, the workers' own over their windows: per message, where the cost is paid."""
        workers = [self.child(_worker_argv(job), name) for job in jobs]
        brokers = BrokerCpu(self.cluster)
        try:
            for worker in workers:
                worker.expect("READY", WORKER_READY_BUDGET_S)
            for worker in workers:
                worker.go()
            brokers.start(seconds)
            results = [json.loads(w.expect("RESULT", seconds + WORKER_RESULT_SLACK_S)) for w in workers]
            brokers.finish()  # the work ended before `seconds` (one pass, push): read the brokers now
        finally:
            brokers.cancel()
            for worker in workers:
                worker.close()
                self._children.remove(worker)
        samples = [s for r in results for s in r.get("error_samples", [])]
        measured = best_window([(r["windows"], r["window_seconds"]) for r in results], self.config.body_bytes,
                               sum(r["errors"] for r in results))
        worker_cpu = [r.get("cpu_s") for r in results]
        cpu_s = {"clients": None if None in worker_cpu else sum(worker_cpu), **brokers.used_s()}
        cpu = cpu_per_message(cpu_s, sum(sum(r["windows"]) for r in results))
        return WorkersRun(measured, samples, cpu)

    def record(self, case: CaseResult, samples: list[str]) -> None:
        self.report.results.append(case)
        if case.measured.errors:
            self.report.problems.append(f"{case.label}: {case.measured.errors} errors, e.g. {samples[:2]}")
        self.hooks.case_done(case)


# ---- stages -----------------------------------------------------------------------------

def _broker_stub(addr: str) -> tuple[grpc.Channel, broker_pb2_grpc.BrokerStub]:
    channel = make_sync_channel(addr)
    return channel, broker_pb2_grpc.BrokerStub(channel)


def create_topic(cluster: LocalCluster, topic: str, queues: int) -> None:
    channel, stub = _broker_stub(cluster.node("broker-a-0").addr)
    with channel:
        resp = stub.CreateTopic(broker_pb2.CreateTopicRequest(config=common_pb2.TopicConfig(
            topic=topic, read_queue_nums=queues, write_queue_nums=queues, perm=c.PERM_DEFAULT)), timeout=RPC_TIMEOUT_S)
    if resp.code != common_pb2.SUCCESS:
        raise BenchError(f"creating topic {topic} failed: {resp.remark}")
    cluster.wait_until_routable(topic)


def queue_max_offsets(addr: str, topic: str, queues: int) -> list[int]:
    channel, stub = _broker_stub(addr)
    with channel:
        return [stub.GetQueueOffset(broker_pb2.GetQueueOffsetRequest(topic=topic, queue_id=q, kind=broker_pb2.MAX),
                                    timeout=RPC_TIMEOUT_S).offset for q in range(queues)]


def preload(run: Run) -> int:
    """Send `messages` with send_batch from a few threads; returns how many were stored."""
    from nodes.client import Message, Producer

    config = run.config
    body = b"m" * config.body_bytes
    total = config.messages
    sent = [0]
    lock = threading.Lock()

    def send(count: int) -> None:
        producer.send_batch([Message(PULL_TOPIC, body) for _ in range(count)])
        with lock:
            sent[0] += count
            run.hooks.preloaded(sent[0], total)

    producer = Producer(run.cluster.namesrv_addr, group="bench_preload", timing=run.cluster.timing)
    producer.start()
    try:
        batches = [min(PRELOAD_BATCH, total - first) for first in range(0, total, PRELOAD_BATCH)]
        with ThreadPoolExecutor(PRELOAD_THREADS, thread_name_prefix="bench-preload") as pool:
            for fut in [pool.submit(send, n) for n in batches]:
                fut.result()
    finally:
        producer.shutdown()
    return sent[0]


def wait_for_slave(run: Run) -> None:
    cluster, queues = run.cluster, run.config.queues
    want = queue_max_offsets(cluster.node("broker-a-0").addr, PULL_TOPIC, queues)
    deadline = time.monotonic() + SLAVE_CATCH_UP_BUDGET_S
    while True:
        try:
            have = queue_max_offsets(cluster.node("broker-a-1").addr, PULL_TOPIC, queues)
        except grpc.RpcError:
            have = []
        if have == want:
            return
        if time.monotonic() > deadline:
            raise BenchError(f"the slave did not catch up within {SLAVE_CATCH_UP_BUDGET_S:.0f} s: "
                             f"max offsets {have} vs the master's {want}")
        time.sleep(0.1)


def measure_scan(run: Run) -> None:
    commitlog = run.cluster.node("broker-a-0").run_dir / "store" / "commitlog"
    measured, record_bytes = scan_commitlog(commitlog, seconds_min=min(1.0, run.config.seconds),
                                            body_bytes=run.config.body_bytes)
    run.report.limits.mmap_scan = measured
    run.report.limits.record_bytes = record_bytes


def start_limits_server(run: Run) -> str:
    server = run.child([sys.executable, "-m", "harness.bench.limits", "--record-bytes",
                        str(run.report.limits.record_bytes)], "limits-server")
    port = server.expect("READY", WORKER_READY_BUDGET_S)
    return f"127.0.0.1:{port}"


def measure_stream_limit(run: Run, addr: str, batch: int) -> None:
    config = run.config
    job = {"role": "grpc-stream", "addr": addr, "batch": batch, "window": config.window, "seconds": config.seconds,
           "windows": config.windows, "body_bytes": config.body_bytes}
    measured = run.run_workers(f"limit-stream-b{batch}", [job], config.measuring_seconds).measured
    known = run.report.limits.grpc_stream.get(batch)
    if known is None or measured.msgs_per_s > known.measured.msgs_per_s:
        run.report.limits.grpc_stream[batch] = StreamLimit(batch, config.window, measured)


def measure_pull(run: Run, source: str, batch: int, consumers: int, *, first_read: bool = False) -> None:
    """Pull for `seconds`; with `first_read`, one pass over every queue instead (the brokers check
    each record the first time they hand it out, so this pass shows what a first read costs)."""
    config = run.config
    seconds, windows = (max(60.0, 20 * config.seconds), 1) if first_read else (config.seconds, config.windows)
    jobs = [{"role": "pull", "namesrv": run.cluster.namesrv_addr, "timing": run.timing, "topic": PULL_TOPIC,
             "group": "bench_pull", "queue_ids": [q for q in range(config.queues) if q % consumers == i],
             "batch": batch, "window": config.window, "source": source, "seconds": seconds, "windows": windows,
             "one_pass": first_read, "body_bytes": config.body_bytes} for i in range(consumers)]
    name = f"pull-{source}-b{batch}-x{consumers}" + ("-first" if first_read else "")
    measured, samples, cpu = run.run_workers(name, jobs, seconds * windows)
    run.record(CaseResult("pull", source, batch, config.body_bytes, consumers, measured,
                          mode="first-read" if first_read else "", window=config.window,
                          cpu_us_per_msg=cpu), samples)


def measure_push(run: Run, expected: int) -> None:
    config = run.config
    job = {"role": "push", "namesrv": run.cluster.namesrv_addr, "timing": run.timing, "topic": PULL_TOPIC,
           "group": "bench_push", "batch": PUSH_PULL_BATCH, "expected": expected,
           "seconds": max(10.0, 10 * config.seconds), "body_bytes": config.body_bytes}
    measured, samples, cpu = run.run_workers("push", [job], job["seconds"])
    run.record(CaseResult("push", "master", PUSH_PULL_BATCH, config.body_bytes, 1, measured, cpu_us_per_msg=cpu),
               samples)


SEND_MODES = ("sync", "batch", "async")


def _send_shape(config: BenchConfig, mode: str) -> tuple[int, int]:
    """(messages per call, calls in flight) of a send mode."""
    return (config.send_batch if mode == "batch" else 1), (config.send_window if mode == "async" else 1)


def _unary_limit_shape(config: BenchConfig, mode: str) -> tuple[int, int]:
    """(messages per call, calls in flight) of the bare unary limit for a send mode. send_async
    coalesces: under load it sends full batches, a few in flight, so its limit is that shape
    (not `window` one-message calls, which would measure a send path it does not take)."""
    if mode == "async":
        batch = min(config.send_window, c.SEND_ASYNC_BATCH_COUNT_MAX,
                    max(1, c.SEND_ASYNC_BATCH_BYTES_MAX // config.body_bytes))
        return batch, c.SEND_ASYNC_BATCHES_IN_FLIGHT_MAX
    return _send_shape(config, mode)


def measure_unary_limit(run: Run, addr: str, mode: str) -> None:
    config = run.config
    batch, window = _unary_limit_shape(config, mode)
    job = {"role": "grpc-unary", "addr": addr, "mode": mode, "batch": batch, "window": window,
           "seconds": config.seconds, "windows": config.windows, "body_bytes": config.body_bytes}
    measured = run.run_workers(f"limit-unary-{mode}", [job], config.measuring_seconds).measured
    run.report.limits.grpc_unary[mode] = UnaryLimit(mode, batch, window, measured)


def measure_send(run: Run, mode: str) -> None:
    config = run.config
    batch, window = _send_shape(config, mode)
    job = {"role": "send", "namesrv": run.cluster.namesrv_addr, "timing": run.timing, "topic": SEND_TOPIC,
           "group": "bench_send", "mode": mode, "batch": batch, "window": window, "seconds": config.seconds,
           "windows": config.windows, "body_bytes": config.body_bytes}
    measured, samples, cpu = run.run_workers(f"send-{mode}", [job], config.measuring_seconds)
    run.record(CaseResult("send", "master", batch, config.body_bytes, 1, measured, mode=mode, window=window,
                          cpu_us_per_msg=cpu), samples)


def machine_info() -> dict[str, Any]:
    import grpc as grpc_module

    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu_model": model, "memory_bytes": psutil.virtual_memory().total,
            "platform": platform.platform(), "python": platform.python_version(), "grpcio": grpc_module.__version__,
            "load_avg_at_start": [round(x, 2) for x in os.getloadavg()]}


@contextlib.contextmanager
def _environment(extra: dict[str, str]) -> Iterator[None]:
    """Set `extra` in os.environ for the duration (the node processes started meanwhile inherit it)."""
    saved = {name: os.environ.get(name) for name in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_bench(config: BenchConfig, hooks: Hooks | None = None) -> BenchReport:
    """Run the whole benchmark; every process it started is gone when it returns or raises."""
    config.validate()
    hooks = hooks or Hooks()
    machine = machine_info()
    hooks.stage("starting the cluster (master + slave)")
    store = dict(TRANSFER_CAPS)
    spec = (ClusterSpec.default(time_scale=config.time_scale)
            .with_node_options("broker-a-0", store=store).with_node_options("broker-a-1", store=store))
    with _environment(MALLOC_TUNING if config.tune_malloc else {}):
        cluster = LocalCluster(spec, run_dir=config.run_dir)  # nodes inherit the environment
    with cluster:
        run = Run(config, hooks, cluster)
        run.report.machine = machine
        run.report.run = {**{k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(config).items()
                             if k != "run_dir"}, "run_dir": str(cluster.run_dir), "broker_store": store,
                      "malloc_env": MALLOC_TUNING if config.tune_malloc else {}}
        try:
            _run_stages(run)
        finally:
            run.close_children()
        run.report.machine["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
        died = cluster.unexpected_exits
        if died:
            run.report.problems.extend(f"unexpected exit: {record}" for record in died)
    return run.report


def _attempt(run: Run, what: str, fn: Callable[..., None], *args: Any, **kwargs: Any) -> None:
    """Run one measurement; if it cannot run, note why and go on with the others."""
    try:
        fn(run, *args, **kwargs)
    except BenchError as exc:
        run.report.problems.append(f"{what}: {exc}")
        run.hooks.stage(f"[red]failed[/]: {what}: {str(exc)[:200]}")


def _run_stages(run: Run) -> None:
    config, hooks = run.config, run.hooks
    hooks.stage(f"creating topics {PULL_TOPIC} and {SEND_TOPIC} ({config.queues} queues)")
    create_topic(run.cluster, PULL_TOPIC, config.queues)
    create_topic(run.cluster, SEND_TOPIC, config.queues)
    hooks.stage(f"preloading {config.messages:,} messages of {config.body_bytes} bytes")
    stored = preload(run)
    hooks.stage("waiting for the slave to catch up")
    wait_for_slave(run)
    hooks.stage("limit: raw mmap scan of the master's commitlog")
    measure_scan(run)
    for source in config.sources:
        hooks.stage(f"first read: one pass over every queue from the {source}, batch {max(config.batches)}")
        _attempt(run, f"first read from the {source}", measure_pull, source, max(config.batches), 1, first_read=True)
    addr = start_limits_server(run)
    for batch in config.batches:
        hooks.stage(f"limit: bare gRPC stream, batch {batch}")
        _attempt(run, f"gRPC stream limit b{batch}", measure_stream_limit, addr, batch)
        for source in config.sources:
            for consumers in config.consumers:
                hooks.stage(f"pull from the {source}, batch {batch}, {consumers} consumer process(es)")
                _attempt(run, f"pull {source} b{batch} x{consumers}", measure_pull, source, batch, consumers)
    if config.push:
        if PUSH_PULL_BATCH not in run.report.limits.grpc_stream:
            hooks.stage(f"limit: bare gRPC stream, batch {PUSH_PULL_BATCH}")
            _attempt(run, f"gRPC stream limit b{PUSH_PULL_BATCH}", measure_stream_limit, addr, PUSH_PULL_BATCH)
        hooks.stage("push consumer, no-op listener")
        _attempt(run, "push", measure_push, stored)
    if config.send:
        for mode in SEND_MODES:
            hooks.stage(f"limit: bare gRPC unary, {mode}")
            _attempt(run, f"gRPC unary limit {mode}", measure_unary_limit, addr, mode)
            hooks.stage(f"send: {mode}")
            _attempt(run, f"send {mode}", measure_send, mode)
