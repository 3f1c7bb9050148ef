"""Offset stores: the local file (BROADCASTING) and the remote one (CLUSTERING) with a fake broker."""

from __future__ import annotations

import asyncio
import json

from nodes.client.consumer_state import ConsumerState
from nodes.client.offset_store import (
    OFFSET_NOT_FOUND,
    OFFSET_READ_FAILED,
    LocalFileOffsetStore,
    ReadOffsetType,
    RemoteBrokerOffsetStore,
    offsets_file,
    read_offsets_file,
)
from nodes.client.process_queue import ProcessQueue
from nodes.common import constants as c
from nodes.common.clock import FakeClock
from nodes.common.config import Timing
from nodes.common.errors import TransportError
from nodes.common.types import MessageModel, MessageQueue
from proto import broker_pb2, common_pb2

Q0, Q1, Q2 = (MessageQueue("T", "broker-a", i) for i in range(3))
STORE = ReadOffsetType.READ_FROM_STORE
MEMORY = ReadOffsetType.READ_FROM_MEMORY


# --- the memory table ---------------------------------------------------------------------------

def test_increase_only_never_moves_back_but_a_plain_update_does(tmp_path):
    store = LocalFileOffsetStore(tmp_path, "cid", "g")
    store.update_offset(Q0, 10, increase_only=True)
    store.update_offset(Q0, 7, increase_only=True)
    assert store.read_memory(Q0) == 10
    store.update_offset(Q0, 3, increase_only=False)  # the OFFSET_ILLEGAL fix-up may go backwards
    assert store.read_memory(Q0) == 3
    store.remove_offset(Q0)
    assert store.read_memory(Q0) == OFFSET_NOT_FOUND


# --- the local file -------------------------------------------------------------------------------

def test_local_file_lives_under_client_id_and_group(tmp_path):
    assert offsets_file(tmp_path, "10.0.0.1@DEFAULT", "g") == tmp_path / "10.0.0.1@DEFAULT" / "g" / "offsets.json"


def test_local_file_round_trip_across_instances(tmp_path):
    store = LocalFileOffsetStore(tmp_path, "cid", "g")
    store.update_offset(Q0, 5, increase_only=True)
    store.update_offset(Q1, 9, increase_only=True)
    asyncio.run(store.persist_all({Q0, Q1}))
    again = LocalFileOffsetStore(tmp_path, "cid", "g")
    again.load()
    assert again.offsets() == {Q0: 5, Q1: 9}
    assert asyncio.run(again.read_offset(Q1, STORE)) == 9
    assert asyncio.run(again.read_offset(Q2, STORE)) == OFFSET_NOT_FOUND


def test_persist_all_is_read_modify_write_and_leaves_no_temp_file(tmp_path):
    store = LocalFileOffsetStore(tmp_path, "cid", "g")
    store.update_offset(Q0, 1, increase_only=True)
    store.update_offset(Q1, 2, increase_only=True)
    asyncio.run(store.persist_all({Q0, Q1}))
    other = LocalFileOffsetStore(tmp_path, "cid", "g")  # e.g. another consumer of the same client id
    other.update_offset(Q1, 20, increase_only=True)
    other.update_offset(Q2, 30, increase_only=True)
    asyncio.run(other.persist_all({Q1, Q2}))
    assert read_offsets_file(store.path) == {Q0: 1, Q1: 20, Q2: 30}  # Q0 kept, Q1 replaced
    assert [p.name for p in store.path.parent.iterdir()] == ["offsets.json"]


def test_persist_all_with_nothing_owned_writes_nothing(tmp_path):
    store = LocalFileOffsetStore(tmp_path, "cid", "g")
    store.update_offset(Q0, 1, increase_only=True)
    asyncio.run(store.persist_all(set()))
    assert not store.path.exists()


def test_persist_one_queue_and_memory_first_then_store(tmp_path):
    store = LocalFileOffsetStore(tmp_path, "cid", "g")
    store.update_offset(Q2, 42, increase_only=True)
    asyncio.run(store.persist(Q2))
    fresh = LocalFileOffsetStore(tmp_path, "cid", "g")
    assert asyncio.run(fresh.read_offset(Q2, MEMORY)) == OFFSET_NOT_FOUND
    assert asyncio.run(fresh.read_offset(Q2, ReadOffsetType.MEMORY_FIRST_THEN_STORE)) == 42
    assert fresh.read_memory(Q2) == 42


