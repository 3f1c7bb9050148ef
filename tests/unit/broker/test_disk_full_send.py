# ruff: noqa: F811  (pytest fixtures imported from test_disk_full, then named as arguments)
"""A broker on a full disk answers sends SERVICE_NOT_AVAILABLE (14) with RocketMQ's disk-full
remark, on the handler and in the remoting answer; reads go on; the client's error names it.
Consumer offsets the disk refused to persist are kept and written once there is room."""

from __future__ import annotations

import asyncio
import os

import pytest

from nodes.broker.ha_master import ReplicationState
from nodes.broker.offsets import ConsumerOffsetTable, OffsetPersistService
from nodes.broker.send import SendHandler, SendProcessor, SendRequest
from nodes.broker.topics import SubscriptionGroupManager, TopicConfigManager
from nodes.broker.transport.remoting_send import send_answer
from nodes.common import errors
from nodes.common.clock import FakeClock
from nodes.common.codes import ResponseCode
from nodes.common.config import BrokerConfig
from nodes.common.errors import StoreError
from nodes.remoting.command import RemotingCommand
from nodes.store.message_store import MessageStore
from nodes.store.metadata import MetadataStore
from tests.unit.store.test_disk_full import TINY, fill, tmpfs  # noqa: F401  (tmpfs is a fixture)

pytestmark = pytest.mark.requires(os.geteuid() == 0, "mounting a tmpfs needs root: run as root")


async def _no_registration() -> None:
    return None


def _send(handler: SendHandler, body: bytes) -> object:
    return asyncio.run(handler.handle(SendRequest(topic="T", queue_id=0, messages=[(body, 0, {}, 0)],
                                                  default_topic_queue_nums=4)))


def test_a_full_disk_answers_14_with_the_disk_remark_and_sends_resume_after(tmpfs):
    fs = tmpfs(1024 * 1024)
    clock = FakeClock()
    store = MessageStore(fs / "store", TINY, clock=clock)
    store.open()
    try:
        config = BrokerConfig(namesrv_addrs=("127.0.0.1:1",), store=TINY)
        topics = TopicConfigManager(store.metadata, auto_create_enable=True, default_queue_nums=4, now_ms=0)
        processor = SendProcessor(config, store, topics, clock, groups=SubscriptionGroupManager(store.metadata, auto_create_enable=True))
        handler = SendHandler(processor, ReplicationState(clock), _no_registration)
        assert _send(handler, b"before").code == ResponseCode.SUCCESS
        filler = fill(fs, leave_bytes=48 * 1024)
        store.check_disk()  # the guard's periodic check
        refused = _send(handler, b"refused")
        assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE == 14
        assert "the broker's disk is full [CL: 0.9" in refused.remark and "INDEX: -1]" in refused.remark
        wire = send_answer(RemotingCommand(code=10, opaque=7), refused)
        assert (wire.code, wire.remark) == (14, refused.remark)
        assert store.max_queue_offset("T", 0) == 1 and store.get_messages("T", 0, 0, 1, None).record_sizes
        error = errors.for_code(refused.code.name, refused.remark)
        assert isinstance(error, errors.ServiceNotAvailableError) and error.retriable
        assert str(error).startswith("SERVICE_NOT_AVAILABLE (code 14): service not available now.")
        filler.unlink()
        store.check_disk()
        assert _send(handler, b"after").code == ResponseCode.SUCCESS
    finally:
        store.close()


def test_offsets_a_full_disk_refused_to_persist_stay_dirty_and_are_written_later(tmpfs):
    fs = tmpfs(1024 * 1024)
    metadata = MetadataStore(fs / "metadata")
    try:
        table = ConsumerOffsetTable(metadata)
        for i in range(5_000):
            table.commit(f"group-{i}", "T", 0, i)
        service = OffsetPersistService(table, 1_000, on_crash=lambda exc: pytest.fail(f"crashed: {exc}"))
        assert StoreError in service.expected_errors
        filler = fill(fs)
        with pytest.raises(StoreError):
            asyncio.run(service.tick())
        assert metadata.get_all("consumer_offsets") == {}
        filler.unlink()
        asyncio.run(service.tick())  # the entries were kept dirty: all of them are written now
        assert len(metadata.get_all("consumer_offsets")) == 5_000
    finally:
        metadata.close()


def test_a_group_auto_created_on_a_full_disk_is_used_at_once_and_written_once_there_is_room(tmpfs):
    # a consumer's first pull auto-creates its group: a full disk must not fail that pull
    fs = tmpfs(1024 * 1024)
    metadata = MetadataStore(fs / "metadata")
    try:
        groups = SubscriptionGroupManager(metadata, auto_create_enable=True)
        filler = fill(fs)
        assert groups.find("readers").group_name == "readers"
        assert groups.find("readers") is groups.groups["readers"]  # no write yet, still served
        assert "readers" not in metadata.get_all("subscription_groups")
        filler.unlink()
        groups.find("readers")  # the next lookup writes it
        assert "readers" in metadata.get_all("subscription_groups")
    finally:
        metadata.close()
