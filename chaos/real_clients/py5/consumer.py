"""A chaos consumer node made of Apache's RocketMQ 5 Python client (5.1.2, a PushConsumer) and a thin journal.

Run as a script with `.venv-py5/bin/python` (never imported, imports nothing from mqlab). The
harness starts it in place of `python -m nodes consumer`, with `--endpoints` the loopback
addresses of this node's own link proxies to the brokers' RocketMQ 5 ports; those proxies rewrite
the brokers' endpoints in route and assignment answers to themselves, so every receive, ack and
heartbeat crosses a link a partition can cut. One `READY {json}` line on stdout once it runs;
SIGTERM = graceful stop (the client shuts down), SIGKILL, SIGSTOP/SIGCONT as for any node.

A PushConsumer, not a SimpleConsumer loop: it is the 5.x consumer applications run, and its own
receive loop, auto-renewed invisible time, retries and ack after the listener's SUCCESS are what
the suites put under faults. The listener journals each message, then answers SUCCESS (the
client acks after it returns), so a kill may lose an ack, never the evidence of a delivery.

It writes the same history files as mqlab's consumer node, in `--run-dir`:
  deliveries.jsonl  one flushed line per message before the listener returns
                    (docs/real-clients-chaos.md lists the fields)
  events.jsonl      consumer-start / consumer-stop (with client_id). The client exposes no
                    receive or ack callbacks: pops, acks and redeliveries come from the brokers'
                    own pop events, which carry the client id.

The 5.x message carries no queue: where a message was popped from (broker, queue topic, queue
id, queue offset, commitlog offset) is read from the receipt handle mqlab's broker hands out with
it (`p1 <kind> <broker> <group> <queue topic> <queue id> <queue offset> <phys offset> ...`, see
nodes/broker/pop/handle.py); a handle of another shape leaves those fields null.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import threading
import time
import zlib
from pathlib import Path
from typing import Any

POLL_S = 0.05
JOURNAL_FILE = "deliveries.jsonl"
EVENTS_FILE = "events.jsonl"
HANDLE_VERSION = "p1"
HANDLE_FIELDS = 11


def mono_ms() -> int:
    return time.monotonic_ns() // 1_000_000  # CLOCK_MONOTONIC: the checker's timeline


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class Journal:
    """Whole lines, flushed per call, from any consume thread."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, records: list[dict]) -> None:
        data = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
        with self._lock:
            self._file.write(data)
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


def handle_fields(handle: str | None) -> dict[str, Any]:
    """Where the broker popped the message from, from its receipt handle (nulls for a foreign one)."""
    parts = handle.split(" ") if isinstance(handle, str) else []
    if len(parts) != HANDLE_FIELDS or parts[0] != HANDLE_VERSION:
        return {"pop_kind": None, "broker_name": None, "queue_topic": None, "queue_id": None, "queue_offset": None,
                "commitlog_offset": None}
    try:
        queue_id, queue_offset, phys_offset = int(parts[5]), int(parts[6]), int(parts[7])
    except ValueError:
        queue_id = queue_offset = phys_offset = None
    return {"pop_kind": parts[1], "broker_name": parts[2], "queue_topic": parts[4], "queue_id": queue_id,
            "queue_offset": queue_offset, "commitlog_offset": phys_offset}


def as_int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def record(args: argparse.Namespace, client_id: str, msg: Any, result: str) -> dict:
    props = dict(msg.properties or {})
    body = bytes(msg.body or b"")
    attempt = msg.delivery_attempt
    line = {
        "event": "deliver", "node": args.node_id, "group": args.group, "client_id": client_id,
        "msg_id": props.get("UNIQ_KEY") or msg.message_id,
        "keys": " ".join(sorted(msg.keys)) if msg.keys else None, "tags": msg.tag or None, "topic": msg.topic,
        **handle_fields(msg.receipt_handle),
        "delivery_attempt": attempt, "reconsume_times": attempt - 1 if isinstance(attempt, int) else None,
        "origin_msg_id": props.get("ORIGIN_MESSAGE_ID"),
        "sharding_key": props.get(args.sharding_key_property), "seq": as_int(props.get(args.seq_property)),
        "message_group": msg.message_group or None,
        "body_sha256": hashlib.sha256(body).hexdigest(), "body_crc32": zlib.crc32(body), "body_bytes": len(body),
        "store_timestamp_ms": getattr(msg, "_Message__store_timestamp", None),  # no public getter
        "born_timestamp_ms": msg.born_timestamp,
        "wall_ms": wall_ms(), "mono_ms": mono_ms(), "result": result, "orderly": False,
    }
    if line["queue_topic"] is None:
        line["queue_topic"] = msg.topic
    return line


