"""Power loss on real store files: `faults.power_loss` drops what no fsync covered and leaves torn
tails; recovery cuts them, keeps every fsync'd message at its queue offset, serves no garbage
and reports what it found."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.examples import examples

from nodes.common.clock import FakeClock
from nodes.common.config import StoreConfig
from nodes.store import faults
from nodes.store.message_store import MessageStore
from nodes.store.record import decode_record

from .conftest import SMALL, crash_copy, msg

TOPICS = (("T", 0), ("T", 1), ("U", 0))

# one step of a write pattern: ("put", queue index, body bytes, messages in the batch) | ("flush",)
# | ("flush-commitlog",) (SYNC_FLUSH's group commit: the commitlog alone) | ("restart",) (clean)
_steps = st.lists(st.one_of(
    st.tuples(st.just("put"), st.integers(0, len(TOPICS) - 1), st.integers(1, 3000), st.integers(1, 4)),
    st.just(("flush",)), st.just(("flush-commitlog",)), st.just(("restart",))), min_size=1, max_size=60)


class Sent:
    """What a producer was told: every acknowledged message at its queue offset."""

    def __init__(self) -> None:
        self.by_queue: dict[tuple[str, int], list[tuple[int, int, bytes]]] = {q: [] for q in TOPICS}

    def put(self, store: MessageStore, queue: tuple[str, int], *bodies: bytes) -> None:
        result = store.put_messages([msg(queue[0], queue[1], body) for body in bodies])
        assert result.status.name == "PUT_OK"
        for appended, body in zip(result.appended, bodies, strict=True):
            self.by_queue[queue].append((appended.queue_offset, appended.phys_offset + appended.size, body))


def _open(root: Path, events: list, config: StoreConfig = SMALL) -> MessageStore:
    store = MessageStore(root, config, clock=FakeClock(), reporter=events.append)
    store.open()
    return store


def _write(store: MessageStore, steps, sent: Sent) -> MessageStore:
    for i, step in enumerate(steps):
        if step[0] == "put":
            queue = TOPICS[step[1]]
            sent.put(store, queue, *(f"{queue}-{i}-{j}:".encode().ljust(step[2], b"x") for j in range(step[3])))
        elif step[0] == "flush":
            store.flush()
        elif step[0] == "flush-commitlog":
            store._files.flush_commitlog()
        else:
            store.close()
            store = _open(store.root, [])
    return store


def _pull_all(store: MessageStore, topic: str, queue_id: int) -> dict[int, bytes]:
    """Every record a consumer gets from the queue, by queue offset (stepping over holes)."""
    got: dict[int, bytes] = {}
    offset = 0
    while True:
        result = store.get_messages(topic, queue_id, offset, 32, None)
        for data in result.records:
            record = decode_record(data)
            got[record.queue_offset] = record.body
        if result.next_begin_offset <= offset:
            return got
        offset = result.next_begin_offset


def _store_errors(events: list, kind: str) -> list[dict]:
    return [e for e in events if e["event"] == "store-error" and e["kind"] == kind]


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_steps, seed=st.integers(0, 2**32 - 1))
def test_power_loss_keeps_every_fsynced_message_and_serves_no_garbage(tmp_path_factory, steps, seed):
    base = tmp_path_factory.mktemp("pl")
    store = _open(base / "live", [])
    sent = Sent()
    try:
        store = _write(store, steps, sent)
        copy = crash_copy(store, base / "lost")
    finally:
        store.close()
    flushed = faults.read_flushed(copy)["commitlog"]
    done = faults.power_loss(copy, random.Random(seed))
    assert done["commitlog"]["flushed_phys_offset"] == flushed
    assert done["commitlog"]["written_phys_offset"] >= flushed

    events: list = []
    recovered = _open(copy, events)
    try:
        assert recovered.max_phys_offset == flushed  # the torn tail is cut, nothing after it kept
        for (topic, queue_id), acked in sent.by_queue.items():
            got = _pull_all(recovered, topic, queue_id)
            durable = {offset: body for offset, end, body in acked if end <= flushed}
            assert got == durable  # byte-identical at the acknowledged offsets; nothing else served
            assert recovered.max_queue_offset(topic, queue_id) == len(durable)
        # a new message continues each queue where the durable ones end
        sent_after = Sent()
        sent_after.put(recovered, TOPICS[0], b"after")
        assert sent_after.by_queue[TOPICS[0]][0][0] == sum(end <= flushed for _o, end, _b in sent.by_queue[TOPICS[0]])
    finally:
        recovered.close()

    recovered_events = [e for e in events if e["event"] == "store-recovered"]
    assert len(recovered_events) == 1 and recovered_events[0]["clean"] is False
    assert recovered_events[0]["commitlog_max_phys_offset"] == flushed
    torn = done["commitlog"]["torn_bytes"]
    assert [(e["phys_offset"], e["bytes"]) for e in _store_errors(events, "torn-tail")] == (
        [(flushed, torn)] if torn else [])
    assert recovered_events[0]["truncated_bytes"] == torn
    assert not _store_errors(events, "bad-record") and not _store_errors(events, "recovery-anomaly")
    for event in _store_errors(events, "cq-truncated"):
        assert f"{event['topic']}/{event['queue_id']}" in done["consume_queues"] and event["bytes"] > 0


def test_power_loss_records_what_the_page_cache_held_and_drops_it(open_store, tmp_path):
    store = open_store()
    sent = Sent()
    for i in range(30):
        sent.put(store, TOPICS[i % 3], b"early-%d" % i)
    store.flush()
    flushed = json.loads((store.root / "flushed.json").read_text())
    assert flushed["commitlog"] == store.max_phys_offset
    assert flushed["consume_queues"] == {"T/0": 10, "T/1": 10, "U/0": 10}
    for i in range(12):
        sent.put(store, TOPICS[i % 3], b"late-%d" % i)
    written = store.max_phys_offset
    copy = crash_copy(store, tmp_path / "copy")
    done = faults.power_loss(copy, random.Random(7))
    assert done["commitlog"]["written_phys_offset"] == written
    assert done["commitlog"]["torn_bytes"] > 0
    assert done["consume_queues"]["T/0"] == {"flushed_queue_offset": 10, "written_queue_offset": 14}
    events: list = []
    recovered = _open(copy, events)
    try:
        assert recovered.max_phys_offset == flushed["commitlog"]
        assert all(recovered.max_queue_offset(*q) == 10 for q in TOPICS)
        assert len(_store_errors(events, "torn-tail")) == 1
        assert _store_errors(events, "cq-truncated")  # the torn unit
    finally:
        recovered.close()


def test_power_loss_is_deterministic_for_a_seed(open_store, tmp_path):
    store = open_store()
    sent = Sent()
    for i in range(20):
        sent.put(store, TOPICS[i % 3], b"m-%d" % i * 50)
        if i == 9:
            store.flush()
    one, two = crash_copy(store, tmp_path / "one"), crash_copy(store, tmp_path / "two")
    assert faults.power_loss(one, random.Random(3)) == faults.power_loss(two, random.Random(3))
    for path in sorted(p for p in one.rglob("*") if p.is_file() and "metadata" not in p.parts):
        assert path.read_bytes() == (two / path.relative_to(one)).read_bytes(), path


def test_a_switched_recovery_keeps_the_torn_tail_and_dispatch_meets_it(open_store, tmp_path):
    store = open_store()
    sent = Sent()
    for i in range(10):
        sent.put(store, TOPICS[0], b"kept-%d" % i)
    store.flush()
    flushed = store.max_phys_offset
    sent.put(store, TOPICS[0], b"lost")
    honest_copy = crash_copy(store, tmp_path / "honest")
    faults.power_loss(honest_copy, random.Random(1))
    switched_copy = crash_copy(store, tmp_path / "switched")
    faults.power_loss(switched_copy, random.Random(1))

    events: list = []
    honest = _open(honest_copy, events)
    try:
        assert honest.max_phys_offset == flushed and honest.read_commitlog(flushed, 64) == b""
        honest.put_messages([msg("T", 0, b"next")])
        assert not _store_errors(events, "bad-record")
    finally:
        honest.close()

    switched_events: list = []
    switched = _open(switched_copy, switched_events, dataclasses.replace(SMALL, recovery_keep_torn_tail=True))
    try:
        assert switched.max_phys_offset > flushed
        assert any(switched.read_commitlog(flushed, 64))  # garbage a replica would copy
        assert not _store_errors(switched_events, "torn-tail")  # the cut it should have made is missing
        switched.put_messages([msg("T", 0, b"next")])
        bad = _store_errors(switched_events, "bad-record")
        assert [e["phys_offset"] for e in bad] == [flushed]
    finally:
        switched.close()


def test_a_torn_unit_that_looks_real_is_dropped_and_rebuilt(open_store, tmp_path):
    store = open_store()
    sent = Sent()
    for i in range(8):
        sent.put(store, TOPICS[0], b"m-%d" % i)
    copy = crash_copy(store, tmp_path / "copy")
    cq_file = copy / "consumequeue" / "T" / "0" / f"{0:020d}"
    with cq_file.open("r+b") as f:  # unit 8: a plausible phys offset and size, but no such record
        f.seek(8 * 20)
        f.write((100).to_bytes(8, "big") + (150).to_bytes(4, "big") + bytes(8))
    events: list = []
    recovered = _open(copy, events)
    try:
        assert recovered.max_queue_offset("T", 0) == 8
        assert sorted(_pull_all(recovered, "T", 0)) == list(range(8))
        [event] = _store_errors(events, "cq-truncated")
        assert (event["topic"], event["queue_id"], event["queue_offset"], event["bytes"]) == ("T", 0, 8, 20)
    finally:
        recovered.close()


def test_a_kill_alone_reports_no_store_error(open_store, tmp_path):
    store = open_store()
    sent = Sent()
    for i in range(40):
        sent.put(store, TOPICS[i % 3], b"k-%d" % i * 40)
        if i == 20:
            store.flush()
    events: list = []
    recovered = _open(crash_copy(store, tmp_path / "killed"), events)  # the page cache survives a kill
    try:
        assert [e["event"] for e in events] == ["store-recovered"] and events[0]["clean"] is False
        assert events[0]["truncated_bytes"] == 0 and events[0]["cq_units_dropped"] == 0
        for queue, acked in sent.by_queue.items():
            assert _pull_all(recovered, *queue) == {offset: body for offset, _end, body in acked}
    finally:
        recovered.close()
