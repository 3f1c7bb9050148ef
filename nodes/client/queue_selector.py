"""Which queue a send goes to: round robin with broker avoidance, or a sharding-key hash.

Pure: owns the producer's `sendWhichQueue` index and nothing else.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from nodes.client.latency_fault import LatencyFaultTable
from nodes.common.types import MessageQueue

_POSITIVE_MASK = 0x7FFFFFFF


def java_string_hash(s: str) -> int:
    """Java's String.hashCode: 31-polynomial over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def select_by_hash(queues: Sequence[MessageQueue], sharding_key: object) -> MessageQueue:
    """SelectMessageQueueByHash: `abs(hashCode(str(key)) % size)` with Java's remainder."""
    if not queues:
        raise ValueError("no queue to select from")
    # Java's `%` keeps the dividend's sign, so abs(h % n) == abs(h) % n (Python's % differs).
    return queues[abs(java_string_hash(str(sharding_key))) % len(queues)]


class QueueSelector:
    """MQFaultStrategy#selectOneMessageQueue: `select` with sendLatencyFaultEnable=false,
    `select_available` with it on.

    RocketMQ keeps one index per thread (ThreadLocalIndex); every selection here runs on the
    client's event loop thread, so one index is the same thing.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._index = (rng or random).getrandbits(31)  # a random non-negative start

    def next_index(self) -> int:
        self._index = (self._index + 1) & _POSITIVE_MASK  # ++index & 0x7FFFFFFF
        return self._index

    def select(self, queues: Sequence[MessageQueue], last_broker_name: str | None = None) -> MessageQueue:
        """The next queue; a retry (`last_broker_name` set) prefers another broker."""
        if not queues:
            raise ValueError("no queue to select from")
        n = len(queues)
        if last_broker_name is not None:
            for _ in range(n):
                mq = queues[self.next_index() % n]
                if mq.broker_name != last_broker_name:
                    return mq
        return queues[self.next_index() % n]

    def select_available(self, queues: Sequence[MessageQueue], faults: LatencyFaultTable,
                         now_ms: int) -> MessageQueue:
        """Round robin to the first queue whose broker the fault table deems available; if none,
        a queue of the least bad broker (its queue id by the index over its write queues); if that
        broker has no queue left, forget it and fall back to plain round robin."""
        if not queues:
            raise ValueError("no queue to select from")
        n = len(queues)
        start = self.next_index()
        for i in range(n):
            mq = queues[((start + i) & _POSITIVE_MASK) % n]
            if faults.is_available(mq.broker_name, now_ms):
                return mq
        least_bad = faults.pick_one_at_least(now_ms)
        if least_bad is not None:
            write_queue_nums = sum(1 for q in queues if q.broker_name == least_bad)
            if write_queue_nums > 0:
                template = queues[self.next_index() % n]
                return MessageQueue(template.topic, least_bad, self.next_index() % write_queue_nums)
            faults.remove(least_bad)
        return queues[self.next_index() % n]
