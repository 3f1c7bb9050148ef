"""The broker's remoting adapter: every request code translated into the real handlers'
requests and their answers back into remoting answers, with constructed commands and a fake
connection (no sockets)."""

from __future__ import annotations

import asyncio
import json
import zlib
from dataclasses import dataclass, field

import pytest

from nodes.broker.client_manage import ClientManageHandler
from nodes.broker.consumers import ConsumerRegistry
from nodes.broker.ha_master import ReplicationState
from nodes.broker.offset_requests import OffsetRequestHandler
from nodes.broker.offsets import ConsumerOffsetTable
from nodes.broker.pull import PullProcessor
from nodes.broker.pull_hold import PullRequestHoldService
from nodes.broker.queue_locks import QueueLockHandler, QueueLockManager
from nodes.broker.request_table import RequestKind, RequestTable
from nodes.broker.send import SendHandler, SendProcessor
from nodes.broker.send_back import SendBackProcessor
from nodes.broker.transport import remoting_json
from nodes.broker.transport.remoting_adapter import BrokerRemotingAdapter
from nodes.common import constants as c
from nodes.common.config import BrokerConfig
from nodes.remoting.command import HeaderFieldError, RemotingCommand, RequestCode, encode_properties
from nodes.store import message_batch
from nodes.store.record import iter_records, offset_msg_id

TOPIC = "TopicTest"


@dataclass
class FakeChannel:
    channel_id: int
    peer: str = "127.0.0.1:40000"
    closed: bool = False
    oneway: list[tuple[int, dict[str, str]]] = field(default_factory=list)

    def send_oneway(self, code: int, ext: dict[str, str] | None = None, body: bytes = b"") -> None:
        self.oneway.append((code, dict(ext or {})))

    async def drain(self) -> None:
        pass


