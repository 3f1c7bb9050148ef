from hypothesis import given, settings
from hypothesis import strategies as st

from nodes.store.commitlog import CommitLog
from nodes.store.consume_queue import ConsumeQueue
from nodes.store.dispatch import Dispatcher, Step, scan_step
from nodes.store.record import (
    RecordKind,
    check_at,
    decode_properties,
    decode_record,
    encode_record,
    index_fields,
)

from .conftest import SEGMENT_BYTES, msg


class Index:
    """The consume queues a dispatcher writes into, plus the arrivals it announced."""

    def __init__(self, root):
        self.root = root
        self.queues = {}
        self.arrivals = []

    def queue_for(self, topic, queue_id):
        if (topic, queue_id) not in self.queues:
            self.queues[(topic, queue_id)] = ConsumeQueue(self.root, topic, queue_id, 64)
        return self.queues[(topic, queue_id)]

    def on_arrival(self, *args):
        self.arrivals.append(args[:3])


def _master(tmp_path, count=30):
    log = CommitLog(tmp_path / "master", SEGMENT_BYTES)
    results = []
    for i in range(count):
        results += log.append([msg(queue_id=i % 2, body=bytes(3000))], first_queue_offset=i // 2,
                              store_timestamp_ms=i)
    return log, results


def test_dispatch_indexes_every_record_at_its_queue_offset_once(tmp_path):
    log, results = _master(tmp_path)
    index = Index(tmp_path / "cq")
    dispatcher = Dispatcher(log, index.queue_for, index.on_arrival)
    assert dispatcher.dispatch_until(log.max_phys_offset) == 30
    assert dispatcher.reput_from_phys_offset == log.max_phys_offset
    for result, queue_id in zip(results, [i % 2 for i in range(30)], strict=True):
        assert index.queues[("T", queue_id)].unit_at(result.queue_offset)[:2] == (result.phys_offset, result.size)
    assert index.arrivals[:3] == [("T", 0, 1), ("T", 1, 1), ("T", 0, 2)]
    # re-dispatching the same records changes nothing and announces nothing
    dispatcher.reput_from_phys_offset = 0
    assert dispatcher.dispatch_until(log.max_phys_offset) == 30
    assert len(index.arrivals) == 30
    assert index.queues[("T", 0)].max_queue_offset == 15


def test_a_replica_waits_for_the_tail_of_a_split_record(tmp_path):
    master, results = _master(tmp_path, count=3)
    replica = CommitLog(tmp_path / "replica", SEGMENT_BYTES)
    index = Index(tmp_path / "cq")
    dispatcher = Dispatcher(replica, index.queue_for)
    cut = results[1].phys_offset + 50  # record 1 arrives in two pieces
    replica.append_bytes(0, master.read_bytes(0, cut))
    assert scan_step(replica, results[1].phys_offset, cut) == (Step.WAIT, 0)
    assert dispatcher.dispatch_until(replica.max_phys_offset) == 1
    replica.append_bytes(cut, master.read_bytes(cut, SEGMENT_BYTES))
    assert dispatcher.dispatch_until(replica.max_phys_offset) == 2
    assert index.queues[("T", 0)].max_queue_offset == 2


def test_garbage_is_stepped_over_when_a_valid_record_follows(tmp_path):
    log, results = _master(tmp_path, count=6)
    log.segments[0].buffer[results[2].phys_offset + 10] ^= 0xFF  # the CRC field of record 2
    index = Index(tmp_path / "cq")
    dispatcher = Dispatcher(log, index.queue_for)
    assert dispatcher.dispatch_until(log.max_phys_offset) == 5
    assert dispatcher.damaged_ranges == [(results[2].phys_offset, results[3].phys_offset)]
    assert index.queues[("T", 0)].max_queue_offset == 3  # 0, 1 (hole), 2


def test_garbage_at_the_tail_stops_the_walk(tmp_path):
    log, results = _master(tmp_path, count=4)
    log.segments[0].buffer[results[3].phys_offset + 100] ^= 0xFF
    index = Index(tmp_path / "cq")
    dispatcher = Dispatcher(log, index.queue_for)
    assert dispatcher.dispatch_until(log.max_phys_offset) == 3
    assert scan_step(log, results[3].phys_offset, log.max_phys_offset) == (Step.STUCK, 0)
    assert dispatcher.reput_from_phys_offset == results[3].phys_offset
    assert dispatcher.dispatch_until(log.max_phys_offset) == 0  # no rescan for the same end
    assert dispatcher.damaged_ranges == []


# --- the fast walk: index_fields is check_at plus a partial decode, never looser ---------------------

_damage = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=3)


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=300), tags=st.sampled_from([None, "a", "Tág"]), damage=_damage,
       cut=st.integers(0, 40))
def test_index_fields_agrees_with_check_at_and_decode_record(body, tags, damage, cut):
    properties = {"TAGS": tags, "k": "v"} if tags else {"k": "v"}
    good = encode_record(msg(topic="Tópico", queue_id=3, body=body, properties=properties), queue_offset=9,
                         phys_offset=4096, store_timestamp_ms=123)
    for data in (good, _damaged(good, damage), good[:len(good) - cut]):
        fields = index_fields(memoryview(data), 0, len(data), 4096)
        kind, size = check_at(data, 0, base_phys_offset=4096)
        if fields is None:
            assert data != good
            continue
        assert (kind, size) == (RecordKind.RECORD, fields[0])
        record = decode_record(data)
        assert fields == (record.total_size, record.topic, record.queue_id, record.queue_offset,
                          record.store_timestamp_ms, fields[5])
        assert decode_properties(fields[5]) == record.properties
    assert index_fields(good, 0, len(good), 4096 + 1) is None  # an old or shifted copy of a record


def _damaged(data: bytes, damage) -> bytes:
    out = bytearray(data)
    for position, value in damage:
        out[position % len(out)] = value
    return bytes(out)


def test_the_fast_walk_and_the_step_walk_index_alike(tmp_path):
    log, _ = _master(tmp_path, count=40)
    slow, fast = Index(tmp_path / "slow"), Index(tmp_path / "fast")
    stepping = Dispatcher(log, slow.queue_for, slow.on_arrival)
    stepping._dispatch_run = lambda *_: 0  # every record through scan_step and decode_record
    walking = Dispatcher(log, fast.queue_for, fast.on_arrival)
    assert stepping.dispatch_until(log.max_phys_offset) == walking.dispatch_until(log.max_phys_offset) == 40
    assert slow.arrivals == fast.arrivals
    for key, queue in slow.queues.items():
        units = [queue.unit_at(q) for q in range(queue.max_queue_offset)]
        assert units == [fast.queues[key].unit_at(q) for q in range(fast.queues[key].max_queue_offset)]
