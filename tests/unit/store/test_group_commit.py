"""SYNC_FLUSH's group commit: requests made during one fsync share the next; flushed.json moves
only after an fsync returned."""

from __future__ import annotations

import dataclasses
import json
import threading

import pytest

from nodes.common.errors import ConfigError
from nodes.store.group_commit import GroupCommitService

from .conftest import SMALL, crash_copy, put_many


def test_requests_arriving_during_an_fsync_share_the_next_one():
    started, release = threading.Event(), threading.Event()
    written = [100]
    calls: list[int] = []

    def flush() -> int:
        end = written[0]  # the snapshot is taken when the fsync starts
        calls.append(end)
        started.set()
        release.wait(10)
        return end

    service = GroupCommitService(flush)
    service.start(0)
    try:
        first = service.request(100)
        assert started.wait(10)
        written[0] = 500
        during = [service.request(end) for end in (200, 300, 400, 500)]  # all arrive mid-fsync
        assert not any(f.done() for f in [first, *during])
        release.set()
        first.result(10)
        for future in during:
            future.result(10)
        assert calls == [100, 500]  # one fsync for the four that waited together
        assert service.request(450).done()  # already covered: answered at once
    finally:
        release.set()
        service.stop()


def test_a_failed_fsync_fails_its_waiters_and_the_next_round_retries():
    outcomes = [OSError("disk gone"), 50]

    def flush() -> int:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    service = GroupCommitService(flush)
    service.start(0)
    try:
        failed = service.request(10)
        assert isinstance(failed.exception(10), OSError)
        assert service.request(50).result(10) is None
    finally:
        service.stop()


def test_a_sync_flush_store_makes_puts_durable_through_flushed_json(open_store):
    store = open_store(config=dataclasses.replace(SMALL, flush_disk_type="SYNC_FLUSH"))
    appended = put_many(store, 5)
    end = appended[-1].phys_offset + appended[-1].size
    store.wait_flushed(end).result(10)
    flushed = json.loads((store.root / "flushed.json").read_text())
    assert flushed["commitlog"] >= end
    assert flushed["consume_queues"].get("T/0", 0) <= 5  # the group commit syncs the commitlog only


def test_flushed_json_never_moves_back(open_store):
    store = open_store()
    put_many(store, 5)
    store.flush()
    first = json.loads((store.root / "flushed.json").read_text())
    store._files._note_flushed(0, {"T/0": 1})  # a slower flusher finishing late
    again = json.loads((store.root / "flushed.json").read_text())
    assert again == first and first["consume_queues"] == {"T/0": 5}


def test_flush_disk_type_is_validated():
    with pytest.raises(ConfigError, match="flush_disk_type"):
        dataclasses.replace(SMALL, flush_disk_type="SOMETIMES").validate()
    with pytest.raises(ConfigError, match="sync_flush_timeout_ms"):
        dataclasses.replace(SMALL, sync_flush_timeout_ms=0).validate()
    dataclasses.replace(SMALL, flush_disk_type="SYNC_FLUSH").validate()


def test_flushed_json_carries_over_a_restart_no_further_than_the_recovered_ends(open_store, tmp_path):
    store = open_store()
    put_many(store, 5)
    store.flush()
    flushed = json.loads((store.root / "flushed.json").read_text())
    put_many(store, 5)  # in the page cache only
    reopened = open_store(crash_copy(store, tmp_path / "killed"))
    assert json.loads((reopened.root / "flushed.json").read_text()) == flushed
    assert reopened.max_queue_offset("T", 0) == 10