def event(args: argparse.Namespace, name: str, **fields: object) -> dict:
    return {"event": name, "node": args.node_id, "side": "client", "wall_ms": wall_ms(), "mono_ms": mono_ms(),
            **fields}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoints", required=True, help="loopback host:port;host:port of this node's broker links")
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--node-id", required=True)
    parser.add_argument("--port", type=int, required=True, help="the port the harness gave this node (READY)")
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--sleep-ms", type=int, default=0, help="time each message's listener call takes")
    parser.add_argument("--threads", type=int, default=4, help="the PushConsumer's consumption threads")
    parser.add_argument("--sharding-key-property", required=True)
    parser.add_argument("--seq-property", required=True)
    parser.add_argument("--timeout-s", type=int, default=3, help="the client's request timeout")
    args = parser.parse_args()
    if not all(e.startswith("127.0.0.1:") for e in args.endpoints.split(";")):
        parser.error(f"--endpoints must be loopback addresses 127.0.0.1:PORT, got {args.endpoints!r}")
    args.run_dir.mkdir(parents=True, exist_ok=True)
    # the client logs under $HOME/logs/rocketmq_python: keep its log in the node's dir
    os.environ["HOME"] = str(args.run_dir.absolute())
    # the harness's PYTHONPATH names mqlab's tree, whose `proto` stubs must not meet the client's
    inherited = set(filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)))
    sys.path[:] = [p for p in sys.path if p not in inherited]
    try:
        from rocketmq import (
            ClientConfiguration,
            ConsumeResult,
            Credentials,
            FilterExpression,
            MessageListener,
            PushConsumer,
        )
    except ImportError as exc:
        sys.stderr.write(f"Apache's RocketMQ 5 Python client is not installed in {sys.prefix}: {exc}; "
                         "run ./scripts/bootstrap.sh\n")
        return 3

    journal = Journal(args.run_dir / JOURNAL_FILE)
    events = Journal(args.run_dir / EVENTS_FILE)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    results: dict[str, int] = {}
    results_lock = threading.Lock()
    holder: dict[str, str] = {}

    class Listener(MessageListener):
        def consume(self, message: Any) -> Any:
            try:
                if args.sleep_ms:
                    time.sleep(args.sleep_ms / 1000)
                journal.write([record(args, holder.get("client_id", ""), message, "CONSUME_SUCCESS")])
            except Exception as exc:  # journalling failed: have it redelivered rather than acked unseen
                sys.stderr.write(f"listener error: {exc!r}\n")
                return ConsumeResult.FAILURE
            with results_lock:
                results["CONSUME_SUCCESS"] = results.get("CONSUME_SUCCESS", 0) + 1
            return ConsumeResult.SUCCESS

    config = ClientConfiguration(args.endpoints, Credentials(), request_timeout=args.timeout_s)

    def new_consumer() -> Any:
        consumer = PushConsumer(config, args.group, Listener(), {args.topic: FilterExpression("*")},
                                consumption_thread_count=args.threads)
        holder["client_id"] = consumer.client_id
        return consumer

    consumer = new_consumer()
    # READY before the client starts: the harness creates the suite's topic only once every node is
    # up, and the 5.x client's startup fails while its topic has no route
    ready = {"node_id": args.node_id, "role": "consumer", "addr": f"127.0.0.1:{args.port}", "port": args.port,
             "pid": os.getpid(), "client": "py5", "client_id": consumer.client_id}
    sys.stdout.write("READY " + json.dumps(ready) + "\n")
    sys.stdout.flush()
    while not stop.is_set():
        try:
            consumer.startup()
            break
        except Exception as exc:  # a failed startup leaves the client unusable: make a new one
            sys.stderr.write(f"startup failed, retrying in 1 s: {exc!r}\n")
            if stop.wait(1.0):
                break
            consumer = new_consumer()
    client_id = consumer.client_id
    events.write([event(args, "consumer-start", group=args.group, client_id=client_id, client="py5",
                        subscriptions={args.topic: "*"}, orderly=False)])
    while not stop.wait(POLL_S):
        pass
    try:
        consumer.shutdown()  # stops receiving, waits for the listener's calls, closes its channels
    except Exception as exc:
        sys.stderr.write(f"shutdown failed: {exc!r}\n")
    events.write([event(args, "consumer-stop", group=args.group, client_id=client_id, client="py5",
                        results=dict(results))])
    journal.close()
    events.close()
    sys.stdout.flush()
    os._exit(0)  # the client's non-daemon scheduler threads could hold the interpreter's exit


if __name__ == "__main__":
    sys.exit(main())
