"""One benchmark client process: `python -m harness.bench.worker '<job json>'`.

Every measured client runs in a process of its own, as a real consumer or producer would, so
the benchmark process's own work never competes with it for the GIL. Roles:

    pull         PullConsumer.pull_async over its queues, `window` pulls in flight
    push         PushConsumer with a no-op listener, from the first offset
    send         one Producer: `sync` (send), `batch` (send_batch), `async` (send_async, window)
    grpc-stream  the limit: bare grpc.aio Pull stream against the limits server
    grpc-unary   the limit: bare grpc.aio SendMessage calls against the limits server

Protocol on stdout: `READY` once set up (client started, routes and streams warm), then the
worker waits for `GO` on stdin, counts what completes in `windows` back-to-back windows of
`seconds` each, prints `RESULT {json}` and exits. Windows start at GO, so the windows of
workers started together line up and the benchmark can sum them (and keep the best one: the
machine is shared, and a window that lost the CPU to something else measures that). Any
failure prints `ERROR <text>` and exits 1. If stdin closes early (the benchmark died or gave
up), the worker exits at once, so none outlives a run.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import ctypes
import json
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from nodes.client.rpc.send_wire import Outgoing, build_request
from nodes.common import constants as c
from nodes.common import rpc
from nodes.common.config import Timing
from nodes.common.types import Message, MessageQueue, PullStatus, SendStatus
from proto import broker_pb2, broker_pb2_grpc

_PR_SET_PDEATHSIG = 1
WARM_UP_TIMEOUT_S = 30.0  # a loaded machine may take a while to connect


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when the benchmark process dies, whatever kills it."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # not Linux: the stdin watchdog below still ends us


def _emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _await_go() -> None:
    """Block until the benchmark says GO; exit if it closes stdin instead. Afterwards a
    watchdog thread ends the process as soon as stdin closes."""
    line = sys.stdin.readline()
    if line.strip() != "GO":
        sys.exit(3)

    def watchdog() -> None:
        sys.stdin.read()
        os._exit(3)

    threading.Thread(target=watchdog, name="stdin-watchdog", daemon=True).start()


class Windows:
    """Completions counted into `count` back-to-back windows of `seconds`, from `start`."""

    def __init__(self, start: float, seconds: float, count: int) -> None:
        self.start = start
        self.seconds = seconds
        self.messages = [0] * count
        self.end = start + seconds * count
        self._cpu_start_s = time.process_time()
        self.cpu_s: float | None = None  # this process's CPU (every thread) over the windows

    def close(self) -> None:
        """The windows are over: take the process's CPU time spent in them."""
        if self.cpu_s is None:
            self.cpu_s = time.process_time() - self._cpu_start_s

    @classmethod
    def from_now(cls, job: dict[str, Any]) -> Windows:
        return cls(time.monotonic(), job["seconds"], job.get("windows", 1))

    def is_open(self) -> bool:
        return time.monotonic() < self.end

    def add(self, count: int) -> None:
        index = int((time.monotonic() - self.start) / self.seconds)
        if 0 <= index < len(self.messages):
            self.messages[index] += count


def _result(windows: list[int], window_seconds: float, errors: int = 0, *, cpu_s: float | None = None,
            **extra: Any) -> dict[str, Any]:
    return {"windows": windows, "window_seconds": window_seconds, "errors": errors, "cpu_s": cpu_s, **extra}


# ---- pull -------------------------------------------------------------------------------

