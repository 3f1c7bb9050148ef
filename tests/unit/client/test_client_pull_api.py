"""Pull responses to PullResults and the pull kernel's broker choice."""

from __future__ import annotations

import asyncio

import pytest

from nodes.client.pull_api import PullApi
from nodes.client.pull_decode import parse_subscription
from nodes.client.rpc.api import process_pull_response, pull_status_for_code
from nodes.common import constants as c
from nodes.common import errors
from nodes.common.types import MessageQueue, PullStatus
from nodes.store.record import MessageToStore, encode_record, iter_records
from proto import broker_pb2, common_pb2

MQ = MessageQueue("T", "broker-a", 1)


def records(*tags_list, start_offset=5, topic="T", body=b"payload"):
    """Concatenated records, one per entry of tags_list (None = no TAGS property)."""
    out, phys = [], 4096
    for i, tags in enumerate(tags_list):
        props = {c.PROPERTY_UNIQ_KEY: f"{i:032X}"}
        if tags is not None:
            props[c.PROPERTY_TAGS] = tags
        rec = encode_record(
            MessageToStore(topic=topic, queue_id=1, body=body + bytes([i]), flag=3, properties=props,
                           born_timestamp_ms=1000 + i, born_host=("10.0.0.1", 5), store_host=("10.0.0.2", 10911),
                           reconsume_times=i),
            queue_offset=start_offset + i, phys_offset=phys, store_timestamp_ms=2000 + i)
        out.append(rec)
        phys += len(rec)
    return b"".join(out)


def response(code=common_pb2.SUCCESS, recs=b"", **kw):
    kw.setdefault("next_begin_offset", 9)
    kw.setdefault("min_offset", 0)
    kw.setdefault("max_offset", 42)
    return broker_pb2.PullResponse(code=code, records=recs, record_count=0, **kw)


# --- code mapping -----------------------------------------------------------------------------
@pytest.mark.parametrize(("code", "status"), [
    (common_pb2.SUCCESS, PullStatus.FOUND),
    (common_pb2.PULL_NOT_FOUND, PullStatus.NO_NEW_MSG),
    (common_pb2.PULL_RETRY_IMMEDIATELY, PullStatus.NO_MATCHED_MSG),
    (common_pb2.PULL_OFFSET_MOVED, PullStatus.OFFSET_ILLEGAL),
])
def test_pull_codes_map_to_statuses(code, status):
    assert pull_status_for_code(code) is status


@pytest.mark.parametrize(("code", "exc"), [
    (common_pb2.SYSTEM_ERROR, errors.SystemError_),
    (common_pb2.SUBSCRIPTION_NOT_EXIST, errors.SubscriptionNotExistError),
    (common_pb2.SUBSCRIPTION_GROUP_NOT_EXIST, errors.SubscriptionGroupNotExistError),
    (common_pb2.TOPIC_NOT_EXIST, errors.TopicNotExistError),
    (common_pb2.SYSTEM_BUSY, errors.RemoteError),
])
def test_other_pull_codes_raise_their_remote_error(code, exc):
    with pytest.raises(exc) as info:
        process_pull_response(response(code, remark="why"), MQ, None)
    assert info.value.remark == "why"


def test_unknown_code_number_still_raises():
    with pytest.raises(errors.RemoteError, match="CODE_999"):
        pull_status_for_code(999)


# --- subscription expressions -----------------------------------------------------------------
@pytest.mark.parametrize(("expression", "tags"), [
    (None, None), ("", None), ("*", None), ("  *  ", None), ("||", None),
    ("a", frozenset({"a"})),
    (" a || b ||c", frozenset({"a", "b", "c"})),
    ("a||", frozenset({"a"})),
])
def test_parse_subscription(expression, tags):
    assert parse_subscription(expression) == tags


# --- decoding (each test runs the compiled decoder and the Python loop: the decode_impl fixture) ---
def test_decode_matches_store_codec_field_by_field(decode_impl):
    buf = records("a", None, "b")
    msgs = decode_impl(buf, broker_name="broker-a", min_offset=0, max_offset=42, tags=None)
    recs = list(iter_records(buf))
    assert len(msgs) == len(recs) == 3
    for m, r in zip(msgs, recs, strict=True):
        assert (m.topic, m.body, m.queue_id, m.queue_offset, m.commitlog_offset, m.reconsume_times,
                m.store_timestamp_ms, m.born_timestamp_ms, m.flag, m.store_size) == (
            r.topic, r.body, r.queue_id, r.queue_offset, r.phys_offset, r.reconsume_times,
            r.store_timestamp_ms, r.born_timestamp_ms, r.flag, r.total_size)
        assert m.offset_msg_id == r.offset_msg_id
        assert m.msg_id == r.msg_id == r.properties[c.PROPERTY_UNIQ_KEY]
        assert m.broker_name == "broker-a"
        assert type(m.body) is bytes


