"""Symbolic nemesis targets resolved to node ids of a `LocalCluster`.

Targets: "master" / "slave" (of the first broker group; "master:<broker_name>" for another),
"group" (every node of the first broker group, master first; "group:<broker_name>" for another),
"namesrv" (the first name server; "namesrv:<n>" for namesrv-<n>), "random-consumer" (a running one), "all-consumers", "lock-holder" (the consumer holding the
master's lock on a random locked queue of the runner's topic), "lock-holder:<queue_id>" (or
"lock-holder:<broker_name>:<queue_id>"), or a node id (also an in-harness client that has link
proxies, e.g. the chaos producer `producer-0`, for partitions). A seeded `random.Random` makes the
choices, so a seed picks the same nodes.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Mapping
from typing import Any

from harness import HarnessError, LocalCluster, NodeState
from nodes.common import constants as c


class ResolveError(HarnessError):
    """A symbolic target names nothing that can be faulted right now."""


def locked_queues(broker_details: Mapping[str, Any], topic: str, group: str | None = None,
                  broker_name: str | None = None) -> dict[tuple[str, int], str]:
    """(broker_name, queue_id) -> holder client id, for every live lease on `topic` in a master's
    Admin.Describe details (`queue_locks`: group -> [{topic, broker_name, queue_id, client_id, lease_left_ms}]),
    and for every FIFO queue a RocketMQ 5 client holds a batch of (`pop.fifo_holders`: [{group, topic,
    broker_name, queue_id, client_id, lease_left_ms}]: the queue is blocked for the others until it acks)."""
    entries = [{**e, "group": grp} for grp, es in sorted((broker_details.get("queue_locks") or {}).items()) for e in es]
    entries += (broker_details.get("pop") or {}).get("fifo_holders") or []
    held = {}
    for e in entries:
        if ((group is None or e.get("group") == group) and e.get("topic") == topic and e.get("lease_left_ms", 0) > 0
                and e.get("client_id") and (broker_name is None or e.get("broker_name") == broker_name)):
            held[(str(e.get("broker_name")), int(e["queue_id"]))] = str(e["client_id"])
    return held


def consumer_locked_queues(consumer_details: Mapping[str, Any], topic: str) -> set[tuple[str, int]]:
    """(broker_name, queue_id) a consumer's Admin.Describe details show it holding locked."""
    return {(str(q.get("broker_name")), int(q["queue_id"]))
            for q in (consumer_details.get("consumer") or {}).get("queues", [])
            if q.get("topic") == topic and q.get("locked") and not q.get("dropped")}


