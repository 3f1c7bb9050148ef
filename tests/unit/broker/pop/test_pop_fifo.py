"""FIFO pops (a group with consume_message_orderly): a queue with an unacked, invisible batch is
blocked for the group; an expired batch is handed out again in place from its first unacked
message, counts going up; a retry with the batch's attempt id gets the same hand-outs."""

from __future__ import annotations

import asyncio
import time

import pytest

from nodes.broker.pop import PopCode
from nodes.common import constants as c
from tests.support.timing import slack_ms

from .rig import REVIVE_MS, PopRig

G = "fifo-g"
INVISIBLE_MS = 1_000  # acks right after a pop land well inside it, even on a loaded machine


@pytest.fixture
def rig(tmp_path):
    opened = PopRig(tmp_path)
    opened.topic("F", queues=1)
    opened.group(G, consume_message_orderly=True)
    for i in range(5):
        opened.put("F", 0, f"m{i}".encode())
    yield opened
    opened.close()


async def _pop(rig, attempt_id: str, max_nums: int = 3, poll_timeout_ms: int = 0, invisible_ms: int = INVISIBLE_MS):
    return await rig.engine.pop(group=G, topic="F", max_nums=max_nums, invisible_ms=invisible_ms,
                                poll_timeout_ms=poll_timeout_ms, attempt_id=attempt_id)


def _offsets(popped) -> list[int]:
    return [m.queue_offset for m in popped.messages]


def test_a_batch_blocks_its_queue_until_acked_and_an_attempt_id_retry_gets_the_same_handles(rig):
    async def scenario():
        first = await _pop(rig, "a1", invisible_ms=60_000)
        assert _offsets(first) == [0, 1, 2] and {m.delivery_attempt for m in first.messages} == {1}
        assert (await _pop(rig, "a2")).code is PopCode.NOT_FOUND  # blocked
        repeat = await _pop(rig, "a1")
        assert [m.receipt_handle for m in repeat.messages] == [m.receipt_handle for m in first.messages]
        for message in first.messages[:2]:
            assert (await rig.engine.ack(G, "F", message.receipt_handle)).code is PopCode.OK
        assert (await _pop(rig, "a3")).code is PopCode.NOT_FOUND  # one still unacked: still blocked
        # a pop waiting on the blocked queue is woken by the ack that unblocks it
        waiting = asyncio.create_task(_pop(rig, "a4", poll_timeout_ms=10_000))
        await asyncio.sleep(0.1)
        started = time.monotonic()
        assert (await rig.engine.ack(G, "F", first.messages[2].receipt_handle)).code is PopCode.OK
        second = await waiting
        assert _offsets(second) == [3, 4] and time.monotonic() - started < 5
    rig.run(scenario, revive=False)


def test_an_expired_batch_is_handed_out_again_in_place_in_order_with_counts_up(rig):
    async def scenario():
        first = await _pop(rig, "a1")
        # acked out of order: 0 and 2; 1 is the first unacked
        for message in (first.messages[0], first.messages[2]):
            assert (await rig.engine.ack(G, "F", message.receipt_handle)).code is PopCode.OK
        again = await _pop(rig, "a2", poll_timeout_ms=INVISIBLE_MS + REVIVE_MS + slack_ms())
        return first, again

    first, again = rig.run(scenario)
    assert again.code is PopCode.OK
    assert _offsets(again) == [1, 2, 3]  # from the first unacked, everything after it again, in order
    assert [m.delivery_attempt for m in again.messages] == [2, 2, 1]
    assert again.messages[0].receipt_handle != first.messages[1].receipt_handle
    assert again.messages[0].queue_topic == "F"  # never through the retry topic
    assert not rig.topics.get(f"{c.RETRY_GROUP_TOPIC_PREFIX}{G}_F")
    assert min(m.invisible_deadline_wall_ms for m in first.messages) <= min(
        e["wall_ms"] for e in rig.journal("pop-revive"))
    assert [e["queue_offset"] for e in rig.journal("pop-revive")] == [1]
    assert all(e["in_place"] for e in rig.journal("pop-revive"))

    async def stale():
        return await rig.engine.ack(G, "F", first.messages[1].receipt_handle)
    assert rig.run(stale, revive=False).code is PopCode.INVALID_RECEIPT_HANDLE


def test_a_fifo_message_handed_out_max_attempts_times_goes_to_the_dlq_and_the_queue_moves_on(rig):
    rig.group(G, consume_message_orderly=True, retry_max_times=1)  # 2 attempts

    async def scenario():
        attempts = []
        for attempt_id in ("a1", "a2"):
            popped = await _pop(rig, attempt_id, max_nums=1, poll_timeout_ms=INVISIBLE_MS + REVIVE_MS + slack_ms())
            attempts.append((popped.messages[0].queue_offset, popped.messages[0].delivery_attempt))
        third = await _pop(rig, "a3", max_nums=1, poll_timeout_ms=INVISIBLE_MS + REVIVE_MS + slack_ms())
        attempts.append((third.messages[0].queue_offset, third.messages[0].delivery_attempt))
        return attempts

    assert rig.run(scenario) == [(0, 1), (0, 2), (1, 1)]
    assert rig.bodies(f"{c.DLQ_GROUP_TOPIC_PREFIX}{G}") == [b"m0"]
    [dead] = rig.journal("pop-dlq")
    assert (dead["queue_offset"], dead["reason"], dead["attempt"]) == (0, "max-attempts", 2)
