"""The POP engine over a real store: pop and ack, revive, change-invisible, the DLQ, long polling,
two kinds of groups on one topic. Real time, with the revive interval at RocketMQ's 1 s × 0.05."""

from __future__ import annotations

import asyncio
import time

import pytest

from nodes.broker.offsets import ConsumerOffsetTable
from nodes.broker.pop import PopCode, ReceiptHandle
from nodes.broker.pop.moves import pop_retry_topic
from nodes.common import constants as c
from tests.support.timing import slack_ms

from .rig import BROKER, REVIVE_MS, PopRig

G = "g"


@pytest.fixture
def rig(tmp_path):
    opened = PopRig(tmp_path)
    opened.topic("T", queues=2)
    opened.group(G)
    yield opened
    opened.close()


def test_pop_hands_out_everything_a_5x_answer_needs_and_ack_settles_it(rig):
    rig.put("T", 0, b"a", TAGS="red", KEYS="k1", UNIQ_KEY="ID-A")
    rig.put("T", 1, b"b", TAGS="blue")

    async def scenario():
        popped = await rig.engine.pop(group=G, topic="T", max_nums=32, invisible_ms=60_000, client_id="c1")
        assert popped.code is PopCode.OK
        by_body = {m.body: m for m in popped.messages}
        assert set(by_body) == {b"a", b"b"}
        a = by_body[b"a"]
        assert (a.topic, a.queue_topic, a.broker_name, a.queue_id, a.queue_offset) == ("T", "T", BROKER, 0, 0)
        assert (a.tags, a.keys, a.msg_id, a.delivery_attempt, a.reconsume_times) == ("red", "k1", "ID-A", 1, 0)
        assert a.born_timestamp_ms == 1 and a.store_timestamp_ms > 0 and a.phys_offset == 0
        handle = ReceiptHandle.parse(a.receipt_handle)
        assert (handle.group, handle.queue_topic, handle.queue_id, handle.queue_offset) == (G, "T", 0, 0)
        assert handle.deadline_wall_ms == a.invisible_deadline_wall_ms
        # nothing more to hand out: both are invisible, the offsets moved on
        again = await rig.engine.pop(group=G, topic="T", max_nums=32, invisible_ms=60_000)
        assert again.code is PopCode.NOT_FOUND
        for message in popped.messages:
            assert (await rig.engine.ack(G, "T", message.receipt_handle)).code is PopCode.OK
            assert (await rig.engine.ack(G, "T", message.receipt_handle)).code is PopCode.OK  # idempotent
        assert not rig.engine.state.inflight
        garbage = await rig.engine.ack(G, "T", "not a handle")
        assert garbage.code is PopCode.ILLEGAL_ARGUMENT
        other_group = await rig.engine.ack("other", "T", a.receipt_handle)
        assert other_group.code is PopCode.ILLEGAL_ARGUMENT
    rig.run(scenario)
    pops = rig.journal("pop")
    assert sorted((p["queue_id"], p["queue_offset"], p["attempt"]) for p in pops) == [(0, 0, 1), (1, 0, 1)]
    assert [a["status"] for a in rig.journal("pop-ack")] == ["ok", "ok"]  # a repeated ack is not journalled again


def test_tag_filter_skips_other_tags_for_good(rig):
    rig.put("T", 0, b"x", TAGS="blue")
    rig.put("T", 0, b"y", TAGS="red")

    async def scenario():
        popped = await rig.engine.pop(group=G, topic="T", max_nums=32, invisible_ms=60_000, tag_expression="red")
        assert [m.body for m in popped.messages] == [b"y"]
        assert (await rig.engine.pop(group=G, topic="T", max_nums=32, invisible_ms=60_000)).code is PopCode.NOT_FOUND
    rig.run(scenario)


