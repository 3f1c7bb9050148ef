"""The benchmark's measurements, one function per kind of row (the runner decides the order).

Owns what each case and reference starts (worker jobs) and how its result is recorded:
the mqlab cases (pull, pull loop, push, send) and the same-run references (mmap scan,
loopback TCP, plain grpc stream and unary, mqlab's transport-only Pull stream, Redis Streams).
"""

from __future__ import annotations

import sys
from typing import Any

from harness.bench.limits import append_fresh, scan_commitlog
from harness.bench.peers import REDIS_PULL_STREAM, REDIS_SEND_STREAM
from harness.bench.processes import BenchError
from harness.bench.results import PULL_LOOP_BATCH, PUSH_PULL_BATCH, CaseResult, Reference
from harness.bench.run_state import WORKER_READY_BUDGET_S, Run
from nodes.common import constants as c

PULL_TOPIC = "BenchPull"
SEND_TOPIC = "BenchSend"


def _window_job(run: Run, **job: Any) -> dict[str, Any]:
    return {"seconds": run.config.seconds, "windows": run.config.windows, "body_bytes": run.config.body_bytes, **job}


def _client_job(run: Run, **job: Any) -> dict[str, Any]:
    return _window_job(run, namesrv=run.cluster.namesrv_addr, timing=run.timing, **job)


def add_reference(run: Run, kind: str, batch: int, window: int, job: dict[str, Any], *,
                  servers: dict[str, int] | None = None) -> None:
    """Run one reference's worker and record it (`servers`: also read these peer servers' CPU,
    by role)."""
    name = f"ref-{kind}" + (f"-b{batch}" if batch else "")
    done = run.run_workers(name, [job], run.config.measuring_seconds, servers=servers)
    if done.measured.errors:
        run.report.problems.append(f"{name}: {done.measured.errors} errors, e.g. {done.error_samples[:2]}")
    run.report.add_reference(Reference(kind, batch, window, done.measured, done.cpu_us_per_msg))


# ---- references ---------------------------------------------------------------------------

def measure_scan(run: Run) -> None:
    from harness.bench.results import Measured

    commitlog = run.cluster.node("broker-a-0").run_dir / "store" / "commitlog"
    measured, record_bytes = scan_commitlog(commitlog, seconds_min=min(1.0, run.config.seconds),
                                            body_bytes=run.config.body_bytes)
    run.report.record_bytes = record_bytes
    rate = Measured(measured.messages, measured.payload_bytes, measured.seconds)
    run.report.add_reference(Reference("mmap-scan", 0, 1, rate))


def measure_append(run: Run) -> None:
    """The storage write ceiling, in the master's run dir (the stores' filesystem); a disk that
    cannot spare its file is a problem of this reference, not the end of the run."""
    try:
        measured = append_fresh(run.cluster.node("broker-a-0").run_dir, run.report.record_bytes,
                                seconds_min=min(1.0, run.config.seconds), body_bytes=run.config.body_bytes)
    except OSError as exc:
        raise BenchError(str(exc)) from exc
    run.report.add_reference(Reference("mmap-append", 0, 1, measured))


def start_limits_server(run: Run) -> None:
    server = run.child([sys.executable, "-m", "harness.bench.limits", "--record-bytes",
                        str(run.report.record_bytes)], "limits-server")
    run.tcp_port = int(server.expect("TCP", WORKER_READY_BUDGET_S))
    run.limits_addr = f"127.0.0.1:{server.expect('READY', WORKER_READY_BUDGET_S)}"


def measure_tcp(run: Run) -> None:
    job = _window_job(run, role="tcp", host="127.0.0.1", tcp_port=run.tcp_port, record_bytes=run.report.record_bytes)
    add_reference(run, "tcp", 0, 1, job)


def measure_plain_stream(run: Run, batch: int) -> None:
    window = run.config.window
    add_reference(run, "plain-stream", batch, window,
                  _window_job(run, role="plain-stream", addr=run.limits_addr, batch=batch, window=window))


def measure_grpc_stream(run: Run, batch: int) -> None:
    window = run.config.window
    add_reference(run, "grpc-stream", batch, window,
                  _window_job(run, role="grpc-stream", addr=run.limits_addr, batch=batch, window=window))


def measure_plain_unary(run: Run, batch: int) -> None:
    add_reference(run, "plain-unary", batch, 1,
                  _window_job(run, role="plain-unary", addr=run.limits_addr, batch=batch))


def measure_plain_stream_publish(run: Run, batch: int) -> None:
    add_reference(run, "plain-stream-publish", batch, 1,
                  _window_job(run, role="plain-stream-publish", addr=run.limits_addr, batch=batch))


