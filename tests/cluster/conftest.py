import os

import pytest

from harness import LocalCluster
from harness.spec import ClusterSpec

TIME_SCALE = float(os.environ.get("MQLAB_TEST_TIME_SCALE", "0.05"))


@pytest.fixture
def time_scale():
    return TIME_SCALE


@pytest.fixture
def local_cluster(tmp_path, time_scale):
    """The default topology as real processes; closed (and checked for leftovers) even on failure."""
    spec = ClusterSpec.default(time_scale=time_scale)
    with LocalCluster(spec, time_scale=time_scale, run_dir=tmp_path / "run") as cluster:
        yield cluster
        assert not cluster.unexpected_exits, f"nodes died unexpectedly: {cluster.unexpected_exits}"
