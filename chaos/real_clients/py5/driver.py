"""A RocketMQ 5 producer (Apache's Python client 5.x) driven by JSON lines, for the interop tests.

Runs in `.venv-py5` (never mqlab's venv) and imports nothing from mqlab. Reads one command per
line on stdin and answers each with one JSON line on stdout:

  {"op": "start", "endpoints": "h:p;h:p", "topics": ["T"]}       -> {"event": "started", "seconds": s}
  {"op": "send", "topic": "T", "body": "..." (or "body_bytes": n), "tag": "t", "keys": ["k"],
   "properties": {"p": "v"}, "group": "g", "delay_s": n}          -> {"event": "sent", "message_id": id,
                                                                       "queue_id": q, "offset": o, "due": s}
                                                                  or {"event": "send-failed", "error_type": cls,
                                                                       "error": text}
  {"op": "shutdown"}                                              -> {"event": "done"}, exit 0

`group` makes a FIFO message, `delay_s` a DELAY one (due `delay_s` whole seconds from now: the
client writes the value into Timestamp.seconds). The client's own log goes to
$HOME/logs/rocketmq_python; point HOME at a test's temporary directory to keep it.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from typing import Any


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def main() -> int:
    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    producer = None
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        op = cmd.get("op")
        try:
            if op == "start":
                config = ClientConfiguration(cmd["endpoints"], Credentials(), request_timeout=cmd.get("timeout_s", 3))
                producer = Producer(config, tuple(cmd.get("topics", ())))
                began = time.monotonic()
                producer.startup()
                emit("started", seconds=round(time.monotonic() - began, 3), client_id=producer.client_id)
            elif op == "send":
                assert producer is not None, "start first"
                msg = Message()
                msg.topic = cmd["topic"]
                msg.body = cmd["body"].encode() if "body" in cmd else b"x" * int(cmd["body_bytes"])
                if cmd.get("tag"):
                    msg.tag = cmd["tag"]
                for key in cmd.get("keys") or ():
                    msg.keys = key  # the setter adds one key per assignment
                for key, value in (cmd.get("properties") or {}).items():
                    msg.add_property(key, value)
                if cmd.get("group"):
                    msg.message_group = cmd["group"]
                due = None
                if cmd.get("delay_s") is not None:
                    due = msg.delivery_timestamp = int(time.time()) + int(cmd["delay_s"])
                try:
                    receipt = producer.send(msg)
                except Exception as exc:  # the test judges what the client raised
                    emit("send-failed", error_type=type(exc).__name__, error=str(exc)[:2000])
                    continue
                # the queue prints as "<broker>.<topic>.<queue id>"; the class has no queue id getter
                queue = str(receipt.message_queue)
                emit("sent", message_id=receipt.message_id, queue=queue, queue_id=int(queue.rpartition(".")[2]),
                     offset=receipt.offset, sent_at=time.time(), due=due)
            elif op == "shutdown":
                if producer is not None:
                    producer.shutdown()
                emit("done")
                return 0
            else:
                emit("error", error=f"unknown op {op!r}")
        except Exception as exc:
            emit("error", op=op, error_type=type(exc).__name__, error=str(exc)[:2000],
                 trace=traceback.format_exc()[-3000:])
    if producer is not None:
        producer.shutdown()
    emit("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
