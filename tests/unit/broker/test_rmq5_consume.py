"""RocketMQ 5's consumer calls over a real POP engine (a real store in a tmp dir): the proxy's
rules the rmq5 layer adds (the scaled invisible floor, the long-poll clamp, the batch cap, SQL
refused), the status each engine outcome becomes, auto-renew, the group's settings; and the
subscription group admin that makes a group FIFO."""

from __future__ import annotations

import asyncio

import pytest

from nodes.broker.group_admin import GroupAdminHandler, UpdateGroupRequest
from nodes.broker.rmq5.clients import CallContext, Rmq5ClientRegistry
from nodes.broker.rmq5.codes import Rmq5Code
from nodes.broker.rmq5.consume import PopHandlers, ReceiveRequest, Rmq5Consume, auto_renew_invisible_ms
from nodes.broker.rmq5.renew import AutoRenew
from nodes.broker.rmq5.settings import ServerSettings
from nodes.common import constants as c
from nodes.common.codes import ResponseCode

from .pop.rig import PopRig

CTX = CallContext(client_id="host@1@0@abc", language="PYTHON", version="5.1.2")
SCALE = 0.05
G = "g5"


@pytest.fixture
def rig(tmp_path):
    opened = PopRig(tmp_path)
    opened.topic("T", queues=2)
    opened.group(G)
    yield opened
    opened.close()


def _consume(rig: PopRig, scale: float = SCALE, renew: bool = False) -> Rmq5Consume:
    e = rig.engine
    registry = Rmq5ClientRegistry(rig.clock.monotonic_ms)
    auto = AutoRenew(e.handle_change_invisible, registry, rig.clock, time_scale=scale,
                     invisible_ms=auto_renew_invisible_ms(scale)) if renew else None
    return Rmq5Consume(registry, PopHandlers(e.handle_pop, e.handle_ack, e.handle_change_invisible,
                                             e.handle_forward_to_dlq), rig.groups, time_scale=scale, renew=auto)


def _req(**fields: object) -> ReceiveRequest:
    fields.setdefault("group", G)
    fields.setdefault("topic", "T")
    fields.setdefault("batch_size", 32)
    fields.setdefault("invisible_ms", 1_000)
    fields.setdefault("long_polling_ms", 0)
    return ReceiveRequest(**fields)  # type: ignore[arg-type]


def test_the_long_poll_is_clamped_to_the_scaled_5_to_20_s_and_ends_before_the_deadline(rig: PopRig) -> None:
    consume = _consume(rig)
    assert (consume.poll_min_ms, consume.poll_max_ms) == (250, 1_000)
    assert consume.poll_ms(1_000, 4_000) == 1_000
    assert consume.poll_ms(100, None) == 250
    assert consume.poll_ms(60_000, None) == 1_000
    assert consume.poll_ms(None, 4_000) == 1_000  # no long poll asked: the deadline's, clamped
    assert consume.poll_ms(1_000, c.RMQ5_RECEIVE_DEADLINE_MARGIN_MS + 100) == 100
    assert consume.poll_ms(1_000, 100) == 0  # lenient: never refused, just not held


def test_receive_refusals_and_the_scaled_invisible_floor(rig: PopRig) -> None:
    consume = _consume(rig)
    assert consume.invisible_min_ms == 500 and consume.auto_renew_invisible_ms == 3_000

    async def scenario() -> list[Rmq5Code]:
        answers = [await consume.receive(CTX, _req(invisible_ms=499)),
                   await consume.receive(CTX, _req(invisible_ms=None)),
                   await consume.receive(CTX, _req(invisible_ms=c.POP_INVISIBLE_MAX_MS + 1)),
                   await consume.receive(CTX, _req(filter_type="SQL", filter_expression="a > 1")),
                   await consume.receive(CTX, _req(batch_size=0)),
                   await consume.receive(CTX, _req(topic="Missing")),
                   await consume.receive(CTX, _req()),  # nothing there (and no settings ever came)
                   await consume.receive(CTX, _req(invisible_ms=500))]
        return [a.status.code for a in answers]
    assert rig.run(scenario) == [Rmq5Code.ILLEGAL_INVISIBLE_TIME] * 3 + [
        Rmq5Code.ILLEGAL_FILTER_EXPRESSION, Rmq5Code.BAD_REQUEST, Rmq5Code.TOPIC_NOT_FOUND,
        Rmq5Code.MESSAGE_NOT_FOUND, Rmq5Code.MESSAGE_NOT_FOUND]


def test_a_batch_is_capped_at_32_and_filtered_by_tag(rig: PopRig) -> None:
    for i in range(40):
        rig.put("T", i % 2, body=f"m{i}".encode(), TAGS="A" if i < 36 else "B")
    consume = _consume(rig)

    async def scenario() -> tuple[int, int, list[str]]:
        first = await consume.receive(CTX, _req(batch_size=100, filter_expression="A"))
        rest = await consume.receive(CTX, _req(batch_size=100, filter_expression="A"))
        tagged_b = await consume.receive(CTX, _req(group="g5b", filter_expression="B"))
        return len(first.messages), len(rest.messages), sorted(m.body.decode() for m in tagged_b.messages)
    assert rig.run(scenario) == (32, 4, ["m36", "m37", "m38", "m39"])


