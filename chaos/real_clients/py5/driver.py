"""A RocketMQ 5 producer or consumer (Apache's Python client 5.x) driven by JSON lines, for the
interop tests.

Runs in `.venv-py5` (never mqlab's venv) and imports nothing from mqlab. Reads one command per
line on stdin and answers each with one JSON line on stdout:

  {"op": "start", "endpoints": "h:p;h:p", "topics": ["T"]}       -> {"event": "started", "seconds": s}
  {"op": "send", "topic": "T", "body": "..." (or "body_bytes": n), "tag": "t", "keys": ["k"],
   "properties": {"p": "v"}, "group": "g", "delay_s": n}          -> {"event": "sent", "message_id": id,
                                                                       "queue_id": q, "offset": o, "due": s}
                                                                  or {"event": "send-failed", "error_type": cls,
                                                                       "error": text}
  {"op": "consumer_start", "endpoints": "...", "kind": "push"|"simple", "group": "G", "topic": "T",
   "await_s": n, "fail_once": ["body", ...],
   "fail_always": ["body", ...], "slow": {"body": s}}             -> {"event": "started", "seconds": s}
  {"op": "receive", "max": n, "invisible_s": s}  (simple)         -> {"event": "received", "messages": [...],
                                                                       "seconds": s}
                                                                  or {"event": "receive-failed", ...}
  {"op": "ack", "ref": n}  (simple)                               -> {"event": "acked"} or {"event": "ack-failed", ...}
  {"op": "change_invisible", "ref": n, "invisible_s": s}          -> {"event": "changed", "receipt_handle": h}
                                                                  or {"event": "change-failed", ...}
  {"op": "consumed"}  (push: what the listener got so far)        -> {"event": "consumed", "messages": [...]}
  {"op": "txn_send", (send's message fields), "end": "commit"|"rollback"|"none"}
                                                                  -> {"event": "txn-sent", "message_id": id,
                                                                       "transaction_id": t, "ref": n,
                                                                       "end_error": text or null}
  {"op": "end", "ref": n, "end": "commit"|"rollback"}             -> {"event": "ended", "end_error": text or null}
  {"op": "answer", "answer": "COMMIT"|"ROLLBACK"|"UNKNOWN"}       -> {"event": "answering", "answer": a}
  {"op": "checks"}                                                -> {"event": "checks", "checks": [{"message_id",
                                                                       "body", "topic", "answer", "at"}, ...]}
  {"op": "shutdown"}                                              -> {"event": "done"}, exit 0

Each received message is described with a `ref`: the index of the client's message object that
`ack` and `change_invisible` act on (a later receive of the same message gets a new ref, so an
old ref acks with the handle of that earlier delivery). A push consumer's listener answers
FAILURE the first time it sees a body listed in `fail_once`, always for one in `fail_always`,
SUCCESS otherwise, after sleeping `slow[body]` seconds for a body listed there; every call is
recorded from its start, failures too (`"result"`: RUNNING until the listener answers).

A producer answers the broker's transaction checks with the current `answer` (COMMIT, ROLLBACK,
or UNKNOWN: TRANSACTION_RESOLUTION_UNSPECIFIED, which ends nothing; `start` may set it, default
COMMIT) and records each check.

One client per driver: a producer or a consumer. `group` makes a FIFO message, `delay_s` a
DELAY one (due `delay_s` whole seconds from now: the client writes the value into
Timestamp.seconds). The client's own log goes to $HOME/logs/rocketmq_python; point HOME at a
test's temporary directory to keep it.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback
from typing import Any


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def described(msg: Any) -> dict[str, Any]:
    return {"message_id": msg.message_id, "body": msg.body.decode(errors="replace"), "tag": msg.tag,
            "keys": sorted(msg.keys or ()), "properties": dict(msg.properties or {}),
            "delivery_attempt": msg.delivery_attempt, "message_group": msg.message_group,
            "receipt_handle": msg.receipt_handle, "at": time.time()}


def main() -> int:
    from rocketmq import (
        ClientConfiguration,
        ConsumeResult,
        Credentials,
        FilterExpression,
        Message,
        MessageListener,
        Producer,
        PushConsumer,
        SimpleConsumer,
        TransactionChecker,
        TransactionResolution,
    )

    consumed: list[dict[str, Any]] = []
    fail_once: set[str] = set()
    fail_always: set[str] = set()
    slow: dict[str, float] = {}
    held: list[Any] = []  # received messages, by ref
    transactions: list[Any] = []  # sent transactions, by ref, for a later `end`
    resolutions = {"COMMIT": TransactionResolution.COMMIT, "ROLLBACK": TransactionResolution.ROLLBACK,
                   "UNKNOWN": TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED}
    answer = ["COMMIT"]
    checks: list[dict[str, Any]] = []
    lock = threading.Lock()  # the checker runs on the client's threads

    class Checker(TransactionChecker):
        def check(self, message: Any) -> Any:
            with lock:
                given = answer[0]
                checks.append({"message_id": message.message_id, "body": message.body.decode(errors="replace"),
                               "topic": message.topic, "answer": given, "at": time.time()})
            return resolutions[given]

    def end(transaction: Any, how: str | None) -> str | None:
        try:
            if how == "commit":
                transaction.commit()
            elif how == "rollback":
                transaction.rollback()
        except Exception as exc:
            return f"{type(exc).__name__}: {str(exc)[:1000]}"
        return None

    def message_of(cmd: dict[str, Any]) -> Any:
        msg = Message()
        msg.topic = cmd["topic"]
        msg.body = cmd["body"].encode() if "body" in cmd else b"x" * int(cmd["body_bytes"])
        if cmd.get("tag"):
            msg.tag = cmd["tag"]
        for key in cmd.get("keys") or ():
            msg.keys = key  # the setter adds one key per assignment
        for key, value in (cmd.get("properties") or {}).items():
            msg.add_property(key, value)
        return msg

    class Recorder(MessageListener):
        """A push consumer's listener: records each message (the driver's stdout carries answers only)."""

        def consume(self, message: Any) -> Any:
            seen = {**described(message), "result": "RUNNING"}  # recorded from the call's start
            consumed.append(seen)
            body = seen["body"]
            if body in slow:
                time.sleep(slow[body])
            result = ConsumeResult.SUCCESS
            if body in fail_once or body in fail_always:
                fail_once.discard(body)
                result = ConsumeResult.FAILURE
            seen["result"] = result.name
            return result

    client = None
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        op = cmd.get("op")
        try:
            if op == "start":
                config = ClientConfiguration(cmd["endpoints"], Credentials(), request_timeout=cmd.get("timeout_s", 3))
                answer[0] = cmd.get("answer", "COMMIT")
                client = Producer(config, tuple(cmd.get("topics", ())), checker=Checker())
                began = time.monotonic()
                client.startup()
                emit("started", seconds=round(time.monotonic() - began, 3), client_id=client.client_id)
            elif op == "send":
                assert client is not None, "start first"
                msg = message_of(cmd)
                if cmd.get("group"):
                    msg.message_group = cmd["group"]
                due = None
                if cmd.get("delay_s") is not None:
                    due = msg.delivery_timestamp = int(time.time()) + int(cmd["delay_s"])
                try:
                    receipt = client.send(msg)
                except Exception as exc:  # the test judges what the client raised
                    emit("send-failed", error_type=type(exc).__name__, error=str(exc)[:2000])
                    continue
                # the queue prints as "<broker>.<topic>.<queue id>"; the class has no queue id getter
                queue = str(receipt.message_queue)
                emit("sent", message_id=receipt.message_id, queue=queue, queue_id=int(queue.rpartition(".")[2]),
                     offset=receipt.offset, sent_at=time.time(), due=due)
            elif op == "consumer_start":
                config = ClientConfiguration(cmd["endpoints"], Credentials(), request_timeout=cmd.get("timeout_s", 3))
                subscription = {cmd["topic"]: FilterExpression(cmd.get("tags") or "*")}
                fail_once.update(cmd.get("fail_once") or ())
                fail_always.update(cmd.get("fail_always") or ())
                slow.update(cmd.get("slow") or {})
                if cmd["kind"] == "push":
                    client = PushConsumer(config, cmd["group"], Recorder(), subscription)
                else:
                    client = SimpleConsumer(config, cmd["group"], subscription, await_duration=cmd.get("await_s", 5))
                began = time.monotonic()
                client.startup()
                emit("started", seconds=round(time.monotonic() - began, 3), client_id=client.client_id)
            elif op == "receive":
                assert client is not None, "start first"
                began = time.monotonic()
                try:
                    messages = client.receive(int(cmd.get("max", 16)), int(cmd.get("invisible_s", 15)))
                except Exception as exc:
                    emit("receive-failed", error_type=type(exc).__name__, error=str(exc)[:2000])
                    continue
                seconds = round(time.monotonic() - began, 3)
                out = []
                for m in messages:
                    out.append({**described(m), "ref": len(held)})
                    held.append(m)
                emit("received", messages=out, seconds=seconds)
            elif op == "ack":
                try:
                    client.ack(held[int(cmd["ref"])])
                except Exception as exc:
                    emit("ack-failed", error_type=type(exc).__name__, error=str(exc)[:2000])
                    continue
                emit("acked")
            elif op == "change_invisible":
                msg = held[int(cmd["ref"])]
                try:
                    client.change_invisible_duration(msg, int(cmd["invisible_s"]))
                except Exception as exc:
                    emit("change-failed", error_type=type(exc).__name__, error=str(exc)[:2000])
                    continue
                emit("changed", receipt_handle=msg.receipt_handle, at=time.time())
            elif op == "consumed":
                emit("consumed", messages=list(consumed))
            elif op == "txn_send":
                assert client is not None, "start first"
                transaction = client.begin_transaction()
                try:
                    receipt = client.send(message_of(cmd), transaction)
                except Exception as exc:
                    emit("send-failed", error_type=type(exc).__name__, error=str(exc)[:2000])
                    continue
                transactions.append(transaction)
                emit("txn-sent", message_id=receipt.message_id, transaction_id=receipt.transaction_id,
                     ref=len(transactions) - 1, end_error=end(transaction, cmd.get("end")), sent_at=time.time())
            elif op == "end":
                emit("ended", end_error=end(transactions[int(cmd["ref"])], cmd["end"]))
            elif op == "answer":
                with lock:
                    answer[0] = cmd["answer"]
                emit("answering", answer=answer[0])
            elif op == "checks":
                with lock:
                    emit("checks", checks=list(checks))
            elif op == "shutdown":
                if client is not None:
                    client.shutdown()
                emit("done")
                return 0
            else:
                emit("error", error=f"unknown op {op!r}")
        except Exception as exc:
            emit("error", op=op, error_type=type(exc).__name__, error=str(exc)[:2000],
                 trace=traceback.format_exc()[-3000:])
    if client is not None:
        client.shutdown()
    emit("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