class Rig:
    """A broker's handlers over the unit-test store, wired as the controller wires them."""

    def __init__(self, broker, *, is_master: bool = True) -> None:
        self.b = broker
        config = BrokerConfig(namesrv_addrs=("127.0.0.1:1",), broker_role="ASYNC_MASTER" if is_master else "SLAVE",
                              broker_id=0 if is_master else 1)
        self.hold = PullRequestHoldService(broker.store, broker.clock, 1_000)
        broker.store.on_arrival = self.hold.notify_arrival
        offsets = ConsumerOffsetTable(broker.store.metadata)
        self.offsets = offsets
        registry = ConsumerRegistry(channel_expiry_ms=120_000)
        self.registry = registry

        async def nothing() -> None:
            pass

        table = RequestTable()
        send = SendProcessor(config, broker.store, broker.topics, broker.clock, groups=broker.groups)
        table.register(RequestKind.SEND_MESSAGE, SendHandler(send, ReplicationState(broker.clock), nothing).handle)
        pull = PullProcessor(config, broker.store, broker.topics, broker.groups, offsets, broker.clock, self.hold,
                             consumers=registry)
        table.register(RequestKind.PULL_MESSAGE, pull.open_session)
        handler = OffsetRequestHandler(broker.store, broker.topics, offsets)
        table.register(RequestKind.QUERY_CONSUMER_OFFSET, handler.query_consumer_offset)
        table.register(RequestKind.UPDATE_CONSUMER_OFFSET, handler.update_consumer_offset)
        table.register(RequestKind.GET_QUEUE_OFFSET, handler.get_queue_offset)
        manage = ClientManageHandler(config=config, registry=registry, groups=broker.groups, topics=broker.topics,
                                     clock=broker.clock, on_topics_changed=nothing)
        self.manage = manage
        table.register(RequestKind.HEART_BEAT, manage.heartbeat)
        table.register(RequestKind.UNREGISTER_CLIENT, manage.unregister_client)
        table.register(RequestKind.GET_CONSUMER_LIST_BY_GROUP, manage.consumer_list)
        table.register(RequestKind.NOTIFY_CONSUMER_IDS_CHANGED, manage.open_channel)
        table.register(RequestKind.CONSUMER_SEND_MSG_BACK,
                       SendBackProcessor(config, broker.store, broker.topics, broker.groups, broker.clock).handle)
        locks = QueueLockManager(lease_ms=60_000) if is_master else None
        lock_handler = QueueLockHandler(locks, broker.clock.monotonic_ms, "n")
        table.register(RequestKind.LOCK_BATCH_MQ, lock_handler.lock_batch)
        table.register(RequestKind.UNLOCK_BATCH_MQ, lock_handler.unlock_batch)
        self.adapter = BrokerRemotingAdapter(table)
        self._opaque = 0

    def cmd(self, code: int, ext: dict[str, object] | None = None, body: bytes = b"") -> RemotingCommand:
        self._opaque += 1
        return RemotingCommand(code=code, opaque=self._opaque, ext={k: str(v) for k, v in (ext or {}).items()},
                               body=body)

    async def call(self, code: int, ext: dict[str, object] | None = None, body: bytes = b"",
                   channel: FakeChannel | None = None) -> RemotingCommand:
        request = self.cmd(code, ext, body)
        answer = await self.adapter.dispatch(request, channel or FakeChannel(1))
        assert answer.opaque == request.opaque and answer.is_response
        assert all(isinstance(v, str) for v in answer.ext.values())
        return answer

    async def send_v1(self, body: bytes = b"hello", queue_id: int = 0, **props: str) -> RemotingCommand:
        return await self.call(RequestCode.SEND_MESSAGE, {
            "producerGroup": "PG", "topic": TOPIC, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
            "queueId": queue_id, "sysFlag": 0, "bornTimestamp": 1_700_000_000_000, "flag": 0,
            "properties": encode_properties(props), "reconsumeTimes": "0", "unitMode": "0", "batch": "0"}, body)

    async def heartbeat(self, client_id: str, channel: FakeChannel, group: str = "CG") -> RemotingCommand:
        body = json.dumps({"clientID": client_id, "consumerDataSet": [{
            "consumeFromWhere": 0, "consumeType": 1, "groupName": group, "messageModel": 1,
            "subscriptionDataSet": [{"subString": "*", "subVersion": "17", "topic": TOPIC}]}]}).encode()
        return await self.call(RequestCode.HEART_BEAT, body=body, channel=channel)

    def pull_ext(self, queue_offset: int, sys_flag: int = 4, **extra: object) -> dict[str, object]:
        return {"consumerGroup": "CG", "topic": TOPIC, "queueId": 0, "queueOffset": queue_offset, "maxMsgNums": 32,
                "sysFlag": sys_flag, "commitOffset": -1, "suspendTimeoutMillis": 15_000, "subscription": "*",
                "subVersion": 0, **extra}


@pytest.fixture
def rig(broker) -> Rig:
    return Rig(broker)


# --- send -------------------------------------------------------------------------------------

def test_send_v1_stores_body_and_properties_and_answers_string_fields(rig):
    answer = asyncio.run(rig.send_v1(b"payload", queue_id=2, TAGS="TagA", KEYS="k1", UNIQ_KEY="0100007F0001", a="b"))
    assert answer.code == 0, answer.remark
    assert answer.ext["queueId"] == "2" and answer.ext["queueOffset"] == "0"
    assert answer.ext["MSG_REGION"] == "DefaultRegion" and answer.ext["TRACE_ON"] == "true"
    [record] = rig.b.records(TOPIC, 2)
    assert answer.ext["msgId"] == offset_msg_id(*record.store_host, record.phys_offset)
    assert record.body == b"payload" and record.tags == "TagA" and record.keys == "k1"
    assert record.properties["UNIQ_KEY"] == "0100007F0001" and record.properties["a"] == "b"
    assert record.born_host == ("127.0.0.1", 40000)


