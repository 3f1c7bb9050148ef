import dataclasses

import pytest
from support.inprocess import InProcessCluster

from nodes.common.config import Timing


@pytest.fixture
def cluster(tmp_path):
    with InProcessCluster(tmp_path) as c:
        yield c


@pytest.fixture
def unscanned_cluster(tmp_path):
    """A cluster whose broker never scans its held pulls within a test (one scan an hour): a held
    pull that answers with a message was woken by that message's arrival, however slow the machine."""
    timing = dataclasses.replace(Timing().scaled(0.05), long_poll_scan_ms=3_600_000)
    with InProcessCluster(tmp_path, timing=timing) as c:
        yield c