def test_an_unacked_message_comes_back_after_its_deadline_with_attempt_2_and_a_new_handle(rig):
    rig.put("T", 0, b"late", UNIQ_KEY="ID-L")
    invisible_ms = 300

    async def scenario():
        first = (await rig.engine.pop(group=G, topic="T", max_nums=1, invisible_ms=invisible_ms)).messages[0]
        deadline_ms = first.invisible_deadline_wall_ms
        again = await rig.engine.pop(group=G, topic="T", max_nums=1, invisible_ms=60_000,
                                     poll_timeout_ms=invisible_ms + REVIVE_MS + slack_ms())
        arrived_ms = time.time() * 1000
        return first, deadline_ms, again, arrived_ms

    first, deadline_ms, again, arrived_ms = rig.run(scenario)
    assert again.code is PopCode.OK
    revived = again.messages[0]
    assert arrived_ms >= deadline_ms  # never before its deadline
    assert arrived_ms <= deadline_ms + REVIVE_MS + slack_ms()
    assert (revived.body, revived.msg_id, revived.topic) == (b"late", "ID-L", "T")
    assert revived.queue_topic == pop_retry_topic(G, "T")
    assert (revived.delivery_attempt, revived.reconsume_times) == (2, 1)
    assert revived.receipt_handle != first.receipt_handle
    [event] = rig.journal("pop-revive")
    assert event["deadline_wall_ms"] == deadline_ms and event["wall_ms"] >= deadline_ms
    assert event["wall_ms"] <= deadline_ms + REVIVE_MS + slack_ms()

    async def acks():
        stale = await rig.engine.ack(G, "T", first.receipt_handle)
        current = await rig.engine.ack(G, "T", revived.receipt_handle)
        return stale, current
    stale, current = rig.run(acks)
    assert stale.code is PopCode.INVALID_RECEIPT_HANDLE and "expired" in stale.remark
    assert current.code is PopCode.OK


def test_change_invisible_gives_a_new_handle_and_moves_the_deadline(rig):
    rig.put("T", 0, b"slow")

    async def scenario():
        first = (await rig.engine.pop(group=G, topic="T", max_nums=1, invisible_ms=500)).messages[0]
        changed = await rig.engine.change_invisible(G, "T", first.receipt_handle, 60_000)
        assert changed.code is PopCode.OK and changed.receipt_handle != first.receipt_handle
        # past the first deadline and several revive passes: nothing comes back
        nothing = await rig.engine.pop(group=G, topic="T", max_nums=1, invisible_ms=60_000, poll_timeout_ms=800)
        assert nothing.code is PopCode.NOT_FOUND
        stale = await rig.engine.ack(G, "T", first.receipt_handle)
        assert stale.code is PopCode.INVALID_RECEIPT_HANDLE and "superseded" in stale.remark
        # back to visible at once: revived on the next pass, the attempt counted once
        now = await rig.engine.change_invisible(G, "T", changed.receipt_handle, 0)
        assert now.code is PopCode.OK
        back = await rig.engine.pop(group=G, topic="T", max_nums=1, invisible_ms=60_000, poll_timeout_ms=slack_ms())
        assert back.code is PopCode.OK and back.messages[0].delivery_attempt == 2
        assert (await rig.engine.ack(G, "T", back.messages[0].receipt_handle)).code is PopCode.OK
    rig.run(scenario)
    [change, _] = rig.journal("pop-change-invisible")
    assert change["invisible_ms"] == 60_000 and change["new_generation"] > change["generation"]


def test_after_max_attempts_the_message_goes_to_the_dlq(rig):
    rig.group(G, retry_max_times=2)  # 3 attempts
    rig.put("T", 0, b"poison", UNIQ_KEY="ID-P")

    async def scenario():
        attempts = []
        for _ in range(3):
            popped = await rig.engine.pop(group=G, topic="T", max_nums=1, invisible_ms=100,
                                          poll_timeout_ms=100 + REVIVE_MS + slack_ms())
            attempts.append(popped.messages[0].delivery_attempt)
        give_up = time.monotonic() + (100 + REVIVE_MS + slack_ms()) / 1000
        while rig.engine.state.inflight and time.monotonic() < give_up:
            await asyncio.sleep(REVIVE_MS / 1000)
        assert not rig.engine.state.inflight
        fourth = await rig.engine.pop(group=G, topic="T", max_nums=1, invisible_ms=100, poll_timeout_ms=3 * REVIVE_MS)
        assert fourth.code is PopCode.NOT_FOUND
        return attempts

    assert rig.run(scenario) == [1, 2, 3]
    dlq = f"{c.DLQ_GROUP_TOPIC_PREFIX}{G}"
    assert rig.bodies(dlq) == [b"poison"]
    [dead] = rig.journal("pop-dlq")
    assert (dead["reason"], dead["attempt"], dead["to_topic"]) == ("max-attempts", 3, dlq)
    record = rig.store.lookup_message(*rig.store.queue_unit(dlq, 0, 0)[:2])
    assert record.properties[c.PROPERTY_DLQ_ORIGIN_TOPIC] == "T" and record.msg_id == "ID-P"


