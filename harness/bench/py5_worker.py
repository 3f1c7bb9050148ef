"""Apache's RocketMQ 5 Python client as a benchmark worker:
`.venv-py5/bin/python harness/bench/py5_worker.py '<job json>'`.

The measured client is rocketmq-python-client 5.1.2 as installed in `.venv-py5`, talking RocketMQ
5's gRPC MessagingService to the brokers' `rocketmq5_endpoints`; this process adds only the line
protocol and the windows (`harness.bench.worker_protocol`) and nothing of mqlab's client. It runs
as a script under the 5.x client's venv, where mqlab is not installed (and whose
apache.rocketmq.v2 descriptors must not meet mqlab's): it imports the protocol module from its
own directory, never the `harness` package. Roles:

    send    one Producer: `sync` (Producer.send, one message per call) or `async` (send_async,
            up to `window` messages submitted and not yet answered; each is one SendMessage call)
    simple  a SimpleConsumer of a new group on the preloaded topic: receive(`batch`, a long
            invisible time), then read each message's body, topic, id and properties and ack it,
            one ack call per message, as an application handles what it received

The client writes its log under $HOME/logs/rocketmq_python: HOME is the job's `home`.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

if __package__:  # imported as harness.bench.py5_worker (mqlab's own tests)
    from harness.bench.worker_protocol import Windows, await_go, die_with_parent, emit, result
else:  # run as a script in .venv-py5: this file's directory is sys.path[0]
    from worker_protocol import Windows, await_go, die_with_parent, emit, result  # type: ignore[no-redef]

REQUEST_TIMEOUT_S = 10  # a loaded machine: well over the client's 3 s default
# Long enough that no received message comes back before the worker acks it (acks run one
# at a time after each receive), short enough to be a real consumer's value.
INVISIBLE_S = 60
RECEIVE_AWAIT_S = 5  # the long poll of a receive that finds nothing (the preloaded topic always has some)
ERROR_SAMPLES_MAX = 5
DRAIN_S = 3.0  # the longest wait for a client's shutdown before the process ends anyway


class Window:
    """At most `size` sends in flight: `acquire` before a send, `done` from its future's callback.
    Counts what completed (into `windows`) and what failed (with a few samples)."""

    def __init__(self, size: int, windows: Windows | None) -> None:
        self.size = size
        self.windows = windows
        self._free = threading.Semaphore(size)
        self._lock = threading.Lock()
        self.errors = 0
        self.samples: list[str] = []

    def acquire(self) -> None:
        self._free.acquire()

    def done(self, future: Any) -> None:
        exc = future.exception()
        with self._lock:
            if exc is None:
                if self.windows is not None:
                    self.windows.add(1)
            else:
                self.errors += 1
                if len(self.samples) < ERROR_SAMPLES_MAX:
                    self.samples.append(f"{type(exc).__name__}: {exc}")
        self._free.release()

    def drain(self) -> None:
        """Wait until every send submitted has been answered."""
        for _ in range(self.size):
            self._free.acquire()
        for _ in range(self.size):
            self._free.release()


def touch(msg: Any) -> int:
    """Read a received message as an application would: its body, topic, id and properties."""
    return len(msg.body) + len(msg.topic) + len(msg.message_id) + len(msg.properties or {}) + msg.delivery_attempt


def _config(rmq: Any, job: dict[str, Any]) -> Any:
    return rmq.ClientConfiguration(job["endpoints"], rmq.Credentials(), request_timeout=REQUEST_TIMEOUT_S)


def _message(rmq: Any, topic: str, body: bytes) -> Any:
    msg = rmq.Message()
    msg.topic = topic
    msg.body = body
    return msg


def run_send(job: dict[str, Any]) -> dict[str, Any]:
    import rocketmq as rmq

    topic, mode = job["topic"], job["mode"]
    body = b"b" * job["body_bytes"]
    producer = opened(rmq.Producer(_config(rmq, job), (topic,)))
    producer.startup()
    producer.send(_message(rmq, topic, body))  # warm up: route, connection
    emit("READY")
    await_go()
    windows = Windows.from_now(job)
    if mode == "async":
        window = Window(job["window"], windows)
        while windows.is_open():
            window.acquire()
            producer.send_async(_message(rmq, topic, body)).add_done_callback(window.done)
        windows.close()
        window.drain()  # answered after the windows: not counted, but nothing left in flight at shutdown
        return result(windows.messages, windows.seconds, window.errors, cpu_s=windows.cpu_s,
                      error_samples=window.samples)
    errors, samples = 0, []
    while windows.is_open():
        try:
            producer.send(_message(rmq, topic, body))
            windows.add(1)
        except Exception as exc:  # counted and sampled
            errors += 1
            if len(samples) < ERROR_SAMPLES_MAX:
                samples.append(f"{type(exc).__name__}: {exc}")
    windows.close()
    return result(windows.messages, windows.seconds, errors, cpu_s=windows.cpu_s, error_samples=samples)


def consume(receive: Callable[[], list[Any]], ack: Callable[[Any], None], windows: Windows,
            expected: int) -> tuple[int, int, list[str]]:
    """Receive and ack until the windows close: (messages received, errors, samples). A group
    reads the preloaded `expected` messages once; running out of them before the windows end is
    an error of the run's settings (too few messages for the windows), raised as such."""
    received, errors, samples, touched = 0, 0, [], 0
    while windows.is_open():
        try:
            batch = receive()
        except Exception as exc:  # counted and sampled
            errors += 1
            if len(samples) < ERROR_SAMPLES_MAX:
                samples.append(f"receive: {type(exc).__name__}: {exc}")
            continue
        if not batch and received >= expected:
            raise RuntimeError(f"the group received all {expected} preloaded messages before the windows ended: "
                               f"preload more (--messages) or measure shorter windows (--seconds, --windows)")
        for msg in batch:
            touched += touch(msg)
            try:
                ack(msg)
                windows.add(1)
            except Exception as exc:
                errors += 1
                if len(samples) < ERROR_SAMPLES_MAX:
                    samples.append(f"ack: {type(exc).__name__}: {exc}")
            received += 1
            if not windows.is_open():
                break
    return received, errors, samples


