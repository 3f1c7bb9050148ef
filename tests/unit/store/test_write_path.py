import dataclasses
import threading

import pytest

from nodes.common import constants as c
from nodes.common.errors import StoreError
from nodes.store.message_store import GetStatus, PutStatus
from nodes.store.record import decode_record, iter_records, tag_hash

from .conftest import SMALL, msg, put_many


def test_a_put_is_pullable_at_once_with_its_offsets(open_store, clock):
    store = open_store()
    result = store.put_messages([msg(body=b"one", properties={"TAGS": "TagA", "KEYS": "k"})])
    assert result.status is PutStatus.PUT_OK
    (appended,) = result.appended
    assert (appended.phys_offset, appended.queue_offset, appended.store_timestamp_ms) == (0, 0, clock.wall_ms())
    assert appended.offset_msg_id == "7F00000100000000" + "0" * 16
    got = store.get_messages("T", 0, 0, 32, None)
    assert got.status is GetStatus.FOUND and got.next_begin_offset == 1
    record = decode_record(got.records[0])
    assert (record.body, record.tags, record.keys, record.queue_offset, record.total_size) == (
        b"one", "TagA", "k", 0, appended.size)
    assert got.records_bytes == appended.size
    assert store.lookup_message(appended.phys_offset) == record
    assert store.lookup_message(appended.phys_offset, appended.size) == record
    assert store.lookup_message(appended.phys_offset + 1) is None


def test_a_batch_gets_consecutive_queue_offsets(open_store):
    store = open_store()
    put_many(store, 3)
    result = store.put_messages([msg(body=bytes([i])) for i in range(4)])
    assert result.status is PutStatus.PUT_OK
    assert [a.queue_offset for a in result.appended] == [3, 4, 5, 6]
    assert store.max_queue_offset("T", 0) == 7
    got = store.get_messages("T", 0, 3, 32, None)
    assert [r.body for r in iter_records(b"".join(got.records))] == [bytes([i]) for i in range(4)]


def test_queues_count_their_offsets_independently(open_store):
    store = open_store()
    put_many(store, 3, queue_id=0)
    put_many(store, 2, queue_id=1)
    put_many(store, 1, topic="U", queue_id=0)
    assert [store.max_queue_offset("T", q) for q in (0, 1, 2)] == [3, 2, 0]
    assert store.topics() == ["T", "U"]
    assert store.queue_ids("T") == [0, 1]


@pytest.mark.parametrize(("msgs", "status", "remark"), [
    ([], PutStatus.MESSAGE_ILLEGAL, "no message"),
    ([msg(body=b"x" * (SMALL.message_body_bytes_max + 1))], PutStatus.MESSAGE_ILLEGAL, "over the"),
    ([msg(body=b"x" * 9000), msg(body=b"x" * 9000)], PutStatus.MESSAGE_ILLEGAL, "batch carries"),
    ([msg(properties={"k": "v" * c.PROPERTIES_BYTES_MAX})], PutStatus.PROPERTIES_SIZE_EXCEEDED, "properties"),
    ([msg(properties={"k\x01": "v"})], PutStatus.MESSAGE_ILLEGAL, "separator"),
    ([msg(queue_id=0), msg(queue_id=1)], PutStatus.MESSAGE_ILLEGAL, "one topic and queue"),
    ([msg(topic="../evil")], PutStatus.MESSAGE_ILLEGAL, "cannot be stored"),
    ([msg(topic="x" * 128)], PutStatus.MESSAGE_ILLEGAL, "cannot be stored"),
    ([msg(queue_id=-1)], PutStatus.MESSAGE_ILLEGAL, "negative"),
    ([msg(store_host=("::1", 1))], PutStatus.MESSAGE_ILLEGAL, "IPv4"),
])
def test_invalid_puts_store_nothing(open_store, msgs, status, remark):
    store = open_store()
    result = store.put_messages(msgs)
    assert result.status is status and remark in result.remark and result.appended == []
    assert store.max_phys_offset == 0


def test_a_body_of_exactly_the_limit_is_accepted(open_store):
    store = open_store()
    assert store.put_messages([msg(body=b"x" * SMALL.message_body_bytes_max)]).status is PutStatus.PUT_OK


