"""`mqlab up --store-size`, `status` and `down` with broker stores on filesystems of their own."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal

import pytest
from typer.testing import CliRunner

from harness import cli
from harness.cluster import LocalCluster
from harness.cluster_commands import record_store_mounts, with_store_size
from harness.disk import MIB, fill_disk, mounted_at
from harness.spec import ClusterSpec

needs_mount = pytest.mark.requires(os.geteuid() == 0 and shutil.which("mount") is not None,
                                   "mounting a store filesystem needs root and mount(8): run as root")


@pytest.fixture
def runner():
    return CliRunner()


def test_up_help_names_the_store_options(runner):
    result = runner.invoke(cli.app, ["up", "--help"], terminal_width=200)
    assert "--store-size" in result.output and "--store-fs" in result.output


@pytest.mark.parametrize(("args", "message"), [
    (["--store-size", "lots"], "is not a size"),
    (["--store-size", "64MiB", "--store-fs", "xfs"], "--store-fs must be one of tmpfs, ext4"),
    (["--store-fs", "ext4"], "pass --store-size too"),
    (["--store-size", "1MiB"], "at least"),
])
def test_up_refuses_bad_store_options_before_starting_anything(runner, tmp_path, args, message):
    result = runner.invoke(cli.app, ["up", "--run-dir", str(tmp_path / "run"), *args], terminal_width=200)
    assert result.exit_code == 2 and message in result.output, result.output
    assert not (tmp_path / "run" / "cluster.json").exists()


def test_store_size_sizes_segments_but_keeps_the_specs_own_store_settings():
    spec = ClusterSpec(defaults={"broker": {"store": {"cq_units_per_file": 64}}})
    sized = with_store_size(spec, 64 * MIB, "ext4")
    store = sized.defaults["broker"]["store"]
    assert store["commitlog_segment_bytes"] == 8 * MIB and store["cq_units_per_file"] == 64
    assert {fs.kind for fs in sized.store_filesystems.values()} == {"ext4"}


@needs_mount
def test_status_shows_store_usage_and_down_unmounts_a_detached_clusters_stores(runner, tmp_path, standin_cmd):
    spec = with_store_size(ClusterSpec.default(), 8 * MIB, "tmpfs")
    cluster = LocalCluster(spec, run_dir=tmp_path / "run", detach=True, time_scale=0.05,
                           command=lambda n, cfg: standin_cmd("grpc", config=cfg))
    pids = [n.pid for n in cluster.nodes()]
    cluster.detach()
    record_store_mounts(cluster)
    run_dir = cluster.run_dir
    try:
        recorded = json.loads((run_dir / "cluster.json").read_text())["store_mounts"]
        assert {m["node_id"] for m in recorded} == {"broker-a-0", "broker-a-1"}
        fill_disk("broker-a-0", run_dir / "broker-a-0" / "store", 0.9)
        status = runner.invoke(cli.app, ["status", "--run-dir", str(run_dir)], terminal_width=250)
        assert status.exit_code == 0, status.output
        # a cell per broker: "90.0% (7.2 MiB of 8.0 MiB)", wrapped by the table
        assert "store" in status.output and "90.0%" in status.output and "(7.2" in status.output, status.output

        # as if broker-a-1's store had been mounted by a harness that died before recording it
        data = json.loads((run_dir / "cluster.json").read_text())
        data["store_mounts"] = [m for m in data["store_mounts"] if m["node_id"] != "broker-a-1"]
        (run_dir / "cluster.json").write_text(json.dumps(data))
        down = runner.invoke(cli.app, ["down", "--run-dir", str(run_dir)], terminal_width=250)
        assert down.exit_code == 0, down.output
        assert "broker-a-0: unmounted its tmpfs store" in down.output
        assert mounted_at(run_dir / "broker-a-0" / "store") is None
        assert mounted_at(run_dir / "broker-a-1" / "store") is None
        assert "store_mounts" not in json.loads((run_dir / "cluster.json").read_text())
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        for node in ("broker-a-0", "broker-a-1"):
            if mounted_at(run_dir / node / "store"):
                os.system(f"umount {run_dir / node / 'store'}")
