# ruff: noqa: F811  (pytest fixtures imported from test_disk_full, then named as arguments)
"""Retention: which segments a pass deletes (pure), and a pass over a real store on a tmpfs
filled to the ratios that trigger it."""

from __future__ import annotations

import os
import time
from pathlib import Path

from nodes.common.config import StoreConfig
from nodes.store.disk_guard import measure
from nodes.store.message_store import MessageStore, PutStatus
from nodes.store.read_path import GetStatus
from nodes.store.retention import CleanMode, clean_mode, segments_to_delete
from tests.unit.store.conftest import msg
from tests.unit.store.test_disk_full import TINY, bodies, store_on, tmpfs  # noqa: F401  (fixtures)

HOUR_MS = 3_600_000


def test_never_the_newest_oldest_first_and_no_holes():
    now = 100 * HOUR_MS
    segments = [(0, 0), (10, 0), (20, now), (30, 0), (40, 0)]  # the third is fresh
    assert segments_to_delete(segments, now_ms=now, reserved_ms=HOUR_MS, mode=CleanMode.EXPIRED) == [
        (0, "expired"), (10, "expired")]  # stops at the fresh one even though older ones follow
    assert segments_to_delete(segments, now_ms=now, reserved_ms=HOUR_MS, mode=CleanMode.FORCED) == [
        (0, "expired"), (10, "expired"), (20, "forced"), (30, "expired")]  # never 40, the newest
    assert segments_to_delete([(0, 0)], now_ms=now, reserved_ms=0, mode=CleanMode.FORCED) == []


def test_at_most_a_batch_per_pass():
    segments = [(i, 0) for i in range(30)]
    chosen = segments_to_delete(segments, now_ms=HOUR_MS, reserved_ms=1, mode=CleanMode.EXPIRED)
    assert [start for start, _ in chosen] == list(range(10))


def test_the_ratios_choose_the_mode():
    config = StoreConfig()
    assert clean_mode(0.75, config) is None and clean_mode(-1, config) is None
    assert clean_mode(0.76, config) is CleanMode.EXPIRED and clean_mode(0.85, config) is CleanMode.EXPIRED
    assert clean_mode(0.86, config) is CleanMode.FORCED


def _fill_to(path: Path, ratio: float) -> Path:
    st = os.statvfs(path)
    total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    filler = path / f"filler{len(list(path.glob('filler*')))}"
    with open(filler, "wb") as f:
        os.posix_fallocate(f.fileno(), 0, max(1, int(total * ratio) - (total - free)))
    return filler


def _store_with_segments(fs: Path, store_on, segments: int, events: list):
    store = store_on(fs / "store", reporter=events.append)
    per_segment = TINY.commitlog_segment_bytes // 1100
    for i in range(segments * per_segment):
        assert store.put_messages([msg(body=f"m{i}:".encode().ljust(1000, b"."))]).status is PutStatus.PUT_OK
    return store


def test_above_the_forcibly_ratio_sealed_segments_go_whatever_their_age(tmpfs, store_on):
    fs = tmpfs(4 * 1024 * 1024)
    events: list[dict] = []
    store = _store_with_segments(fs, store_on, 24, events)
    segments = len(store._files.commitlog.segments)
    _fill_to(fs, 0.90)
    assert measure(fs) > 0.85
    now_ms = int(time.time() * 1000)
    deleted = store.clean_files(now_ms, 72 * HOUR_MS)
    commitlog_deleted = [e for e in deleted if e["store"] == "commitlog"]
    assert [e["phys_offset"] for e in commitlog_deleted] == [i * TINY.commitlog_segment_bytes for i in range(10)]
    assert {e["why"] for e in commitlog_deleted} == {"forced"}
    assert [e for e in events if e["event"] == "retention-delete"] == deleted  # reported as events too
    assert store.min_phys_offset == 10 * TINY.commitlog_segment_bytes
    assert not (fs / "store" / "commitlog" / "00000000000000000000").exists()
    min_queue_offset = store.min_queue_offset("T", 0)
    assert min_queue_offset > 0
    assert store.get_messages("T", 0, 0, 1, None).status is GetStatus.OFFSET_TOO_SMALL
    assert bodies(store, "T", 0)[0] == f"m{min_queue_offset}:".encode().ljust(1000, b".")
    assert measure(fs) <= 0.85  # the pass freed enough: the next one deletes nothing
    assert store.clean_files(now_ms, 72 * HOUR_MS) == []
    while True:  # keep the disk above the ratio: pass after pass, down to the newest segment
        _fill_to(fs, 0.90)
        if not store.clean_files(now_ms, 72 * HOUR_MS):
            break
    assert len(store._files.commitlog.segments) == 1 < segments  # the newest stays
    cq_deleted = [e for e in events if e["event"] == "retention-delete" and e["store"] == "consume-queue"]
    assert [e["file"] for e in cq_deleted] == ["consumequeue/T/0/00000000000000000000"]  # wholly below the min
    assert store.min_queue_offset("T", 0) >= TINY.cq_units_per_file


