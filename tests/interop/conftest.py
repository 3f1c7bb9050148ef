"""Fixtures for the interop tests: a shared cluster timed for real clients, and driver processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import LocalCluster
from interop.mqlab_side import interop_spec, start_cluster
from interop.procs import Clients


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One cluster per test module for the tests that only send and receive (each its own topic).

    Not per session: other tests check that their process leaves no node processes behind.
    """
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

