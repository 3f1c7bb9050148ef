"""Apache's C++ RocketMQ client as a benchmark worker: `python -m harness.bench.cpp_worker '<job json>'`.

The measured client is the PyPI `rocketmq` 0.4.4 binding over librocketmq (C++ client 1.2.3),
talking RocketMQ's 4.x remoting protocol to the name server's loopback remoting address; this
process adds only the line protocol and the windows (`harness.bench.worker_protocol`) and
nothing of mqlab's client. Roles:

    send       one Producer: `sync` (send_sync), `batch` (send_batch of `batch`), `oneway`
               (send_oneway; the RESULT carries `sent_total`, every oneway call made, so the
               benchmark can check the master stored them)
    push       a PushConsumer (concurrently, the client's own thread count and pull batch 32)
               from offset 0 of a new group, a raw ctypes callback reading each message's body,
               topic, queue offset and UNIQ_KEY; counts from the first delivery to `expected`
    pull-loop  the binding's PullConsumer.pull(topic, max_num=32): every queue until the broker
               says no new message, pass after pass from offset 0, reading each message

The C++ client writes its logs under $HOME/logs/rocketmq-cpp: HOME is the job's `home`.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
import time
from typing import Any

from harness.bench.worker_protocol import Windows, await_go, die_with_parent, emit, result

CONSUME_SUCCESS = 0  # the C API's E_CONSUME_SUCCESS
RECONSUME_LATER = 1
SEND_TIMEOUT_MS = 10_000  # a loaded machine: well over the client's 3 s default
COMPRESS_OVER_MAX_BYTES = 0x7FFFFFFF  # the client compresses bodies over this many bytes: never
DRAIN_S = 3.0  # the longest wait for a stuck client's shutdown before the process ends anyway


def _rmq() -> Any:
    from rocketmq import client

    return client


def _message(rmq: Any, topic: str, body: bytes) -> Any:
    msg = rmq.Message(topic)
    msg.set_body(body)
    return msg


def run_send(job: dict[str, Any]) -> dict[str, Any]:
    rmq = _rmq()
    mode, batch, topic = job["mode"], job["batch"], job["topic"]
    body = b"b" * job["body_bytes"]
    producer = opened(rmq.Producer(job["group"], timeout=SEND_TIMEOUT_MS))
    producer.set_namesrv_addr(job["namesrv"])
    if mode == "batch":
        # 1.2.3 compresses a batch body over 4 KiB like one message's, and a compressed batch
        # cannot be split into its messages (the master refuses it): keep batches uncompressed.
        from rocketmq.ffi import dll

        setter = dll.SetProducerCompressMsgBodyOverHowmuch  # in the C API, not declared by the binding
        setter.argtypes, setter.restype = [ctypes.c_void_p, ctypes.c_int], ctypes.c_int
        if setter(producer._handle, COMPRESS_OVER_MAX_BYTES) != 0:
            raise RuntimeError("SetProducerCompressMsgBodyOverHowmuch failed")
    producer.start()
    ok_status = rmq.SendStatus.OK
    errors, samples, sent_total = 0, [], 0

    def send_once() -> int:
        nonlocal sent_total
        if mode == "batch":
            res = producer.send_batch([_message(rmq, topic, body) for _ in range(batch)])
        elif mode == "oneway":
            producer.send_oneway(_message(rmq, topic, body))
            sent_total += 1
            return 1
        else:
            res = producer.send_sync(_message(rmq, topic, body))
        if res.status != ok_status:
            raise RuntimeError(f"send status {res.status.name}")
        return batch if mode == "batch" else 1

    send_once()  # warm up: route, connection
    emit("READY")
    await_go()
    windows = Windows.from_now(job)
    while windows.is_open():
        try:
            windows.add(send_once())
        except Exception as exc:  # counted and sampled
            errors += 1
            if len(samples) < 5:
                samples.append(f"{type(exc).__name__}: {exc}")
    windows.close()
    if mode == "oneway":
        # a fence: the client drops oneway requests still in its buffers at shutdown; the
        # master reads a connection's requests in order, so once this answer is back every
        # oneway request before it has reached the master (the benchmark then checks they
        # were stored)
        producer.send_sync(_message(rmq, topic, body))
        sent_total += 1
    return result(windows.messages, windows.seconds, errors, cpu_s=windows.cpu_s, error_samples=samples,
                  sent_total=sent_total)


def run_push(job: dict[str, Any]) -> dict[str, Any]:
    from rocketmq.ffi import MSG_CALLBACK_FUNC, dll

    rmq = _rmq()
    expected = job["expected"]
    lock = threading.Lock()
    seen = {"messages": 0, "first": 0.0, "last": 0.0, "touched": 0}
    done = threading.Event()

    def on_message(_consumer: int, handle: int) -> int:
        try:
            msg = rmq.RecvMessage(handle)
            touched = len(msg.body) + len(msg.topic) + msg.queue_offset + len(msg.get_property("UNIQ_KEY") or b"")
        except Exception:  # never across the C boundary (the binding's own path leaves the status undefined)
            return RECONSUME_LATER
        now = time.monotonic()
        with lock:
            if not seen["messages"]:
                seen["first"] = now
            seen["messages"] += 1
            seen["last"] = now
            seen["touched"] += touched
            if seen["messages"] >= expected:
                done.set()
        return CONSUME_SUCCESS

    consumer = opened(rmq.PushConsumer(job["group"]))
    consumer.set_namesrv_addr(job["namesrv"])
    callback = MSG_CALLBACK_FUNC(on_message)  # kept alive by this frame until the end
    if dll.Subscribe(consumer._handle, job["topic"].encode(), b"*") != 0:
        raise RuntimeError(f"subscribe failed: {dll.GetLatestErrorMessage()}")
    if dll.RegisterMessageCallback(consumer._handle, callback) != 0:
        raise RuntimeError(f"registering the callback failed: {dll.GetLatestErrorMessage()}")
    emit("READY")
    await_go()
    start = time.monotonic()
    cpu_start_s = time.process_time()
    consumer.start()
    done.wait(job["seconds"])
    cpu_s = time.process_time() - cpu_start_s  # start-up and rebalance included: small next to the rest
    with lock:
        messages, first, last = seen["messages"], seen["first"], seen["last"]
    if not messages:
        return result([0], time.monotonic() - start, 1, error_samples=["no message arrived"])
    return result([messages], last - first, 0, cpu_s=cpu_s, started_after_s=first - start)


def run_pull_loop(job: dict[str, Any]) -> dict[str, Any]:
    rmq = _rmq()
    topic, batch = job["topic"], job["batch"]
    consumer = opened(rmq.PullConsumer(job["group"]))
    consumer.set_namesrv_addr(job["namesrv"])
    consumer.start()
    touched = 0

    def read(msg: Any) -> int:
        return len(msg.body) + len(msg.topic) + msg.queue_offset + len(msg.get_property("UNIQ_KEY") or b"")

    for msg in consumer.pull(topic, "*", max_num=1):  # warm up: route, connection
        touched += read(msg)
        break
    consumer.offset_table.clear()
    emit("READY")
    await_go()
    windows = Windows.from_now(job)
    passes = 0
    while windows.is_open():
        got = 0
        for msg in consumer.pull(topic, "*", max_num=batch):
            touched += read(msg)
            windows.add(1)
            got += 1
            if not windows.is_open():
                break
        if got == 0 and windows.is_open():
            raise RuntimeError(f"a pass over {topic} found no message")
        consumer.offset_table.clear()  # the binding keeps offsets in this dict: the next pass from 0
        passes += 1
    windows.close()
    return result(windows.messages, windows.seconds, cpu_s=windows.cpu_s, touched=touched, passes=passes)


_opened: list[Any] = []  # the clients this process started, shut down after RESULT


def opened(client: Any) -> Any:
    _opened.append(client)
    return client


def _shutdown_all() -> None:
    """Shut every client down once (the binding's destructor would do it again), after the
    RESULT is out and bounded: 1.2.3 has aborted in shutdown (an uncaught thread interruption
    when a route refresh was under way), which must not cost a measured row."""
    for client in _opened:
        stopper = threading.Thread(target=client.shutdown, name="cpp-shutdown", daemon=True)
        stopper.start()
        stopper.join(DRAIN_S)
        client._handle = None


ROLES = {"send": run_send, "push": run_push, "pull-loop": run_pull_loop}


def main(argv: list[str] | None = None) -> int:
    die_with_parent()
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        emit("ERROR usage: python -m harness.bench.cpp_worker '<job json>'")
        return 2
    code = 0
    try:
        job = json.loads(args[0])
        os.makedirs(job["home"], exist_ok=True)
        os.environ["HOME"] = job["home"]  # before the client starts: its logs go under HOME
        emit("RESULT " + json.dumps(ROLES[job["role"]](job)))
    except BaseException as exc:
        emit(f"ERROR {type(exc).__name__}: {exc}".replace("\n", " "))
        code = 1
    _shutdown_all()
    sys.stdout.flush()
    os._exit(code)  # the C++ client's static destructors have crashed at interpreter exit


if __name__ == "__main__":
    main()
