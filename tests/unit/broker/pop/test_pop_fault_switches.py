"""The POP engine's selftest switches (constants.BROKER_FAULT_SWITCHES) each break exactly the rule
their POP check judges, and the pop-ack line names the handle an ack was made with."""

from __future__ import annotations

import asyncio

import pytest

from nodes.broker.pop import PopCode
from nodes.common import constants as c

from .rig import REVIVE_MS, PopRig

G = "g"


def _rig(tmp_path, *switches: str, fifo: bool = False) -> PopRig:
    rig = PopRig(tmp_path, fault_switches=frozenset(switches))
    rig.topic("T", queues=1)
    rig.group(G, consume_message_orderly=fifo)
    for i in range(4):
        rig.put("T", 0, f"m{i}".encode())
    return rig


async def _pop(rig: PopRig, max_nums: int, invisible_ms: int, attempt_id: str = ""):
    return await rig.engine.pop(group=G, topic="T", max_nums=max_nums, invisible_ms=invisible_ms,
                                attempt_id=attempt_id)


@pytest.mark.parametrize("switched", [False, True])
def test_never_revive_leaves_an_expired_hand_out_in_flight(tmp_path, switched):
    rig = _rig(tmp_path, *([c.FAULT_POP_NEVER_REVIVE] if switched else []))

    async def scenario():
        assert (await _pop(rig, 1, invisible_ms=100)).code is PopCode.OK
        await asyncio.sleep((100 + 6 * REVIVE_MS) / 1000)
    rig.run(scenario)
    assert len(rig.journal("pop-revive")) == (0 if switched else 1)
    assert len(rig.engine.state.inflight) == (1 if switched else 0)
    rig.close()


@pytest.mark.parametrize("switched", [False, True])
def test_accept_stale_handle_settles_an_expired_and_a_superseded_handle(tmp_path, switched):
    rig = _rig(tmp_path, *([c.FAULT_POP_ACCEPT_STALE_HANDLE] if switched else []))

    async def scenario():
        popped = await _pop(rig, 2, invisible_ms=100)
        expired, changed = popped.messages
        renewed = await rig.engine.change_invisible(G, "T", changed.receipt_handle, 60_000)
        assert renewed.code is PopCode.OK
        await asyncio.sleep(0.15)
        return [(await rig.engine.ack(G, "T", m.receipt_handle)).code for m in (expired, changed)]
    codes = rig.run(scenario, revive=False)
    acks = [a for a in rig.journal("pop-ack") if a["status"] == "ok"]
    if switched:
        assert codes == [PopCode.OK, PopCode.OK]
        # the journal tells the stale handle from the entry it settled
        superseded = next(a for a in acks if a["queue_offset"] == 1)
        assert superseded["handle_generation"] < superseded["generation"]
        expired_ack = next(a for a in acks if a["queue_offset"] == 0)
        assert expired_ack["handle_deadline_wall_ms"] < expired_ack["wall_ms"]
    else:
        assert codes == [PopCode.INVALID_RECEIPT_HANDLE, PopCode.INVALID_RECEIPT_HANDLE] and not acks
    rig.close()


@pytest.mark.parametrize("switched", [False, True])
def test_accept_stale_handle_answers_ok_for_a_revived_message(tmp_path, switched):
    rig = _rig(tmp_path, *([c.FAULT_POP_ACCEPT_STALE_HANDLE] if switched else []))

    async def scenario():
        popped = await _pop(rig, 1, invisible_ms=100)
        await asyncio.sleep((100 + 6 * REVIVE_MS) / 1000)  # expired and revived
        return (await rig.engine.ack(G, "T", popped.messages[0].receipt_handle)).code
    code = rig.run(scenario)
    assert len(rig.journal("pop-revive")) == 1
    assert code is (PopCode.OK if switched else PopCode.INVALID_RECEIPT_HANDLE)
    rig.close()


def test_an_ack_journals_the_handle_it_named(tmp_path):
    rig = _rig(tmp_path)

    async def scenario():
        popped = await _pop(rig, 1, invisible_ms=60_000)
        changed = await rig.engine.change_invisible(G, "T", popped.messages[0].receipt_handle, 30_000)
        assert (await rig.engine.ack(G, "T", changed.receipt_handle)).code is PopCode.OK
        return changed
    changed = rig.run(scenario, revive=False)
    (ack,) = rig.journal("pop-ack")
    assert ack["handle_generation"] == ack["generation"]
    assert ack["handle_deadline_wall_ms"] == changed.invisible_deadline_wall_ms
    rig.close()


@pytest.mark.parametrize("switched", [False, True])
def test_fifo_no_block_hands_out_a_second_batch_while_the_first_is_invisible(tmp_path, switched):
    rig = _rig(tmp_path, *([c.FAULT_POP_FIFO_NO_BLOCK] if switched else []), fifo=True)

    async def scenario():
        first = await _pop(rig, 2, invisible_ms=60_000, attempt_id="a1")
        second = await _pop(rig, 2, invisible_ms=60_000, attempt_id="a2")
        return first, second
    first, second = rig.run(scenario, revive=False)
    assert [m.queue_offset for m in first.messages] == [0, 1]
    if switched:
        assert [m.queue_offset for m in second.messages] == [2, 3]
    else:
        assert second.code is PopCode.NOT_FOUND
    holders = rig.engine.fifo_holders()
    assert [(h["queue_id"], h["client_id"]) for h in holders] == [(0, "")]
    assert 0 < holders[0]["lease_left_ms"] <= 60_000
    rig.close()