def test_decode_stamps_min_and_max_offset(decode_impl):
    (msg,) = decode_impl(records("a"), broker_name="b", min_offset=3, max_offset=77, tags=None)
    assert msg.properties[c.PROPERTY_MIN_OFFSET] == "3"
    assert msg.properties[c.PROPERTY_MAX_OFFSET] == "77"
    assert msg.tags == "a"


def test_msg_id_falls_back_to_offset_id_without_uniq_key(decode_impl):
    rec = encode_record(MessageToStore(topic="T", queue_id=0, body=b"x", store_host=("10.0.0.2", 10911)),
                        queue_offset=0, phys_offset=256, store_timestamp_ms=1)
    (msg,) = decode_impl(rec, broker_name="b", min_offset=0, max_offset=1, tags=None)
    assert msg.msg_id == msg.offset_msg_id == "0A00000200002A9F0000000000000100"


def test_tag_filter_is_exact_and_drops_untagged_messages(decode_impl):
    buf = records("a", None, "b", "c", "a ", "A")
    msgs = decode_impl(buf, broker_name="b", min_offset=0, max_offset=9, tags=frozenset({"a", "c"}))
    assert [m.tags for m in msgs] == ["a", "c"]
    assert [m.queue_offset for m in msgs] == [5, 8]


def test_decode_empty_buffer_is_empty(decode_impl):
    assert decode_impl(b"", broker_name="b", min_offset=0, max_offset=0, tags=None) == []


@pytest.mark.parametrize("damage", ["truncate", "magic", "trailing"])
def test_decode_corrupt_records_raise(decode_impl, damage):
    buf = bytearray(records("a", "b"))
    if damage == "truncate":
        buf = buf[:-5]
    elif damage == "magic":
        buf[4] ^= 0xFF
    else:
        buf += b"\x00\x00\x00"
    with pytest.raises(errors.CorruptRecordError):
        decode_impl(bytes(buf), broker_name="b", min_offset=0, max_offset=0, tags=None)


def test_found_response_becomes_pull_result_with_store_status_and_suggestion():
    resp = response(recs=records("a", "x"), remark="FOUND", suggest_which_broker_id=1)
    result = process_pull_response(resp, MQ, frozenset({"a"}))
    assert result.status is PullStatus.FOUND
    assert (result.next_begin_offset, result.min_offset, result.max_offset) == (9, 0, 42)
    assert [m.tags for m in result.messages] == ["a"]
    assert result.suggest_which_broker_id == 1
    assert result.store_status == "FOUND"


def test_found_with_every_message_filtered_stays_found_and_empty():
    result = process_pull_response(response(recs=records("x", "y")), MQ, frozenset({"a"}))
    assert result.status is PullStatus.FOUND and result.messages == []


def test_not_found_response_ignores_records_and_keeps_remark():
    result = process_pull_response(
        response(common_pb2.PULL_NOT_FOUND, recs=b"garbage", remark="OFFSET_OVERFLOW_ONE"), MQ, None)
    assert result.status is PullStatus.NO_NEW_MSG and result.messages == []
    assert result.store_status == "OFFSET_OVERFLOW_ONE"


# --- the kernel: which broker, which flags -------------------------------------------------------
def run_kernel(api, mq=MQ, **kw):
    kw.setdefault("suspend", False)
    kw.setdefault("suspend_timeout_ms", 0)
    kw.setdefault("timeout_ms", 1000)
    return api.pull_kernel(mq, kw.pop("expression", "*"), kw.pop("offset", 5), kw.pop("max_nums", 32), **kw)


def test_kernel_follows_the_brokers_suggestion_per_queue(fakes):
    suggestions = iter([1, 0, 0, 0])

    def handler(addr, method, fields):
        return response(common_pb2.PULL_NOT_FOUND, suggest_which_broker_id=next(suggestions))

    inst = fakes.FakeInstance({"T": fakes.two_broker_route()}, handler)
    api = PullApi(inst, "cg")

    async def scenario():
        await run_kernel(api)  # first pull: master
        await run_kernel(api)  # suggested 1: the slave
        await run_kernel(api)  # suggested 0 again: the master
        await run_kernel(api, mq=MessageQueue("T", "broker-a", 0))  # another queue has no memory yet

    asyncio.run(scenario())
    assert [addr for addr, _, _ in inst.calls] == ["a0:1", "a1:1", "a0:1", "a0:1"]


