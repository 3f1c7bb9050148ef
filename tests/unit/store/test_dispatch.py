from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples

from nodes.common import constants as c
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


@settings(max_examples=examples(300), deadline=None)
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


# a replica's puts: (topic, queue id, messages, tags) appended back to back, each a run of
# consecutive queue offsets of its queue (a replicated batch), interleaved across queues
_PUTS = st.lists(st.tuples(st.sampled_from(["T", "U", c.SCHEDULE_TOPIC]), st.integers(0, 2), st.integers(1, 5),
                           st.sampled_from([None, "a", "b"])), min_size=1, max_size=12)


@settings(max_examples=examples(40), deadline=None)
@given(puts=_PUTS, chunks=st.integers(1, 4), indexed_before=st.integers(0, 6))
def test_checked_records_index_exactly_as_the_walk_does(tmp_path_factory, puts, chunks, indexed_before):
    """`dispatch_checked` (what a replica's record check read, indexed run by run) leaves the
    same consume queues and announces the same arrivals as walking the bytes, also when the
    checked records come in several chunks and when a restart left some of them indexed."""
    root = tmp_path_factory.mktemp("checked")
    log = CommitLog(root / "log", SEGMENT_BYTES)
    next_queue_offset: dict[tuple[str, int], int] = {}
    records = []
    for i, (topic, queue_id, count, tags) in enumerate(puts):
        first = next_queue_offset.get((topic, queue_id), 0)
        props = {c.PROPERTY_DELAY: "2"} if topic == c.SCHEDULE_TOPIC else {}
        if tags:
            props[c.PROPERTY_TAGS] = tags
        run = log.append([msg(topic=topic, queue_id=queue_id, body=bytes(200), properties=props)
                          for _ in range(count)], first_queue_offset=first, store_timestamp_ms=1000 + i)
        next_queue_offset[(topic, queue_id)] = first + count
        for result in run:
            data = log.read_bytes(result.phys_offset, result.size)
            records.append((result.phys_offset, *index_fields(data, 0, result.size, result.phys_offset)))
    delay_levels_ms = (1000, 5000, 10000)

    def tag_code(topic, properties, store_timestamp_ms):
        if topic != c.SCHEDULE_TOPIC:
            return None
        return store_timestamp_ms + delay_levels_ms[int(properties[c.PROPERTY_DELAY]) - 1]

    walked, checked = Index(root / "walked"), Index(root / "checked")
    walker = Dispatcher(log, walked.queue_for, walked.on_arrival, tag_code=tag_code)
    replica = Dispatcher(log, checked.queue_for, checked.on_arrival, tag_code=tag_code)
    # a restart: the first records were indexed before, and the walk starts over from 0
    replica.dispatch_until(records[min(indexed_before, len(records) - 1)][0])
    replica.reput_from_phys_offset = 0
    assert walker.dispatch_until(log.max_phys_offset) == len(records)
    size = -(-len(records) // chunks)
    for start in range(0, len(records), size):
        part = records[start:start + size]
        assert replica.dispatch_checked(part[0][0], part) == len(part)
    assert replica.reput_from_phys_offset == walker.reput_from_phys_offset == log.max_phys_offset
    assert replica.last_store_timestamp_ms == walker.last_store_timestamp_ms
    # the records indexed before the restart were announced then, the others now, in the same order
    assert checked.arrivals == walked.arrivals
    for key, queue in walked.queues.items():
        mine = checked.queues[key]
        assert [mine.unit_at(q) for q in range(mine.max_queue_offset)] == [
            queue.unit_at(q) for q in range(queue.max_queue_offset)]
