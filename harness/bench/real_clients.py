"""Real RocketMQ clients in the benchmark (`mqlab bench pull --clients cpp,ons,py5`).

Owns which real clients exist, what each needs installed (a missing one fails the run before
it starts, with the install hint), the command of each one's worker process and the rows they
add. cpp and ons speak RocketMQ's 4.x remoting protocol to the same cluster mqlab's own rows
ran against, given the name server's loopback remoting address only; py5 speaks RocketMQ 5's
gRPC MessagingService, given the brokers' `rocketmq5_endpoints`:

    cpp   Apache's C++ client (PyPI `rocketmq` 0.4.4, a binding over librocketmq 1.2.3):
          `python -m harness.bench.cpp_worker` — sync send, send_batch, push consumer, pull consumer
    ons   ali-ons 3.12.0 under node: `harness/bench/ons_worker.js` — sync send, push consumer
          (ali-ons has no batch, oneway or pull consumer)
    py5   Apache's Python client 5.1.2 in .venv-py5: `.venv-py5/bin/python harness/bench/py5_worker.py`
          — sync send, send_async with a window, SimpleConsumer receive of 32 + an ack per message

The workers speak the benchmark's line protocol (`harness.bench.worker_protocol`). Rows are
`CaseResult`s whose client is "<name>-<kind>" (`harness.bench.results.client_kind`); they have
no targets.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.bench.broker_admin import queue_max_offsets
from harness.bench.processes import BenchError
from harness.bench.real_client_install import ONS_MODULES, client_missing, py5_python
from harness.bench.results import (
    PULL_LOOP_BATCH,
    PUSH_PULL_BATCH,
    REAL_CLIENT_TITLES,
    CaseResult,
)

if TYPE_CHECKING:
    from harness.bench.run_state import Run, WorkersRun

HERE = Path(__file__).resolve().parent
ONS_WORKER = HERE / "ons_worker.js"
PY5_WORKER = HERE / "py5_worker.py"
REAL_PUSH_SECONDS_MIN = 30.0  # a real push consumer's bound: its start-up and first rebalance included
ONEWAY_STORED_BUDGET_S = 10.0  # oneway sends still in flight when the worker stops
# What each client has (ali-ons: only send, and a push consumer; the 5.x Python client's rows:
# its SimpleConsumer, and its sends one message per call, synchronous or async)
CONSUMERS = {"cpp": ("push", "pull-loop"), "ons": ("push",), "py5": ("simple",)}
SENDS = {"cpp": ("sync", "batch", "oneway"), "ons": ("sync",), "py5": ("sync", "async")}
SIMPLE_BATCH = 32  # the SimpleConsumer's receive(max_message_num): a pop's cap, as mqlab's pull b32
# py5's send_async makes one SendMessage call per message (the client coalesces nothing): past a
# few dozen in flight more only queue in the client and the master, and a queue of 1024 (the
# --send-window default, sized for mqlab's coalescing producer) takes a loaded machine longer to
# answer than the client's request timeout
PY5_ASYNC_WINDOW_MAX = 64


def worker_argv(job: dict[str, Any]) -> list[str]:
    """The command of a real client's worker process for `job` (its "client" says which)."""
    if job["client"] == "cpp":
        return [sys.executable, "-m", "harness.bench.cpp_worker", json.dumps(job)]
    if job["client"] == "py5":
        python = py5_python()
        if not python.exists():
            raise BenchError(client_missing("py5") or f"no {python}")
        return [str(python), str(PY5_WORKER), json.dumps(job)]
    node = shutil.which("node")
    if node is None:
        raise BenchError(client_missing("ons") or "no node")
    return [node, str(ONS_WORKER), json.dumps({**job, "modules": str(ONS_MODULES)})]


# ---- rows ---------------------------------------------------------------------------------

def _job(run: Run, client: str, role: str, group: str, **job: Any) -> dict[str, Any]:
    config = run.config
    return {"client": client, "role": role, "namesrv": run.cluster.namesrv_remoting_addr,
            "endpoints": run.cluster.rocketmq5_endpoints, "group": group,
            "seconds": config.seconds, "windows": config.windows, "body_bytes": config.body_bytes,
            "home": str(run.log_dir / f"{client}-{role}-home"), **job}


def _run(run: Run, name: str, job: dict[str, Any], seconds: float,
         raw_results: list[dict[str, Any]] | None = None) -> WorkersRun:
    return run.run_workers(name, [job], seconds, argv=worker_argv, raw_results=raw_results)


def measure_send(run: Run, client: str, topic: str, mode: str, batch: int = 1) -> None:
    """One producer process of `client`: `sync` (one message per call), `batch` (B per call),
    `oneway` (no answer awaited; checked afterwards against what the master stored) or `async`
    (one message per call, `--send-window` of them in flight, at most PY5_ASYNC_WINDOW_MAX for py5)."""
    config = run.config
    window = 1
    if mode == "async":
        window = min(config.send_window, PY5_ASYNC_WINDOW_MAX) if client == "py5" else config.send_window
    job = _job(run, client, "send", f"bench_{client}_send", topic=topic, mode=mode, batch=batch, window=window)
    before = _stored(run, topic) if mode == "oneway" else 0
    raw: list[dict[str, Any]] = []
    done = _run(run, f"{client}-send-{mode}-b{batch}", job, config.measuring_seconds, raw)
    if mode == "oneway":
        _check_oneway_stored(run, client, topic, before, sum(r.get("sent_total", 0) for r in raw))
    run.record(CaseResult(f"{client}-send", "master", batch, config.body_bytes, 1, done.measured, mode=mode,
                          window=window, cpu_us_per_msg=done.cpu_us_per_msg), done.error_samples)


