"""Drive Apache's C++ RocketMQ client (PyPI `rocketmq` 0.4.4) against a name server; one JSON line per event.

Run by the interop tests as a separate process with the venv's python and HOME pointing at a
temporary directory (the C++ client writes its logs under ~/logs). It imports nothing from mqlab:
the point is a client we did not write. Every mode exits on its own within --max-s seconds.

    cpp_client.py produce --namesrv 127.0.0.1:9876 --group PG --plan '[{"send": "sync", ...}]' [--warmup-topic W]
    cpp_client.py push    --namesrv ... --group G --topic T [--fail-first BODY ...] [--expect N]
    cpp_client.py orderly --namesrv ... --group G --topic T [--expect N] [--stop-file PATH]
    cpp_client.py pull    --namesrv ... --group G --topic T [--expect N]

A plan item: {"send": "sync"|"oneway"|"orderly"|"delay", "topic", "body", "tags", "keys", "props",
"arg" (orderly: the queue is arg % queue count), "level" (delay)} or {"send": "batch", "messages": [...]}.

Events (field "event"): "started"; "warmup" (attempt, ok, message or status); "sent" (send, body,
msg_id, queue, offset, status); "received" (topic, queue, queue_offset, body, tags, keys,
properties, reconsume_times, msg_id, status, at_ms);
"pulled" (pull mode: queue and next offset when a queue reports no new message); "error" (where,
message); "done" (reason). Message bodies are text: the binding passes them as C strings.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import threading
import time

try:
    from rocketmq import client as rmq
    from rocketmq.ffi import MSG_CALLBACK_FUNC, dll
except ImportError as exc:  # the test reads this line and fails with the install hint
    print(json.dumps({"event": "error", "where": "import", "message": f"rocketmq 0.4.4 is not installed: {exc}"}),
          flush=True)
    sys.exit(3)

CONSUME_SUCCESS = 0
RECONSUME_LATER = 1
# Properties the brokers or the client set; always reported when present.
SYSTEM_PROPERTIES = ("UNIQ_KEY", "RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "REAL_TOPIC", "REAL_QID", "DELAY",
                     "WAIT", "MAX_OFFSET", "MIN_OFFSET")
POLL_S = 0.05
WARMUP_RETRY_S = 0.2

_out_lock = threading.Lock()


def emit(event: str, **fields: object) -> None:
    with _out_lock:
        sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
        sys.stdout.flush()


def _text(value: bytes | str | None) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _message(item: dict) -> rmq.Message:
    msg = rmq.Message(item["topic"])
    msg.set_body(item["body"])
    if item.get("tags"):
        msg.set_tags(item["tags"])
    if item.get("keys"):
        msg.set_keys(item["keys"])
    for key, value in (item.get("props") or {}).items():
        msg.set_property(key, value)
    if item.get("level"):
        msg.set_delay_time_level(int(item["level"]))
    return msg


# ---- produce ------------------------------------------------------------------------------

def produce(args: argparse.Namespace) -> None:
    producer = rmq.Producer(args.group, timeout=args.send_timeout_ms)
    producer.set_namesrv_addr(args.namesrv)
    producer.start()
    emit("started", mode="produce", pid=os.getpid())
    deadline = time.monotonic() + args.max_s
    try:
        if args.warmup_topic and not _warm_up(producer, args.warmup_topic, deadline):
            emit("done", reason="warm-up failed")
            return
        for item in json.loads(args.plan):
            if time.monotonic() > deadline:
                emit("done", reason="timeout")
                return
            _send_one(producer, item)
    finally:
        producer.shutdown()
    emit("done", reason="plan sent")


def _warm_up(producer: rmq.Producer, topic: str, deadline: float) -> bool:
    """Send to a topic of its own until one send is acknowledged.

    The client's first sends race its own start-up: while another of its threads is connecting to
    the broker, a send finds the connection table busy and fails at once ("No route info of this
    topic") without retrying over the network. Warming up on a separate topic keeps that race out
    of the plan, whose every send is then judged strictly. Each failed attempt is an event."""
    attempt = 0
    while time.monotonic() < deadline:
        attempt += 1
        try:
            result = producer.send_sync(_message({"topic": topic, "body": f"warm-up-{attempt}"}))
        except Exception as exc:
            emit("warmup", attempt=attempt, ok=False, message=str(exc))
            time.sleep(WARMUP_RETRY_S)
            continue
        emit("warmup", attempt=attempt, ok=True, status=result.status.name)
        return True
    return False


def _send_one(producer: rmq.Producer, item: dict) -> None:
    kind = item["send"]
    try:
        if kind == "batch":
            msgs = [_message(m) for m in item["messages"]]
            result = producer.send_batch(msgs)
            emit("sent", send=kind, body=[m["body"] for m in item["messages"]], msg_id=result.msg_id,
                 queue=None, offset=result.offset, status=result.status.name)
        elif kind == "oneway":
            producer.send_oneway(_message(item))
            emit("sent", send=kind, body=item["body"], msg_id=None, queue=None, offset=None, status=None)
        elif kind == "orderly":
            chosen: list[int] = []

            def select(queue_count: int, _msg: object, arg: int) -> int:
                queue = ctypes.cast(arg, ctypes.POINTER(ctypes.c_int))[0] % queue_count
                chosen.append(queue)
                return queue

            result = producer.send_orderly(_message(item), int(item["arg"]), queue_selector=select)
            emit("sent", send=kind, body=item["body"], msg_id=result.msg_id, queue=chosen[-1] if chosen else None,
                 offset=result.offset, status=result.status.name)
        elif kind in ("sync", "delay"):
            result = producer.send_sync(_message(item))
            emit("sent", send=kind, body=item["body"], msg_id=result.msg_id, queue=None, offset=result.offset,
                 status=result.status.name)
        else:
            emit("error", where="plan", message=f"unknown send kind {kind!r}")
    except Exception as exc:  # a failed send is an event the test judges, not a crash
        emit("error", where=f"send {kind}", message=str(exc), body=item.get("body"))


# ---- push (concurrent or orderly) ---------------------------------------------------------

class Tracker:
    """What the callback saw, and when the consumer may stop."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.fail_first = set(args.fail_first or ())
        self.failed: set[str] = set()
        self.acked: set[str] = set()
        self.expect = args.expect
        self.props = tuple(args.prop or ()) + SYSTEM_PROPERTIES
        self.sleep_s = args.consume_ms / 1000
        self.last_ack = time.monotonic()
        self.lock = threading.Lock()

    def on_message(self, _consumer: int, handle: int) -> int:
        try:
            msg = rmq.RecvMessage(handle)
            body = _text(msg.body) or ""
            with self.lock:
                fail = body in self.fail_first and body not in self.failed
                if fail:
                    self.failed.add(body)
            properties = {}
            for name in self.props:
                value = _text(msg.get_property(name))
                if value:
                    properties[name] = value
            if self.sleep_s:
                time.sleep(self.sleep_s)
            status = RECONSUME_LATER if fail else CONSUME_SUCCESS
            emit("received", topic=msg.topic, queue=msg.queue_id, queue_offset=msg.queue_offset, body=body,
                 tags=_text(msg.tags), keys=_text(msg.keys), properties=properties,
                 reconsume_times=msg.reconsume_times, msg_id=msg.id, thread=threading.get_ident(),
                 status="RECONSUME_LATER" if fail else "CONSUME_SUCCESS", at_ms=int(time.time() * 1000))
            if not fail:
                with self.lock:
                    self.acked.add(body)
                    self.last_ack = time.monotonic()
            return status
        except Exception as exc:  # never let an exception cross the C boundary (undefined status)
            emit("error", where="callback", message=repr(exc))
            return RECONSUME_LATER

    def finished(self, linger_s: float) -> bool:
        with self.lock:
            return (self.expect is not None and len(self.acked) >= self.expect
                    and time.monotonic() - self.last_ack >= linger_s)


def push(args: argparse.Namespace, orderly: bool) -> None:
    consumer = rmq.PushConsumer(args.group, orderly=orderly)
    consumer.set_namesrv_addr(args.namesrv)
    consumer.set_thread_count(args.threads)
    consumer.set_message_batch_max_size(1)
    tracker = Tracker(args)
    # The binding's own callback re-raises inside ctypes, which leaves the consume status
    # undefined; register a callback that always returns 0 (success) or 1 (reconsume later).
    callback = MSG_CALLBACK_FUNC(tracker.on_message)
    check(dll.Subscribe(consumer._handle, args.topic.encode(), args.expression.encode()), "subscribe")
    register = dll.RegisterMessageCallbackOrderly if orderly else dll.RegisterMessageCallback
    check(register(consumer._handle, callback), "register callback")
    consumer.start()
    emit("started", mode="orderly" if orderly else "push", pid=os.getpid(), group=args.group)
    reason = wait_until(args, tracker)
    consumer.shutdown()  # unregisters from the brokers and persists offsets
    emit("done", reason=reason, acked=len(tracker.acked))
    consumer._handle = None  # shut down once; the binding's destructor would shut down again
    _exit()


def wait_until(args: argparse.Namespace, tracker: Tracker) -> str:
    deadline = time.monotonic() + args.max_s
    while time.monotonic() < deadline:
        if args.stop_file and os.path.exists(args.stop_file):
            return "stop file"
        if tracker.finished(args.linger_s):
            return "expected"
        time.sleep(POLL_S)
    return "timeout"


def check(status: int, where: str) -> None:
    if status != 0:
        raise RuntimeError(f"{where} failed with status {status}: {_text(dll.GetLatestErrorMessage())}")


# ---- pull ---------------------------------------------------------------------------------

def pull(args: argparse.Namespace) -> None:
    consumer = rmq.PullConsumer(args.group)
    consumer.set_namesrv_addr(args.namesrv)
    consumer.start()
    emit("started", mode="pull", pid=os.getpid())
    seen: set[str] = set()
    deadline = time.monotonic() + args.max_s
    rounds = 0
    # Each pull() walks every queue of the topic until the broker answers "no new message",
    # keeping the offsets in the binding's dict; rounds repeat until enough arrived.
    while time.monotonic() < deadline:
        rounds += 1
        try:
            for msg in consumer.pull(args.topic, args.expression):
                body = _text(msg.body) or ""
                seen.add(body)
                emit("received", topic=msg.topic, queue=msg.queue_id, queue_offset=msg.queue_offset, body=body,
                     tags=_text(msg.tags), keys=_text(msg.keys),
                     properties={n: v for n in (*tuple(args.prop or ()), *SYSTEM_PROPERTIES)
                                 if (v := _text(msg.get_property(n)))},
                     reconsume_times=msg.reconsume_times, msg_id=msg.id, status="CONSUME_SUCCESS",
                     at_ms=int(time.time() * 1000))
        except Exception as exc:
            emit("error", where="pull", message=str(exc))
        emit("pulled", round=rounds, offsets=dict(consumer.offset_table))
        if args.expect is None or len(seen) >= args.expect:
            break
        time.sleep(0.2)
    consumer.shutdown()
    emit("done", reason="expected" if args.expect is None or len(seen) >= args.expect else "timeout",
         rounds=rounds)
    consumer._handle = None
    _exit()


def _exit() -> None:
    # The C++ client's static destructors have crashed at interpreter exit; the events are out.
    sys.stdout.flush()
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("produce", "push", "orderly", "pull"))
    parser.add_argument("--namesrv", required=True, help="host:port of the name server (remoting)")
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic")
    parser.add_argument("--expression", default="*")
    parser.add_argument("--plan", help="produce: JSON list of sends")
    parser.add_argument("--warmup-topic", help="produce: before the plan, send here until one send is acknowledged")
    parser.add_argument("--fail-first", action="append", help="push: answer RECONSUME_LATER once for this body")
    parser.add_argument("--prop", action="append", help="a user property to report on received messages")
    parser.add_argument("--expect", type=int, help="stop once this many distinct bodies were acknowledged")
    parser.add_argument("--linger-s", type=float, default=1.0, help="after --expect: wait for stragglers")
    parser.add_argument("--stop-file", help="stop as soon as this file exists")
    parser.add_argument("--max-s", type=float, default=60.0, help="hard bound on the run")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--consume-ms", type=int, default=0, help="time each callback takes")
    parser.add_argument("--send-timeout-ms", type=int, default=5000)
    args = parser.parse_args()
    if args.mode != "produce" and not args.topic:
        parser.error("--topic is required for consumers")
    if args.mode == "produce":
        if not args.plan:
            parser.error("--plan is required for produce")
        produce(args)
        _exit()
    elif args.mode == "pull":
        pull(args)
    else:
        push(args, orderly=args.mode == "orderly")


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:
        emit("error", where="main", message=f"{type(exc).__name__}: {exc}")
        sys.stdout.flush()
        os._exit(1)
