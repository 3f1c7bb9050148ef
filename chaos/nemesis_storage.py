"""The storage faults a nemesis does to a broker's files: a power loss and a flipped record.

Owns reaching a broker's store dir through the harness (`<node run dir>/store`) and calling the
store's offline surgery (`nodes.store.faults`), and the JSON detail of the nemesis end line:

    power-loss  {"store": {"commitlog": {...}, "consume_queues": {...}}, "flush_disk_type": ...}
                (several nodes at once, a rack's power: {"nodes": {<node id>: <the above>}})
    corrupt     {"file": ..., "phys_offset": ..., "bytes": ..., "topic": ..., "queue_id": ...,
                 "queue_offset": ..., "msg_ids": [...]}

A power loss needs the broker dead first (SIGKILL, and the exit waited for): only then are its
files what the disk holds. A corruption is done under a live broker (pwrite; its mapping sees
the change at once), inside a sealed segment only.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from harness import HarnessError, LocalCluster
from nodes.store.faults import corrupt_sealed_record, power_loss

STORE_DIR = "store"


def store_dir(cluster: LocalCluster, node_id: str) -> Path:
    node = cluster.node(node_id)
    if node.role != "broker":
        raise HarnessError(f"{node_id} is a {node.role}: storage faults hit brokers only")
    return Path(node.run_dir) / STORE_DIR


def flush_disk_type(cluster: LocalCluster, node_id: str) -> str:
    """The broker's `store.flush_disk_type` as its config.json says."""
    try:
        config = json.loads((Path(cluster.node(node_id).run_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return "ASYNC_FLUSH"
    return str((config.get("store") or {}).get("flush_disk_type", "ASYNC_FLUSH"))


def lose_power(cluster: LocalCluster, node_id: str, rng: random.Random) -> dict[str, Any]:
    """SIGKILL the broker (waiting for its exit), then drop every byte its disk had not synced."""
    cluster.kill(node_id)
    return {"store": power_loss(store_dir(cluster, node_id), rng), "flush_disk_type": flush_disk_type(cluster, node_id)}


def lose_power_together(cluster: LocalCluster, node_ids: list[str], rng: random.Random) -> dict[str, Any]:
    """A rack's power loss: SIGKILL every node first (none outlives another's crash, so no
    replica keeps what its peer lost in a page cache), then drop each one's unsynced bytes."""
    for node_id in node_ids:
        cluster.kill(node_id)
    return {"nodes": {node_id: {"store": power_loss(store_dir(cluster, node_id), rng),
                                "flush_disk_type": flush_disk_type(cluster, node_id)} for node_id in node_ids}}


def corrupt(cluster: LocalCluster, node_id: str, rng: random.Random) -> dict[str, Any]:
    """Flip bytes inside one record of a sealed segment of a running broker."""
    detail = corrupt_sealed_record(store_dir(cluster, node_id), rng)
    if detail is None:
        raise HarnessError(f"{node_id} has no sealed commitlog segment yet (a small "
                           "store.commitlog_segment_bytes makes one sooner)")
    return detail