def test_a_slave_refuses_puts(open_store):
    store = open_store(is_slave=True)
    assert store.put_messages([msg()]).status is PutStatus.SERVICE_NOT_AVAILABLE


def test_a_closed_store_refuses_puts_and_reads(open_store):
    store = open_store()
    store.close()
    assert store.put_messages([msg()]).status is PutStatus.SERVICE_NOT_AVAILABLE
    with pytest.raises(StoreError, match="not open"):
        store.get_messages("T", 0, 0, 1, None)


def test_arrivals_are_announced_and_the_listener_may_put(open_store):
    store = open_store()
    seen = []

    def on_arrival(topic, queue_id, max_queue_offset, arrived_tag_hash):
        seen.append((topic, queue_id, max_queue_offset, arrived_tag_hash))
        if topic == "T":  # a listener that writes (as the broker's OffsetMovedEvent does)
            store.put_messages([msg(topic="EVENTS")])

    store.on_arrival = on_arrival
    store.put_messages([msg(properties={"TAGS": "TagA"}), msg(properties={"TAGS": "TagB"})])
    assert seen == [("T", 0, 1, tag_hash("TagA")), ("EVENTS", 0, 1, 0),
                    ("T", 0, 2, tag_hash("TagB")), ("EVENTS", 0, 2, 0)]


def test_a_batch_announces_each_run_of_one_tag_once_with_its_last_offset(open_store):
    store = open_store()
    seen = []
    store.on_arrival = lambda *arrival: seen.append(arrival)
    tags = ["A", "A", "A", "B", "A", "A"]
    store.put_messages([msg(properties={"TAGS": tag}) for tag in tags])
    assert seen == [("T", 0, 3, tag_hash("A")), ("T", 0, 4, tag_hash("B")), ("T", 0, 6, tag_hash("A"))]


def test_flush_may_run_on_another_thread_during_puts(open_store, tmp_path):
    store = open_store()
    stop = threading.Event()
    errors = []

    def flusher():
        try:
            while not stop.is_set():
                store.flush()
        except Exception as exc:  # surfaced by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=flusher)
    thread.start()
    try:
        put_many(store, 1500, body_bytes=200)  # rolls through several segments
    finally:
        stop.set()
        thread.join()
    assert errors == []
    store.flush()
    assert (tmp_path / "store" / "checkpoint").stat().st_size == 24


def test_replication_by_raw_bytes_rebuilds_the_queues_on_a_slave(open_store, tmp_path):
    master = open_store()
    put_many(master, 300, queue_id=0, body_bytes=300)
    put_many(master, 200, queue_id=1, body_bytes=150)
    slave = open_store(tmp_path / "slave", is_slave=True)
    slave.on_arrival = lambda *args: None
    while slave.max_phys_offset < master.max_phys_offset:
        # odd chunk sizes so records arrive split across appends
        chunk = master.read_commitlog(slave.max_phys_offset, 7777)
        slave.append_commitlog(slave.max_phys_offset, chunk)
    for queue_id in (0, 1):
        assert slave.max_queue_offset("T", queue_id) == master.max_queue_offset("T", queue_id)
        offset = 0
        while offset < master.max_queue_offset("T", queue_id):
            mine = master.get_messages("T", queue_id, offset, 32, None)
            theirs = slave.get_messages("T", queue_id, offset, 32, None)
            assert theirs.records == mine.records and theirs.next_begin_offset == mine.next_begin_offset
            offset = mine.next_begin_offset
    with pytest.raises(StoreError):
        slave.append_commitlog(0, b"x")


def test_stats_describe_the_store(open_store):
    store = open_store()
    put_many(store, 2)
    stats = store.stats()
    assert stats["max_phys_offset"] == store.max_phys_offset > 0
    assert (stats["topics"], stats["queues"], stats["corrupt_records_skipped"], stats["damaged_ranges"]) == (
        1, 1, 0, [])


def test_store_timestamps_come_from_the_clock(open_store, clock):
    store = open_store()
    first = put_many(store, 1)[0]
    clock.advance_ms(5000)
    second = put_many(store, 1)[0]
    assert second.store_timestamp_ms - first.store_timestamp_ms == 5000
    assert dataclasses.asdict(second)["queue_offset"] == 1
