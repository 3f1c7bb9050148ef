"""The chaos workloads: a producer that records every send, and a tally of what consumers delivered.

`ProducerWorkload` runs in the harness process (Jepsen's client threads): unique message ids
(UNIQ_KEY, known before the send), sharding keys, per-key sequence numbers and the body's
zlib.crc32 (`BODY_CRC32`, also on the send's lines as `body_crc32`) carried in user properties,
every attempt recorded in `<run_dir>/<node>/sends.jsonl` as an `invoke` line and
then exactly one `ok` / `fail` / `info` line (info: the outcome is unknown — the broker may have
stored it). Its producer dials the brokers through the harness's link proxies, so partitions
reach it like any node. Keys are split over threads so each key's sends are strictly sequential:
a key's `seq` order is its send order.

`DeliveryTally` reads the consumers' `deliveries.jsonl` incrementally (only new complete lines)
and answers "how many acknowledged sends are delivered yet", for the progress display and the
drain phase. It never decides validity; the checker does.
"""

from __future__ import annotations

import json
import threading
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodes.client import Message, Producer, SendStatus
from nodes.client.msg_id import default_generator
from nodes.common import constants as c
from nodes.common.clock import SYSTEM_CLOCK, Clock
from nodes.common.config import Timing
from nodes.common.errors import (
    BrokerNotFoundError,
    ClientError,
    ClientStateError,
    RemoteError,
    RouteNotFoundError,
)
from nodes.common.events import EventLog

SENDS_FILE_NAME = "sends.jsonl"
DELIVERIES_FILE_NAME = "deliveries.jsonl"
PRODUCER_GROUP = "mqlab_chaos_producer"

# Failures that prove nothing was stored: the request never left, or the broker refused it.
# send_orderly makes one attempt, so a refusal is not hiding an earlier attempt that timed out;
# send() reports a possibly stored earlier attempt as OutcomeUnknownError (an info line).
_DEFINITE_FAILURES = (ClientError, RemoteError, RouteNotFoundError, BrokerNotFoundError, ClientStateError)


@dataclass(frozen=True)
class ProducerWorkloadConfig:
    topic: str
    keys: int = 16  # sharding keys; each maps to one queue (send_orderly hashes it)
    threads: int = 2
    rate_per_s: float = 200.0  # all threads together; 0: as fast as sends return
    body_bytes: int = 256
    # True: send_orderly by sharding key (one attempt, a key's queue fixed by the publish list);
    # False: send() with the producer's queue selection and retries on another broker
    orderly: bool = True
    latency_fault_enable: bool = True  # the producer's latency fault tolerance (off: a test-only switch)

    def __post_init__(self) -> None:
        if self.keys < 1 or self.threads < 1 or self.threads > self.keys:
            raise ValueError(f"need 1 <= threads ({self.threads}) <= keys ({self.keys})")
        if self.rate_per_s < 0 or self.body_bytes < 1:
            raise ValueError("rate_per_s must be >= 0 and body_bytes >= 1")


@dataclass
class SendCounts:
    invoked: int = 0
    ok: int = 0
    fail: int = 0
    info: int = 0
    acked_ids: set[str] = field(default_factory=set)