def test_a_compressed_body_is_stored_inflated(rig):
    body = b"x" * 10_000
    ext = {"topic": TOPIC, "queueId": 0, "sysFlag": 1, "properties": encode_properties({"TAGS": "Z"})}
    answer = asyncio.run(rig.call(RequestCode.SEND_MESSAGE, ext, zlib.compress(body)))
    assert answer.code == 0, answer.remark
    [record] = rig.b.records(TOPIC, 0)
    assert record.body == body and record.sys_flag & 1 == 0
    with pytest.raises(HeaderFieldError):
        asyncio.run(rig.call(RequestCode.SEND_MESSAGE, ext, b"not zlib"))


def test_send_v2_reads_the_short_field_names(rig):
    answer = asyncio.run(rig.call(RequestCode.SEND_MESSAGE_V2, {
        "a": "PG", "b": TOPIC, "c": "TBW102", "d": 4, "e": 1, "f": 0, "g": 1_700_000_000_123, "h": 0,
        "i": encode_properties({"TAGS": "TagB", "KEYS": "k2"}), "j": 0, "k": "false"}, b"v2"))
    assert answer.code == 0, answer.remark
    [record] = rig.b.records(TOPIC, 1)
    assert record.body == b"v2" and record.tags == "TagB" and record.born_timestamp_ms == 1_700_000_000_123
    assert c.PROPERTY_UNIQ_KEY not in record.properties  # ali-ons sends none; none is made up


@pytest.mark.parametrize("code, flag", [(RequestCode.SEND_MESSAGE, {"batch": "1"}),
                                         (RequestCode.SEND_BATCH_MESSAGE, {"m": "true"})])
def test_a_batch_is_stored_message_by_message_with_joined_msg_ids(rig, code, flag):
    body = b"".join(message_batch.encode_entry(f"m{i}".encode(), 0, {"TAGS": f"T{i}", "UNIQ_KEY": f"U{i}"})
                    for i in range(3))
    names = ({"topic": TOPIC, "queueId": 0, "properties": encode_properties({"WAIT": "true"})}
             if code == RequestCode.SEND_MESSAGE else {"b": TOPIC, "e": 0, "i": ""})
    answer = asyncio.run(rig.call(code, {**names, **flag}, body))
    assert answer.code == 0, answer.remark
    records = rig.b.records(TOPIC, 0)
    assert [r.body for r in records] == [b"m0", b"m1", b"m2"]
    assert [r.properties["UNIQ_KEY"] for r in records] == ["U0", "U1", "U2"]
    assert answer.ext["msgId"].split(",") == [offset_msg_id(*r.store_host, r.phys_offset) for r in records]


def test_a_bad_batch_body_and_a_missing_topic_are_error_answers(rig):
    answer = asyncio.run(rig.call(RequestCode.SEND_MESSAGE, {"topic": TOPIC, "queueId": 0, "batch": "1"}, b"xx"))
    assert answer.code == 13
    with pytest.raises(HeaderFieldError):
        asyncio.run(rig.call(RequestCode.SEND_MESSAGE, {"queueId": 0}, b"x"))


def test_a_slave_refuses_sends_and_locks(broker):
    slave = Rig(broker, is_master=False)
    assert asyncio.run(slave.send_v1()).code == 14
    body = remoting_json.dumps({"clientId": "c", "consumerGroup": "CG", "mqSet": []})
    assert asyncio.run(slave.call(RequestCode.LOCK_BATCH_MQ, body=body)).code == 14


# --- pull -------------------------------------------------------------------------------------

def test_pull_returns_raw_records_and_offsets(rig):
    async def run() -> RemotingCommand:
        for i in range(3):
            await rig.send_v1(f"b{i}".encode(), TAGS="TagA" if i != 1 else "TagB")
        return await rig.call(RequestCode.PULL_MESSAGE, rig.pull_ext(0, subscription="TagA"))

    answer = run_ok = asyncio.run(run())
    assert run_ok.code == 0
    records = list(iter_records(answer.body))
    assert [r.body for r in records] == [b"b0", b"b2"]  # the store filters by tag hash
    assert answer.ext["nextBeginOffset"] == "3" and answer.ext["minOffset"] == "0"
    assert answer.ext["maxOffset"] == "3" and answer.ext["suggestWhichBrokerId"] == "0"