def measure_redis_pull(run: Run, batch: int, *, noack: bool) -> None:
    assert run.redis is not None
    job = _window_job(run, role="redis-pull", host="127.0.0.1", redis_port=run.redis.port, batch=batch,
                      noack=noack, stream=REDIS_PULL_STREAM)
    add_reference(run, "redis-noack" if noack else "redis-ack", batch, 1, job, servers={"redis": run.redis.pid})


def measure_redis_xadd(run: Run, batch: int, kind: str = "redis-xadd") -> None:
    """Pipelined XADDs of `batch`: `redis-xadd` to the master alone, `redis-xadd-replicated` to the
    master with a replica, `redis-xadd-wait` the same with WAIT 1 after each pipeline."""
    if kind == "redis-xadd":
        assert run.redis is not None
        master, servers = run.redis, {"redis": run.redis.pid}
    else:
        assert run.redis_replicated is not None and run.redis_replica is not None
        master = run.redis_replicated
        servers = {"redis": master.pid, "redis-replica": run.redis_replica.pid}
    job = _window_job(run, role="redis-xadd", host="127.0.0.1", redis_port=master.port, batch=batch,
                      stream=f"{REDIS_SEND_STREAM}:{kind}:{batch}", wait=kind == "redis-xadd-wait")
    add_reference(run, kind, batch, 1, job, servers=servers)


# ---- mqlab cases ------------------------------------------------------------------------------

def measure_pull(run: Run, source: str, batch: int, consumers: int, *, first_read: bool = False) -> None:
    """Pull for the windows; with `first_read`, one pass over every queue instead (the brokers
    check each record the first time they hand it out, so this pass shows what that costs)."""
    config = run.config
    seconds, windows = (max(60.0, 20 * config.seconds), 1) if first_read else (config.seconds, config.windows)
    jobs = [_client_job(run, role="pull", topic=PULL_TOPIC, group="bench_pull", batch=batch, window=config.window,
                        queue_ids=[q for q in range(config.queues) if q % consumers == i], source=source,
                        seconds=seconds, windows=windows, one_pass=first_read) for i in range(consumers)]
    name = f"pull-{source}-b{batch}-x{consumers}" + ("-first" if first_read else "")
    measured, samples, cpu = run.run_workers(name, jobs, seconds * windows)
    run.record(CaseResult("pull", source, batch, config.body_bytes, consumers, measured,
                          mode="first-read" if first_read else "", window=config.window,
                          cpu_us_per_msg=cpu), samples)


def measure_pull_loop(run: Run) -> None:
    job = _client_job(run, role="pull-loop", topic=PULL_TOPIC, group="bench_pull_loop", batch=PULL_LOOP_BATCH)
    measured, samples, cpu = run.run_workers("pull-loop", [job], run.config.measuring_seconds)
    run.record(CaseResult("pull-loop", "master", PULL_LOOP_BATCH, run.config.body_bytes, 1, measured, window=1,
                          cpu_us_per_msg=cpu), samples)


def measure_push(run: Run, expected: int) -> None:
    config = run.config
    job = _client_job(run, role="push", topic=PULL_TOPIC, group=run.fresh_group("bench_push"), batch=PUSH_PULL_BATCH,
                      expected=expected, seconds=max(10.0, 10 * config.seconds))
    measured, samples, cpu = run.run_workers("push", [job], job["seconds"])
    run.record(CaseResult("push", "master", PUSH_PULL_BATCH, config.body_bytes, 1, measured, cpu_us_per_msg=cpu),
               samples)


def async_batch(body_bytes: int, window: int) -> int:
    """The batch send_async coalesces into under load (its count and byte caps)."""
    return min(window, c.SEND_ASYNC_BATCH_COUNT_MAX, max(1, c.SEND_ASYNC_BATCH_BYTES_MAX // body_bytes))


def measure_send(run: Run, mode: str, batch: int = 1) -> None:
    config = run.config
    window = config.send_window if mode == "async" else 1
    job = _client_job(run, role="send", topic=SEND_TOPIC, group="bench_send", mode=mode, batch=batch, window=window)
    measured, samples, cpu = run.run_workers(f"send-{mode}-b{batch}", [job], config.measuring_seconds)
    reference_batch = async_batch(config.body_bytes, config.send_window) if mode == "async" else batch
    run.record(CaseResult("send", "master", batch, config.body_bytes, 1, measured, mode=mode, window=window,
                          cpu_us_per_msg=cpu, reference_batch=reference_batch), samples)