def test_ack_change_and_forward_answer_as_the_proxy_does(rig: PopRig) -> None:
    rig.put("T", 0, body=b"one")
    rig.put("T", 0, body=b"two")
    consume = _consume(rig)

    async def scenario() -> list[object]:
        got = (await consume.receive(CTX, _req())).messages
        one, two = sorted(got, key=lambda m: m.body)
        changed = await consume.change_invisible(CTX, G, "T", one.msg_id, one.receipt_handle, 5_000)
        stale = await consume.ack(CTX, G, "T", one.msg_id, one.receipt_handle)
        fresh = await consume.ack(CTX, G, "T", one.msg_id, changed.receipt_handle)
        again = await consume.ack(CTX, G, "T", one.msg_id, changed.receipt_handle)
        bad = await consume.change_invisible(CTX, G, "T", "m", "not a handle", 1_000)
        too_long = await consume.change_invisible(CTX, G, "T", "m", two.receipt_handle, c.POP_INVISIBLE_MAX_MS + 1)
        forwarded = await consume.forward_to_dlq(CTX, G, "T", two.msg_id, two.receipt_handle)
        return [changed.status.code, changed.receipt_handle != one.receipt_handle, stale.status.code,
                fresh.status.code, again.status.code, bad.status.code, bad.receipt_handle, too_long.status.code,
                too_long.receipt_handle == two.receipt_handle, forwarded.status.code]
    assert rig.run(scenario) == [Rmq5Code.OK, True, Rmq5Code.INVALID_RECEIPT_HANDLE, Rmq5Code.OK, Rmq5Code.OK,
                                 Rmq5Code.BAD_REQUEST, "not a handle", Rmq5Code.ILLEGAL_INVISIBLE_TIME, True,
                                 Rmq5Code.OK]
    assert rig.bodies(f"%DLQ%{G}") == [b"two"]


def test_auto_renew_keeps_a_message_invisible_and_the_client_s_handle_acks_it(rig: PopRig) -> None:
    rig.put("T", 0, body=b"slow")
    # scaled so a renewal falls due 300 ms before its deadline: a scan delayed past that (the
    # event loop starved on a loaded machine; 100 ms at scale 0.01 was too little) would let it lapse
    consume = _consume(rig, scale=0.03, renew=True)
    renew = consume.renew
    assert renew is not None and renew.invisible_ms == 1_800 and renew.ahead_ms == 300

    async def scenario() -> list[object]:
        got = (await consume.receive(CTX, _req(auto_renew=True, invisible_ms=None))).messages
        handle = got[0].receipt_handle
        held = renew.held(G, handle)
        assert held is not None and held.latest == handle
        renewed = 0
        for _ in range(70):  # 3.5 s, well past the pop's 1.8 s, scanning every 50 ms
            await asyncio.sleep(0.05)
            consume._registry.touch(CTX, "Heartbeat")  # the client is alive
            renewed += await renew.renew_due()
        other = await consume.receive(CTX, _req(group=G))  # still invisible to the group
        acked = await consume.ack(CTX, G, "T", got[0].msg_id, handle)  # the handle the client got
        return [renewed >= 2, held.latest != handle, other.status.code, acked.status.code, len(renew)]
    assert rig.run(scenario) == [True, True, Rmq5Code.MESSAGE_NOT_FOUND, Rmq5Code.OK, 0]
    assert rig.journal("pop-revive") == []


def test_a_terminated_client_s_renewed_messages_come_back_soon(rig: PopRig) -> None:
    rig.put("T", 0, body=b"held")
    consume = _consume(rig, scale=0.01, renew=True)

    async def scenario() -> tuple[int, list[int]]:
        got = (await consume.receive(CTX, _req(auto_renew=True, invisible_ms=None))).messages
        await consume.client_gone(CTX.client_id)  # released: visible again after 10 ms (1 s scaled)
        await asyncio.sleep(0.3)
        again = await consume.receive(CTX, _req(long_polling_ms=1_000))
        return len(got), [m.delivery_attempt for m in again.messages]
    assert rig.run(scenario) == (1, [2])
    assert consume.renew is not None and consume.renew.released == 1


def test_settings_carry_the_group_s_fifo_flag_and_max_attempts(rig: PopRig) -> None:
    rig.group("orderly", consume_message_orderly=True, retry_max_times=3)
    consume = _consume(rig)
    server = ServerSettings(max_body_bytes=1024)
    assert consume.subscription_settings("orderly", server) == ServerSettings(max_body_bytes=1024, fifo=True,
                                                                             consumer_max_attempts=4)
    assert consume.subscription_settings(G, server).fifo is False
    assert consume.subscription_settings("", server) == server


def test_group_update_sets_the_fifo_flag_and_retries_and_refuses_what_it_cannot_store(rig: PopRig) -> None:
    admin = GroupAdminHandler(rig.groups, is_master=True)
    made = admin.update_group(UpdateGroupRequest("new-group", consume_message_orderly=True))
    assert made.code is ResponseCode.SUCCESS and made.config is not None
    assert (made.config.consume_message_orderly, made.config.retry_max_times) == (True, c.GROUP_RETRY_MAX_TIMES)
    kept = admin.update_group(UpdateGroupRequest("new-group", retry_max_times=2))
    assert kept.config is not None and (kept.config.consume_message_orderly, kept.config.retry_max_times) == (True, 2)
    assert rig.groups.find("new-group") == kept.config
    assert admin.update_group(UpdateGroupRequest("bad group")).code is ResponseCode.INVALID_ARGUMENT
    assert admin.update_group(UpdateGroupRequest(G, retry_max_times=-1)).code is ResponseCode.INVALID_ARGUMENT
    slave = GroupAdminHandler(rig.groups, is_master=False).update_group(UpdateGroupRequest(G))
    assert slave.code is ResponseCode.NO_PERMISSION and "master" in slave.remark
