"""The batch write path: one-pass batch encoding, one copy into the segment, consume-queue
units dispatched from what the writer knew, and pages faulted in ahead of the writer. Each
fast path is checked against the plain path it replaces."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples

from nodes.common import constants as c
from nodes.store.commitlog import CommitLog
from nodes.store.consume_queue import ConsumeQueue
from nodes.store.record import (
    USER_PROPERTIES_BYTES_MAX,
    MessageToStore,
    PropertiesTooLargeError,
    encode_record,
    tag_hash,
)
from nodes.store.record_batch import encode_batch, place_batch

from .conftest import SEGMENT_BYTES, crash_copy, msg

_text = st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=12)
_messages = st.builds(
    MessageToStore,
    topic=st.sampled_from(["T", "Tópico", "x" * 127]),
    queue_id=st.integers(0, 2**31 - 1),
    body=st.binary(max_size=600),
    flag=st.integers(-(2**31), 2**31 - 1),
    properties=st.dictionaries(_text.filter(lambda k: k != c.PROPERTY_RECORD_CRC), _text, max_size=4),
    born_timestamp_ms=st.integers(0, 2**62),
    born_host=st.tuples(st.sampled_from(["10.1.2.3", "127.0.0.1"]), st.integers(0, 65535)),
    store_host=st.tuples(st.sampled_from(["192.168.0.9", "127.0.0.1"]), st.integers(0, 65535)),
    reconsume_times=st.integers(0, 100),
    sys_flag=st.sampled_from([0, 0x1, 0x4]),
    prepared_transaction_offset=st.integers(0, 2**62),
)


@settings(max_examples=examples(150))
@given(msgs=st.lists(_messages, min_size=1, max_size=6), first_queue_offset=st.integers(0, 2**40),
       phys_offset=st.integers(0, 2**50), store_ts=st.integers(0, 2**62))
def test_a_batch_encodes_to_the_records_of_its_messages_one_by_one(msgs, first_queue_offset, phys_offset, store_ts):
    blob, sizes = encode_batch(msgs, first_queue_offset=first_queue_offset, store_timestamp_ms=store_ts)
    positions = place_batch(blob, sizes, phys_offset)
    expected, position = [], phys_offset
    for i, m in enumerate(msgs):
        record = encode_record(m, queue_offset=first_queue_offset + i, phys_offset=position, store_timestamp_ms=store_ts)
        expected.append(record)
        position += len(record)
    assert bytes(blob) == b"".join(expected)
    assert sizes == [len(r) for r in expected]
    assert positions == [phys_offset + sum(sizes[:i]) for i in range(len(msgs))]


@pytest.mark.parametrize("bad, error", [
    (MessageToStore("T", 0, b"", properties={"a\x01": "b"}), ValueError),
    (MessageToStore("T", 0, b"", properties={"a": "b\x02c"}), ValueError),
    (MessageToStore("T", 0, b"", properties={c.PROPERTY_RECORD_CRC: "0"}), ValueError),
    (MessageToStore("T", 0, b"", properties={"k": "v" * USER_PROPERTIES_BYTES_MAX}), PropertiesTooLargeError),
    (MessageToStore("T", 0, b"", sys_flag=0x10), ValueError),
    (MessageToStore("", 0, b""), ValueError),
    (MessageToStore("x" * 128, 0, b""), ValueError),
    (MessageToStore("T", 0, b"", store_host=("::1", 1)), ValueError),
])
def test_a_batch_refuses_what_a_single_record_refuses(bad, error):
    with pytest.raises(error):
        encode_record(bad, queue_offset=0, phys_offset=0, store_timestamp_ms=0)
    with pytest.raises(error):
        encode_batch([msg(), bad], first_queue_offset=0, store_timestamp_ms=0)


def test_a_batch_append_writes_the_bytes_of_one_by_one_appends(tmp_path):
    batch = [msg(body=bytes([i]) * (100 + i), properties={"TAGS": f"t{i % 3}", "k": "v"}) for i in range(40)]
    one = CommitLog(tmp_path / "one", SEGMENT_BYTES)
    singles = [one.append([m], first_queue_offset=5 + i, store_timestamp_ms=77)[0] for i, m in enumerate(batch)]
    many = CommitLog(tmp_path / "many", SEGMENT_BYTES)
    batched = many.append(batch, first_queue_offset=5, store_timestamp_ms=77)
    assert batched == singles  # offsets, sizes, queue offsets, offset msg ids
    assert many.read_bytes(0, SEGMENT_BYTES) == one.read_bytes(0, SEGMENT_BYTES)
    one.close()
    many.close()


def _units(store, topic, queue_id):
    return [store.queue_unit(topic, queue_id, q) for q in range(store.max_queue_offset(topic, queue_id))]


def _workload(store, clock):
    """Singles and batches over a few queues, with tags and without, and a delayed message;
    enough bytes to roll segments (so blank markers precede some puts)."""
    for i in range(60):
        clock.advance_ms(3)
        tags = {"TAGS": f"tag{i % 4}"} if i % 3 else {}
        if i % 5 == 0:
            result = store.put_messages([msg(queue_id=i % 2, body=bytes(900), properties=dict(tags, n=str(j)))
                                         for j in range(7)])
        elif i == 17:
            result = store.put_messages([msg(queue_id=1, body=b"later", properties={c.PROPERTY_DELAY: "3"})])
        else:
            result = store.put_messages([msg(topic="U", queue_id=i % 3, body=bytes(1500), properties=tags)])
        assert result.status.name == "PUT_OK", result


def _runs_joined(arrivals: list) -> list:
    """Each run of arrivals of one queue and tag hash as its last arrival."""
    out: list = []
    for arrival in arrivals:
        if out and (out[-1][0], out[-1][1], out[-1][3]) == (arrival[0], arrival[1], arrival[3]):
            out[-1] = arrival
        else:
            out.append(arrival)
    return out


def test_units_dispatched_from_the_append_equal_units_dispatched_from_the_bytes(open_store, clock, tmp_path):
    master = open_store()
    arrivals = []
    master.on_arrival = lambda *args: arrivals.append(args)
    _workload(master, clock)
    assert len(master._files.commitlog.segments) > 2
    # A slave indexes the same commitlog bytes by walking, checking and decoding them.
    slave = open_store(tmp_path / "slave", is_slave=True)
    slave_arrivals = []
    slave.on_arrival = lambda *args: slave_arrivals.append(args)
    while slave.max_phys_offset < master.max_phys_offset:
        slave.append_commitlog(slave.max_phys_offset, master.read_commitlog(slave.max_phys_offset, 32 * 1024))
    queues = [("T", 0), ("T", 1), ("U", 0), ("U", 1), ("U", 2), (c.SCHEDULE_TOPIC, 2)]
    assert sorted(master._files.consume_queues) == sorted(slave._files.consume_queues) == sorted(queues)
    for topic, queue_id in queues:
        assert _units(master, topic, queue_id) == _units(slave, topic, queue_id), (topic, queue_id)
    tagged = _units(master, "T", 1)[0]
    assert tagged[2] == tag_hash("tag1") or tagged[2] == 0
    # each side announces a run of records of one queue and tag once, the master per put and
    # the slave per appended chunk: the same notices once runs are joined across them
    assert _runs_joined(arrivals) == _runs_joined(slave_arrivals)
    assert len(arrivals) < sum(len(_units(master, topic, queue_id)) for topic, queue_id in queues)
    assert master._files.dispatcher.last_store_timestamp_ms == slave._files.dispatcher.last_store_timestamp_ms


def test_dispatch_from_the_append_survives_a_crash_and_recovery(open_store, clock, tmp_path):
    store = open_store()
    _workload(store, clock)
    queues = {key: _units(store, *key) for key in store._files.consume_queues}
    reopened = open_store(crash_copy(store, tmp_path / "crashed"))
    assert {key: _units(reopened, *key) for key in reopened._files.consume_queues} == queues
    result = reopened.put_messages([msg(body=b"after", properties={"TAGS": "tag0"})])
    assert result.appended[0].queue_offset == len(queues[("T", 0)])


def test_a_lagging_walk_falls_back_to_the_bytes(open_store):
    store = open_store()
    store.put_messages([msg(body=b"a")])
    dispatcher = store._files.dispatcher
    start = store.max_phys_offset
    assert not dispatcher.dispatch_appended(start + 1, start + 2, "T", 0, 1, [(start, 1, 0)], 0)
    assert dispatcher.reput_from_phys_offset == start  # untouched
    dispatcher.reput_from_phys_offset = 0  # as if the walk lagged: the put must still index everything once
    store.put_messages([msg(body=b"b"), msg(body=b"c")])
    assert [u[0] for u in _units(store, "T", 0)] == [r.phys_offset for r in
                                                     [store.lookup_message(u[0]) for u in _units(store, "T", 0)]]
    assert store.max_queue_offset("T", 0) == 3
    assert dispatcher.reput_from_phys_offset == store.max_phys_offset


def test_put_run_equals_put_unit_by_unit(tmp_path):
    runs = [(0, [(0, 10, 1), (10, 10, 2)]), (2, [(20, 5, 0)]),
            (2, [(20, 5, 0), (25, 5, 3)]),  # starts with a unit already there
            (6, [(40, 5, 0), (45, 5, 0)])]  # leaves a gap: hole units before it
    by_run = ConsumeQueue(tmp_path / "a", "T", 0, 16)
    by_unit = ConsumeQueue(tmp_path / "b", "T", 0, 16)
    for first, units in runs:
        written = by_run.put_run(first, units)
        assert list(written) == [i for i, unit in enumerate(units) if by_unit.put(first + i, *unit)]
    assert by_run.max_queue_offset == by_unit.max_queue_offset == 8
    assert [by_run.unit_at(q) for q in range(8)] == [by_unit.unit_at(q) for q in range(8)]
    assert (by_run.min_queue_offset, by_run.max_phys_end) == (by_unit.min_queue_offset, by_unit.max_phys_end)


def test_a_first_run_mid_queue_sets_the_min_offset(tmp_path):
    queue = ConsumeQueue(tmp_path, "T", 0, 16)
    queue._files.create(0)  # an empty file: the run continues the (empty) queue at offset 0
    assert list(queue.put_run(0, [(100, 10, 0)])) == [0]
    assert queue.min_queue_offset == 0 and queue.max_phys_end == 110
