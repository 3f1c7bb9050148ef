"""mqlab's own side of an interop test: topics made up front, and everything in a topic read back."""

from __future__ import annotations

import time
import types

from support.rpc import create_topic

from harness import LocalCluster
from nodes.client import PullConsumer
from nodes.common.types import MessageExt, PullStatus


def make_topic(cluster: LocalCluster, topic: str, queue_nums: int = 4) -> None:
    """Create a topic and wait until the name server routes it.

    ali-ons cannot send to a topic the name server does not know yet (it never falls back to
    the TBW102 route), and a consumer started before its topic exists waits for its next
    rebalance (10 s); so tests that use them create their topics first.
    """
    target = types.SimpleNamespace(broker_addr=cluster.node("broker-a-0").addr, namesrv_addr=cluster.namesrv_addr)
    create_topic(target, topic, queue_nums)


def read_topic(cluster: LocalCluster, topic: str, group: str) -> list[MessageExt]:
    """Every message of `topic` from offset 0 on every queue, with mqlab's PullConsumer."""
    out: list[MessageExt] = []
    with PullConsumer(cluster.namesrv_addr, group) as consumer:
        for mq in consumer.fetch_queues(topic):
            offset = 0
            while True:
                result = consumer.pull(mq, offset, 32)
                if result.status is PullStatus.NO_MATCHED_MSG:
                    continue
                if result.status is not PullStatus.FOUND:
                    break
                out.extend(result.messages)
                offset = result.next_begin_offset
    return out


def read_until(cluster: LocalCluster, topic: str, group: str, count: int, budget_s: float) -> list[MessageExt]:
    """`read_topic` again until it returns at least `count` messages (delayed ones arrive later)."""
    deadline = time.monotonic() + budget_s
    while True:
        messages = read_topic(cluster, topic, group)
        if len(messages) >= count or time.monotonic() > deadline:
            return messages
        time.sleep(0.2)
