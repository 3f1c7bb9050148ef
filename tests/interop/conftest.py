"""Fixtures for the interop tests: a real cluster timed for real clients, and driver processes.

Real clients cannot be time-scaled: C++ and ali-ons heartbeat every 30 s, rebalance every 10 s,
persist offsets every 5 s, hold a pull 15 s and re-lock an orderly queue every 20 s. The cluster
runs at the usual test time scale, except the two broker timers a real client must outlive at
their real length: the consumer channel expiry (a client silent for it is dropped) and the
orderly lock lease (a lease shorter than the 20 s re-lock would let two clients own a queue).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import LocalCluster
from harness.spec import ClusterSpec
from interop.procs import Clients
from nodes.common import constants as c

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


@pytest.fixture(scope="session")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One cluster per test process for the tests that only send and receive (each its own topic)."""
    cluster = start_cluster(interop_spec(), tmp_path_factory.mktemp("interop") / "run")
    try:
        yield cluster
        assert not cluster.unexpected_exits, f"nodes died unexpectedly: {cluster.unexpected_exits}"
    finally:
        cluster.close()


@pytest.fixture
def clients(tmp_path: Path) -> Iterator[Clients]:
    procs = Clients(tmp_path / "clients")
    procs.workdir.mkdir()
    try:
        yield procs
    finally:
        procs.close()

