"""A small filesystem per broker store, and filling it up: the full-disk fault.

Owns the mounts it makes at a node's store dir (`<node run dir>/store`, where a broker keeps its
commitlog and consume queues), the ext4 images behind them, and the filler file that eats their
space. Does not start nodes: the cluster mounts before a node's first start and unmounts after
the node stopped (`StoreMounts.mount_all` / `unmount_all`).

    mounts = StoreMounts(run_dir, {"broker-a-0": StoreFilesystem(32 * MiB, "tmpfs")})
    mounts.mount_all()
    fill = mounts.fill("broker-a-0", 0.95)   # fill.after.ratio >= 0.95
    mounts.free("broker-a-0")
    mounts.unmount_all()

Kinds:
  * `tmpfs`: `mount -t tmpfs -o size=N`; counts against RAM, gives blocks back at once.
  * `ext4`: an image `<node run dir>/store.ext4` made with `mkfs.ext4 -q -m 0` (no root reserve,
    so usage reads as RocketMQ computes it: used / (used + available)), loop-mounted; the loop
    device detaches itself on umount, and the image is removed after.

Usage is `used / (used + available)` from `os.statvfs`, the ratio RocketMQ's disk checks use.
The filler is `<store>/.mqlab-filler`, beside the store's own dirs, allocated with
`posix_fallocate` so its blocks are really taken (a sparse file would take none).

Mounting needs root and `mount`; without them `HarnessError` says so (`check_can_mount`). A harness
that dies with mounts in place leaves them: `mqlab down --run-dir DIR` unmounts the store of every
broker cluster.json lists, or `umount <run dir>/<node>/store` by hand.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.errors import HarnessError

log = logging.getLogger(__name__)

KINDS = ("tmpfs", "ext4")
STORE_DIR_NAME = "store"  # the broker keeps its store in <node run dir>/store
IMAGE_NAME = "store.ext4"  # beside the store dir, never inside the filesystem it holds
FILLER_NAME = ".mqlab-filler"
MIB = 1024 * 1024
STORE_FS_DEFAULT_BYTES = 64 * MIB  # ClusterSpec.with_store_filesystem's size when none is given
STORE_FS_MIN_BYTES = 4 * MIB  # below this mkfs.ext4 and the broker's first segments do not fit
MOUNT_COMMAND_TIMEOUT_S = 30
STORE_SEGMENT_MIN_BYTES = 512 * 1024  # store_options_for: commitlog segments on a small disk
COMMITLOG_SEGMENT_MAX_BYTES = 1024 * MIB
CQ_UNITS_SMALL_DISK = 16_384  # 320 KiB consume-queue files: many queues still fit a small disk
INDEX_HASH_SLOTS_SMALL_DISK = 4_096  # 16 KiB of slots and 320 KiB of entries: a 336 KiB index file
INDEX_ENTRIES_SMALL_DISK = 16_384
PROC_MOUNTS = Path("/proc/mounts")
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "m": MIB, "g": 1024 * MIB, "t": 1024 * 1024 * MIB}


def parse_size(text: str) -> int:
    """`64MiB`, `64M`, `512k`, `1g`, `1048576` -> bytes (binary units: 1 M = 1 MiB).

    Raises:
        HarnessError: not a size; says the accepted forms.
    """
    match = _SIZE_RE.match(str(text))
    if not match:
        raise HarnessError(f"{text!r} is not a size; write it like 64MiB, 64M, 512k or a byte count")
    unit = (match.group(2) or "").lower().rstrip("b").rstrip("i")
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


@dataclass(frozen=True)
class StoreFilesystem:
    """The filesystem a node's store gets: `size_bytes` of `kind` (tmpfs or ext4)."""

    size_bytes: int
    kind: str = "tmpfs"

    def validate(self, where: str = "store filesystem") -> None:
        if self.kind not in KINDS:
            raise HarnessError(f"{where}: kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if isinstance(self.size_bytes, bool) or not isinstance(self.size_bytes, int) or \
                self.size_bytes < STORE_FS_MIN_BYTES:
            raise HarnessError(f"{where}: size_bytes must be an integer of at least {STORE_FS_MIN_BYTES} "
                               f"({STORE_FS_MIN_BYTES // MIB} MiB), got {self.size_bytes!r}")


@dataclass(frozen=True)
class StoreMount:
    """One mounted store filesystem (what cluster.json's `store_mounts` lists)."""

    node_id: str
    mount_point: str
    kind: str
    size_bytes: int
    image: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StoreMount:
        return cls(node_id=str(data["node_id"]), mount_point=str(data["mount_point"]), kind=str(data["kind"]),
                   size_bytes=int(data["size_bytes"]), image=data.get("image"))


@dataclass(frozen=True)
class DiskUsage:
    """A filesystem's usage as RocketMQ measures it: used / (used + available)."""

    used_bytes: int
    available_bytes: int
    total_bytes: int

    @property
    def ratio(self) -> float:
        usable = self.used_bytes + self.available_bytes
        return self.used_bytes / usable if usable else 1.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": round(self.ratio, 4)}

    def describe(self) -> str:
        return f"{self.ratio * 100:.1f}% ({_mib(self.used_bytes)} of {_mib(self.used_bytes + self.available_bytes)})"


@dataclass(frozen=True)
class DiskFill:
    """What `fill_disk` / `free_disk` did: usage before and after, and the filler's size after."""

    node_id: str
    target_ratio: float | None  # None for free_disk
    before: DiskUsage
    after: DiskUsage
    filler_bytes: int
    filler_path: str

    def as_dict(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "target_ratio": self.target_ratio, "before": self.before.as_dict(),
                "after": self.after.as_dict(), "filler_bytes": self.filler_bytes, "filler_path": self.filler_path}


def store_options_for(size_bytes: int) -> dict[str, Any]:
    """Broker store settings that fit a store filesystem of `size_bytes`: segments of an eighth of
    it (a default 1 GiB segment cannot be allocated on a small disk), messages of at most a quarter
    of a segment (a segment holds two of the largest), and small consume-queue and index files."""
    segment = max(STORE_SEGMENT_MIN_BYTES, min(COMMITLOG_SEGMENT_MAX_BYTES, size_bytes // 8)) // 4096 * 4096
    return {"store": {"commitlog_segment_bytes": segment, "message_body_bytes_max": segment // 4,
                      "cq_units_per_file": CQ_UNITS_SMALL_DISK, "index_hash_slots": INDEX_HASH_SLOTS_SMALL_DISK,
                      "index_entries_per_file": INDEX_ENTRIES_SMALL_DISK}}


def _mib(n: int) -> str:
    return f"{n / MIB:.1f} MiB"


def disk_usage(path: str | Path) -> DiskUsage:
    st = os.statvfs(path)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    return DiskUsage(used_bytes=used, available_bytes=st.f_bavail * st.f_frsize, total_bytes=st.f_blocks * st.f_frsize)


def check_can_mount(*, euid: int | None = None, mount_bin: str = "mount", mkfs_bin: str | None = None) -> None:
    """Raise HarnessError unless this process can mount (root, `mount` and, for ext4, `mkfs.ext4`)."""
    euid = os.geteuid() if euid is None else euid
    if euid != 0:
        raise HarnessError("a store filesystem of its own needs root (mount); run the harness as root, "
                           "or drop the store filesystem option (--store-size)")
    for tool in (mount_bin, "umount", mkfs_bin):
        if tool is not None and shutil.which(tool) is None:
            raise HarnessError(f"{tool} is not installed (needed for a store filesystem of its own); "
                               "install util-linux / e2fsprogs, or drop the store filesystem option")


def mounted_at(path: str | Path, mounts_file: Path = PROC_MOUNTS) -> str | None:
    """The filesystem type mounted exactly at `path`, or None."""
    target = os.path.realpath(path)
    kind = None
    with contextlib.suppress(OSError):
        for line in mounts_file.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and _unescape(parts[1]) == target:
                kind = parts[2]  # the last one mounted there is what shows
    return kind


def mounts_under(directory: str | Path, mounts_file: Path = PROC_MOUNTS) -> list[str]:
    """Every mount point at or below `directory`, deepest first (the order to unmount in)."""
    root = os.path.realpath(directory)
    found = []
    with contextlib.suppress(OSError):
        for line in mounts_file.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 2:
                point = _unescape(parts[1])
                if point == root or point.startswith(root + os.sep):
                    found.append(point)
    return sorted(set(found), key=lambda p: -p.count(os.sep))


def _unescape(field: str) -> str:
    """/proc/mounts writes space, tab, newline and backslash as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _run(argv: list[str], what: str) -> None:
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=MOUNT_COMMAND_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HarnessError(f"{what}: {' '.join(argv)} failed: {exc}") from exc
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip()
        raise HarnessError(f"{what}: {' '.join(argv)} exited {result.returncode}: {detail}")


def mount_store(node_id: str, node_run_dir: str | Path, fs: StoreFilesystem) -> StoreMount:
    """Mount a fresh `fs` at `<node_run_dir>/store` (which must be empty or missing).

    Raises:
        HarnessError: not root, no mount tools, a non-empty store dir, or the mount failed.
    """
    fs.validate(f"store filesystem of {node_id}")
    check_can_mount(mkfs_bin="mkfs.ext4" if fs.kind == "ext4" else None)
    node_dir = Path(node_run_dir).absolute()
    store = node_dir / STORE_DIR_NAME
    store.mkdir(parents=True, exist_ok=True)
    if mounted_at(store) is not None:
        raise HarnessError(f"{store} already has a filesystem mounted; unmount it (umount {store}) first")
    if any(store.iterdir()):
        raise HarnessError(f"{node_id}'s store dir {store} is not empty: its own filesystem would hide the "
                           "files in it; use a fresh run dir")
    image = None
    if fs.kind == "tmpfs":
        _run(["mount", "-t", "tmpfs", "-o", f"size={fs.size_bytes},mode=0755", "tmpfs", str(store)],
             f"mount a tmpfs for {node_id}")
    else:
        image = node_dir / IMAGE_NAME
        try:
            with image.open("xb") as f:
                f.truncate(fs.size_bytes)
            _run(["mkfs.ext4", "-q", "-F", "-m", "0", str(image)], f"make an ext4 image for {node_id}")
            _run(["mount", "-o", "loop", str(image), str(store)], f"loop-mount {image} for {node_id}")
        except BaseException:
            with contextlib.suppress(OSError):
                image.unlink()
            raise
    mount = StoreMount(node_id, str(store), fs.kind, fs.size_bytes, str(image) if image else None)
    log.info("%s: store on its own %s of %s at %s", node_id, fs.kind, _mib(fs.size_bytes), store)
    return mount


def unmount_store(mount: StoreMount) -> None:
    """Unmount (the loop device detaches itself) and remove the image. A missing mount is fine.

    Raises:
        HarnessError: umount failed (something still holds the filesystem: a live node?).
    """
    if mounted_at(mount.mount_point) is not None:
        _run(["umount", mount.mount_point], f"unmount {mount.node_id}'s store (is the node stopped?)")
    if mount.image:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(mount.image)
    log.info("%s: unmounted its store filesystem %s", mount.node_id, mount.mount_point)


def unmount_stores(mounts: Iterable[StoreMount], also: Iterable[str | Path] = ()) -> list[str]:
    """Unmount every given mount, then each of the mount points `also` names that still has a
    filesystem mounted (a store a dead harness left behind); the errors, as text."""
    errors = []
    for mount in mounts:
        try:
            unmount_store(mount)
        except HarnessError as exc:
            errors.append(str(exc))
    for point in also:
        if mounted_at(point) is None:
            continue
        try:
            _run(["umount", str(point)], f"unmount {point}")
        except HarnessError as exc:
            errors.append(str(exc))
    return errors


def fill_disk(node_id: str, mount_point: str | Path, target_ratio: float) -> DiskFill:
    """Grow (or shrink) the filler until used / (used + available) reaches `target_ratio`.

    1.0 leaves no block free. A filesystem already above the target with no filler stays as it is.
    Raises HarnessError for a ratio outside [0, 1] or a mount point without its own filesystem.
    """
    if isinstance(target_ratio, bool) or not isinstance(target_ratio, int | float) or not 0 <= target_ratio <= 1:
        raise HarnessError(f"fill_disk {node_id}: target_ratio must be in [0, 1], got {target_ratio!r}")
    filler = Path(mount_point) / FILLER_NAME
    before = disk_usage(mount_point)
    block = os.statvfs(mount_point).f_frsize
    fd = os.open(filler, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        size = os.fstat(fd).st_size
        usable = before.used_bytes + before.available_bytes
        need = math.ceil(target_ratio * usable) - before.used_bytes
        if need < 0:
            os.ftruncate(fd, max(0, size - (-need // block) * block))  # whole blocks only: stay at or above
        else:
            _allocate(fd, size, -(-need // block) * block, block)
        os.fsync(fd)
        filler_bytes = os.fstat(fd).st_size
    finally:
        os.close(fd)
    after = disk_usage(mount_point)
    log.info("%s: filled its disk to %s (target %.3g, filler %s)", node_id, after.describe(), target_ratio,
             _mib(filler_bytes))
    return DiskFill(node_id, float(target_ratio), before, after, filler_bytes, str(filler))


def _allocate(fd: int, offset: int, length: int, block: int) -> None:
    """posix_fallocate up to `offset + length`, in chunks halved on ENOSPC (block metadata takes
    space too, and a running broker takes blocks meanwhile) until even one block does not fit. A
    chunk that fits does not end the fill: the next goes on from there."""
    end, chunk = offset + length, length
    while chunk >= block and offset < end:
        chunk = min(chunk, end - offset)
        try:
            os.posix_fallocate(fd, offset, chunk)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            # ext4 keeps what it allocated before ENOSPC (tmpfs does not): go on from the file's size
            offset = max(offset, os.fstat(fd).st_size)
            chunk = (chunk // 2) // block * block
            continue
        offset += chunk


def free_disk(node_id: str, mount_point: str | Path) -> DiskFill:
    """Remove the filler; its blocks come back at once."""
    filler = Path(mount_point) / FILLER_NAME
    before = disk_usage(mount_point)
    with contextlib.suppress(FileNotFoundError):
        filler.unlink()
    after = disk_usage(mount_point)
    log.info("%s: freed its disk: %s -> %s", node_id, before.describe(), after.describe())
    return DiskFill(node_id, None, before, after, 0, str(filler))


class StoreMounts:
    """The store filesystems of one cluster: node id -> `StoreFilesystem`, mounted on demand."""

    def __init__(self, run_dir: str | Path, filesystems: Mapping[str, StoreFilesystem]) -> None:
        self.run_dir = Path(run_dir).absolute()
        self.filesystems = dict(filesystems)
        self._lock = threading.Lock()
        self._mounted: dict[str, StoreMount] = {}

    def mount_all(self) -> list[StoreMount]:
        """Mount every store filesystem not mounted yet (idempotent); on a failure, unmount what
        this call mounted and raise."""
        made = []
        try:
            for node_id, fs in self.filesystems.items():
                with self._lock:
                    if node_id in self._mounted:
                        continue
                mount = mount_store(node_id, self.run_dir / node_id, fs)
                with self._lock:
                    self._mounted[node_id] = mount
                made.append(mount)
        except BaseException:
            unmount_stores(made)
            with self._lock:
                for mount in made:
                    self._mounted.pop(mount.node_id, None)
            raise
        return made

    def unmount_all(self) -> list[str]:
        """Unmount every store filesystem (the nodes must be stopped); the errors, as text."""
        with self._lock:
            mounts, self._mounted = list(self._mounted.values()), {}
        return unmount_stores(mounts)

    def mounts(self) -> list[StoreMount]:
        with self._lock:
            return list(self._mounted.values())

    def mount_of(self, node_id: str) -> StoreMount:
        with self._lock:
            mount = self._mounted.get(node_id)
        if mount is None:
            raise HarnessError(f"{node_id}'s store has no filesystem of its own; give it one with "
                               "ClusterSpec.with_store_filesystem(...) (mqlab up --store-size)")
        return mount

    def fill(self, node_id: str, target_ratio: float) -> DiskFill:
        return fill_disk(node_id, self.mount_of(node_id).mount_point, target_ratio)

    def free(self, node_id: str) -> DiskFill:
        return free_disk(node_id, self.mount_of(node_id).mount_point)

    def usage(self, node_id: str) -> DiskUsage:
        return disk_usage(self.mount_of(node_id).mount_point)