class ProducerWorkload:
    """Sends until `stop()`; every attempt is in `sends.jsonl` before and after it happens."""

    def __init__(self, namesrv_addr: str, run_dir: Path, config: ProducerWorkloadConfig, *, timing: Timing,
                 node_id: str = "producer-0", dial_overrides: dict[str, str] | None = None,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.node_id = node_id
        self.path = run_dir / node_id / SENDS_FILE_NAME
        self._history = EventLog(self.path, node_id, clock)
        self._clock = clock
        self._producer = Producer(namesrv_addr, PRODUCER_GROUP, timing=timing, dial_overrides=dial_overrides,
                                  latency_fault_enable=config.latency_fault_enable)
        self._ids = default_generator()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.counts = SendCounts()
        self._op_seq = 0

    def start(self) -> None:
        self._producer.start()
        keys = [f"key-{i}" for i in range(self.config.keys)]
        per_thread_rate = self.config.rate_per_s / self.config.threads
        for t in range(self.config.threads):
            mine = keys[t::self.config.threads]
            thread = threading.Thread(target=self._run, args=(mine, per_thread_rate), name=f"{self.node_id}-{t}",
                                      daemon=True)
            self._threads.append(thread)
            thread.start()

    def stop(self) -> None:
        """Stop sending, wait for the sends in flight (bounded by the send timeout), close."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=self._producer.send_timeout_ms / 1000 * 2 + 1)
        self._producer.shutdown()
        self._history.close()

    def _run(self, keys: list[str], rate_per_s: float) -> None:
        interval_ms = 1000.0 / rate_per_s if rate_per_s > 0 else 0.0
        next_ms = float(self._clock.monotonic_ms())
        seqs = dict.fromkeys(keys, 0)
        i = 0
        while not self._stop.is_set():
            key = keys[i % len(keys)]
            i += 1
            self._send_one(key, seqs[key])
            seqs[key] += 1
            if interval_ms:
                next_ms += interval_ms
                wait_ms = next_ms - self._clock.monotonic_ms()
                if wait_ms > 0:
                    self._stop.wait(wait_ms / 1000)
                else:
                    next_ms = float(self._clock.monotonic_ms())  # behind (a fault): do not burst to catch up

    def _send_one(self, key: str, seq: int) -> None:
        msg_id = self._ids.next_id()
        with self._lock:
            self._op_seq += 1
            op_id = f"{self.node_id}:{self._op_seq}"
            self.counts.invoked += 1
        body = (f"{key}:{seq}:".encode() + b"x" * self.config.body_bytes)[: self.config.body_bytes]
        body_crc32 = zlib.crc32(body)
        msg = Message(self.config.topic, body, keys=key, properties={
            c.PROPERTY_UNIQ_KEY: msg_id, c.PROPERTY_WORKLOAD_SHARDING_KEY: key,
            c.PROPERTY_WORKLOAD_SEQ: str(seq), c.PROPERTY_WORKLOAD_BODY_CRC32: str(body_crc32)})
        base: dict[str, Any] = {"event": "send", "op_id": op_id, "msg_id": msg_id, "topic": self.config.topic,
                                "sharding_key": key, "seq": seq, "body_crc32": body_crc32}
        self._history.record({**base, "type": "invoke"})
        try:
            result = self._producer.send_orderly(msg, key) if self.config.orderly else self._producer.send(msg)
        except _DEFINITE_FAILURES as exc:
            self._history.record({**base, "type": "fail", "status": f"{type(exc).__name__}: {exc}"[:300]})
            with self._lock:
                self.counts.fail += 1
            return
        except Exception as exc:  # a timeout, a reset: the broker may have stored it
            self._history.record({**base, "type": "info", "status": f"{type(exc).__name__}: {exc}"[:300]})
            with self._lock:
                self.counts.info += 1
            return
        self._history.record({**base, "type": "ok", "status": result.status.value,
                              "queue_id": result.message_queue.queue_id, "queue_offset": result.queue_offset,
                              "broker_name": result.message_queue.broker_name})
        with self._lock:
            self.counts.ok += 1
            if result.status in ACKED:
                self.counts.acked_ids.add(msg_id)


ACKED = frozenset(SendStatus)  # every SendStatus means "stored" (RocketMQ stores in all four)


class DeliveryTally:
    """Distinct delivered message ids across every consumer journal under a run dir."""

    def __init__(self, run_dir: Path, node_ids: Iterable[str]) -> None:
        self._paths = [run_dir / n / DELIVERIES_FILE_NAME for n in node_ids]
        self._positions: dict[Path, int] = {}
        self.delivered_ids: set[str] = set()
        self.lines = 0

    def refresh(self) -> None:
        for path in self._paths:
            try:
                with path.open("rb") as f:
                    f.seek(self._positions.get(path, 0))
                    data = f.read()
            except FileNotFoundError:
                continue
            end = data.rfind(b"\n") + 1  # a line still being written waits for the next refresh
            for line in data[:end].splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # a torn line from a killed process
                self.lines += 1
                msg_id = record.get("msg_id")
                if msg_id:
                    self.delivered_ids.add(msg_id)
            self._positions[path] = self._positions.get(path, 0) + end

    def missing(self, acked_ids: set[str]) -> int:
        return len(acked_ids - self.delivered_ids)
