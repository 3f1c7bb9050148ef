"""A chaos consumer node made of Apache's C++ RocketMQ client (PyPI `rocketmq` 0.4.4) and a thin journal.

Run as a script with the project venv's python (never imported): it imports only `rocketmq` and
the standard library, so the consumer under test is a client mqlab did not write. The harness
starts it in place of `python -m nodes consumer`, with the name server address of its own link
proxy (a loopback `host:port`), and treats it like any node: one `READY {json}` line on stdout,
SIGTERM = graceful stop (the C++ client unlocks and unregisters), SIGKILL, SIGSTOP/SIGCONT.

It writes the same history files as mqlab's consumer node, in `--run-dir`:
  deliveries.jsonl  one flushed line per message *before* the listener's answer goes back
                    (docs/real-clients-chaos.md lists the fields)
  events.jsonl      consumer-start / consumer-stop (with client_id). The C++ client exposes no
                    lock, rebalance or offset-commit callbacks: those come from the brokers'
                    own events (lock granted/denied/released, offset-commit with client_id).
                    One rebalance step is read from the client's own log instead, because it
                    redelivers: `queue-resumed` (see `ResumeWatch`).

The client id is the one the C++ client sends on the wire: `<pid>-<local address>@<instance>`,
with the instance name set to `--instance` (the harness passes the node id).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import socket
import sys
import threading
import time
import zlib
from pathlib import Path

CONSUME_SUCCESS = 0  # the C API's statuses: E_CONSUME_SUCCESS, E_RECONSUME_LATER
RECONSUME_LATER = 1
POLL_S = 0.05
RESUME_READ_S = 1.0  # how often the client's log is read for resumes (each line carries its own time)
JOURNAL_FILE = "deliveries.jsonl"
EVENTS_FILE = "events.jsonl"
# The C++ client's own log (under $HOME, which main() points at the node's dir), one per process.
CLIENT_LOG_GLOB = "logs/rocketmq-cpp/{pid}_rocketmq-cpp.log*"
# A queue given back to the client while its dropped pull request is still in the client's table
# is "resumed": the old request, with the messages it had cached before the drop, goes on from
# the new offset, and the client consumes that stale cache again (1.2.3's
# RebalanceImpl::updateRequestTableInRebalance; the Java client makes a new process queue).
RESUME_LINE = re.compile(
    r"^\[(?P<time>\d{4}-\w{3}-\d{2} \d{2}:\d{2}:\d{2}\.\d+)\]\(info\):after resume the pull handle of this "
    r"pullRequest, its mq is:MessageQueue \[topic=(?P<topic>[^,]+), brokerName=(?P<broker>[^,]+), "
    r"queueId=(?P<queue>\d+)\], its offset is:(?P<offset>-?\d+)")


def mono_ms() -> int:
    return time.monotonic_ns() // 1_000_000  # CLOCK_MONOTONIC: the checker's timeline


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def text(value: bytes | str | None) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


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


def parse_resume(line: str) -> dict | None:
    """A `queue-resumed` line of the client's log as event fields (its wall time read in the
    process's local time zone, the one the client wrote it in), or None."""
    m = RESUME_LINE.match(line)
    if m is None:
        return None
    seconds, fraction = m["time"].split(".")
    written_s = int(time.mktime(time.strptime(seconds, "%Y-%b-%d %H:%M:%S")))
    return {"topic": m["topic"], "broker_name": m["broker"], "queue_id": int(m["queue"]),
            "queue_offset": int(m["offset"]), "written_wall_ms": written_s * 1000 + int(fraction[:3].ljust(3, "0"))}