def test_a_damaged_file_reads_as_empty(tmp_path):
    store = LocalFileOffsetStore(tmp_path, "cid", "g")
    store.path.parent.mkdir(parents=True)
    store.path.write_text("{not json")
    store.load()
    assert store.offsets() == {}
    store.path.write_text(json.dumps({"offsetTable": [{"topic": "T"}, {"topic": "T", "brokerName": "broker-a",
                                                                       "queueId": 1, "offset": 6}]}))
    assert read_offsets_file(store.path) == {Q1: 6}


def test_local_file_commit_events_only_for_changes(tmp_path):
    events: list[dict] = []
    store = LocalFileOffsetStore(tmp_path, "cid", "g", on_event=events.append)
    store.update_offset(Q0, 3, increase_only=True)
    asyncio.run(store.persist_all({Q0}))
    asyncio.run(store.persist_all({Q0}))
    assert [(e["event"], e["offset"]) for e in events] == [("offset-commit", 3)]
    assert (events[0]["side"], events[0]["client_id"], events[0]["target_broker_id"]) == ("client", "cid", None)


def test_commit_pulled_offset_switch_commits_what_was_pulled_not_what_was_consumed(tmp_path):
    """Fault switch commit-pulled-offset: OFF, the stored offset is the consume path's (the lowest
    unconsumed); ON, it jumps to the end of what the pull cached, concurrent (increase_only) and
    orderly (overwrite) updates alike, until the queue is given up."""
    honest = LocalFileOffsetStore(tmp_path / "off", "cid", "g")
    broken = LocalFileOffsetStore(tmp_path / "on", "cid", "g", commit_pulled_offset=True)
    for store in (honest, broken):
        store.update_offset(Q0, 0, increase_only=False)  # the start offset, before any pull
        store.note_pulled(Q0, 32)  # messages 0..31 cached
        store.update_offset(Q0, 1, increase_only=True)  # concurrent: message 0 consumed
    assert honest.read_memory(Q0) == 1
    assert broken.read_memory(Q0) == 32
    broken.note_pulled(Q0, 40)
    broken.update_offset(Q0, 2, increase_only=False)  # orderly commit after message 1
    assert broken.read_memory(Q0) == 40
    asyncio.run(broken.persist_all({Q0}))
    assert read_offsets_file(broken.path) == {Q0: 40}  # what a restarted consumer resumes from
    broken.remove_offset(Q0)  # the queue is given up: what was pulled is forgotten with it
    broken.update_offset(Q0, 5, increase_only=False)
    assert broken.read_memory(Q0) == 5


# --- the remote store with a fake broker ------------------------------------------------------------

def remote(fakes, handler, route=None, events=None):
    inst = fakes.FakeInstance({"T": route or fakes.make_route(("broker-a", 3, 3, c.PERM_DEFAULT,
                                                               {0: "a0:1", 1: "a1:1"}))}, handler)
    store = RemoteBrokerOffsetStore(inst, "g", timeout_ms=1000, on_event=(events.append if events is not None else None),
                                    client_id="cid-1")
    return inst, store


def test_remote_read_from_store_asks_the_master_and_caches(fakes):
    def handler(addr, method, request):
        assert (addr, method, request.consumer_group, request.queue_id) == ("a0:1", "QueryConsumerOffset", "g", 1)
        return broker_pb2.QueryConsumerOffsetResponse(code=common_pb2.SUCCESS, offset=77)

    _, store = remote(fakes, handler)
    assert asyncio.run(store.read_offset(Q1, STORE)) == 77
    assert store.read_memory(Q1) == 77


def test_remote_read_maps_not_found_to_minus_1_and_transport_failures_to_minus_2(fakes):
    answers = iter([broker_pb2.QueryConsumerOffsetResponse(code=common_pb2.QUERY_NOT_FOUND),
                    TransportError("unreachable")])
    _, store = remote(fakes, lambda addr, method, request: next(answers))
    assert asyncio.run(store.read_offset(Q0, STORE)) == OFFSET_NOT_FOUND
    assert asyncio.run(store.read_offset(Q0, STORE)) == OFFSET_READ_FAILED