def test_forward_to_dlq_settles_the_handle_at_once(rig):
    rig.put("T", 0, b"bad")

    async def scenario():
        message = (await rig.engine.pop(group=G, topic="T", max_nums=1, invisible_ms=60_000)).messages[0]
        assert (await rig.engine.forward_to_dlq(G, "T", message.receipt_handle)).code is PopCode.OK
        assert (await rig.engine.ack(G, "T", message.receipt_handle)).code is PopCode.OK  # already settled
        assert not rig.engine.state.inflight
    rig.run(scenario)
    assert rig.bodies(f"{c.DLQ_GROUP_TOPIC_PREFIX}{G}") == [b"bad"]
    assert rig.journal("pop-dlq")[0]["reason"] == "client"


def test_a_long_poll_is_woken_by_an_arrival(rig):
    poll_ms = 10_000

    async def scenario():
        waiting = asyncio.create_task(rig.engine.pop(group=G, topic="T", max_nums=4, invisible_ms=60_000,
                                                     poll_timeout_ms=poll_ms))
        await asyncio.sleep(0.2)
        assert not waiting.done() and rig.engine.waiters.count() == 1
        started = time.monotonic()
        rig.put("T", 1, b"news")
        popped = await waiting
        return popped, time.monotonic() - started

    popped, waited_s = rig.run(scenario, revive=False)
    assert popped.code is PopCode.OK and [m.body for m in popped.messages] == [b"news"]
    assert waited_s < poll_ms / 1000 / 2  # woken by the arrival, not by the end of the poll


def test_a_pull_group_and_a_pop_group_share_a_topic_without_touching_each_others_offsets(rig):
    for body in (b"0", b"1", b"2"):
        rig.put("T", 0, body)
    pull_offsets = ConsumerOffsetTable(rig.store.metadata)
    pull_offsets.commit("pull-g", "T", 0, 2)
    pull_offsets.persist()

    async def scenario():
        popped = await rig.engine.pop(group="pop-g", topic="T", max_nums=32, invisible_ms=60_000)
        for message in popped.messages:
            await rig.engine.ack("pop-g", "T", message.receipt_handle)
        return [m.body for m in popped.messages]

    assert rig.run(scenario) == [b"0", b"1", b"2"]  # a young queue: the pop group starts at its beginning
    assert ConsumerOffsetTable(rig.store.metadata).offsets == {("T", "pull-g"): {0: 2}}
    assert rig.engine.state.offsets[("pop-g", "T", 0)] == 3


def test_a_slave_refuses_pops(rig):
    rig.engine.is_master = False

    async def scenario():
        return await rig.engine.pop(group=G, topic="T", max_nums=1, invisible_ms=1_000)
    assert rig.run(scenario, revive=False).code is PopCode.NOT_MASTER


def test_two_groups_whose_retry_topics_share_a_name_each_get_only_their_own_retries(rig):
    # group g with topic X_T and group g_X with topic T both revive into %RETRY%g_X_T
    rig.topic("X_T")
    rig.group("g_X")
    rig.put("X_T", 0, b"for g")
    rig.put("T", 0, b"for g_X")

    async def scenario():
        for group, topic in (("g", "X_T"), ("g_X", "T")):
            assert (await rig.engine.pop(group=group, topic=topic, max_nums=1, invisible_ms=100)).code is PopCode.OK
        back = {}
        for group, topic in (("g", "X_T"), ("g_X", "T")):
            popped = await rig.engine.pop(group=group, topic=topic, max_nums=32, invisible_ms=60_000,
                                          poll_timeout_ms=100 + REVIVE_MS + slack_ms())
            back[group] = [(m.body, m.queue_topic, m.delivery_attempt) for m in popped.messages]
        return back

    assert rig.run(scenario) == {"g": [(b"for g", "%RETRY%g_X_T", 2)], "g_X": [(b"for g_X", "%RETRY%g_X_T", 2)]}


def test_a_pop_past_the_held_limit_is_answered_polling_full(rig, monkeypatch):
    monkeypatch.setattr(c, "POP_POLLING_MAX", 2)

    async def scenario():
        held = [asyncio.create_task(rig.engine.pop(group=G, topic="T", max_nums=1, invisible_ms=60_000,
                                                   poll_timeout_ms=10_000)) for _ in range(2)]
        await asyncio.sleep(0.2)
        full = await rig.engine.pop(group=G, topic="T", max_nums=1, invisible_ms=60_000, poll_timeout_ms=10_000)
        rig.put("T", 0, b"one")
        rig.put("T", 1, b"two")
        answers = await asyncio.gather(*held)
        return full, answers

    full, answers = rig.run(scenario, revive=False)
    assert full.code is PopCode.POLLING_FULL
    assert sorted(a.messages[0].body for a in answers) == [b"one", b"two"]
