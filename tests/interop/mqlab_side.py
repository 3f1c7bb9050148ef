"""mqlab's own side of an interop test: the cluster, topics made up front, a topic read back.

Real clients cannot be time-scaled: C++ and ali-ons heartbeat every 30 s, rebalance every 10 s,
persist offsets every 5 s, hold a pull 15 s and re-lock an orderly queue every 20 s. The cluster
runs at the usual test time scale, except the two broker timers a real client must outlive at
their real length: the consumer channel expiry (a client silent for it is dropped) and the
orderly lock lease (a lease shorter than the 20 s re-lock would let two clients own a queue).
"""

from __future__ import annotations

import os
import time
import types
from pathlib import Path

from support.rpc import create_topic

from harness import LocalCluster
from harness.spec import ClusterSpec
from nodes.client import PullConsumer
from nodes.common import constants as c
from nodes.common.types import MessageExt, PullStatus

TIME_SCALE = float(os.environ.get("MQLAB_TEST_TIME_SCALE", "0.05"))
REAL_CLIENT_TIMING = {"consumer_channel_expiry_ms": c.CONSUMER_CHANNEL_EXPIRY_MS,
                      "broker_lock_lease_ms": c.BROKER_LOCK_LEASE_MS}


def interop_spec(**broker_options: object) -> ClusterSpec:
    """The default topology (name server, broker-a master and slave) timed for real clients."""
    spec = ClusterSpec(time_scale=TIME_SCALE, timing=REAL_CLIENT_TIMING)
    for node_id in ("broker-a-0", "broker-a-1"):
        spec = spec.with_node_options(node_id, **broker_options) if broker_options else spec
    return spec


def start_cluster(spec: ClusterSpec, run_dir: Path) -> LocalCluster:
    return LocalCluster(spec, time_scale=spec.time_scale, run_dir=run_dir)


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
