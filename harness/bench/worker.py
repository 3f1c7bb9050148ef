"""One benchmark client process: `python -m harness.bench.worker '<job json>'`.

Every measured client runs in a process of its own, as a real consumer or producer would, so
the benchmark process's own work never competes with it for the GIL. Every consumer role
reads each message it gets as an application would (`read_messages`: body, topic, queue
offset, properties). Roles:

    pull         PullConsumer.pull_async over its queues, `window` pulls in flight
    pull-loop    a plain loop of PullConsumer.pull(mq, offset, max_nums=batch), one call at a time
    push         PushConsumer (concurrently) with a listener that reads each message
    send         one Producer: `sync` (send), `batch` (send_batch), `async` (send_async, window)
    the references (plain-stream, plain-unary, plain-stream-publish, tcp, redis-pull, redis-xadd, grpc-stream,
    grpc-unary): `harness.bench.ref_workers`

The line protocol and the windows: `harness.bench.worker_protocol`.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from harness.bench import ref_workers
from harness.bench.worker_protocol import Windows, await_go, die_with_parent, emit
from harness.bench.worker_protocol import result as worker_result
from nodes.common import constants as c
from nodes.common.config import Timing
from nodes.common.types import Message, MessageQueue, PullStatus, SendStatus

__all__ = ["PullLoop", "Windows", "main", "read_messages"]

WARM_UP_TIMEOUT_S = 30.0  # a loaded machine may take a while to connect


def read_messages(messages: Any) -> int:
    """What an application does with each message it consumes: look at its body, topic, queue
    offset and properties. Returns a number built from them, so nothing is skipped."""
    touched = 0
    for msg in messages:
        touched += len(msg.body) + len(msg.topic) + msg.queue_offset + len(msg.properties)
    return touched


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
        self.touched = 0
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
        got = 0
        if result.status is PullStatus.FOUND:
            messages = result.messages
            self.touched += read_messages(messages)
            got = len(messages)
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
        emit("READY")
        await_go()
        windows = Windows.from_now(job)
        end = loop.run(windows)
        windows.close()
        if one_pass:  # the rate of the pass itself, however long it took
            return worker_result([loop.messages], end - windows.start, loop.errors, cpu_s=windows.cpu_s,
                           error_samples=loop.error_samples)
        return worker_result(windows.messages, windows.seconds, loop.errors, cpu_s=windows.cpu_s,
                       error_samples=loop.error_samples)
    finally:
        consumer.shutdown()


def run_pull_loop(job: dict[str, Any]) -> dict[str, Any]:
    """RocketMQ's pull consumer as applications use it: one `pull` at a time, round robin over
    the queues, each from where the last answer said to go on (wrapping to 0 at the end)."""
    from nodes.client import PullConsumer

    consumer = PullConsumer(job["namesrv"], job["group"], timing=Timing(**job["timing"]))
    consumer.start()
    try:
        queues = [mq for mq in consumer.fetch_queues(job["topic"]) if consumer.max_offset(mq) > 0]
        if not queues:
            raise RuntimeError("every queue is empty: nothing to pull")
        offsets = dict.fromkeys(queues, 0)
        batch, touched, errors = job["batch"], 0, 0
        consumer.pull(queues[0], 0, 1)  # warm up: routes and the stream
        emit("READY")
        await_go()
        windows = Windows.from_now(job)
        turn = 0
        while windows.is_open():
            mq = queues[turn % len(queues)]
            turn += 1
            pulled = consumer.pull(mq, offsets[mq], batch)
            if pulled.status is PullStatus.FOUND:
                touched += read_messages(pulled.messages)
                windows.add(len(pulled.messages))
                offsets[mq] = pulled.next_begin_offset
            elif pulled.status is PullStatus.NO_NEW_MSG:
                offsets[mq] = 0  # the next pass over this queue
            else:
                errors += 1
                offsets[mq] = 0
        windows.close()
        return worker_result(windows.messages, windows.seconds, errors, cpu_s=windows.cpu_s, touched=touched)
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
        read_messages(msgs)
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
    emit("READY")
    await_go()
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
        return worker_result([0], time.monotonic() - start, 1, error_samples=["no message arrived"])
    # From the first delivery to the last: rebalance and start-up are not consumption.
    return worker_result([messages], last - first, 0, cpu_s=cpu_s, started_after_s=first - start)


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
        emit("READY")
        await_go()
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
    return worker_result(windows.messages, windows.seconds, counts["errors"], cpu_s=windows.cpu_s, error_samples=samples)


ROLES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "pull": run_pull,
    "push": run_push,
    "send": run_send,
    "pull-loop": run_pull_loop,
    **ref_workers.ROLES,
}


def main(argv: list[str] | None = None) -> int:
    die_with_parent()
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        emit("ERROR usage: python -m harness.bench.worker '<job json>'")
        return 2
    try:
        job = json.loads(args[0])
        outcome = ROLES[job["role"]](job)
    except SystemExit:
        raise
    except BaseException as exc:
        emit(f"ERROR {type(exc).__name__}: {exc}".replace("\n", " "))
        return 1
    emit("RESULT " + json.dumps(outcome))
    return 0


if __name__ == "__main__":
    sys.exit(main())