def measure_push(run: Run, client: str, topic: str, expected: int) -> None:
    """`client`'s push consumer (a new group, from offset 0), its listener reading each message's
    body; from the first delivery to the last of the `expected` preloaded messages."""
    config = run.config
    job = _job(run, client, "push", run.fresh_group(f"bench_{client}_push"), topic=topic, expected=expected,
               seconds=max(REAL_PUSH_SECONDS_MIN, 10 * config.seconds))
    done = _run(run, f"{client}-push", job, job["seconds"])
    if done.measured.messages < expected:
        run.report.problems.append(f"{client} push: {done.measured.messages} of {expected} messages arrived "
                                   f"within {job['seconds']:.0f} s")
    run.record(CaseResult(f"{client}-push", "master", PUSH_PULL_BATCH, config.body_bytes, 1, done.measured,
                          cpu_us_per_msg=done.cpu_us_per_msg), done.error_samples)


def measure_pull_loop(run: Run, client: str, topic: str) -> None:
    """`client`'s pull consumer: pulls of 32 over every queue until each says no new message,
    reading each message's body, pass after pass from offset 0."""
    config = run.config
    job = _job(run, client, "pull-loop", f"bench_{client}_pull", topic=topic, batch=PULL_LOOP_BATCH)
    done = _run(run, f"{client}-pull-loop", job, config.measuring_seconds)
    run.record(CaseResult(f"{client}-pull-loop", "master", PULL_LOOP_BATCH, config.body_bytes, 1, done.measured,
                          window=1, cpu_us_per_msg=done.cpu_us_per_msg), done.error_samples)


def measure_simple(run: Run, client: str, topic: str, expected: int) -> None:
    """`client`'s SimpleConsumer in a new group on the preloaded topic: receive of 32 with a long
    invisible time, each message read and acked (one ack call per message); the group reads
    the `expected` preloaded messages from the start of each queue, once."""
    config = run.config
    job = _job(run, client, "simple", run.fresh_group(f"bench_{client}_simple"), topic=topic, batch=SIMPLE_BATCH,
               expected=expected)
    done = _run(run, f"{client}-simple", job, config.measuring_seconds)
    run.record(CaseResult(f"{client}-simple", "master", SIMPLE_BATCH, config.body_bytes, 1, done.measured,
                          window=1, cpu_us_per_msg=done.cpu_us_per_msg), done.error_samples)


def _stored(run: Run, topic: str) -> int:
    return sum(queue_max_offsets(run.cluster.node("broker-a-0").addr, topic, run.config.queues))


def _check_oneway_stored(run: Run, client: str, topic: str, before: int, sent: int) -> None:
    """Oneway sends have no answer: the row counts calls, so make sure the master stored them."""
    deadline = time.monotonic() + ONEWAY_STORED_BUDGET_S
    while True:
        stored = _stored(run, topic) - before
        if stored >= sent or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if stored < sent:
        run.report.problems.append(f"{client} send oneway: the master stored {stored} of {sent} oneway sends")


def measure_all(run: Run, client: str, attempt: Callable[..., None], *, pull_topic: str, send_topic: str,
                expected: int) -> None:
    """Every row of `client`, consumers first (the sends grow the commitlog), each through
    `attempt` (the runner's: a row that cannot run is a problem of the run, the others run)."""
    hooks = run.hooks
    hooks.stage(f"{client}: {REAL_CLIENT_TITLES[client]}")
    if "push" in CONSUMERS[client]:
        hooks.stage(f"{client}: push consumer, a listener that reads each body")
        attempt(run, f"{client} push", measure_push, client, pull_topic, expected)
    if "simple" in CONSUMERS[client]:
        hooks.stage(f"{client}: SimpleConsumer, receive({SIMPLE_BATCH}) and an ack per message")
        attempt(run, f"{client} simple", measure_simple, client, pull_topic, expected)
    if "pull-loop" in CONSUMERS[client]:
        hooks.stage(f"{client}: pull consumer, pull(max_num={PULL_LOOP_BATCH}) pass after pass")
        attempt(run, f"{client} pull loop", measure_pull_loop, client, pull_topic)
    hooks.stage(f"{client}: sync send, one message per call")
    attempt(run, f"{client} send sync", measure_send, client, send_topic, "sync")
    if "batch" in SENDS[client]:
        for batch in run.config.send_batches:
            hooks.stage(f"{client}: send_batch of {batch}")
            attempt(run, f"{client} send batch b{batch}", measure_send, client, send_topic, "batch", batch)
    if "oneway" in SENDS[client]:
        hooks.stage(f"{client}: oneway send, one message per call")
        attempt(run, f"{client} send oneway", measure_send, client, send_topic, "oneway")
    if "async" in SENDS[client]:
        window = min(run.config.send_window, PY5_ASYNC_WINDOW_MAX)
        hooks.stage(f"{client}: send_async, one message per call, window {window}")
        attempt(run, f"{client} send async", measure_send, client, send_topic, "async")