def test_remote_persist_all_sends_owned_offsets_and_forgets_the_rest(fakes):
    events: list[dict] = []
    inst, store = remote(fakes, lambda addr, method, request: broker_pb2.UpdateConsumerOffsetResponse(
        code=common_pb2.SUCCESS), events=events)
    store.update_offset(Q0, 4, increase_only=True)
    store.update_offset(Q1, 5, increase_only=True)
    asyncio.run(store.persist_all({Q0}))
    sent = [(a, m, r.queue_id, r.offset) for a, m, r in inst.calls]
    assert sent == [("a0:1", "UpdateConsumerOffset", 0, 4)]
    assert store.offsets() == {Q0: 4}
    asyncio.run(store.persist_all({Q0}))  # unchanged: sent again (oneway in RocketMQ), no new event
    assert len(inst.calls) == 2 and len(events) == 1
    decided = events[0]["decided_mono_ms"]  # the clock's reading when the update was sent
    assert isinstance(decided, int) and decided > 0
    assert events[0] | {"addr": None} == {"event": "offset-commit", "side": "client", "group": "g",
                                          "client_id": "cid-1", "topic": "T", "broker_name": "broker-a",
                                          "queue_id": 0, "offset": 4, "ok": True, "addr": None, "target_broker_id": 0,
                                          "decided_mono_ms": decided}


def test_remote_store_falls_back_to_a_slave_without_a_master(fakes):
    route = fakes.make_route(("broker-a", 3, 3, c.PERM_DEFAULT, {1: "a1:1"}))
    inst, store = remote(fakes, lambda addr, method, request: broker_pb2.UpdateConsumerOffsetResponse(
        code=common_pb2.SUCCESS), route=route)
    store.update_offset(Q2, 8, increase_only=True)
    asyncio.run(store.persist(Q2))
    assert [a for a, _, _ in inst.calls] == ["a1:1"]


def test_remote_persist_failures_are_reported_not_raised(fakes):
    events: list[dict] = []
    _, store = remote(fakes, lambda addr, method, request: TransportError("down"), events=events)
    store.update_offset(Q0, 4, increase_only=True)
    asyncio.run(store.persist_all({Q0}))
    assert events[0]["ok"] is False and "down" in events[0]["error"]


def test_an_orderly_queue_commits_only_while_its_lock_is_valid(fakes):
    """A consumer resumed from a pause past its lease commits nothing for that queue (persist or
    a single persist) and keeps the offset; once the queue is relocked it commits again."""
    clock = FakeClock(start_ms=1_000_000)
    state = ConsumerState(group="g", message_model=MessageModel.CLUSTERING, clock=clock,
                          client_lock_lease_ms=Timing().client_lock_lease_ms, orderly=True)
    pq = state.process_queue_table[Q0] = ProcessQueue(now_ms=clock.monotonic_ms())
    pq.locked = True
    inst = fakes.FakeInstance({"T": fakes.make_route(("broker-a", 3, 3, c.PERM_DEFAULT, {0: "a0:1"}))},
                              lambda addr, method, request: broker_pb2.UpdateConsumerOffsetResponse(
                                  code=common_pb2.SUCCESS))
    store = RemoteBrokerOffsetStore(inst, "g", timeout_ms=1000, may_commit=state.may_commit)
    store.update_offset(Q0, 84, increase_only=False)
    clock.advance_ms(Timing().client_lock_lease_ms + 1)  # the pause: the lease ran out meanwhile
    asyncio.run(store.persist_all(state.process_queue_table))
    asyncio.run(store.persist(Q0))
    assert inst.calls == [] and store.skipped_commits == 2
    assert store.read_memory(Q0) == 84  # kept, not forgotten
    pq.last_lock_timestamp_ms = clock.monotonic_ms()  # relocked
    asyncio.run(store.persist_all(state.process_queue_table))
    assert [(m, r.queue_id, r.offset) for _, m, r in inst.calls] == [("UpdateConsumerOffset", 0, 84)]
