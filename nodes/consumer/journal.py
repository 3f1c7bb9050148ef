"""The delivery journal: `<run_dir>/deliveries.jsonl`, one flushed JSON line per delivered message.

Owns the line format and the write discipline: a delivery's line is written and flushed to
the OS *before* the listener's result is returned to the push consumer, so a SIGKILL between
the two can only lose an acknowledgement, never the evidence of a delivery (the page cache
survives a process kill). Does not decide results (`workload`).

A line (the checker's history contract, `chaos/checker/schemas.py`): event (`deliver`), node,
group, client_id, msg_id, keys, tags, topic (the original topic, also for retries), the queue it
was pulled from as flat fields queue_topic / broker_name / queue_id (queue_topic is a retry
topic for a redelivery in concurrent mode), queue_offset, commitlog_offset, reconsume_times,
origin_msg_id, sharding_key and seq (the producer workload's user properties
`PROPERTY_WORKLOAD_SHARDING_KEY` / `PROPERTY_WORKLOAD_SEQ`; null when absent, seq also when it
is not an integer), body_sha256, body_crc32 (zlib.crc32 of the body handed to the listener, the
`integrity` check's digest), body_bytes, store and born timestamps, wall_ms, mono_ms, result
(CONSUME_SUCCESS, RECONSUME_LATER or EXCEPTION; orderly: SUCCESS,
SUSPEND_CURRENT_QUEUE_A_MOMENT or EXCEPTION), orderly, and for orderly deliveries the listener
call's interval, consume_start_mono_ms / consume_end_mono_ms (a batch shares one).
"""

from __future__ import annotations

import hashlib
import json
import threading
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nodes.common import constants as c
from nodes.common.clock import SYSTEM_CLOCK, Clock
from nodes.common.types import MessageExt, MessageQueue

JOURNAL_FILE_NAME = "deliveries.jsonl"


def body_digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def workload_seq(properties: Mapping[str, str]) -> int | None:
    """The producer workload's per-key sequence number, or None when absent or not an integer."""
    raw = properties.get(c.PROPERTY_WORKLOAD_SEQ)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


class DeliveryJournal:
    """Thread-safe: consume threads write concurrently; each call writes whole lines and flushes."""

    def __init__(self, path: Path, node_id: str, group: str, clock: Clock = SYSTEM_CLOCK) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.node_id = node_id
        self.group = group
        self.client_id = ""
        self._clock = clock
        self._lock = threading.Lock()
        self._file: Any = path.open("a", encoding="utf-8")
        self.lines = 0

    def record(self, msgs: Sequence[MessageExt], mq: MessageQueue, results: Sequence[str], *,
               consume_start_mono_ms: int | None = None, consume_end_mono_ms: int | None = None) -> None:
        """One line per message (results[i] is msgs[i]'s), then one flush for the call.

        An orderly listener passes its call's interval; its lines say `orderly: true`.
        """
        wall_ms, mono_ms = self._clock.wall_ms(), self._clock.monotonic_ms()
        orderly: dict[str, Any] = {"orderly": consume_start_mono_ms is not None}
        if consume_start_mono_ms is not None:
            orderly["consume_start_mono_ms"] = consume_start_mono_ms
            orderly["consume_end_mono_ms"] = mono_ms if consume_end_mono_ms is None else consume_end_mono_ms
        lines = []
        for msg, result in zip(msgs, results, strict=True):
            lines.append(json.dumps({
                "event": "deliver", "node": self.node_id, "group": self.group, "client_id": self.client_id,
                "msg_id": msg.msg_id, "keys": msg.keys, "tags": msg.tags, "topic": msg.topic,
                "queue_topic": mq.topic, "broker_name": mq.broker_name, "queue_id": mq.queue_id,
                "queue_offset": msg.queue_offset, "commitlog_offset": msg.commitlog_offset,
                "reconsume_times": msg.reconsume_times,
                "origin_msg_id": msg.properties.get(c.PROPERTY_ORIGIN_MESSAGE_ID),
                "sharding_key": msg.properties.get(c.PROPERTY_WORKLOAD_SHARDING_KEY),
                "seq": workload_seq(msg.properties),
                "body_sha256": body_digest(bytes(msg.body)), "body_crc32": zlib.crc32(msg.body),
                "body_bytes": len(msg.body),
                "store_timestamp_ms": msg.store_timestamp_ms, "born_timestamp_ms": msg.born_timestamp_ms,
                "wall_ms": wall_ms, "mono_ms": mono_ms, "result": result, **orderly,
            }, separators=(",", ":")))
        with self._lock:
            if self._file is None:
                raise RuntimeError(f"delivery journal {self.path} is closed")
            self._file.write("\n".join(lines) + "\n")
            self._file.flush()
            self.lines += len(lines)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def read_journal(path: Path) -> list[dict[str, Any]]:
    """Every complete line of a journal (a torn last line, from a kill mid-write, is skipped)."""
    records = []
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    for line in text.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records