def test_pull_past_the_end_is_not_found_and_far_past_is_offset_moved(rig):
    async def run() -> tuple[int, int]:
        await rig.send_v1()
        not_found = await rig.call(RequestCode.PULL_MESSAGE, rig.pull_ext(1))
        moved = await rig.call(RequestCode.PULL_MESSAGE, rig.pull_ext(50))
        return not_found.code, moved.code

    assert asyncio.run(run()) == (19, 21)


def test_a_suspended_pull_waits_for_the_hold_service_and_answers_with_its_opaque(rig):
    async def run() -> RemotingCommand:
        channel = FakeChannel(3)
        await rig.heartbeat("cid", channel)
        await rig.send_v1(b"early")
        request = rig.cmd(RequestCode.PULL_MESSAGE, rig.pull_ext(1, sys_flag=2, subVersion=17))
        task = asyncio.create_task(rig.adapter.dispatch(request, channel))
        await asyncio.sleep(0)
        assert not task.done(), task.result()
        assert rig.hold.holds.count() == 1
        await rig.send_v1(b"late")
        rig.hold.process_notices()
        answer = await task
        assert answer.opaque == request.opaque
        return answer

    answer = asyncio.run(run())
    assert answer.code == 0 and [r.body for r in iter_records(answer.body)] == [b"late"]


def test_closing_the_connection_drops_its_held_pulls(rig):
    async def run() -> None:
        channel = FakeChannel(4)
        await rig.heartbeat("cid", channel)
        await rig.send_v1()
        task = asyncio.create_task(rig.adapter.dispatch(
            rig.cmd(RequestCode.PULL_MESSAGE, rig.pull_ext(1, sys_flag=2)), channel))
        await asyncio.sleep(0)
        assert rig.hold.holds.count() == 1
        rig.adapter.channel_closed(channel)
        with pytest.raises(asyncio.CancelledError):
            await task
        assert rig.hold.holds.count() == 0

    asyncio.run(run())


def test_the_commit_flag_commits_the_offset(rig):
    async def run() -> None:
        await rig.send_v1()
        answer = await rig.call(RequestCode.PULL_MESSAGE, rig.pull_ext(0, sys_flag=5, commitOffset=1))
        assert answer.code == 0

    asyncio.run(run())
    assert rig.offsets.query("CG", TOPIC, 0) == 1  # the queue's max offset: a consumer that read everything commits it


# --- offsets ----------------------------------------------------------------------------------

def test_offset_codes(rig):
    async def run() -> None:
        for _ in range(2):
            await rig.send_v1()
        q = {"consumerGroup": "CG", "topic": TOPIC, "queueId": 0}
        young = await rig.call(RequestCode.QUERY_CONSUMER_OFFSET, q)
        assert (young.code, young.ext["offset"]) == (0, "0")  # the young-queue rule
        assert (await rig.call(RequestCode.UPDATE_CONSUMER_OFFSET, {**q, "commitOffset": 2})).code == 0
        assert (await rig.call(RequestCode.QUERY_CONSUMER_OFFSET, q)).ext["offset"] == "2"
        mq = {"topic": TOPIC, "queueId": 0}
        assert (await rig.call(RequestCode.GET_MAX_OFFSET, mq)).ext["offset"] == "2"
        assert (await rig.call(RequestCode.GET_MIN_OFFSET, mq)).ext["offset"] == "0"
        by_time = await rig.call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {**mq, "timestamp": 0})
        assert by_time.code == 0 and by_time.ext["offset"] == "0"

    asyncio.run(run())


# --- consumers --------------------------------------------------------------------------------

