"""SYNC_FLUSH on the send path: a send is answered after the commitlog fsync through its record,
FLUSH_DISK_TIMEOUT when the fsync takes longer than store.sync_flush_timeout_ms (the message
stays stored), and the sync-flush-ack-early switch answering before any fsync."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
from pathlib import Path

import pytest

from nodes.broker.ha_master import ReplicationState
from nodes.broker.send import SendHandler, SendProcessor, SendRequest
from nodes.broker.topics import TopicConfigManager
from nodes.broker.transport.convert import send_response_to_pb
from nodes.broker.transport.remoting_send import send_answer
from nodes.common import constants as c
from nodes.common.clock import FakeClock
from nodes.common.codes import ResponseCode
from nodes.common.config import BrokerConfig
from nodes.remoting.command import RemotingCommand
from nodes.store.message_store import MessageStore
from proto import common_pb2

from .conftest import SMALL


async def _no_registration() -> None:
    return None


@pytest.fixture
def sync_store(tmp_path: Path):
    store = MessageStore(tmp_path / "store", dataclasses.replace(SMALL, flush_disk_type="SYNC_FLUSH",
                                                                 sync_flush_timeout_ms=200), clock=FakeClock())
    store.open()
    yield store
    store.close()


def _handler(store: MessageStore, *switches: str) -> SendHandler:
    config = BrokerConfig(namesrv_addrs=("127.0.0.1:1",), store=store.config, fault_switches=switches)
    topics = TopicConfigManager(store.metadata, auto_create_enable=True, default_queue_nums=4, now_ms=0)
    return SendHandler(SendProcessor(config, store, topics, FakeClock()), ReplicationState(FakeClock()),
                       _no_registration)


def _send(handler: SendHandler, body: bytes = b"x"):
    return asyncio.run(handler.handle(SendRequest(topic="T", queue_id=0, messages=[(body, 0, {}, 0)],
                                                  default_topic_queue_nums=4)))


def _flushed_commitlog(store: MessageStore) -> int:
    return json.loads((store.root / c.FLUSHED_POSITIONS_FILE).read_text())["commitlog"]


def test_a_sync_flush_send_is_answered_after_the_fsync_through_its_record(sync_store):
    handler = _handler(sync_store)
    for i in range(5):
        response = _send(handler, b"m%d" % i)
        assert response.code == ResponseCode.SUCCESS
        last = response.appended[-1]
        assert _flushed_commitlog(sync_store) >= last.phys_offset + last.size


def test_a_slow_fsync_answers_flush_disk_timeout_and_the_message_stays(sync_store):
    release = threading.Event()
    group_commit = sync_store._files._group_commit
    real_flush = group_commit._flush_commitlog

    def slow_flush() -> int:
        release.wait(10)
        return real_flush()

    group_commit._flush_commitlog = slow_flush
    try:
        response = _send(_handler(sync_store), b"slow")
        assert response.code == ResponseCode.FLUSH_DISK_TIMEOUT
        assert len(response.appended) == 1  # stored and answered with its offset
        assert sync_store.get_messages("T", 0, 0, 32, None).record_sizes  # and pullable
    finally:
        release.set()


def test_the_ack_early_switch_answers_before_any_fsync(sync_store):
    before = _flushed_commitlog(sync_store)
    response = _send(_handler(sync_store, c.FAULT_SYNC_FLUSH_ACK_EARLY), b"early")
    assert response.code == ResponseCode.SUCCESS
    assert _flushed_commitlog(sync_store) == before < response.appended[0].phys_offset + response.appended[0].size


def test_async_flush_answers_without_waiting_for_an_fsync(tmp_path):
    store = MessageStore(tmp_path / "store", SMALL, clock=FakeClock())
    store.open()
    try:
        before = _flushed_commitlog(store)
        assert _send(_handler(store)).code == ResponseCode.SUCCESS
        assert _flushed_commitlog(store) == before
    finally:
        store.close()


def test_flush_disk_timeout_reaches_both_wires_with_where_the_message_went(sync_store):
    release = threading.Event()
    group_commit = sync_store._files._group_commit
    real_flush = group_commit._flush_commitlog
    group_commit._flush_commitlog = lambda: (release.wait(10), real_flush())[1]
    try:
        response = _send(_handler(sync_store), b"slow")
    finally:
        release.set()
    assert response.code == ResponseCode.FLUSH_DISK_TIMEOUT
    pb = send_response_to_pb(response)
    assert pb.code == common_pb2.FLUSH_DISK_TIMEOUT and pb.entries[0].queue_offset == 0
    answer = send_answer(RemotingCommand(code=10, opaque=3), response)
    assert answer.code == 10 and answer.ext["msgId"] == response.appended[0].offset_msg_id  # RocketMQ's 10