class PullLoop:
    """`window` pulls in flight over `queues`, each queue read from 0 to its end, again and again
    (or, with `one_pass`, once).

    Offsets run ahead of the answers (pipelining); a short answer (fewer messages than asked
    for) leaves a gap that is pulled again before the queue's cursor moves on.
    """

    def __init__(self, pull_async: Callable[[MessageQueue, int, int], cf.Future[Any]],
                 ends: dict[MessageQueue, int], batch: int, window: int, *, one_pass: bool = False) -> None:
        self._pull_async = pull_async
        self._queues = [mq for mq, end in ends.items() if end > 0]
        if not self._queues:
            raise RuntimeError("every queue is empty: nothing to pull")
        self._ends = ends
        self._batch = batch
        self._window = window
        self._one_pass = one_pass
        self._cursors = dict.fromkeys(self._queues, 0)
        self._gaps: dict[MessageQueue, deque[tuple[int, int]]] = {mq: deque() for mq in self._queues}
        self._inflight: dict[cf.Future[Any], tuple[MessageQueue, int, int]] = {}
        self._turn = 0
        self.messages = 0
        self.windows: Windows | None = None
        self.errors = 0
        self.error_samples: list[str] = []

    def _next_range(self, mq: MessageQueue) -> tuple[int, int] | None:
        gaps = self._gaps[mq]
        if gaps:
            return gaps.popleft()
        offset = self._cursors[mq]
        if offset >= self._ends[mq]:
            if self._one_pass:
                return None
            offset = 0  # the next pass over this queue
        count = min(self._batch, self._ends[mq] - offset)
        self._cursors[mq] = offset + count
        return offset, count

    def _issue(self) -> bool:
        """Start the next pull, round robin over the queues; False when no queue has work left."""
        for _ in range(len(self._queues)):
            mq = self._queues[self._turn % len(self._queues)]
            self._turn += 1
            found = self._next_range(mq)
            if found is not None:
                offset, count = found
                self._inflight[self._pull_async(mq, offset, count)] = (mq, offset, count)
                return True
        return False

    def _settle(self, fut: cf.Future[Any]) -> None:
        mq, offset, count = self._inflight.pop(fut)
        try:
            result = fut.result()
        except Exception as exc:  # counted and sampled; the range is pulled again
            self.errors += 1
            if len(self.error_samples) < 5:
                self.error_samples.append(f"{type(exc).__name__}: {exc}")
            self._gaps[mq].append((offset, count))
            return
        got = len(result.messages) if result.status is PullStatus.FOUND else 0
        self.messages += got
        if self.windows is not None:
            self.windows.add(got)
        if got < count:
            resume = result.next_begin_offset if result.status is PullStatus.FOUND else offset
            if offset <= resume < offset + count:
                self._gaps[mq].append((resume, offset + count - resume))

    def _fill(self) -> None:
        while len(self._inflight) < self._window and self._issue():
            pass

    def run(self, windows: Windows) -> float:
        """Pull while `windows` are open, counting into them, then settle what is in flight;
        returns the end time."""
        self.windows = windows
        self._fill()
        while self._inflight:
            done, _ = cf.wait(list(self._inflight), return_when=cf.FIRST_COMPLETED)
            for fut in done:
                self._settle(fut)
            if windows.is_open():
                self._fill()
        return time.monotonic()


def run_pull(job: dict[str, Any]) -> dict[str, Any]:
    from nodes.client import PullConsumer

    broker_id = c.MASTER_ID if job["source"] == "master" else 1
    consumer = PullConsumer(job["namesrv"], job["group"], timing=Timing(**job["timing"]),
                            pull_from_broker_id=broker_id)
    consumer.start()
    try:
        wanted = set(job["queue_ids"])
        queues = [mq for mq in consumer.fetch_queues(job["topic"]) if mq.queue_id in wanted]
        ends = {mq: consumer.max_offset(mq) for mq in queues}
        for mq in queues:  # warm up: routes, the stream, and a check of what comes back
            result = consumer.pull(mq, 0, 1)
            if result.messages and len(result.messages[0].body) != job["body_bytes"]:
                raise RuntimeError(f"pulled a {len(result.messages[0].body)}-byte body, expected {job['body_bytes']}")
        one_pass = job.get("one_pass", False)
        loop = PullLoop(consumer.pull_async, ends, job["batch"], job["window"], one_pass=one_pass)
        _emit("READY")
        _await_go()
        windows = Windows.from_now(job)
        end = loop.run(windows)
        windows.close()
        if one_pass:  # the rate of the pass itself, however long it took
            return _result([loop.messages], end - windows.start, loop.errors, cpu_s=windows.cpu_s,
                           error_samples=loop.error_samples)
        return _result(windows.messages, windows.seconds, loop.errors, cpu_s=windows.cpu_s,
                       error_samples=loop.error_samples)
    finally:
        consumer.shutdown()


