"""A full filesystem under the store: a segment's blocks cannot be allocated (DiskFullError, no SIGBUS), the disk guard
refuses puts, dispatch waits for room, and everything acknowledged stays readable.

The filesystems are small tmpfs mounts made here (the tests run as root); writes that could
die of SIGBUS run in a subprocess, so a regression shows as exit -7 instead of killing pytest.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nodes.common import constants as c
from nodes.common.config import StoreConfig
from nodes.common.errors import DiskFullError, StoreError
from nodes.store.disk_guard import DiskGuard, disk_full_remark, is_over, measure, used_ratio
from nodes.store.mapped_file import MappedFileQueue
from nodes.store.message_store import MessageStore, PutStatus
from nodes.store.metadata import MetadataStore
from nodes.store.read_path import GetStatus
from nodes.store.record import decode_record
from tests.unit.store.conftest import SMALL, msg

pytestmark = pytest.mark.requires(os.geteuid() == 0, "mounting a tmpfs needs root: run as root")

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    """tmpfs(size_bytes) -> a fresh tmpfs of that size, unmounted at teardown."""
    mounts: list[Path] = []

    def mount(size_bytes: int) -> Path:
        path = tmp_path / f"fs{len(mounts)}"
        path.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(path)], check=True)
        mounts.append(path)
        return path

    yield mount
    for path in reversed(mounts):
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(path: Path, leave_bytes: int = 0) -> Path:
    """A filler file taking all but `leave_bytes` of the filesystem holding `path`."""
    st = os.statvfs(path)
    filler = path / "filler"
    size = st.f_bavail * st.f_frsize - leave_bytes
    with open(filler, "wb") as f:
        if size > 0:
            os.posix_fallocate(f.fileno(), 0, size)
    return filler


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=60)


def bodies(store: MessageStore, topic: str, queue_id: int) -> list[bytes]:
    """Every body in the queue, read the way a pull reads them."""
    out, offset = [], store.min_queue_offset(topic, queue_id)
    while offset < store.max_queue_offset(topic, queue_id):
        got = store.get_messages(topic, queue_id, offset, 32, None)
        assert got.status is GetStatus.FOUND, got.status
        out.extend(decode_record(record, 0).body for record in got.records)
        offset = got.next_begin_offset
    return out


# --- segments ---------------------------------------------------------------------------------

_WRITE_SEGMENT = """
    import json
    from pathlib import Path
    from nodes.common.errors import DiskFullError
    from nodes.store.mapped_file import MappedFileQueue
    queue = MappedFileQueue(Path({dir!r}), 2 * 1024 * 1024, preallocate={preallocate})
    try:
        mapped = queue.create(0)
        mapped.append(b"x" * mapped.size_bytes)  # every page of the map
    except DiskFullError as exc:
        print(json.dumps({{"disk_full": str(exc)}}))
    else:
        print(json.dumps({{"written": True}}))
