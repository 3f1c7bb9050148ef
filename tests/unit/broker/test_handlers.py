"""The broker's request handlers called directly with plain values: no gRPC, no protobuf."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from nodes.broker.consumers import ConsumerRegistry
from nodes.broker.ha_master import ReplicationState, SlaveReport
from nodes.broker.offset_requests import (
    GetQueueOffsetRequest,
    OffsetKind,
    OffsetRequestHandler,
    QueryConsumerOffsetRequest,
    UpdateConsumerOffsetRequest,
)
from nodes.broker.offsets import ConsumerOffsetTable
from nodes.broker.pull import PullAnswer, PullProcessor, PullRequest
from nodes.broker.pull_hold import PullRequestHoldService
from nodes.broker.request_table import RequestKind, RequestNotSupportedError, RequestTable
from nodes.broker.send import SendHandler, SendProcessor, SendRequest
from nodes.broker.topics import TopicConfigManager
from nodes.broker.validation import scanned_needs_property_checks
from nodes.common import constants as c
from nodes.common.clock import FakeClock
from nodes.common.codes import ResponseCode
from nodes.common.config import BrokerConfig
from nodes.store.message_batch import encode_entry
from nodes.store.message_store import MessageStore
from nodes.store.record import MessageToStore, iter_records
from nodes.store.record_batch import scan_batch_body

from .conftest import SMALL, Broker

G = "g"


async def _no_registration() -> None:
    return None


def _send_handler(broker: Broker, replication: ReplicationState | None = None,
                  config: BrokerConfig | None = None) -> SendHandler:
    processor = SendProcessor(config or broker.config, broker.store, broker.topics, broker.clock, groups=broker.groups)
    return SendHandler(processor, replication or ReplicationState(broker.clock), _no_registration)


def _pull(broker: Broker, hold: PullRequestHoldService | None = None) -> PullProcessor:
    offsets = ConsumerOffsetTable(broker.store.metadata)
    hold = hold or PullRequestHoldService(broker.store, broker.clock, 1_000)
    return PullProcessor(broker.config, broker.store, broker.topics, broker.groups, offsets, broker.clock, hold,
                         consumers=ConsumerRegistry(channel_expiry_ms=120_000))


def _pull_request(queue_offset: int = 0, **kwargs) -> PullRequest:
    return PullRequest(consumer_group=G, topic="T", queue_id=0, queue_offset=queue_offset, max_msg_nums=32,
                       has_subscription=True, subscription_expression="*", **kwargs)


def _send(handler: SendHandler, *bodies: bytes, topic: str = "T") -> object:
    request = SendRequest(topic=topic, queue_id=0, messages=[(body, 0, {}, 0) for body in bodies],
                          default_topic_queue_nums=4)
    return asyncio.run(handler.handle(request))


def test_send_then_pull_through_the_handlers(broker):
    sent = _send(_send_handler(broker), b"one", b"two")
    assert sent.code == ResponseCode.SUCCESS
    assert [a.queue_offset for a in sent.appended] == [0, 1] and not sent.compact

    session = _pull(broker).open_session(respond=lambda answer: pytest.fail("nothing is held"))
    answer = session.handle(_pull_request())
    assert answer is not None and answer.code == ResponseCode.SUCCESS
    assert answer.record_count == 2 and answer.next_begin_offset == 2
    assert [r.body for r in iter_records(answer.records)] == [b"one", b"two"]
    past_the_end = session.handle(_pull_request(queue_offset=2))
    assert past_the_end is not None and past_the_end.code == ResponseCode.PULL_NOT_FOUND


@pytest.mark.parametrize("writes_open", [True, False])
def test_a_pull_far_past_the_end_records_the_offset_move_unless_writes_are_held(broker, writes_open):
    """A master holding writes while its slave restores its lost tail must not write anything else
    (a write moves the log and abandons the restore): the offset-moved event waits for no one."""
    _send(_send_handler(broker), b"one")
    offsets = ConsumerOffsetTable(broker.store.metadata)
    processor = PullProcessor(broker.config, broker.store, broker.topics, broker.groups, offsets, broker.clock,
                              PullRequestHoldService(broker.store, broker.clock, 1_000),
                              consumers=ConsumerRegistry(channel_expiry_ms=120_000), writes_open=lambda: writes_open)
    log_end = broker.store.max_phys_offset
    answer = processor.open_session(respond=lambda _: pytest.fail("nothing is held")).handle(
        _pull_request(queue_offset=50))
    assert answer is not None and answer.code == ResponseCode.PULL_OFFSET_MOVED
    assert (broker.store.max_phys_offset > log_end) is writes_open


def test_send_refusals_are_answer_codes(broker):
    handler = _send_handler(broker)
    assert _send(handler, b"").code == ResponseCode.MESSAGE_ILLEGAL
    assert _send(handler, b"x", topic="bad topic!").code == ResponseCode.MESSAGE_ILLEGAL
    slave = _send_handler(broker, config=dataclasses.replace(broker.config, broker_id=1))
    assert _send(slave, b"x").code == ResponseCode.SERVICE_NOT_AVAILABLE


@pytest.mark.parametrize(("properties", "code"), [
    ({c.PROPERTY_REAL_QUEUE_ID: "-1"}, ResponseCode.MESSAGE_ILLEGAL),
    ({c.PROPERTY_REAL_TOPIC: "bad name"}, ResponseCode.MESSAGE_ILLEGAL),
    ({c.PROPERTY_REAL_TOPIC: c.SCHEDULE_TOPIC}, ResponseCode.MESSAGE_ILLEGAL),
    ({c.PROPERTY_DELAY: "soon"}, ResponseCode.MESSAGE_ILLEGAL),
    ({c.PROPERTY_REAL_TOPIC: "Elsewhere", c.PROPERTY_REAL_QUEUE_ID: "2"}, ResponseCode.SUCCESS),
])
def test_a_batch_body_meets_the_property_checks_of_messages(broker, properties, code):
    body = encode_entry(b"plain", 0, {"TAGS": "t"}) + encode_entry(b"checked", 0, properties)
    assert scan_batch_body(body, 1024) is not None or c.PROPERTY_DELAY in properties  # the store could take it
    response = asyncio.run(_send_handler(broker).handle(SendRequest(
        topic="T", queue_id=0, batch_body=body, born_timestamp_ms=1, default_topic_queue_nums=4)))
    assert response.code == code, response.remark
    stored = [record.properties for record in broker.records("T")]
    if code == ResponseCode.SUCCESS:
        assert [{k: v for k, v in p.items() if k in properties} for p in stored] == [{}, properties]
    else:
        assert stored == [] and "message 1" in response.remark


def test_only_entries_naming_a_checked_property_leave_the_fast_path():
    def needs_checks(*entries: dict[str, str]) -> bool:
        scanned = scan_batch_body(b"".join(encode_entry(b"x", 0, p) for p in entries), 1024)
        assert scanned is not None
        return scanned_needs_property_checks(scanned)

    assert not needs_checks({}, {"TAGS": "REAL_TOPIC", "KEYS": "REAL_QID"})  # in values they are plain text
    assert needs_checks({}, {c.PROPERTY_REAL_QUEUE_ID: "1"})
    assert needs_checks({c.PROPERTY_REAL_TOPIC: "T"}, {})
    assert needs_checks({"MY_REAL_TOPIC": "T"})  # a raw-text match: decoded, the same outcome


def _sync_master(broker: Broker, replication: ReplicationState) -> SendHandler:
    timing = dataclasses.replace(broker.config.timing, slave_timeout_ms=50)
    config = dataclasses.replace(broker.config, broker_role="SYNC_MASTER", timing=timing)
    return _send_handler(broker, replication, config)


def test_sync_master_answers_slave_not_available_with_no_slave(broker):
    response = _send(_sync_master(broker, ReplicationState(broker.clock)), b"x")
    assert response.code == ResponseCode.SLAVE_NOT_AVAILABLE
    assert len(response.appended) == 1  # stored anyway


def test_sync_master_answers_flush_slave_timeout_when_no_ack_comes(broker):
    replication = ReplicationState(broker.clock)
    replication.open(SlaveReport(max_phys_offset=0, slave_node_id="broker-a-1", broker_id=1))
    assert _send(_sync_master(broker, replication), b"x").code == ResponseCode.FLUSH_SLAVE_TIMEOUT


def test_sync_master_answers_success_once_a_slave_acks(broker):
    replication = ReplicationState(broker.clock)
    conn = replication.open(SlaveReport(max_phys_offset=0, slave_node_id="broker-a-1", broker_id=1))
    handler = _sync_master(broker, replication)

    async def send_while_the_slave_acks() -> object:
        sending = asyncio.create_task(handler.handle(SendRequest(topic="T", queue_id=0, messages=[(b"x", 0, {}, 0)])))
        await asyncio.sleep(0.01)
        assert not sending.done()  # waiting for the ack
        replication.ack(conn, broker.store.max_phys_offset)
        return await sending

    assert asyncio.run(send_while_the_slave_acks()).code == ResponseCode.SUCCESS


def _offsets_handler(store: MessageStore, topics: TopicConfigManager) -> OffsetRequestHandler:
    return OffsetRequestHandler(store, topics, ConsumerOffsetTable(store.metadata))


def test_query_offset_young_queue_rule(broker, tmp_path: Path):
    handler = _offsets_handler(broker.store, broker.topics)
    # no committed offset, queue never written: start at 0
    assert handler.query_consumer_offset(QueryConsumerOffsetRequest(G, "T", 0)).offset == 0
    broker.put("T", 0, b"x" * 1000)
    broker.topics.create_in_send("T", 4, 0)  # offsets are stored only for a topic the broker has
    # the queue's first message is still in memory: 0 as well
    young = handler.query_consumer_offset(QueryConsumerOffsetRequest(G, "T", 0))
    assert (young.code, young.offset) == (ResponseCode.SUCCESS, 0)
    # a committed offset wins
    assert handler.update_consumer_offset(UpdateConsumerOffsetRequest(G, "T", 0, 1)).code == ResponseCode.SUCCESS
    assert handler.query_consumer_offset(QueryConsumerOffsetRequest(G, "T", 0)).offset == 1

    # the first message is out of the memory budget: nothing to start from
    clock = FakeClock()
    store = MessageStore(tmp_path / "old", dataclasses.replace(SMALL, memory_budget_bytes=100), clock=clock)
    store.open()
    try:
        store.put_messages([MessageToStore(topic="T", queue_id=0, body=b"x" * 1000)])
        topics = TopicConfigManager(store.metadata, auto_create_enable=True, default_queue_nums=8, now_ms=0)
        old = _offsets_handler(store, topics).query_consumer_offset(QueryConsumerOffsetRequest(G, "T", 0))
        assert old.code == ResponseCode.QUERY_NOT_FOUND
    finally:
        store.close()


def test_queue_offsets_min_max_and_checks(broker):
    handler = _offsets_handler(broker.store, broker.topics)
    for body in (b"a", b"b", b"c"):
        broker.put("T", 0, body)
    broker.topics.create_in_send("T", 4, 0)
    assert handler.get_queue_offset(GetQueueOffsetRequest("T", 0, OffsetKind.MIN)).offset == 0
    assert handler.get_queue_offset(GetQueueOffsetRequest("T", 0, OffsetKind.MAX)).offset == 3
    assert handler.get_queue_offset(GetQueueOffsetRequest("T", 0, None)).code == ResponseCode.INVALID_ARGUMENT
    assert handler.get_queue_offset(GetQueueOffsetRequest("nope", 0, OffsetKind.MAX)).code == \
        ResponseCode.TOPIC_NOT_EXIST
    assert handler.update_consumer_offset(UpdateConsumerOffsetRequest(G, "T", 0, -1)).code == \
        ResponseCode.INVALID_ARGUMENT


async def _until_answered(answers: list, budget_s: float = 0.1) -> None:
    """Until a held pull's re-run answered (the hold task runs it after the send returned)."""
    for _ in range(int(budget_s / 0.001)):
        if answers:
            return
        await asyncio.sleep(0.001)