def test_heartbeat_registers_by_ordinal_and_name_and_lists_both(rig):
    async def run() -> None:
        assert (await rig.heartbeat("cpp-client", FakeChannel(1))).code == 0
        ons = {"clientID": "ons@1", "consumerDataSet": [{
            "groupName": "CG", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_TIMESTAMP", "unitMode": False,
            "subscriptionDataSet": [{"topic": TOPIC, "subString": "*", "classFilterMode": False, "tagsSet": [],
                                     "codeSet": [], "subVersion": 18}]}], "producerDataSet": [{"groupName": "P"}]}
        assert (await rig.call(RequestCode.HEART_BEAT, body=json.dumps(ons).encode(),
                               channel=FakeChannel(2))).code == 0
        answer = await rig.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "CG"})
        assert answer.code == 0
        assert sorted(json.loads(answer.body)["consumerIdList"]) == ["cpp-client", "ons@1"]
        info = rig.registry.find("CG")
        assert info.consume_from_where == "CONSUME_FROM_TIMESTAMP"
        assert info.subscriptions[TOPIC].sub_version == 18

    asyncio.run(run())


def test_an_empty_group_is_system_error_and_a_producer_heartbeat_registers_nothing(rig):
    async def run() -> None:
        body = b'{"clientID":"p-1","producerDataSet":[{"groupName":"PG"}]}'
        assert (await rig.call(RequestCode.HEART_BEAT, body=body)).code == 0
        answer = await rig.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "CG"})
        assert answer.code == 1 and "no consumer for this group" in answer.remark
        assert rig.adapter.consumers.open_pumps() == 0

    asyncio.run(run())


def test_members_are_notified_on_their_heartbeat_channel_and_close_unregisters(rig):
    async def run() -> None:
        first, second = FakeChannel(1), FakeChannel(2)
        await rig.heartbeat("c1", first)
        await rig.heartbeat("c2", second)
        await asyncio.sleep(0.01)
        notify = (RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "CG"})
        assert notify in first.oneway and notify in second.oneway
        first.oneway.clear()
        second.closed = True
        rig.adapter.channel_closed(second)
        await asyncio.sleep(0.01)
        assert rig.registry.client_ids("CG") == ["c1"]
        assert first.oneway == [notify]  # told that c2 left
        answer = await rig.call(RequestCode.UNREGISTER_CLIENT, {"clientID": "c1", "producerGroup": "",
                                                                "consumerGroup": "CG"})
        assert answer.code == 0 and rig.registry.client_ids("CG") == []

    asyncio.run(run())


def test_an_expired_client_loses_its_pump_and_a_new_heartbeat_reopens_it(rig):
    async def run() -> None:
        channel = FakeChannel(1)
        await rig.heartbeat("c1", channel)
        assert rig.adapter.consumers.open_pumps() == 1
        await rig.b.clock.sleep_ms(rig.registry.channel_expiry_ms + 1)
        rig.manage.close_channels_of_expired(rig.registry.scan_expired(rig.b.clock.monotonic_ms()))
        await asyncio.sleep(0.01)
        assert rig.adapter.consumers.open_pumps() == 0 and rig.registry.client_ids("CG") == []
        await rig.heartbeat("c1", channel)
        await asyncio.sleep(0.01)
        assert rig.adapter.consumers.open_pumps() == 1 and rig.registry.client_ids("CG") == ["c1"]

    asyncio.run(run())


def test_mqlab_only_codes_go_out_as_system_error(rig):
    answer = asyncio.run(rig.call(RequestCode.UPDATE_CONSUMER_OFFSET, {
        "consumerGroup": "CG", "topic": TOPIC, "queueId": 0, "commitOffset": -5}))
    assert answer.code == 1 and answer.remark.startswith("INVALID_ARGUMENT")


def test_a_heartbeat_on_a_closed_connection_registers_nothing(rig):
    channel = FakeChannel(9, closed=True)
    assert asyncio.run(rig.heartbeat("late", channel)).code == 1
    assert rig.registry.client_ids("CG") == [] and rig.adapter.consumers.open_pumps() == 0