def test_between_the_ratios_only_expired_segments_go(tmpfs, store_on):
    fs = tmpfs(4 * 1024 * 1024)
    events: list[dict] = []
    store = _store_with_segments(fs, store_on, 6, events)
    _fill_to(fs, 0.80)
    assert 0.75 < measure(fs) <= 0.85
    now_ms = int(time.time() * 1000)
    old_s = (now_ms - 2 * HOUR_MS) / 1000
    for mapped in store._files.commitlog.segments[:3]:
        os.utime(mapped.path, (old_s, old_s))
    deleted = [e for e in store.clean_files(now_ms, HOUR_MS) if e["store"] == "commitlog"]
    assert [(e["phys_offset"], e["why"]) for e in deleted] == [
        (i * TINY.commitlog_segment_bytes, "expired") for i in range(3)]
    assert store.clean_files(now_ms, HOUR_MS) == []  # the fourth is fresh: the pass stops there


def test_below_the_max_used_ratio_nothing_goes(tmpfs, store_on):
    fs = tmpfs(4 * 1024 * 1024)
    store = _store_with_segments(fs, store_on, 4, [])
    for mapped in store._files.commitlog.segments:
        os.utime(mapped.path, (0, 0))
    assert measure(fs) <= 0.75
    assert store.clean_files(int(time.time() * 1000), HOUR_MS) == []


def test_a_segment_with_a_live_view_is_kept_for_a_later_pass(tmpfs, store_on):
    fs = tmpfs(4 * 1024 * 1024)
    store = _store_with_segments(fs, store_on, 4, [])
    _fill_to(fs, 0.90)
    first = store._files.commitlog.segments[0]
    view = memoryview(first.buffer)  # a reader in the middle of a read
    assert store.clean_files(int(time.time() * 1000), 72 * HOUR_MS) == []
    assert first.path.exists() and store.min_phys_offset == 0
    view.release()
    deleted = store.clean_files(int(time.time() * 1000), 72 * HOUR_MS)
    assert deleted[0]["phys_offset"] == 0 and not first.path.exists()


def test_a_store_reopens_after_retention_deleted_its_first_segments(tmp_path, clock):
    root = tmp_path / "store"
    store = MessageStore(root, TINY, clock=clock)
    store.open()
    for i in range(300):
        assert store.put_messages([msg(body=f"m{i}:".encode().ljust(1000, b"."))]).status is PutStatus.PUT_OK
    with store._files.lock:  # what a pass does once the disk asks for it (this disk never does)
        for _ in range(2):
            store._files.commitlog.delete_first_segment()
        for queue in store._files.consume_queues.values():
            queue.delete_files_below(store.min_phys_offset)
    kept = bodies(store, "T", 0)
    min_queue_offset = store.min_queue_offset("T", 0)
    store.close()
    for clean in (True, False):
        if not clean:
            (root / "abort").write_bytes(b"")
        reopened = MessageStore(root, TINY, clock=clock)
        reopened.open()
        try:
            assert reopened.min_phys_offset == 2 * TINY.commitlog_segment_bytes
            assert reopened.min_queue_offset("T", 0) == min_queue_offset
            assert bodies(reopened, "T", 0) == kept
            assert reopened.put_messages([msg(body=b"after")]).status is PutStatus.PUT_OK
            kept.append(b"after")
        finally:
            reopened.close()
