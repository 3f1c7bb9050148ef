"""The end-of-run read-back: every replica's copy of every queue, read through the public API.

After the faults are recovered and the consumers drained, `read_back` waits (bounded) until each
slave's commitlog reaches its master's, then reads every queue of the run's topics from each
replica of each broker group, from the queue's min to its max offset, with a pull consumer pinned
to that replica's broker id, and writes what it read to `<run_dir>/readback/readback.jsonl`:

    event = "replica-state"  node (the replica's node id), broker_name, replica_id,
                             max_phys_offset, master_max_phys_offset, caught_up
    event = "readback"       node, broker_name, replica_id, topic, queue_id, queue_offset,
                             msg_id, body_crc32 (zlib.crc32 of the body the replica served)

Nothing here reaches inside a node: commitlog positions come from Admin.Describe (the control
plane every node serves), messages from ordinary pulls. The `replication` check judges the file.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodes.client.pull_consumer import PullConsumer
from nodes.common import constants as c
from nodes.common.config import Timing
from nodes.common.events import EventLog
from nodes.common.types import PullStatus

READBACK_DIR = "readback"
READBACK_FILE = "readback.jsonl"
READBACK_GROUP = "mqlab_chaos_readback"
PULL_BATCH = 32
POLL_S = 0.05


@dataclass(frozen=True)
class Replica:
    node_id: str
    broker_name: str
    broker_id: int
    describe: Callable[[], dict[str, Any]]  # Admin.Describe of the node, as a dict


@dataclass
class ReadbackSummary:
    path: Path
    messages: int = 0
    replicas: int = 0
    behind: int = 0  # replicas still behind their master when the wait ended
    errors: int = 0  # pulls that failed or were answered by another broker than the one asked


def max_phys_offset(replica: Replica) -> int | None:
    """The replica's commitlog end from its Admin.Describe, or None when it does not answer."""
    try:
        store = replica.describe().get("details", {}).get("store") or {}
    except Exception:  # a node that does not answer has no position to compare
        return None
    value = store.get("max_phys_offset")
    return int(value) if isinstance(value, int | float) else None


def read_back(replicas: Sequence[Replica], namesrv_addr: str, topics: Iterable[str], run_dir: Path, *,
              timing: Timing, catch_up_ms: int, dial_overrides: dict[str, str] | None = None,
              make_consumer: Callable[..., Any] = PullConsumer) -> ReadbackSummary:
    """Wait up to `catch_up_ms` for every slave to reach its master, then read every replica back."""
    path = run_dir / READBACK_DIR / READBACK_FILE
    log = EventLog(path, READBACK_DIR)
    summary = ReadbackSummary(path)
    topics = list(topics)
    try:
        groups: dict[str, list[Replica]] = {}
        for r in sorted(replicas, key=lambda r: (r.broker_name, r.broker_id)):
            groups.setdefault(r.broker_name, []).append(r)
        for name, members in groups.items():
            master = next((r for r in members if r.broker_id == c.MASTER_ID), None)
            positions = _wait_caught_up(master, members, catch_up_ms)
            master_max = positions.get(master.node_id) if master else None
            for r in members:
                mine = positions.get(r.node_id)
                caught_up = mine is not None and master_max is not None and mine >= master_max
                summary.behind += not caught_up
                summary.replicas += 1
                log.record({"event": "replica-state", "node": r.node_id, "broker_name": name,
                            "replica_id": r.broker_id, "max_phys_offset": mine,
                            "master_max_phys_offset": master_max, "caught_up": caught_up})
            for r in members:
                _read_replica(r, namesrv_addr, topics, log, summary, timing, dial_overrides, make_consumer,
                              retry_ms=catch_up_ms)
    finally:
        log.close()
    return summary


def _wait_caught_up(master: Replica | None, members: Sequence[Replica], catch_up_ms: int) -> dict[str, int | None]:
    deadline = time.monotonic() + catch_up_ms / 1000
    while True:
        positions = {r.node_id: max_phys_offset(r) for r in members}
        target = positions.get(master.node_id) if master else None
        done = target is not None and all(p is not None and p >= target for p in positions.values())
        if done or time.monotonic() >= deadline:
            return positions
        time.sleep(POLL_S)


def _read_replica(r: Replica, namesrv_addr: str, topics: Sequence[str], log: EventLog, summary: ReadbackSummary,
                  timing: Timing, dial_overrides: dict[str, str] | None, make_consumer: Callable[..., Any], *,
                  retry_ms: int) -> None:
    try:
        consumer = make_consumer(namesrv_addr, READBACK_GROUP, timing=timing, dial_overrides=dial_overrides,
                                 pull_from_broker_id=r.broker_id, instance_name=f"readback-{r.node_id}")
        consumer.start()
    except Exception:  # no client, no read-back of this replica: the check sees its messages missing
        summary.errors += 1
        return
    # a slave learns the read-back's group from its master's next metadata sync: a pull refused
    # meanwhile is retried until this deadline
    deadline = time.monotonic() + retry_ms / 1000
    try:
        for topic in topics:
            try:
                queues = [mq for mq in consumer.fetch_queues(topic) if mq.broker_name == r.broker_name]
            except Exception:  # no route for the topic: nothing of it to read back
                summary.errors += 1
                continue
            for mq in queues:
                _read_queue(r, consumer, mq, log, summary, deadline)
    finally:
        consumer.shutdown()


def _read_queue(r: Replica, consumer: Any, mq: Any, log: EventLog, summary: ReadbackSummary,
                deadline: float) -> None:
    try:
        # MQAdminImpl asks the master for a queue's bounds; a replica that is caught up has the same
        offset, end = consumer.min_offset(mq), consumer.max_offset(mq)
    except Exception:
        summary.errors += 1
        return
    while offset < end:
        try:
            result = consumer.pull(mq, offset, PULL_BATCH)
        except Exception:
            if time.monotonic() < deadline:
                time.sleep(POLL_S)
                continue
            summary.errors += 1
            return
        if getattr(result, "broker_id", r.broker_id) != r.broker_id:
            summary.errors += 1  # the route lacks this replica: the answer is another broker's copy
            return
        msgs = list(result.messages) if result.status == PullStatus.FOUND else []
        for m in msgs:
            log.record({"event": "readback", "node": r.node_id, "broker_name": r.broker_name,
                        "replica_id": r.broker_id, "topic": mq.topic, "queue_id": mq.queue_id,
                        "queue_offset": m.queue_offset, "msg_id": m.msg_id, "body_crc32": zlib.crc32(m.body)})
        summary.messages += len(msgs)
        if not msgs or result.next_begin_offset <= offset:
            return  # the replica has nothing more (behind, or a hole): the check judges what is missing
        offset = result.next_begin_offset
