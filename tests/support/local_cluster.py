"""A real `LocalCluster` (name server, master and slave as processes) shared by one test module.

`cluster = module_cluster("surface-x")` in a module gives its tests a module-scoped `cluster`
fixture: started once, routable before the first test, and checked at teardown for nodes that
died unexpectedly. `master_stub(cluster)` is a raw Broker stub on the master, for tests that
must reach it below the client library.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import grpc
import pytest

from harness import LocalCluster
from harness.spec import ClusterSpec
from proto import broker_pb2_grpc

TIME_SCALE = 0.05
MASTER_ID = "broker-a-0"


def module_cluster(run_name: str, spec: ClusterSpec | None = None) -> Callable[..., Any]:
    """A module-scoped `cluster` fixture running `spec` (the default topology at TIME_SCALE when
    None) under a fresh run dir named after `run_name`."""

    @pytest.fixture(scope="module", name="cluster")
    def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
        with LocalCluster(spec or ClusterSpec.default(time_scale=TIME_SCALE),
                          run_dir=tmp_path_factory.mktemp(run_name) / "run") as cl:
            cl.wait_until_routable()
            yield cl
            assert not cl.unexpected_exits, cl.unexpected_exits

    return cluster


@contextmanager
def master_stub(cluster: LocalCluster) -> Iterator[broker_pb2_grpc.BrokerStub]:
    """A Broker stub on the cluster's master over its own channel, closed on exit."""
    with grpc.insecure_channel(cluster.node(MASTER_ID).addr) as channel:
        yield broker_pb2_grpc.BrokerStub(channel)


def module_master_stub() -> Callable[..., Any]:
    """A module-scoped `broker` fixture: `master_stub` of the module's `cluster`."""

    @pytest.fixture(scope="module", name="broker")
    def broker(cluster: LocalCluster) -> Iterator[broker_pb2_grpc.BrokerStub]:
        with master_stub(cluster) as stub:
            yield stub

    return broker
