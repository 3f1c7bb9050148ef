"""The broker's consumer offset table: a stored value that changes is an `offset-commit` event
(side broker) naming its source; a value written again unchanged records nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodes.broker.offsets import ConsumerOffsetTable
from nodes.common.events import EventLog
from nodes.store.metadata import MetadataStore


@pytest.fixture
def metadata(tmp_path: Path):
    md = MetadataStore(tmp_path / "metadata")
    yield md
    md.close()


def read_events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_client_commits_record_only_changes(tmp_path, metadata):
    path = tmp_path / "events.jsonl"
    table = ConsumerOffsetTable(metadata, events=EventLog(path, "broker-a-0"), broker_name="broker-a", broker_id=0)
    table.commit("g", "T", 2, 10)
    table.commit("g", "T", 2, 10)  # a piggy-backed commit repeating the stored value
    table.commit("g", "T", 2, 7, client_id="cid-1")  # moves back: still a change
    rows = read_events(path)
    assert [(r["offset"], r["previous_offset"], r.get("client_id")) for r in rows] == [
        (10, None, None), (7, 10, "cid-1")]
    first = rows[0]
    assert {k: first[k] for k in ("event", "side", "group", "topic", "broker_name", "broker_id", "queue_id",
                                  "source")} == {
        "event": "offset-commit", "side": "broker", "group": "g", "topic": "T", "broker_name": "broker-a",
        "broker_id": 0, "queue_id": 2, "source": "client"}
    assert isinstance(first["mono_ms"], int) and first["node"] == "broker-a-0"


def test_slave_sync_records_the_values_it_overwrites_as_slave_sync(tmp_path, metadata):
    path = tmp_path / "events.jsonl"
    table = ConsumerOffsetTable(metadata, events=EventLog(path, "broker-a-1"), broker_name="broker-a", broker_id=1)
    table.commit("g", "%RETRY%g", 0, 3)  # committed to the slave while the master was away
    table.commit("g", "T", 1, 5)
    table.put_all({"T@g": {"0": 4, "1": 5}, "%RETRY%g@g": {"0": 1}})
    rows = [r for r in read_events(path) if r["source"] == "slave-sync"]
    assert sorted((r["topic"], r["group"], r["queue_id"], r["offset"], r["previous_offset"]) for r in rows) == [
        ("%RETRY%g", "g", 0, 1, 3), ("T", "g", 0, 4, None)]  # T queue 1 kept its value: no event
    table.put_all({"T@g": {"0": 4, "1": 5}})
    assert len([r for r in read_events(path) if r["source"] == "slave-sync"]) == 2
    assert table.query("g", "%RETRY%g", 0) == 1


def test_a_commit_that_overtook_a_later_one_from_the_same_client_is_dropped(tmp_path, metadata):
    path = tmp_path / "events.jsonl"
    table = ConsumerOffsetTable(metadata, events=EventLog(path, "broker-a-0"), broker_name="broker-a", broker_id=0)
    table.commit("g", "T", 0, 31, client_id="c1", commit_seq=8)  # a pull's piggy-backed value, read second
    table.commit("g", "T", 0, 29, client_id="c1", commit_seq=7)  # the explicit update read first, arriving late
    assert table.query("g", "T", 0) == 31
    table.commit("g", "T", 0, 25, client_id="c2", commit_seq=1)  # another client may move it back (RocketMQ)
    table.commit("g", "T", 0, 20, client_id="c1", commit_seq=9)  # and so may c1, in its own order
    table.commit("g", "T", 0, 22)  # unordered commits (no sequence) are stored as they come
    assert table.query("g", "T", 0) == 22
    assert [r["offset"] for r in read_events(path)] == [31, 25, 20, 22]


def test_a_restarted_broker_records_the_offsets_it_starts_from(tmp_path, metadata):
    first = ConsumerOffsetTable(metadata)
    first.commit("g", "T", 1, 41)
    first.persist()
    path = tmp_path / "events.jsonl"
    ConsumerOffsetTable(metadata, events=EventLog(path, "broker-a-0"), broker_name="broker-a", broker_id=0)
    assert [(r["queue_id"], r["offset"], r["source"]) for r in read_events(path)] == [(1, 41, "load")]