class TargetResolver:
    """Turns a symbolic target into node ids of `cluster`, drawing from `rng` only where it must choose.

    `note` holds what the last resolution found (e.g. which queue's holder), for the history.
    """

    def __init__(self, cluster: LocalCluster, rng: random.Random, *, topic: str | None = None,
                 group: str | None = None, describe_timeout_ms: int | None = None) -> None:
        self.cluster = cluster
        self.rng = rng
        self.topic = topic
        self.group = group
        # Admin calls are control plane (never faulted); a paused node simply does not answer in time.
        self.describe_timeout_ms = describe_timeout_ms or cluster.timing.rpc_timeout_ms
        self.note = ""

    def resolve(self, target: str) -> list[str]:
        self.note = ""
        name, _, arg = target.partition(":")
        if name in ("master", "slave"):
            return [self.broker(name, arg or None)]
        if name == "group":
            return self.broker_group(arg or None)
        if name == "namesrv":
            return [self.namesrv(arg or None)]
        if name == "random-consumer":
            return [self.rng.choice(self._consumers(running=True))]
        if name == "all-consumers":
            return self._consumers(running=False)
        if name == "lock-holder":
            return [self._lock_holder(arg)]
        if target in {p.node_id for p in self.cluster.nodes()} or target in self._link_ends():
            return [target]
        raise ResolveError(f"unknown target {target!r}: use master, slave, group, namesrv, random-consumer, "
                           "all-consumers, lock-holder[:<queue_id>] or a node id")

    def broker(self, role: str, broker_name: str | None = None) -> str:
        brokers = self.cluster.spec.broker_nodes()
        name = broker_name or (brokers[0].broker_name if brokers else None)
        for n in brokers:
            if n.broker_name == name and (n.broker_id == c.MASTER_ID) == (role == "master"):
                return n.id
        raise ResolveError(f"no {role} of broker group {name!r} in this cluster")

    def broker_group(self, broker_name: str | None = None) -> list[str]:
        """Every node of a broker group, master first (a restart brings the master back first)."""
        brokers = self.cluster.spec.broker_nodes()
        name = broker_name or (brokers[0].broker_name if brokers else None)
        nodes = sorted((n for n in brokers if n.broker_name == name), key=lambda n: n.broker_id or 0)
        if not nodes:
            raise ResolveError(f"no broker group {name!r} in this cluster")
        return [n.id for n in nodes]

    def namesrv(self, index: str | None = None) -> str:
        ids = [n.id for n in self.cluster.spec.namesrv_nodes()]
        wanted = f"namesrv-{index}" if index is not None else ids[0]
        if wanted not in ids:
            raise ResolveError(f"no name server {wanted!r} in this cluster; name servers are {', '.join(ids)}")
        return wanted

    def _link_ends(self) -> set[str]:
        """Every node the link proxies connect, including in-harness clients (the producer)."""
        if self.cluster.links is None:
            return set()
        return {end for name in self.cluster.link_stats() for end in name.split("->")}

    def _consumers(self, *, running: bool) -> list[str]:
        ids = sorted(p.node_id for p in self.cluster.nodes("consumer")
                     if not running or p.state is NodeState.RUNNING)
        if not ids:
            raise ResolveError("no running consumer to fault" if running else "the cluster has no consumers")
        return ids

    def _lock_holder(self, arg: str) -> str:
        """The master's lock table is the authority; the consumers' own view is the fallback (the
        master may be down or paused). A bare `lock-holder` draws one of the locked queues."""
        if self.topic is None:
            raise ResolveError("lock-holder targets need the runner's topic")
        broker_name, _, queue = arg.rpartition(":")
        try:
            queue_id = int(queue) if queue else None
        except ValueError:
            raise ResolveError(f"lock-holder:{arg}: expected lock-holder[:<broker_name>]:<queue_id>") from None
        master = self.broker("master", broker_name or None)
        by_client: dict[str, str] = {}
        own: dict[tuple[str, int], set[str]] = {}
        for proc in self.cluster.nodes("consumer"):
            if proc.state is not NodeState.RUNNING:
                continue
            real_client_id = proc.ready.extra.get("client_id") if proc.ready is not None else None
            if real_client_id:  # a real RocketMQ client serves no Admin: its READY line names its client id
                by_client[str(real_client_id)] = proc.node_id
                continue
            with contextlib.suppress(HarnessError):
                details = proc.describe(self.describe_timeout_ms).get("details", {})
                by_client[str(details.get("client_id"))] = proc.node_id
                for q in consumer_locked_queues(details, self.topic):
                    own.setdefault(q, set()).add(proc.node_id)
        holders: dict[tuple[str, int], str] = {}
        with contextlib.suppress(HarnessError):
            master_details = self.cluster.node(master).describe(self.describe_timeout_ms).get("details", {})
            holders = {q: by_client[cid] for q, cid in locked_queues(
                master_details, self.topic, self.group, broker_name or None).items() if cid in by_client}
        source = "the master's lock table (queue locks, FIFO batches)"
        if not holders:
            holders = {q: sorted(nodes)[0] for q, nodes in own.items() if not broker_name or q[0] == broker_name}
            source = "the consumers' own locks"
        if queue_id is not None:
            holders = {q: n for q, n in holders.items() if q[1] == queue_id}
        if not holders:
            which = f"queue {queue_id}" if queue_id is not None else "any queue"
            raise ResolveError(f"no running consumer holds a lock on {self.topic} {which}")
        q = self.rng.choice(sorted(holders)) if queue_id is None else min(holders)
        self.note = f"holder of {self.topic} {q[0]}:{q[1]} per {source}"
        return holders[q]