class ResumeWatch:
    """Reads the client's log as it grows and journals each `queue-resumed` (polled by main)."""

    def __init__(self, args: argparse.Namespace, client_id: str, events: Journal) -> None:
        self._args, self._client_id, self._events = args, client_id, events
        self._positions: dict[Path, int] = {}
        self._partial: dict[Path, str] = {}

    def poll(self) -> None:
        pattern = CLIENT_LOG_GLOB.format(pid=os.getpid())
        for path in sorted(self._args.run_dir.glob(pattern)):
            try:
                with path.open("r", encoding="utf-8", errors="replace") as f:
                    f.seek(self._positions.get(path, 0))
                    chunk = f.read()
                    self._positions[path] = f.tell()
            except OSError:
                continue
            lines = (self._partial.pop(path, "") + chunk).split("\n")
            self._partial[path] = lines.pop()  # the last line may still be half written
            found = [fields for line in lines if (fields := parse_resume(line)) is not None]
            if found:
                self._events.write([self._event(fields) for fields in found])

    def _event(self, fields: dict) -> dict:
        written_wall_ms = fields.pop("written_wall_ms")
        record = event(self._args, "queue-resumed", group=self._args.group, client_id=self._client_id, **fields)
        # the line's own time, on the checker's monotonic timeline
        record["mono_ms"] -= record["wall_ms"] - written_wall_ms
        record["wall_ms"] = written_wall_ms
        return record


class Listener:
    """The callback the C++ client calls per message (batch size 1): journal, then answer."""

    def __init__(self, args: argparse.Namespace, client_id: str, journal: Journal, rmq: object) -> None:
        self.args = args
        self.client_id = client_id
        self.journal = journal
        self.rmq = rmq
        self.results: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, _consumer: int, handle: int) -> int:
        start = mono_ms()
        try:
            msg = self.rmq.RecvMessage(handle)
            if self.args.sleep_ms:
                time.sleep(self.args.sleep_ms / 1000)
            result = "SUCCESS" if self.args.orderly else "CONSUME_SUCCESS"
            self.journal.write([self.record(msg, result, start)])  # before the answer is acted on
            with self._lock:
                self.results[result] = self.results.get(result, 0) + 1
            return CONSUME_SUCCESS
        except Exception as exc:  # never let an exception cross the C boundary (its status is undefined)
            sys.stderr.write(f"listener error: {exc!r}\n")
            return RECONSUME_LATER

    def record(self, msg: object, result: str, start_ms: int) -> dict:
        a = self.args
        prop = msg.get_property
        body = (text(msg.body) or "").encode()
        retry_topic = text(prop("RETRY_TOPIC"))
        topic = text(msg.topic)
        seq_text = text(prop(a.seq_property))
        try:
            seq = int(seq_text) if seq_text is not None else None
        except ValueError:
            seq = None
        end = mono_ms()
        line = {
            "event": "deliver", "node": a.node_id, "group": a.group, "client_id": self.client_id,
            "msg_id": text(prop("UNIQ_KEY")) or text(msg.id),
            "keys": text(msg.keys) or None, "tags": text(msg.tags) or None, "topic": retry_topic or topic,
            # the C++ client restores a retried message's topic; the queue it came from is the retry topic
            "queue_topic": f"%RETRY%{a.group}" if retry_topic else topic,
            # the binding exposes no broker name: the harness passes the one broker group's
            "broker_name": a.broker_name, "queue_id": msg.queue_id,
            "queue_offset": msg.queue_offset, "commitlog_offset": msg.commit_log_offset,
            "reconsume_times": msg.reconsume_times,
            "origin_msg_id": text(prop("ORIGIN_MESSAGE_ID")) or None,
            "sharding_key": text(prop(a.sharding_key_property)), "seq": seq,
            "body_sha256": hashlib.sha256(body).hexdigest(), "body_crc32": zlib.crc32(body), "body_bytes": len(body),
            "store_timestamp_ms": msg.store_timestamp, "born_timestamp_ms": msg.born_timestamp,
            "wall_ms": wall_ms(), "mono_ms": end, "result": result, "orderly": bool(a.orderly),
        }
        if a.orderly:
            line["consume_start_mono_ms"] = start_ms
            line["consume_end_mono_ms"] = end
        return line