def test_bad_heartbeat_bodies_raise_body_errors(rig):
    for body in (b"not json", b"[1]", b'{"consumerDataSet":[]}', b'{"clientID":"c","consumerDataSet":[{"groupName"'
                 b':"g","consumeType":9}]}', b"\xff\xfe"):
        with pytest.raises(remoting_json.BodyError):
            asyncio.run(rig.call(RequestCode.HEART_BEAT, body=body))


def test_locks_share_the_lock_table(rig):
    def body(client: str, queue_ids: list[int]) -> bytes:
        # fastjson-style unquoted integer keys are read too
        mqs = ",".join(f'{{"brokerName":"broker-a","queueId":{q},"topic":"{TOPIC}"}}' for q in queue_ids)
        return f'{{"clientId":"{client}","consumerGroup":"CG","mqSet":[{mqs}],"extra":{{0:"x"}}}}'.encode()

    async def run() -> None:
        first = await rig.call(RequestCode.LOCK_BATCH_MQ, body=body("c1", [0, 1]))
        assert first.code == 0 and [m["queueId"] for m in json.loads(first.body)["lockOKMQSet"]] == [0, 1]
        refused = await rig.call(RequestCode.LOCK_BATCH_MQ, body=body("c2", [1]))
        assert json.loads(refused.body) == {"lockOKMQSet": []}
        assert (await rig.call(RequestCode.UNLOCK_BATCH_MQ, body=body("c1", [1]))).code == 0
        taken = await rig.call(RequestCode.LOCK_BATCH_MQ, body=body("c2", [1]))
        assert json.loads(taken.body)["lockOKMQSet"] == [{"brokerName": "broker-a", "queueId": 1, "topic": TOPIC}]

    asyncio.run(run())


def test_send_back_puts_the_message_on_the_retry_topic(rig):
    async def run() -> RemotingCommand:
        await rig.send_v1(b"fails", TAGS="T")
        phys_offset = rig.b.records(TOPIC, 0)[0].phys_offset
        return await rig.call(RequestCode.CONSUMER_SEND_MSG_BACK, {
            "offset": phys_offset, "group": "CG", "delayLevel": 0, "originTopic": TOPIC, "maxReconsumeTimes": 16})

    assert asyncio.run(run()).code == 0
    assert rig.b.store.max_queue_offset("SCHEDULE_TOPIC_XXXX", 2) == 1  # level 3 waits in the schedule topic


def test_unknown_codes_are_not_supported(rig):
    answer = asyncio.run(rig.call(RequestCode.END_TRANSACTION))
    assert answer.code == 3 and "37" in answer.remark


def test_quote_integer_keys_leaves_strings_alone():
    text = '{0:"a, 1:b", -2 : {"k":"{3:x}"}, "n":[1,2]}'
    assert json.loads(remoting_json.quote_integer_keys(text)) == {"0": "a, 1:b", "-2": {"k": "{3:x}"}, "n": [1, 2]}


def test_a_commit_names_the_one_client_heartbeating_on_its_connection(rig):
    recorded: list[dict] = []
    rig.offsets._events = type("Events", (), {"record": staticmethod(recorded.append)})()

    async def run() -> None:
        for _ in range(3):
            await rig.send_v1()
        mine, anonymous = FakeChannel(1), FakeChannel(2)
        await rig.heartbeat("cpp-1", mine)
        q = {"consumerGroup": "CG", "topic": TOPIC, "queueId": 0}
        assert (await rig.call(RequestCode.UPDATE_CONSUMER_OFFSET, {**q, "commitOffset": 1}, channel=mine)).code == 0
        assert (await rig.call(RequestCode.PULL_MESSAGE, rig.pull_ext(1, sys_flag=5, commitOffset=2),
                               channel=mine)).code == 0
        assert (await rig.call(RequestCode.UPDATE_CONSUMER_OFFSET, {**q, "commitOffset": 3},
                               channel=anonymous)).code == 0

    asyncio.run(run())
    commits = [(e["offset"], e.get("client_id")) for e in recorded if e["event"] == "offset-commit"]
    assert commits == [(1, "cpp-1"), (2, "cpp-1"), (3, None)]
