"""A RocketMQ 5 transactional producer (Apache's Python client 5.x) driven by JSON lines, for the
transaction interop tests; the same line protocol as chaos/real_clients/py5/driver.py.

Runs in `.venv-py5` and imports nothing from mqlab. Commands, one JSON line each, one answer each:

  {"op": "start", "endpoints": "h:p", "topics": ["T"], "answer": "COMMIT"}  -> {"event": "started", ...}
  {"op": "txn_send", "topic": "T", "body": "...", "tag": "t", "keys": ["k"], "properties": {...},
   "end": "commit"|"rollback"|"none"}     -> {"event": "txn-sent", "message_id": id, "transaction_id": t,
                                               "ref": n, "end_error": text or null}
                                          or {"event": "send-failed", "error_type": cls, "error": text}
  {"op": "end", "ref": n, "end": "commit"|"rollback"}  -> {"event": "ended", "end_error": text or null}
  {"op": "answer", "answer": "ROLLBACK"}  -> {"event": "answering", "answer": ...}
  {"op": "checks"}                        -> {"event": "checks", "checks": [{"message_id", "body", "topic",
                                               "answer", "at"}, ...]}
  {"op": "shutdown"}                      -> {"event": "done"}, exit 0

The checker answers every check from the broker with the current `answer` (COMMIT, ROLLBACK, or
UNKNOWN: TRANSACTION_RESOLUTION_UNSPECIFIED, which ends nothing) and records the call.
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


def main() -> int:
    from rocketmq import (
        ClientConfiguration,
        Credentials,
        Message,
        Producer,
        TransactionChecker,
        TransactionResolution,
    )

    resolutions = {"COMMIT": TransactionResolution.COMMIT, "ROLLBACK": TransactionResolution.ROLLBACK,
                   "UNKNOWN": TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED}
    answer = ["COMMIT"]
    checks: list[dict[str, Any]] = []
    lock = threading.Lock()

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

    client = None
    transactions: list[Any] = []  # by ref, for a later `end`
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        op = cmd.get("op")
        try:
            if op == "start":
                answer[0] = cmd.get("answer", "COMMIT")
                config = ClientConfiguration(cmd["endpoints"], Credentials(), request_timeout=cmd.get("timeout_s", 3))
                client = Producer(config, tuple(cmd.get("topics", ())), checker=Checker())
                began = time.monotonic()
                client.startup()
                emit("started", seconds=round(time.monotonic() - began, 3), client_id=client.client_id)
            elif op == "txn_send":
                assert client is not None, "start first"
                msg = Message()
                msg.topic = cmd["topic"]
                msg.body = cmd["body"].encode()
                if cmd.get("tag"):
                    msg.tag = cmd["tag"]
                for key in cmd.get("keys") or ():
                    msg.keys = key  # the setter adds one key per assignment
                for key, value in (cmd.get("properties") or {}).items():
                    msg.add_property(key, value)
                transaction = client.begin_transaction()
                try:
                    receipt = client.send(msg, transaction)
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