"""


def test_writing_a_segment_past_the_filesystem_is_a_disk_full_error_not_a_sigbus(tmpfs):
    fs = tmpfs(1024 * 1024)
    done = run_python(_WRITE_SEGMENT.format(dir=str(fs / "commitlog"), preallocate=True))
    assert done.returncode == 0, done.stderr
    assert "no room for 2097152 bytes at 0" in json.loads(done.stdout)["disk_full"]
    segment = fs / "commitlog" / "00000000000000000000"
    assert segment.stat().st_size == 2 * 1024 * 1024 and segment.stat().st_blocks == 0  # nothing written


def test_blocks_are_allocated_a_step_ahead_of_the_writes_not_for_the_whole_segment(tmp_path):
    queue = MappedFileQueue(tmp_path / "commitlog", 64 * 1024 * 1024)
    mapped = queue.create(0)
    assert mapped.path.stat().st_blocks == 0  # a new segment costs no disk
    mapped.append(b"x" * 100)
    assert mapped.allocated_position == c.SEGMENT_ALLOCATE_STEP_BYTES
    assert mapped.path.stat().st_blocks * 512 >= c.SEGMENT_ALLOCATE_STEP_BYTES
    mapped.append(b"y" * c.SEGMENT_ALLOCATE_STEP_BYTES)
    assert mapped.allocated_position == 2 * c.SEGMENT_ALLOCATE_STEP_BYTES  # the next step from the last
    assert mapped.path.stat().st_blocks * 512 < 4 * c.SEGMENT_ALLOCATE_STEP_BYTES
    queue.close()


def test_the_sparse_segments_switch_brings_the_sigbus_back(tmpfs):
    fs = tmpfs(1024 * 1024)
    done = run_python(_WRITE_SEGMENT.format(dir=str(fs / "commitlog"), preallocate=False))
    assert done.returncode == -signal.SIGBUS, (done.returncode, done.stdout, done.stderr)


def test_ensure_room_creates_all_or_nothing(tmpfs):
    fs = tmpfs(1024 * 1024)
    queue = MappedFileQueue(fs / "cq", 256 * 1024)
    queue.ensure_room(100)
    assert len(queue.files) == 1
    with pytest.raises(DiskFullError):
        queue.ensure_room(8 * 256 * 1024)  # four fit, the fifth does not
    assert len(queue.files) == 1 and sorted(p.name for p in (fs / "cq").iterdir()) == [queue.files[0].path.name]
    queue.close()


# --- the guard's arithmetic ---------------------------------------------------------------------

def test_used_ratio_rounds_up_to_a_whole_percent():
    assert used_ratio(90, 10) == 0.90
    assert used_ratio(9001, 999) == 0.91  # 90.01 % reads 0.91
    assert used_ratio(0, 100) == 0.0
    assert used_ratio(1, 999) == 0.01
    assert used_ratio(100, 0) == 1.0
    assert used_ratio(0, 0) == -1


def test_thresholds_are_strictly_above():
    assert not is_over(0.90, 0.90) and is_over(0.91, 0.90)
    assert not is_over(-1, 0.90)
    remark = disk_full_remark(0.92, 0.92, Path("/s"), 0.90)
    assert remark.startswith("service not available now. It may be caused by one of the following reasons: the "
                             "broker's disk is full [CL: 0.92 CQ: 0.92 INDEX: -1], messages are put to the slave")
    assert "/s" in remark and "0.90" in remark


def test_the_guard_flips_on_above_the_warning_level_and_off_at_or_below(tmpfs):
    fs = tmpfs(1024 * 1024)
    guard = DiskGuard(fs / "store", SMALL)
    assert guard.check() is None and not guard.full and guard.ratio == measure(fs) < 0.1
    filler = fill(fs, leave_bytes=64 * 1024)  # 94 % used
    event = guard.check()
    assert guard.full and event is not None and event["state"] == "on" and event["commitlog_ratio"] > 0.90
    assert event["event"] == "disk-guard" and event["path"] == str(fs / "store")
    filler.unlink()
    event = guard.check()
    assert not guard.full and event is not None and event["state"] == "off"


# --- the store on a full disk -------------------------------------------------------------------

TINY = StoreConfig(commitlog_segment_bytes=64 * 1024, cq_units_per_file=1024, message_body_bytes_max=16 * 1024,
                   memory_budget_bytes=1 << 40)


@pytest.fixture
def store_on(clock) -> Iterator[Callable[..., MessageStore]]:
    opened: list[MessageStore] = []

    def factory(root: Path, config: StoreConfig = TINY, **kwargs) -> MessageStore:
        store = MessageStore(root, config, clock=clock, reporter=kwargs.pop("reporter", None), **kwargs)
        store.open()
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.close()


def test_puts_until_enospc_are_refused_with_code_14_and_everything_acked_reads_back(tmpfs, store_on):
    fs = tmpfs(1024 * 1024)
    events: list[dict] = []
    store = store_on(fs / "store", reporter=events.append)
    acked = []
    for i in range(2000):
        result = store.put_messages([msg(body=f"m{i}:".encode().ljust(1000, b"."))])
        if result.status is not PutStatus.PUT_OK:
            break
        acked.append(result.appended[0])
    else:
        pytest.fail("a 1 MiB filesystem took 2 MB of messages")
    assert result.status is PutStatus.SERVICE_NOT_AVAILABLE
    assert "the broker's disk is full [CL: " in result.remark
    assert store.disk_full
    assert [e["state"] for e in events if e["event"] == "disk-guard"] == ["on"]
    assert len(acked) > 500
    assert bodies(store, "T", 0) == [f"m{i}:".encode().ljust(1000, b".") for i in range(len(acked))]
    store.check_disk()
    assert store.disk_full  # nothing was freed: still full


def test_ignore_disk_full_answers_enospc_as_create_mapped_file_failed(tmpfs, store_on):
    fs = tmpfs(512 * 1024)
    store = store_on(fs / "store", dataclasses.replace(TINY, ignore_disk_full=True))
    for _ in range(2000):
        result = store.put_messages([msg(body=bytes(1000))])
        if result.status is not PutStatus.PUT_OK:
            break
    assert result.status is PutStatus.CREATE_MAPPED_FILE_FAILED, result
    assert not store.disk_full
    store.check_disk()
    assert not store.disk_full  # the guard is off


def test_a_consume_queue_file_that_cannot_be_allocated_stops_dispatch_until_there_is_room(tmpfs, store_on):
    fs = tmpfs(1024 * 1024)
    store = store_on(fs / "store")
    assert store.put_messages([msg(body=b"first")]).status is PutStatus.PUT_OK
    filler = fill(fs)
    # the commitlog segment has room; the new queue's first file does not
    stored = store.put_messages([msg(queue_id=5, body=b"stored, not yet indexed")])
    assert stored.status is PutStatus.PUT_OK
    assert store.max_queue_offset("T", 5) == 0
    refused = store.put_messages([msg(body=b"refused")])
    assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE
    assert store.get_messages("T", 0, 0, 10, None).status is GetStatus.FOUND  # reads go on
    filler.unlink()
    store.check_disk()  # finds room, indexes what waited
    assert not store.disk_full
    assert store.max_queue_offset("T", 5) == 1
    assert bodies(store, "T", 5) == [b"stored, not yet indexed"]
    assert store.put_messages([msg(body=b"accepted")]).status is PutStatus.PUT_OK


def test_a_replica_on_a_full_disk_stops_appending_and_catches_up_after(tmpfs, store_on, tmp_path):
    master = store_on(tmp_path / "master")
    for i in range(300):
        assert master.put_messages([msg(body=f"m{i}:".encode().ljust(1000, b"."))]).status is PutStatus.PUT_OK
    fs = tmpfs(1024 * 1024)
    slave = store_on(fs / "store", is_slave=True)
    filler = fill(fs, leave_bytes=200 * 1024)
    with pytest.raises(DiskFullError):
        while slave.max_phys_offset < master.max_phys_offset:
            slave.append_commitlog(slave.max_phys_offset, master.read_commitlog(slave.max_phys_offset, 16 * 1024))
    stopped_at = slave.max_phys_offset
    assert 0 < stopped_at < master.max_phys_offset and slave.disk_full
    with pytest.raises(DiskFullError):  # refused while the guard says full
        slave.append_commitlog(stopped_at, master.read_commitlog(stopped_at, 16 * 1024))
    assert slave.max_phys_offset == stopped_at
    filler.unlink()
    slave.check_disk()
    while slave.max_phys_offset < master.max_phys_offset:
        slave.append_commitlog(slave.max_phys_offset, master.read_commitlog(slave.max_phys_offset, 16 * 1024))
    assert slave.max_queue_offset("T", 0) == 300


def test_checkpoint_and_flushed_positions_survive_a_full_disk(tmpfs, store_on):
    fs = tmpfs(1024 * 1024)
    store = store_on(fs / "store")
    assert store.put_messages([msg(body=b"x")]).status is PutStatus.PUT_OK
    store.flush()
    before = (fs / "store" / "flushed.json").read_text()
    filler = fill(fs)
    assert store.put_messages([msg(body=b"y")]).status is PutStatus.PUT_OK  # fits the allocated segment
    store.flush()  # the small files cannot be rewritten: logged, the old ones kept
    assert (fs / "store" / "flushed.json").read_text() == before
    assert not (fs / "store" / "flushed.json.tmp").exists() and not (fs / "store" / "checkpoint.tmp").exists()
    filler.unlink()
    store.flush()
    assert (fs / "store" / "flushed.json").read_text() != before


def test_a_metadata_write_on_a_full_disk_is_a_store_error_and_changes_nothing(tmpfs):
    fs = tmpfs(1024 * 1024)
    metadata = MetadataStore(fs / "metadata")
    try:
        metadata.put("topics", "kept", {"queues": 4})
        fill(fs)
        with pytest.raises(StoreError, match=r"metadata write to .* failed"):
            metadata.put_many("consumer_offsets", {f"group-{i}": {"0": i} for i in range(20_000)})
        assert metadata.get_all("topics") == {"kept": {"queues": 4}}
        assert metadata.get_all("consumer_offsets") == {}
    finally:
        metadata.close()