@pytest.mark.parametrize("switch_on", [False, True])
def test_fault_switch_ignore_pull_suggestion_always_asks_the_master(fakes, switch_on):
    """OFF: a suggestion of the slave (cold read) sends the next pull there. ON: it is recorded
    in the pull-route event but every pull still goes to the master."""
    inst = fakes.FakeInstance({"T": fakes.two_broker_route()},
                              lambda *_: response(common_pb2.PULL_NOT_FOUND, suggest_which_broker_id=1))
    events: list[dict] = []
    api = PullApi(inst, "cg", events.append, client_id="cid-7", ignore_pull_suggestion=switch_on)

    async def scenario():
        for _ in range(3):
            await run_kernel(api)

    asyncio.run(scenario())
    expected = ["a0:1", "a0:1", "a0:1"] if switch_on else ["a0:1", "a1:1", "a1:1"]
    assert [addr for addr, _, _ in inst.calls] == expected
    assert [(e["requested_broker_id"], e["suggest_which_broker_id"]) for e in events] == (
        [(0, 1)] * 3 if switch_on else [(0, 1), (1, 1), (1, 1)])


def test_pull_route_event_carries_the_contract_fields(fakes):
    inst = fakes.FakeInstance({"T": fakes.two_broker_route()},
                              lambda *_: response(common_pb2.PULL_NOT_FOUND, next_begin_offset=9))
    events: list[dict] = []
    asyncio.run(run_kernel(PullApi(inst, "cg", events.append, client_id="cid-7"), commit_offset_value=4))
    (event,) = events
    assert {k: event[k] for k in ("event", "group", "client_id", "topic", "broker_name", "queue_id", "queue_offset",
                                  "requested_broker_id", "broker_id", "commit_flag", "suggest_which_broker_id",
                                  "status", "next_begin_offset")} == {
        "event": "pull-route", "group": "cg", "client_id": "cid-7", "topic": "T", "broker_name": "broker-a",
        "queue_id": 1, "queue_offset": 5, "requested_broker_id": 0, "broker_id": 0, "commit_flag": True,
        "suggest_which_broker_id": 0, "status": "NO_NEW_MSG", "next_begin_offset": 9}


def test_kernel_sends_subscription_and_clears_commit_flag_on_slave(fakes):
    inst = fakes.FakeInstance({"T": fakes.two_broker_route()},
                              lambda *_: response(common_pb2.PULL_NOT_FOUND, suggest_which_broker_id=1))
    api = PullApi(inst, "cg")

    async def scenario():
        await run_kernel(api, expression="a || b", commit_offset_value=7, suspend=True, suspend_timeout_ms=15000)
        await run_kernel(api, commit_offset_value=7)

    asyncio.run(scenario())
    (_, _, to_master), (_, _, to_slave) = inst.calls
    assert to_master["has_subscription"] is True and to_master["subscription_expression"] == "a || b"
    assert to_master["commit_offset"] is True and to_master["commit_offset_value"] == 7
    assert to_master["suspend"] is True and to_master["suspend_timeout_ms"] == 15000
    assert (to_master["consumer_group"], to_master["topic"], to_master["queue_id"]) == ("cg", "T", 1)
    assert to_slave["commit_offset"] is False and to_slave["commit_offset_value"] == 0


def test_kernel_falls_back_to_slave_when_master_is_gone(fakes):
    route = fakes.make_route(("broker-a", 4, 4, c.PERM_DEFAULT, {1: "a1:1"}))
    inst = fakes.FakeInstance({"T": route}, lambda *_: response(common_pb2.PULL_NOT_FOUND))
    asyncio.run(run_kernel(PullApi(inst, "cg")))
    assert inst.calls[0][0] == "a1:1"


def test_kernel_unknown_topic_raises_route_not_found(fakes):
    inst = fakes.FakeInstance({}, lambda *_: pytest.fail("nothing should be sent"))
    with pytest.raises(errors.RouteNotFoundError, match="no route"):
        asyncio.run(run_kernel(PullApi(inst, "cg"), mq=MessageQueue("NOPE", "broker-a", 0)))


def test_kernel_error_code_does_not_update_suggestion(fakes):
    answers = iter([response(common_pb2.PULL_NOT_FOUND, suggest_which_broker_id=1),
                    response(common_pb2.SUBSCRIPTION_NOT_LATEST, suggest_which_broker_id=0)])
    inst = fakes.FakeInstance({"T": fakes.two_broker_route()}, lambda *_: next(answers))
    api = PullApi(inst, "cg")
    asyncio.run(run_kernel(api))
    with pytest.raises(errors.RemoteError, match="SUBSCRIPTION_NOT_LATEST"):
        asyncio.run(run_kernel(api))
    assert api.recalculate_pull_from_which_node(MQ) == 1

