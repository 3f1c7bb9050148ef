"""Resource faults on a real cluster: broker stores on filesystems of their own (filled, freed,
unmounted at close) and a starved broker (undone by close)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from harness import LocalCluster
from harness.cpu import CGROUP_V1_CPU_ROOT, cluster_id
from harness.disk import MIB, mounted_at, store_options_for
from harness.process import NodeState
from harness.spec import ClusterSpec

pytestmark = pytest.mark.cluster

STORE_BYTES = 32 * MIB
needs_root_mount = pytest.mark.requires(os.geteuid() == 0 and shutil.which("mount") is not None,
                                        "mounting a store filesystem needs root and mount(8): run as root")


def store_spec(time_scale: float, kind: str = "tmpfs") -> ClusterSpec:
    spec = ClusterSpec(time_scale=time_scale, defaults={"broker": store_options_for(STORE_BYTES)})
    return spec.with_store_filesystem("brokers", STORE_BYTES, kind=kind)


def mount_kinds(run_dir: Path) -> dict[str, str | None]:
    return {node_id: mounted_at(run_dir / node_id / "store") for node_id in ("broker-a-0", "broker-a-1")}


@needs_root_mount
def test_brokers_run_on_small_tmpfs_stores_that_fill_free_and_unmount(tmp_path, time_scale):
    run_dir = tmp_path / "run"
    with LocalCluster(store_spec(time_scale), run_dir=run_dir) as cluster:
        assert mount_kinds(run_dir) == {"broker-a-0": "tmpfs", "broker-a-1": "tmpfs"}
        assert {m.node_id for m in cluster.store_mounts()} == {"broker-a-0", "broker-a-1"}
        store = run_dir / "broker-a-0" / "store"
        assert (store / "metadata").is_dir()  # the broker opened its store on the mount
        fill = cluster.fill_disk("broker-a-0", 0.95)
        assert fill.after.ratio >= 0.95 and fill.before.ratio < 0.95, fill.as_dict()
        assert fill.after.used_bytes + fill.after.available_bytes <= STORE_BYTES
        freed = cluster.free_disk("broker-a-0")
        assert freed.after.ratio < 0.5 and abs(freed.after.ratio - fill.before.ratio) < 0.05, freed.as_dict()
        assert cluster.node("broker-a-0").state is NodeState.RUNNING
        cluster.assert_no_unexpected_exits()
    assert mount_kinds(run_dir) == {"broker-a-0": None, "broker-a-1": None}


@pytest.mark.slow
@needs_root_mount
def test_brokers_run_on_loop_mounted_ext4_stores(tmp_path, time_scale):
    run_dir = tmp_path / "run"
    with LocalCluster(store_spec(time_scale, "ext4"), run_dir=run_dir) as cluster:
        assert mount_kinds(run_dir) == {"broker-a-0": "ext4", "broker-a-1": "ext4"}
        assert cluster.fill_disk("broker-a-1", 0.95).after.ratio >= 0.95
        assert cluster.free_disk("broker-a-1").after.ratio < 0.5
        cluster.assert_no_unexpected_exits()
    assert mount_kinds(run_dir) == {"broker-a-0": None, "broker-a-1": None}
    assert not list(run_dir.glob("*/store.ext4"))
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True, check=False).stdout
    assert str(run_dir) not in loops


@pytest.mark.requires(os.geteuid() == 0 and (CGROUP_V1_CPU_ROOT / "cpu.cfs_quota_us").is_file(),
                      "a CPU quota needs root and the cgroup v1 cpu controller")
def test_close_undoes_a_starvation_of_a_broker(local_cluster):
    assert local_cluster.starve("broker-a-1", 0.3) == "cgroup-v1"
    assert local_cluster.starve("broker-a-0", 0.5, 50, mechanism="duty-cycle") == "duty-cycle"
    cgroup = CGROUP_V1_CPU_ROOT / f"mqlab-{cluster_id(local_cluster.run_dir)}-broker-a-1"
    assert str(local_cluster.node("broker-a-1").pid) in (cgroup / "cgroup.procs").read_text().split()
    local_cluster.close()
    assert not cgroup.exists()
    assert all(p.state is NodeState.STOPPED for p in local_cluster.nodes())
