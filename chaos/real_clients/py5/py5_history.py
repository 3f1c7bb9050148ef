"""The history lines the py5 consumer wrapper writes (deliveries.jsonl, events.jsonl), for both modes.

Imported by `consumer.py` and `py5_simple.py` from their own directory; stdlib only, so it loads
in `.venv-py5` and in mqlab's venv alike (mqlab's tests parse handles with it).

The 5.x message carries no queue: where a message was popped from (broker, queue topic, queue
id, queue offset, commitlog offset) is read from the receipt handle mqlab's broker hands out with
it (`p1 <kind> <broker> <group> <queue topic> <queue id> <queue offset> <phys offset> <pop wall ms>
<invisible ms> <generation>`, see nodes/common/receipt_handle.py); a handle of another shape leaves
those fields null.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import threading
import time
import zlib
from pathlib import Path
from typing import Any

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


def _handle_parts(handle: str | None) -> list[str] | None:
    parts = handle.split(" ") if isinstance(handle, str) else []
    return parts if len(parts) == HANDLE_FIELDS and parts[0] == HANDLE_VERSION else None


def handle_fields(handle: str | None) -> dict[str, Any]:
    """Where the broker popped the message from, from its receipt handle (nulls for a foreign one)."""
    parts = _handle_parts(handle)
    if parts is None:
        return {"pop_kind": None, "broker_name": None, "queue_topic": None, "queue_id": None, "queue_offset": None,
                "commitlog_offset": None}
    queue_id, queue_offset, phys_offset = (as_int(p) for p in parts[5:8])
    return {"pop_kind": parts[1], "broker_name": parts[2], "queue_topic": parts[4], "queue_id": queue_id,
            "queue_offset": queue_offset, "commitlog_offset": phys_offset}


def ack_handle_fields(handle: str | None) -> dict[str, Any]:
    """The handle fields of a client-ack line: the hand-out it acks (generation) and until when
    the broker keeps that hand-out invisible (deadline_wall_ms = pop wall ms + invisible ms)."""
    parts = _handle_parts(handle)
    if parts is None:
        return {"broker_name": None, "queue_topic": None, "queue_id": None, "queue_offset": None,
                "generation": None, "deadline_wall_ms": None}
    queue_id, queue_offset, pop_wall, invisible, generation = (as_int(p) for p in (parts[5], parts[6], *parts[8:]))
    deadline = pop_wall + invisible if pop_wall is not None and invisible is not None else None
    return {"broker_name": parts[2], "queue_topic": parts[4], "queue_id": queue_id, "queue_offset": queue_offset,
            "generation": generation, "deadline_wall_ms": deadline}


def as_int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def msg_id(msg: Any) -> str:
    return dict(msg.properties or {}).get("UNIQ_KEY") or msg.message_id


def record(args: argparse.Namespace, client_id: str, msg: Any, result: str) -> dict:
    """The deliveries.jsonl line of one message handed to the application."""
    props = dict(msg.properties or {})
    body = bytes(msg.body or b"")
    attempt = msg.delivery_attempt
    line = {
        "event": "deliver", "node": args.node_id, "group": args.group, "client_id": client_id,
        "msg_id": msg_id(msg),
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