def event(args: argparse.Namespace, name: str, **fields: object) -> dict:
    return {"event": name, "node": args.node_id, "side": "client", "wall_ms": wall_ms(), "mono_ms": mono_ms(),
            **fields}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namesrv", required=True, help="loopback host:port of the name server (remoting)")
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--node-id", required=True)
    parser.add_argument("--port", type=int, required=True, help="the port the harness gave this node (READY)")
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--instance", required=True, help="the client's instance name (part of its client id)")
    parser.add_argument("--broker-name", required=True, help="the broker group the topic lives on")
    parser.add_argument("--orderly", action="store_true")
    parser.add_argument("--sleep-ms", type=int, default=0, help="time each message's listener call takes")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sharding-key-property", required=True)
    parser.add_argument("--seq-property", required=True)
    args = parser.parse_args()
    if not args.namesrv.startswith("127.0.0.1:"):
        parser.error(f"--namesrv must be a loopback address 127.0.0.1:PORT, got {args.namesrv!r}")
    args.run_dir.mkdir(parents=True, exist_ok=True)
    # the C++ client writes its own logs under $HOME/logs/rocketmq-cpp: keep them in the node's dir
    os.environ["HOME"] = str(args.run_dir.absolute())
    try:
        from rocketmq import client as rmq
        from rocketmq.ffi import MSG_CALLBACK_FUNC, dll
    except ImportError as exc:
        sys.stderr.write(f"rocketmq 0.4.4 (Apache's C++ client) is not installed: {exc}; "
                         f"run ./scripts/bootstrap.sh or {sys.executable} -m pip install rocketmq==0.4.4\n")
        return 3

    client_id = f"{os.getpid()}-{socket.gethostbyname(socket.gethostname())}@{args.instance}"
    journal = Journal(args.run_dir / JOURNAL_FILE)
    events = Journal(args.run_dir / EVENTS_FILE)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    consumer = rmq.PushConsumer(args.group, orderly=args.orderly)
    consumer.set_namesrv_addr(args.namesrv)
    consumer.set_instance_name(args.instance)
    consumer.set_thread_count(args.threads)
    consumer.set_message_batch_max_size(1)
    listener = Listener(args, client_id, journal, rmq)
    # the binding's own callback re-raises inside ctypes (undefined status): register a raw one
    callback = MSG_CALLBACK_FUNC(listener)
    if dll.Subscribe(consumer._handle, args.topic.encode(), b"*") != 0:
        sys.stderr.write(f"subscribe failed: {text(dll.GetLatestErrorMessage())}\n")
        return 1
    register = dll.RegisterMessageCallbackOrderly if args.orderly else dll.RegisterMessageCallback
    if register(consumer._handle, callback) != 0:
        sys.stderr.write(f"registering the callback failed: {text(dll.GetLatestErrorMessage())}\n")
        return 1
    consumer.start()
    events.write([event(args, "consumer-start", group=args.group, client_id=client_id, client="cpp",
                        subscriptions={args.topic: "*"}, orderly=bool(args.orderly))])
    ready = {"node_id": args.node_id, "role": "consumer", "addr": f"127.0.0.1:{args.port}", "port": args.port,
             "pid": os.getpid(), "client": "cpp", "client_id": client_id}
    sys.stdout.write("READY " + json.dumps(ready) + "\n")
    sys.stdout.flush()
    resumes = ResumeWatch(args, client_id, events)
    next_read_s = 0.0
    while not stop.wait(POLL_S):
        if time.monotonic() >= next_read_s:  # not every tick: it lists and opens the log files
            resumes.poll()
            next_read_s = time.monotonic() + RESUME_READ_S
    consumer.shutdown()  # unlocks the queues it holds (orderly), persists offsets, unregisters
    consumer._handle = None  # shut down once: the binding's destructor would shut down again
    resumes.poll()
    events.write([event(args, "consumer-stop", group=args.group, client_id=client_id, client="cpp",
                        results=dict(listener.results))])
    journal.close()
    events.close()
    sys.stdout.flush()
    os._exit(0)  # the C++ client's static destructors have crashed at interpreter exit


if __name__ == "__main__":
    sys.exit(main())