def test_a_send_never_runs_a_held_pull_on_its_own_stack(broker):
    """Long polling: the store's arrival listener only posts a notice; the hold service's task
    re-runs the held pull after the send has returned, and the pull gets its message."""

    broker.topics.create_in_send("T", 4, 0)

    async def scenario() -> list[tuple[PullAnswer, bool]]:
        hold = PullRequestHoldService(broker.store, broker.clock, 60_000)
        broker.store.on_arrival = hold.notify_arrival
        pull = _pull(broker, hold)
        sending = False
        answers: list[tuple[PullAnswer, bool]] = []  # (answer, answered while the send ran)
        session = pull.open_session(respond=lambda answer: answers.append((answer, sending)))
        hold.start()
        try:
            assert session.handle(_pull_request(suspend=True, suspend_timeout_ms=30_000)) is None
            assert session.held() == 1
            sending = True
            sent = await _send_handler(broker).handle(SendRequest(topic="T", queue_id=0,
                                                                  messages=[(b"hello", 0, {}, 0)]))
            sending = False
            assert sent.code == ResponseCode.SUCCESS
            assert answers == [] and session.held() == 1  # the send returned; the pull still waits
            await _until_answered(answers)
        finally:
            await hold.stop()
        return answers

    [(answer, during_send)] = asyncio.run(scenario())
    assert not during_send
    assert answer.code == ResponseCode.SUCCESS and answer.record_count == 1
    assert [r.body for r in iter_records(answer.records)] == [b"hello"]


