"""The pull benchmark's run: a fresh cluster, a preload, the case matrix, the same-run references.

Owns the order of a run and the processes it starts (workers, the limits server, a Redis
peer); draws nothing (the CLI passes callbacks). Every process it starts is stopped before
`run_bench` returns, on failure and Ctrl-C too; the brokers' stores are deleted afterwards
unless `keep_store`.

Order: start the cluster (master + slave; both brokers may hand out whole batches of 1024,
see `TRANSFER_CAPS`) and, with `--peers redis`, a redis-server; create the topics, preload the
same messages into both; wait for the slave; the mmap scan (and the record size), the limits
server, loopback TCP; read every queue once from each broker ("first read": a broker checks a
record's CRC the first time it hands it out); then per batch size: the plain stream, mqlab's
transport-only stream, Redis with and without acks, then every pull case; then the pull loop
and push; then per send batch the plain unary call, pipelined XADD and send_batch; then sync
and async sends (they grow the commitlog); last, with `--clients`, each real RocketMQ client's
rows (`harness.bench.real_clients`), against the same topics. Every case and reference counts `windows`
windows and reports the median one with the spread.

With `rounds` > 1 everything after the loopback TCP reference is measured again each round (the
first reads only in the first: later reads are not first), each round into a report of its own;
the run's report combines them (`results.combine_rounds`).

Slave cases pin the PullConsumer to broker id 1 (`PullConsumer(pull_from_broker_id=1)`, a
bench-only option): with RocketMQ's defaults a slave answers and then suggests the master, so
following the suggestion would measure the master again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import platform
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import psutil

from harness.bench import real_clients, stages
from harness.bench.broker_admin import create_topic, queue_max_offsets
from harness.bench.peers import RedisPeer
from harness.bench.processes import BenchError, Child
from harness.bench.results import PULL_LOOP_BATCH, PUSH_PULL_BATCH, BenchReport, combine_rounds
from harness.bench.run_state import (
    BENCH_MODES,
    MALLOC_TUNING,
    TRANSFER_CAPS,
    BenchConfig,
    Hooks,
    Run,
    _worker_argv,
)
from harness.bench.stages import PULL_TOPIC, SEND_TOPIC
from harness.cluster import LocalCluster
from harness.spec import ClusterSpec

__all__ = ["BenchConfig", "BenchError", "Child", "Hooks", "Run", "_worker_argv", "run_bench"]

PRELOAD_BATCH = 100  # messages per send_batch while preloading
PRELOAD_THREADS = 4
SLAVE_CATCH_UP_BUDGET_S = 120.0


# ---- stages -----------------------------------------------------------------------------

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
    store = {**TRANSFER_CAPS, "message_index_enable": config.message_index}
    spec = (ClusterSpec.default(time_scale=config.time_scale)
            .with_node_options("broker-a-0", store=store, broker_role=BENCH_MODES[config.mode])
            .with_node_options("broker-a-1", store=store))
    with _environment(MALLOC_TUNING if config.tune_malloc else {}):
        cluster = LocalCluster(spec, run_dir=config.run_dir)  # nodes inherit the environment
    try:
        with cluster:
            run = Run(config, hooks, cluster)
            run.report.machine = machine
            run.report.run = {**{k: (list(v) if isinstance(v, tuple) else str(v) if isinstance(v, Path) else v)
                                 for k, v in dataclasses.asdict(config).items() if k != "run_dir"},
                              "run_dir": str(cluster.run_dir), "broker_store": store,
                              "malloc_env": MALLOC_TUNING if config.tune_malloc else {}}
            try:
                if "redis" in config.peers:
                    hooks.stage("starting redis-server (no persistence), and a second one with a replica")
                    run.redis = RedisPeer(cluster.run_dir)
                    run.redis_replicated = RedisPeer(cluster.run_dir, "redis-replicated")
                    run.redis_replica = RedisPeer(cluster.run_dir, "redis-replica", replica_of=run.redis_replicated)
                    for peer in (run.redis, run.redis_replicated, run.redis_replica):
                        peer.wait_ready()
                    run.redis_replica.wait_linked()
                _run_stages(run)
            finally:
                run.close_children()
                for peer in (run.redis_replica, run.redis_replicated, run.redis):
                    if peer is not None:
                        peer.close()
            run.report.machine["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
            died = cluster.unexpected_exits
            if died:
                run.report.problems.extend(f"unexpected exit: {record}" for record in died)
    finally:
        if not config.keep_store:
            _delete_stores(cluster.run_dir)
    return run.report


def _delete_stores(run_dir: Path) -> None:
    """The brokers' stores (and the redis servers' dumps) go; results, logs and configs stay."""
    for path in [*run_dir.glob("*/store"), *run_dir.glob("redis*/dump.rdb")]:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        elif path.exists():
            path.unlink()


def _attempt(run: Run, what: str, fn: Callable[..., None], *args: Any, **kwargs: Any) -> None:
    """Run one measurement; if it cannot run, note why and go on with the others."""
    try:
        fn(run, *args, **kwargs)
    except BenchError as exc:
        run.report.problems.append(f"{what}: {exc}")
        run.hooks.stage(f"[red]failed[/]: {what}: {str(exc)[:200]}")


def _consumer_references(run: Run, batch: int) -> None:
    """The references a consumer case at `batch` is a ratio of (once per batch)."""
    if f"plain-stream b{batch}" in run.report.references:
        return
    hooks = run.hooks
    hooks.stage(f"reference: plain grpc stream, batch {batch}")
    _attempt(run, f"plain stream b{batch}", stages.measure_plain_stream, batch)
    hooks.stage(f"reference: mqlab Pull stream shape, transport only, batch {batch}")
    _attempt(run, f"grpc stream b{batch}", stages.measure_grpc_stream, batch)
    if run.redis is not None:
        for noack in (False, True):
            hooks.stage(f"reference: Redis Streams XREADGROUP{' NOACK' if noack else ' + XACK'}, batch {batch}")
            _attempt(run, f"redis {'noack' if noack else 'ack'} b{batch}", stages.measure_redis_pull, batch,
                     noack=noack)


def _send_references(run: Run, batch: int) -> None:
    if "mmap-append" not in run.report.references:  # once per round: right before its sends
        run.hooks.stage("reference: appends into a fresh file through a shared mapping")
        _attempt(run, "mmap append", stages.measure_append)
    if f"plain-unary b{batch}" in run.report.references:
        return
    run.hooks.stage(f"reference: plain grpc unary publish, batch {batch}")
    _attempt(run, f"plain unary b{batch}", stages.measure_plain_unary, batch)
    run.hooks.stage(f"reference: plain grpc stream publish, batch {batch}")
    _attempt(run, f"plain stream publish b{batch}", stages.measure_plain_stream_publish, batch)
    if run.redis is not None:
        run.hooks.stage(f"reference: Redis Streams pipelined XADD, batch {batch}")
        _attempt(run, f"redis xadd b{batch}", stages.measure_redis_xadd, batch)
        run.hooks.stage(f"reference: the same to a Redis master with a replica attached, batch {batch}")
        _attempt(run, f"redis xadd replicated b{batch}", stages.measure_redis_xadd, batch, "redis-xadd-replicated")
        if batch == 1 or run.config.mode == "sync-master":
            run.hooks.stage(f"reference: the same, WAIT 1 after each pipeline (a replica has it), batch {batch}")
            _attempt(run, f"redis xadd wait b{batch}", stages.measure_redis_xadd, batch, "redis-xadd-wait")


def _pull_stages(run: Run, *, first_round: bool) -> None:
    """The pull consumer's rows (a first read in the first round, then per batch, source and
    process count) and the pull loop."""
    config, hooks = run.config, run.hooks
    for source in config.sources if first_round else ():
        hooks.stage(f"first read: one pass over every queue from the {source}, batch {max(config.batches)}")
        _attempt(run, f"first read from the {source}", stages.measure_pull, source, max(config.batches), 1,
                 first_read=True)
    for batch in config.batches:
        _consumer_references(run, batch)
        for source in config.sources:
            for consumers in config.consumers:
                hooks.stage(f"pull from the {source}, batch {batch}, {consumers} consumer process(es)")
                _attempt(run, f"pull {source} b{batch} x{consumers}", stages.measure_pull, source, batch, consumers)
    _consumer_references(run, PULL_LOOP_BATCH)
    hooks.stage(f"pull loop: PullConsumer.pull(max_nums={PULL_LOOP_BATCH}), one call at a time")
    _attempt(run, "pull loop", stages.measure_pull_loop)


def _run_stages(run: Run) -> None:
    config, hooks = run.config, run.hooks
    hooks.stage(f"creating topics {PULL_TOPIC} and {SEND_TOPIC} ({config.queues} queues)")
    create_topic(run.cluster, PULL_TOPIC, config.queues)
    create_topic(run.cluster, SEND_TOPIC, config.queues)
    hooks.stage(f"preloading {config.messages:,} messages of {config.body_bytes} bytes")
    stored = preload(run)
    if run.redis is not None:
        hooks.stage(f"preloading {config.messages:,} entries into a Redis stream")
        run.redis.preload(config.messages, config.body_bytes)
    hooks.stage("waiting for the slave to catch up")
    wait_for_slave(run)
    hooks.stage("reference: mmap scan of the master's commitlog")
    stages.measure_scan(run)
    stages.start_limits_server(run)
    hooks.stage("reference: loopback TCP")
    _attempt(run, "tcp", stages.measure_tcp)
    if config.rounds == 1:
        _measure_round(run, stored, first_round=True)
        return
    shared = run.report
    rounds: list[BenchReport] = []
    for number in range(1, config.rounds + 1):
        hooks.stage(f"round {number} of {config.rounds}")
        run.report = BenchReport(references=dict(shared.references), record_bytes=shared.record_bytes)
        run.round_number = number
        _measure_round(run, stored, first_round=number == 1)
        rounds.append(run.report)
    run.report = shared
    combined = combine_rounds(rounds)
    shared.results, shared.references, shared.rounds = combined.results, combined.references, rounds
    shared.problems.extend(f"round {i}: {problem}" for i, r in enumerate(rounds, 1) for problem in r.problems)


def _measure_round(run: Run, stored: int, *, first_round: bool) -> None:
    """Every row and the references it is a ratio of, once."""
    config, hooks = run.config, run.hooks
    if config.pull:
        _pull_stages(run, first_round=first_round)
    if config.push:
        _consumer_references(run, PUSH_PULL_BATCH)
        hooks.stage("push consumer, a listener that reads each message")
        _attempt(run, "push", stages.measure_push, stored)
    if config.send:
        for batch in config.send_batches:
            _send_references(run, batch)
            hooks.stage(f"send: send_batch of {batch}")
            _attempt(run, f"send batch b{batch}", stages.measure_send, "batch", batch)
        _send_references(run, 1)
        hooks.stage("send: sync, one message per call")
        _attempt(run, "send sync", stages.measure_send, "sync")
        _send_references(run, stages.async_batch(config.body_bytes, config.send_window))
        hooks.stage(f"send: send_async, window {config.send_window}")
        _attempt(run, "send async", stages.measure_send, "async")
    for client in dict.fromkeys(config.clients):  # real clients last, beside every mqlab row
        _consumer_references(run, PUSH_PULL_BATCH)
        for batch in (1, *config.send_batches):
            _send_references(run, batch)
        real_clients.measure_all(run, client, _attempt, pull_topic=PULL_TOPIC, send_topic=SEND_TOPIC,
                                 expected=stored)