# ---- push -------------------------------------------------------------------------------

def run_push(job: dict[str, Any]) -> dict[str, Any]:
    from nodes.client import PushConsumer
    from nodes.common.types import ConsumeConcurrentlyStatus, ConsumeFromWhere

    lock = threading.Lock()
    seen = {"messages": 0, "first": 0.0, "last": 0.0}
    done = threading.Event()
    expected = job["expected"]

    def listener(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        now = time.monotonic()
        with lock:
            if not seen["messages"]:
                seen["first"] = now
            seen["messages"] += len(msgs)
            seen["last"] = now
            if seen["messages"] >= expected:
                done.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(job["namesrv"], job["group"], consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                            timing=Timing(**job["timing"]), pull_batch_size=job["batch"])
    consumer.subscribe(job["topic"])
    consumer.register_listener(listener)
    _emit("READY")
    _await_go()
    start = time.monotonic()
    cpu_start_s = time.process_time()
    consumer.start()
    try:
        done.wait(job["seconds"])
        cpu_s = time.process_time() - cpu_start_s  # start-up and rebalance included: small next to the rest
    finally:
        with lock:
            messages, first, last = seen["messages"], seen["first"], seen["last"]
        consumer.shutdown()
    if not messages:
        return _result([0], time.monotonic() - start, 1, error_samples=["no message arrived"])
    # From the first delivery to the last: rebalance and start-up are not consumption.
    return _result([messages], last - first, 0, cpu_s=cpu_s, started_after_s=first - start)


# ---- send -------------------------------------------------------------------------------

def run_send(job: dict[str, Any]) -> dict[str, Any]:
    from nodes.client import Producer

    mode, batch, window = job["mode"], job["batch"], job["window"]
    body = b"b" * job["body_bytes"]
    topic = job["topic"]
    producer = Producer(job["namesrv"], group=job["group"], timing=Timing(**job["timing"]), async_window=window)
    producer.start()
    counts = {"ok": 0, "errors": 0}
    samples: list[str] = []
    lock = threading.Lock()

    windows: Windows | None = None

    def settle(n: int, result: Any, exc: BaseException | None) -> None:
        with lock:
            if exc is None and result.status is SendStatus.SEND_OK:
                counts["ok"] += n
                if windows is not None:
                    windows.add(n)
            else:
                counts["errors"] += n
                if len(samples) < 5:
                    samples.append(repr(exc) if exc is not None else result.status.value)

    def done(fut: cf.Future[Any]) -> None:
        try:  # one look at the future (each takes its lock)
            result = fut.result()
        except Exception as exc:
            settle(1, None, exc)
        else:
            settle(1, result, None)

    try:
        producer.send(Message(topic, body))  # warm up: route, channel
        _emit("READY")
        _await_go()
        windows = Windows.from_now(job)
        pending: list[cf.Future[Any]] = []
        while windows.is_open():
            try:
                if mode == "sync":
                    settle(1, producer.send(Message(topic, body)), None)
                elif mode == "batch":
                    settle(batch, producer.send_batch([Message(topic, body) for _ in range(batch)]), None)
                else:
                    fut = producer.send_async(Message(topic, body))  # blocks while `window` are in flight
                    fut.add_done_callback(done)
                    pending.append(fut)
                    if len(pending) > 4 * window:
                        pending = [f for f in pending if not f.done()]
            except Exception as exc:  # counted and sampled
                settle(batch if mode == "batch" else 1, None, exc)
        windows.close()
        cf.wait(pending)
    finally:
        producer.shutdown()
    assert windows is not None
    return _result(windows.messages, windows.seconds, counts["errors"], cpu_s=windows.cpu_s, error_samples=samples)


# ---- the limits' clients --------------------------------------------------------------------

class _Feed:
    """Request iterator for a bare stream call: yields what was put, one message each."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()

    def __aiter__(self) -> _Feed:
        return self

    async def __anext__(self) -> Any:
        item = await self.queue.get()
        if item is None:
            raise StopAsyncIteration
        return item


async def _stream_limit(job: dict[str, Any]) -> dict[str, Any]:
    batch, window = job["batch"], job["window"]
    channel = rpc.make_channel(job["addr"])
    try:
        stub = broker_pb2_grpc.BrokerStub(channel)
        feed = _Feed()
        call = stub.Pull(feed, wait_for_ready=True)
        ids = iter(range(1, 1 << 62))

        def request() -> broker_pb2.PullRequest:
            return broker_pb2.PullRequest(request_id=next(ids), consumer_group="bench", topic="BenchLimit",
                                          queue_id=0, queue_offset=0, max_msg_nums=batch, has_subscription=True,
                                          subscription_expression="*")

        feed.queue.put_nowait(request())  # warm up: the connection and the server's blob
        await call.read()
        _emit("READY")
        await asyncio.get_running_loop().run_in_executor(None, _await_go)
        windows = Windows.from_now(job)
        for _ in range(window):
            feed.queue.put_nowait(request())
        inflight = window
        while inflight:
            resp = await call.read()
            inflight -= 1
            windows.add(resp.record_count)
            if windows.is_open():
                feed.queue.put_nowait(request())
                inflight += 1
        feed.queue.put_nowait(None)
        call.cancel()
        return _result(windows.messages, windows.seconds)
    finally:
        await channel.close()


async def _unary_limit(job: dict[str, Any]) -> dict[str, Any]:
    mode, batch, window = job["mode"], job["batch"], job["window"]
    channel = rpc.make_channel(job["addr"])
    try:
        stub = broker_pb2_grpc.BrokerStub(channel)
        # The bytes a Producer sends: the same request shape (a batch body for several), a
        # unique id per message.
        msg = Message("BenchLimit", b"b" * job["body_bytes"], properties={c.PROPERTY_UNIQ_KEY: "0" * 32})
        out = Outgoing(msg.body, msg.flag, msg.all_properties(), int(time.time() * 1000))
        request = build_request([out] * batch, producer_group="bench", topic="BenchLimit", queue_id=0,
                                born_host="127.0.0.1:0")
        await stub.SendMessage(request, wait_for_ready=True, timeout=WARM_UP_TIMEOUT_S)  # warm up
        _emit("READY")
        await asyncio.get_running_loop().run_in_executor(None, _await_go)
        windows = Windows.from_now(job)

        async def caller() -> None:
            while windows.is_open():
                await stub.SendMessage(request)
                windows.add(batch)

        await asyncio.gather(*(caller() for _ in range(window if mode == "async" else 1)))
        return _result(windows.messages, windows.seconds)
    finally:
        await channel.close()


ROLES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "pull": run_pull,
    "push": run_push,
    "send": run_send,
    "grpc-stream": lambda job: asyncio.run(_stream_limit(job)),
    "grpc-unary": lambda job: asyncio.run(_unary_limit(job)),
}


def main(argv: list[str] | None = None) -> int:
    _die_with_parent()
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        _emit("ERROR usage: python -m harness.bench.worker '<job json>'")
        return 2
    try:
        job = json.loads(args[0])
        result = ROLES[job["role"]](job)
    except SystemExit:
        raise
    except BaseException as exc:
        _emit(f"ERROR {type(exc).__name__}: {exc}".replace("\n", " "))
        return 1
    _emit("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