def run_simple(job: dict[str, Any]) -> dict[str, Any]:
    import rocketmq as rmq

    topic, batch = job["topic"], job["batch"]
    consumer = opened(rmq.SimpleConsumer(_config(rmq, job), job["group"], {topic: rmq.FilterExpression("*")},
                                         await_duration=RECEIVE_AWAIT_S))
    consumer.startup()
    warm = consumer.receive(1, INVISIBLE_S)  # warm up: route, connection, the first pop of the group
    for msg in warm:
        touch(msg)
        consumer.ack(msg)
    emit("READY")
    await_go()
    windows = Windows.from_now(job)
    received, errors, samples = consume(lambda: consumer.receive(batch, INVISIBLE_S), consumer.ack, windows,
                                        job["expected"] - len(warm))
    windows.close()
    return result(windows.messages, windows.seconds, errors, cpu_s=windows.cpu_s, error_samples=samples,
                  received=received + len(warm))


_opened: list[Any] = []  # the clients this process started, shut down after RESULT


def opened(client: Any) -> Any:
    _opened.append(client)
    return client


def _shutdown_all() -> None:
    """Shut every client down after the RESULT is out, bounded: a client stuck in its shutdown
    (a telemetry stream, a scheduler) must not hold the process up."""
    for client in _opened:
        stopper = threading.Thread(target=client.shutdown, name="py5-shutdown", daemon=True)
        stopper.start()
        stopper.join(DRAIN_S)


ROLES = {"send": run_send, "simple": run_simple}


def main(argv: list[str] | None = None) -> int:
    die_with_parent()
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        emit("ERROR usage: .venv-py5/bin/python harness/bench/py5_worker.py '<job json>'")
        return 2
    code = 0
    try:
        job = json.loads(args[0])
        os.makedirs(job["home"], exist_ok=True)
        os.environ["HOME"] = job["home"]  # before the client is imported: its log goes under HOME
        role = ROLES.get(job["role"])
        if role is None:
            raise ValueError(f"unknown role {job['role']!r}: py5 workers run {', '.join(ROLES)}")
        emit("RESULT " + json.dumps(role(job)))
    except BaseException as exc:
        emit(f"ERROR {type(exc).__name__}: {exc}".replace("\n", " "))
        code = 1
    _shutdown_all()
    sys.stdout.flush()
    os._exit(code)  # the client's non-daemon threads (schedulers, its loop) would hold the exit


if __name__ == "__main__":
    main()
