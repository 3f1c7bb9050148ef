"""A chaos consumer node made of Apache's RocketMQ 5 Python client (5.1.2) and a thin journal.

Run as a script with `.venv-py5/bin/python` (never imported; it imports nothing from mqlab, only
its sibling modules py5_history.py and py5_simple.py). The harness starts it in place of
`python -m nodes consumer`, with `--endpoints` the loopback addresses of this node's own link
proxies to the brokers' RocketMQ 5 ports; those proxies rewrite the brokers' endpoints in route
and assignment answers to themselves, so every receive, ack and heartbeat crosses a link a
partition can cut. One `READY {json}` line on stdout once it runs; SIGTERM = graceful stop (the
client shuts down), SIGKILL, SIGSTOP/SIGCONT as for any node.

`--mode push` (the default, `--client py5`): a PushConsumer, the 5.x consumer applications run.
Its own receive loop, auto-renewed invisible time, retries and ack after the listener's SUCCESS
are what the suites put under faults. The listener journals each message, then answers SUCCESS
(the client acks after it returns), so a kill may lose an ack, never the evidence of a delivery.
The PushConsumer exposes no ack outcome: it acks in its consume thread after the listener
returned and only logs a failure (its ack path is private), so push mode writes no client-ack
lines; the brokers' pop events carry its acks.

`--mode simple` (`--client py5-simple`): SimpleConsumer receive-and-consume loops with a fixed
invisible time and no renewal, journalling every ack's outcome (py5_simple.py).

It writes the same history files as mqlab's consumer node, in `--run-dir`:
  deliveries.jsonl  one flushed line per message before it is acked
                    (docs/real-clients-chaos.md lists the fields)
  events.jsonl      consumer-start / consumer-stop (with client_id); in simple mode a client-ack
                    line per ack once it was answered (docs/history.md). Pops, renewals and
                    redeliveries come from the brokers' own pop events, which carry the client id.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from py5_history import EVENTS_FILE, JOURNAL_FILE, Journal, event, record

POLL_S = 0.05
MODES = ("push", "simple")
# RocketMQ's SimpleConsumer examples receive with a 15 s invisible time: long enough for a batch's
# consumption, short enough that a message a dead or paused consumer held comes back soon
SIMPLE_INVISIBLE_MS = 15_000
SIMPLE_BATCH = 16
SHUTDOWN_JOIN_S = 2.0  # the simple loops' last receives, cut by the shutdown


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoints", required=True, help="loopback host:port;host:port of this node's broker links")
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--node-id", required=True)
    parser.add_argument("--port", type=int, required=True, help="the port the harness gave this node (READY)")
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--mode", choices=MODES, default="push", help="PushConsumer, or SimpleConsumer loops")
    parser.add_argument("--sleep-ms", type=int, default=0, help="time each message's consumption takes")
    parser.add_argument("--threads", type=int, default=4,
                        help="push: the PushConsumer's consumption threads; simple: receive-and-consume loops")
    parser.add_argument("--invisible-ms", type=int, default=SIMPLE_INVISIBLE_MS,
                        help="simple: each receive's invisible time, whole seconds (the client sends seconds)")
    parser.add_argument("--batch", type=int, default=SIMPLE_BATCH, help="simple: messages asked per receive")
    parser.add_argument("--sharding-key-property", required=True)
    parser.add_argument("--seq-property", required=True)
    parser.add_argument("--timeout-s", type=int, default=3, help="the client's request timeout")
    args = parser.parse_args()
    if not all(e.startswith("127.0.0.1:") for e in args.endpoints.split(";")):
        parser.error(f"--endpoints must be loopback addresses 127.0.0.1:PORT, got {args.endpoints!r}")
    if args.invisible_ms < 1000 or args.invisible_ms % 1000:
        parser.error(f"--invisible-ms {args.invisible_ms}: the client sends whole seconds; pass a multiple of 1000")
    if args.batch < 1 or args.threads < 1:
        parser.error("--batch and --threads must be at least 1")
    args.client = "py5-simple" if args.mode == "simple" else "py5"
    return args


def main() -> int:
    args = parse_args()
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
            SimpleConsumer,
        )
        from rocketmq.grpc_protocol import Code
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
    subscription = {args.topic: FilterExpression("*")}

    def new_consumer() -> Any:
        if args.mode == "simple":  # the client's own long poll (await_duration, 20 s) holds an empty receive
            consumer = SimpleConsumer(config, args.group, subscription)
        else:
            consumer = PushConsumer(config, args.group, Listener(), subscription, consumption_thread_count=args.threads)
        holder["client_id"] = consumer.client_id
        return consumer

    consumer = new_consumer()
    # READY before the client starts: the harness creates the suite's topic only once every node is
    # up, and the 5.x client's startup fails while its topic has no route
    ready = {"node_id": args.node_id, "role": "consumer", "addr": f"127.0.0.1:{args.port}", "port": args.port,
             "pid": os.getpid(), "client": args.client, "client_id": consumer.client_id}
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
    simple = None
    start_fields: dict[str, Any] = {}
    if args.mode == "simple":
        from py5_simple import SimpleLoops
        simple = SimpleLoops(args, consumer, client_id, journal, events, stop, Code.Name)
        start_fields = {"mode": "simple", "invisible_ms": args.invisible_ms, "batch": args.batch,
                        "threads": args.threads}
    events.write([event(args, "consumer-start", group=args.group, client_id=client_id, client=args.client,
                        subscriptions={args.topic: "*"}, orderly=False, **start_fields)])
    if simple is not None and not stop.is_set():
        simple.start()
    while not stop.wait(POLL_S):
        pass
    if simple is not None:
        simple.drain()  # no new receive; the batches in hand are consumed and acked
    try:
        consumer.shutdown()  # stops receiving, waits for the listener's calls, closes its channels
    except Exception as exc:
        sys.stderr.write(f"shutdown failed: {exc!r}\n")
    if simple is not None:
        simple.join(SHUTDOWN_JOIN_S)
        results.update(simple.results)
    events.write([event(args, "consumer-stop", group=args.group, client_id=client_id, client=args.client,
                        results=dict(results))])
    journal.close()
    events.close()
    sys.stdout.flush()
    os._exit(0)  # the client's non-daemon scheduler threads could hold the interpreter's exit


if __name__ == "__main__":
    sys.exit(main())
