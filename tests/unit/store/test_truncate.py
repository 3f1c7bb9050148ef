"""MessageStore.truncate_to and report_bad_record: the calls replication makes on a running store."""

from __future__ import annotations

from .conftest import put_many


def test_truncate_to_cuts_the_log_and_its_queue_units_and_the_next_put_reuses_the_offsets(open_store, tmp_path):
    store = open_store()
    appended = put_many(store, 10)
    cut = appended[6].phys_offset
    dropped_bytes, units = store.truncate_to(cut)
    assert (dropped_bytes, units) == (store_end(appended) - cut, 4)
    assert store.max_phys_offset == cut and store.max_queue_offset("T", 0) == 6
    assert store.get_messages("T", 0, 0, 32, None).record_sizes == [a.size for a in appended[:6]]
    [again] = put_many(store, 1)
    assert (again.phys_offset, again.queue_offset) == (cut, 6)
    store.close()
    reopened = open_store(root=tmp_path / "store")  # a clean reopen keeps the cut log
    assert reopened.max_phys_offset == cut + again.size and reopened.max_queue_offset("T", 0) == 7


def test_a_bad_record_is_reported_once_per_phys_offset(open_store):
    events: list[dict] = []
    store = open_store(reporter=events.append)
    put_many(store, 2)
    for _ in range(3):
        store.report_bad_record(4096, 120, "replication read", queue_id=0, queue_offset=7)
    bad = [e for e in events if e.get("kind") == "bad-record"]
    assert len(bad) == 1 and (bad[0]["phys_offset"], bad[0]["queue_offset"]) == (4096, 7)
    assert store.store_errors >= 1


def store_end(appended) -> int:
    last = appended[-1]
    return last.phys_offset + last.size


