"""Store filesystems (harness.disk): real tmpfs and loop-mounted ext4 mounts, filling and freeing them."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.disk import (
    FILLER_NAME,
    MIB,
    StoreFilesystem,
    StoreMounts,
    check_can_mount,
    disk_usage,
    mounted_at,
    mounts_under,
    parse_size,
    store_options_for,
)
from harness.errors import HarnessError, SpecError
from harness.spec import ClusterSpec

CAN_MOUNT = os.geteuid() == 0 and shutil.which("mount") is not None
needs_mount = pytest.mark.requires(CAN_MOUNT, "mounting a store filesystem needs root and mount(8): run as root")


@pytest.fixture
def store_mounts(tmp_path):
    made: list[StoreMounts] = []

    def make(**filesystems: StoreFilesystem) -> StoreMounts:
        mounts = StoreMounts(tmp_path / "run", {k.replace("_", "-"): v for k, v in filesystems.items()})
        made.append(mounts)
        mounts.mount_all()
        return mounts

    yield make
    for mounts in made:
        assert mounts.unmount_all() == []
    assert mounts_under(tmp_path) == []


@needs_mount
def test_a_tmpfs_store_fills_to_the_target_and_frees_back(store_mounts, tmp_path):
    mounts = store_mounts(broker_a_0=StoreFilesystem(8 * MIB))
    store = tmp_path / "run" / "broker-a-0" / "store"
    assert mounted_at(store) == "tmpfs"
    assert disk_usage(store).used_bytes + disk_usage(store).available_bytes == 8 * MIB
    fill = mounts.fill("broker-a-0", 0.95)
    assert fill.before.ratio < 0.05 and 0.95 <= fill.after.ratio < 0.96, fill.as_dict()
    assert fill.filler_path == str(store / FILLER_NAME) and fill.filler_bytes >= 7 * MIB
    # a lower target shrinks the filler; a full one leaves no block free
    assert 0.5 <= mounts.fill("broker-a-0", 0.5).after.ratio < 0.51
    full = mounts.fill("broker-a-0", 1.0)
    assert full.after.ratio == 1.0 and full.after.available_bytes == 0
    with pytest.raises(OSError):
        (store / "one-more").write_bytes(b"x" * 8192)
    freed = mounts.free("broker-a-0")
    assert freed.before.ratio == 1.0 and freed.after.ratio < 0.05 and not (store / FILLER_NAME).exists()


@needs_mount
def test_a_fill_to_full_goes_on_after_a_broker_took_blocks_under_it(store_mounts, tmp_path, monkeypatch):
    # the store's broker writes while the filler is allocated: the first chunk no longer fits (a
    # tmpfs gives back all of a failed fallocate), a half does, and the fill must go on from there
    mounts = store_mounts(broker_a_0=StoreFilesystem(8 * MIB))
    store = tmp_path / "run" / "broker-a-0" / "store"
    real_fallocate, calls = os.posix_fallocate, []

    def racing_fallocate(fd: int, offset: int, length: int) -> None:
        if not calls:
            (store / "segment").write_bytes(b"x" * (256 * 1024))
        calls.append(length)
        real_fallocate(fd, offset, length)

    monkeypatch.setattr(os, "posix_fallocate", racing_fallocate)
    full = mounts.fill("broker-a-0", 1.0)
    assert len(calls) > 2, calls
    assert full.after.available_bytes == 0 and full.after.ratio == 1.0, full.as_dict()


@needs_mount
def test_an_ext4_store_has_no_root_reserve_fills_and_removes_its_image(store_mounts, tmp_path):
    mounts = store_mounts(broker_a_0=StoreFilesystem(16 * MIB, "ext4"))
    node_dir = tmp_path / "run" / "broker-a-0"
    image = node_dir / "store.ext4"
    assert mounted_at(node_dir / "store") == "ext4" and image.exists()
    usage = mounts.usage("broker-a-0")
    # -m 0: no 5 % root reserve; ext4 still holds back ~2 % for itself, which no one can use
    assert usage.total_bytes - (usage.used_bytes + usage.available_bytes) < 0.03 * usage.total_bytes
    fill = mounts.fill("broker-a-0", 0.92)
    assert 0.92 <= fill.after.ratio < 0.93, fill.as_dict()
    assert mounts.fill("broker-a-0", 1.0).after.available_bytes == 0
    assert mounts.free("broker-a-0").after.ratio < 0.1
    assert mounts.unmount_all() == []
    assert mounted_at(node_dir / "store") is None and not image.exists()
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True, check=False).stdout
    assert str(image) not in loops


@needs_mount
def test_mount_refuses_a_store_dir_with_files_in_it(tmp_path):
    store = tmp_path / "run" / "broker-a-0" / "store"
    store.mkdir(parents=True)
    (store / "commitlog").mkdir()
    mounts = StoreMounts(tmp_path / "run", {"broker-a-0": StoreFilesystem(8 * MIB)})
    with pytest.raises(HarnessError, match=r"not empty.*fresh run dir"):
        mounts.mount_all()
    assert mounted_at(store) is None and mounts.mounts() == []


def test_fill_of_a_node_without_its_own_filesystem_says_how_to_get_one(tmp_path):
    mounts = StoreMounts(tmp_path, {})
    with pytest.raises(HarnessError, match="with_store_filesystem"):
        mounts.fill("broker-a-0", 0.9)


def test_mount_probe_needs_root_and_the_tools():
    with pytest.raises(HarnessError, match="needs root"):
        check_can_mount(euid=1000)
    with pytest.raises(HarnessError, match="no-such-mount-tool is not installed"):
        check_can_mount(euid=0, mount_bin="no-such-mount-tool")


def test_mount_table_reading_unescapes_paths_and_orders_deepest_first(tmp_path):
    table = tmp_path / "mounts"
    table.write_text(f"tmpfs {tmp_path}/run/a\\040b/store tmpfs rw 0 0\n"
                     f"tmpfs {tmp_path}/run tmpfs rw 0 0\n"
                     "tmpfs /elsewhere tmpfs rw 0 0\n")
    assert mounted_at(tmp_path / "run" / "a b" / "store", table) == "tmpfs"
    assert mounted_at(tmp_path / "run" / "a b", table) is None
    assert mounts_under(tmp_path / "run", table) == [f"{tmp_path}/run/a b/store", f"{tmp_path}/run"]


def test_sizes_parse_in_binary_units():
    assert parse_size("64MiB") == parse_size("64M") == parse_size("64m") == 64 * MIB
    assert parse_size("512k") == 512 * 1024 and parse_size("1g") == 1024 * MIB and parse_size("4096") == 4096
    with pytest.raises(HarnessError, match="not a size"):
        parse_size("lots")


def test_store_options_fit_the_filesystem_and_render():
    options = store_options_for(32 * MIB)
    assert options["store"]["commitlog_segment_bytes"] == 4 * MIB
    spec = ClusterSpec(defaults={"broker": options}).with_store_filesystem("brokers", 32 * MIB)
    assert spec.render("broker-a-0", ports=dict.fromkeys(["namesrv-0", "broker-a-0", "broker-a-1"], 1),
                       run_dir=Path(".")).store.commitlog_segment_bytes == 4 * MIB


def test_spec_store_filesystem_option_names_brokers_and_checks_sizes():
    spec = ClusterSpec.default().with_store_filesystem("brokers", 32 * MIB)
    assert set(spec.store_filesystems) == {"broker-a-0", "broker-a-1"}
    assert spec.with_time_scale(0.5).store_filesystems == spec.store_filesystems
    one = ClusterSpec.default().with_store_filesystem(["broker-a-1"], 16 * MIB, kind="ext4")
    assert one.store_filesystems == {"broker-a-1": StoreFilesystem(16 * MIB, "ext4")}
    with pytest.raises(SpecError, match="only a broker has a store"):
        ClusterSpec.default().with_store_filesystem("namesrv-0", 32 * MIB)
    with pytest.raises(SpecError, match="kind must be one of"):
        ClusterSpec.default().with_store_filesystem("brokers", 32 * MIB, kind="xfs")
    with pytest.raises(SpecError, match="at least"):
        ClusterSpec.default().with_store_filesystem("brokers", 1024)
