"""OffsetResetHandler over a real store and offset table: the first message at or after the time
becomes each queue's offset, journaled as source `reset`, and every member's notification channel
gets one notice (resets are kept in order, never coalesced); refusals say what to do."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from nodes.broker.client_manage import ClientManageHandler, ResetNotice
from nodes.broker.consumers import ConsumerRegistration, ConsumerRegistry
from nodes.broker.offset_reset import RESET_TO_MAX, OffsetResetHandler, ResetOffsetRequest
from nodes.broker.offsets import SOURCE_RESET, ConsumerOffsetTable
from nodes.common.codes import ResponseCode
from nodes.common.types import TopicConfig


class _Journal:
    def __init__(self) -> None:
        self.events: list[dict] = []

    def record(self, event: dict) -> None:
        self.events.append(event)


async def _noop() -> None:
    return None


@pytest.fixture
def setup(broker):
    broker.topics.put(TopicConfig("T", 2, 2), broker.clock.wall_ms())
    times = []
    for i in range(6):  # queue 0 gets 0, 2, 4; queue 1 gets 1, 3, 5; 100 ms apart
        times.append(broker.clock.wall_ms())
        broker.put("T", i % 2, f"m{i}".encode())
        broker.clock.advance_ms(100)
    journal = _Journal()
    offsets = ConsumerOffsetTable(broker.store.metadata, events=journal, broker_name="broker-a", broker_id=0)
    registry = ConsumerRegistry(channel_expiry_ms=120_000)
    manage = ClientManageHandler(config=broker.config, registry=registry, groups=broker.groups, topics=broker.topics,
                                 clock=broker.clock, on_topics_changed=_noop)

    def handler(config=broker.config) -> OffsetResetHandler:
        return OffsetResetHandler(config=config, store=broker.store, topics=broker.topics, offsets=offsets,
                                  consumers=registry, client_manage=manage, master_addr=lambda: "10.0.0.1:10911")

    return broker, times, journal, offsets, registry, manage, handler


def test_a_reset_sets_the_first_message_at_or_after_the_time_and_tells_each_member(setup):
    broker, times, journal, offsets, registry, manage, handler = setup
    for queue_id in (0, 1):
        offsets.commit("G", "T", queue_id, 3)
    channel = manage.open_channel("c1", "peer")
    registry.register("c1", ConsumerRegistration("G"), broker.clock.monotonic_ms(), channel_key="peer")
    answer = handler().reset(ResetOffsetRequest("G", "T", times[3] - 50))  # between m2 and m3
    assert answer.code is ResponseCode.SUCCESS and answer.clients_told == ("c1",)
    assert [(q.queue_id, q.old_offset, q.new_offset) for q in answer.queues] == [(0, 3, 2), (1, 3, 1)]
    assert (offsets.query("G", "T", 0), offsets.query("G", "T", 1)) == (2, 1)
    resets = [e for e in journal.events if e.get("source") == SOURCE_RESET]
    assert [(e["queue_id"], e["previous_offset"], e["offset"]) for e in resets] == [(0, 3, 2), (1, 3, 1)]

    later = handler().reset(ResetOffsetRequest("G", "T", RESET_TO_MAX))  # the end of each queue
    assert [q.new_offset for q in later.queues] == [3, 3]
    notices = asyncio.run(channel.next_notices())
    assert notices == ["G",  # c1 joining: NOTIFY_CONSUMER_IDS_CHANGED
                       ResetNotice("G", "T", "broker-a", times[3] - 50, ((0, 2), (1, 1))),
                       ResetNotice("G", "T", "broker-a", RESET_TO_MAX, ((0, 3), (1, 3)))]


def test_an_offline_group_is_reset_and_unknown_names_and_slaves_are_refused(setup):
    broker, _, _, offsets, _, _, handler = setup
    offsets.commit("Offline", "T", 0, 3)
    answer = handler().reset(ResetOffsetRequest("Offline", "T", 0))
    assert answer.code is ResponseCode.SUCCESS and answer.clients_told == ()
    assert offsets.query("Offline", "T", 0) == 0

    nobody = handler().reset(ResetOffsetRequest("Nobody", "T", 0))
    assert nobody.code is ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
    assert "group list" in nobody.remark and offsets.query("Nobody", "T", 0) == -1
    missing = handler().reset(ResetOffsetRequest("Offline", "NoSuchTopic", 0))
    assert missing.code is ResponseCode.TOPIC_NOT_EXIST
    assert handler().reset(ResetOffsetRequest("Offline", "T", -2)).code is ResponseCode.INVALID_ARGUMENT
    slave = handler(dataclasses.replace(broker.config, broker_id=1)).reset(ResetOffsetRequest("Offline", "T", 0))
    assert slave.code is ResponseCode.NO_PERMISSION and "10.0.0.1:10911" in slave.remark