def test_an_arrival_on_a_queue_with_no_held_pull_does_not_wake_the_hold_task(broker):
    """Only a queue with a held pull costs a send a notice and a turn of the hold task; a pull
    held after the send reads past it by itself."""
    broker.topics.create_in_send("T", 4, 0)

    async def scenario() -> tuple[int, list[PullAnswer]]:
        hold = PullRequestHoldService(broker.store, broker.clock, 60_000)
        broker.store.on_arrival = hold.notify_arrival
        send = _send_handler(broker)
        answers: list[PullAnswer] = []
        session = _pull(broker, hold).open_session(respond=answers.append)
        hold.start()
        try:
            for queue_id in (1, 2, 3):
                await send.handle(SendRequest(topic="T", queue_id=queue_id, messages=[(b"x", 0, {}, 0)]))
            notices_for_nothing = hold.notices_posted
            assert session.handle(_pull_request(suspend=True, suspend_timeout_ms=30_000)) is None
            await send.handle(SendRequest(topic="T", queue_id=0, messages=[(b"y", 0, {}, 0)]))
            await _until_answered(answers)
        finally:
            await hold.stop()
        return notices_for_nothing, hold.notices_posted, answers

    notices_for_nothing, notices, [answer] = asyncio.run(scenario())
    assert notices_for_nothing == 0 and notices == 1
    assert answer.code == ResponseCode.SUCCESS and answer.record_count == 1


def test_a_held_pull_times_out_on_the_periodic_scan(broker):
    broker.topics.create_in_send("T", 4, 0)

    async def scenario() -> list[PullAnswer]:
        hold = PullRequestHoldService(broker.store, broker.clock, 5)
        answers: list[PullAnswer] = []
        session = _pull(broker, hold).open_session(respond=answers.append)
        hold.start()
        try:
            assert session.handle(_pull_request(suspend=True, suspend_timeout_ms=1_000)) is None
            broker.clock.advance_ms(1_001)
            for _ in range(200):
                if answers:
                    break
                await asyncio.sleep(0.005)
        finally:
            await hold.stop()
        return answers

    [answer] = asyncio.run(scenario())
    assert answer.code == ResponseCode.PULL_NOT_FOUND


def test_the_request_table_holds_one_handler_per_kind():
    table = RequestTable()
    table.register(RequestKind.SEND_MESSAGE, _no_registration)
    with pytest.raises(ValueError, match="SEND_MESSAGE"):
        table.register(RequestKind.SEND_MESSAGE, _no_registration)
    with pytest.raises(RequestNotSupportedError):
        table[RequestKind.PULL_MESSAGE]()
