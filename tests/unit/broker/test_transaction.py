"""Transactional messages over a real store: half messages from the send path, commit and
rollback, repeated ends, the check's timing, discards, and state across a reopen."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from nodes.broker.send import SendProcessor, SendRequest
from nodes.broker.transaction import TABLE, TransactionalMessages
from nodes.broker.transaction_check import TransactionCheckService
from nodes.common import constants as c
from nodes.common.codes import ResponseCode
from nodes.common.events import EventLog
from nodes.common.types import TopicConfig
from nodes.store.message_store import MessageStore

from .conftest import SMALL, Broker

TIMEOUT_MS = 300
INTERVAL_MS = 3_000


class Txn:
    """The broker fixture's store with a send path and the transaction state over it."""

    def __init__(self, broker: Broker, root: Path, check_max: int = c.TRANSACTION_CHECK_MAX) -> None:
        self.b = broker
        self.root = root
        self.check_max = check_max
        self.b.topics.put(TopicConfig("T", 2, 2), broker.clock.wall_ms())
        self.send = SendProcessor(broker.config, broker.store, broker.topics, broker.clock)
        self.open_state()

    def open_state(self) -> None:
        self.events = EventLog(self.root / "events.jsonl", "broker-a-0", self.b.clock)
        self.txns = TransactionalMessages(self.b.store, self.b.clock, self.events, timeout_ms=TIMEOUT_MS,
                                          check_interval_ms=INTERVAL_MS, check_max=self.check_max)
        self.txns.load()
        self.send.on_half = self.txns.half_stored

    def reopen(self) -> None:
        """Persist, close the store, open it again and rebuild the state from it."""
        self.txns.persist()
        self.events.close()
        self.b.store.close()
        self.b.store = MessageStore(self.root / "store", SMALL, clock=self.b.clock)
        self.b.store.open()
        self.send = SendProcessor(self.b.config, self.b.store, self.b.topics, self.b.clock)
        self.open_state()

    def half(self, body: bytes = b"order-1", uniq: str = "U1", queue_id: int = 1) -> str:
        """A transactional send through the send path; returns its transaction id."""
        response = self.send.process(SendRequest(
            topic="T", queue_id=queue_id, sys_flag=c.SYS_FLAG_TRANSACTION_PREPARED,
            messages=[(body, 0, {c.PROPERTY_UNIQ_KEY: uniq, c.PROPERTY_KEYS: "k1 k2", c.PROPERTY_TAGS: "TagA",
                                 c.PROPERTY_TRANSACTION_PREPARED: "true", c.PROPERTY_PRODUCER_GROUP: "PG"},
                       self.b.clock.wall_ms())]))
        assert response.code == ResponseCode.SUCCESS, response
        return response.appended[0].offset_msg_id

    def journal(self, event: str) -> list[dict]:
        lines = (self.root / "events.jsonl").read_text().splitlines()
        return [e for e in map(json.loads, lines) if e["event"] == event]


def test_a_half_message_waits_in_the_half_topic_and_a_commit_puts_it_into_its_queue(broker, tmp_path):
    t = Txn(broker, tmp_path)
    txn_id = t.half()
    assert broker.store.max_queue_offset("T", 1) == 0  # nothing a consumer could read
    (half,) = broker.records(c.TRANS_HALF_TOPIC)
    assert half.properties[c.PROPERTY_REAL_TOPIC] == "T" and half.properties[c.PROPERTY_REAL_QUEUE_ID] == "1"
    assert half.sys_flag & c.SYS_FLAG_TRANSACTION_MASK == 0
    assert t.txns.open_count() == 1

    assert t.txns.end(txn_id, "U1", commit=True, source="client").code == ResponseCode.SUCCESS
    (real,) = broker.records("T", 1)
    assert real.body == b"order-1" and real.properties[c.PROPERTY_UNIQ_KEY] == "U1"
    assert real.keys == "k1 k2" and real.tags == "TagA"
    assert not {c.PROPERTY_REAL_TOPIC, c.PROPERTY_REAL_QUEUE_ID, c.PROPERTY_TRANSACTION_PREPARED,
                c.PROPERTY_PRODUCER_GROUP} & real.properties.keys()
    assert real.sys_flag & c.SYS_FLAG_TRANSACTION_MASK == c.SYS_FLAG_TRANSACTION_COMMIT
    (op,) = broker.records(c.TRANS_OP_HALF_TOPIC)
    assert op.body == b"0" and op.tags == c.TRANS_OP_REMOVE_TAG
    assert op.properties[c.PROPERTY_TRANSACTION_RESOLUTION] == "COMMIT"
    assert t.txns.open_count() == 0 and t.txns.half_cursor == 1
    assert [e["resolution"] for e in t.journal("txn-end")] == ["COMMIT"]
    assert t.journal("txn-half")[0]["uniq_key"] == "U1"


def test_a_rollback_delivers_nothing_and_late_ends_change_nothing(broker, tmp_path):
    t = Txn(broker, tmp_path)
    txn_id = t.half()
    assert t.txns.end(txn_id, "U1", commit=False, source="client").code == ResponseCode.SUCCESS
    assert broker.store.max_queue_offset("T", 1) == 0
    again = t.txns.end(txn_id, "U1", commit=False, source="check")
    assert again.code == ResponseCode.SUCCESS and "already" in again.remark
    late_commit = t.txns.end(txn_id, "U1", commit=True, source="check")
    assert late_commit.code == ResponseCode.INVALID_ARGUMENT and "ROLLBACK" in late_commit.remark
    assert broker.store.max_queue_offset("T", 1) == 0
    assert broker.store.max_queue_offset(c.TRANS_OP_HALF_TOPIC, 0) == 1  # one op record, no more
    assert [e.get("repeat_of") for e in t.journal("txn-end")] == [None, "ROLLBACK", "ROLLBACK"]


def test_a_repeated_commit_stores_one_copy(broker, tmp_path):
    t = Txn(broker, tmp_path)
    txn_id = t.half()
    for _ in range(3):
        assert t.txns.end(txn_id, "U1", commit=True, source="client").code == ResponseCode.SUCCESS
    assert broker.store.max_queue_offset("T", 1) == 1


def test_ends_naming_no_half_message_are_refused(broker, tmp_path):
    t = Txn(broker, tmp_path)
    txn_id = t.half()
    normal = broker.put("T", 0, body=b"plain", properties={c.PROPERTY_UNIQ_KEY: "N1"})
    not_half = broker.records("T", 0)[0].offset_msg_id
    assert normal >= 0
    for bad_id, message_id in ((txn_id, "someone-else"), ("not-an-id", "U1"), (not_half, "N1"),
                               (txn_id[:16] + "00000000000FFFFF", "U1")):
        outcome = t.txns.end(bad_id, message_id, commit=True, source="client")
        assert outcome.code == ResponseCode.QUERY_NOT_FOUND, (bad_id, outcome)
    assert broker.store.max_queue_offset("T", 1) == 0 and t.txns.open_count() == 1


def test_checks_start_after_the_timeout_repeat_every_interval_and_end_in_a_discard(broker, tmp_path):
    t = Txn(broker, tmp_path, check_max=3)
    t.half()
    clock = broker.clock
    checks, next_due = t.txns.due_checks(clock.wall_ms())
    assert checks == [] and next_due == clock.wall_ms() + TIMEOUT_MS
    clock.advance_ms(TIMEOUT_MS - 1)
    assert t.txns.due_checks(clock.wall_ms())[0] == []
    clock.advance_ms(1)
    (check,), next_due = t.txns.due_checks(clock.wall_ms())
    assert check.check_times == 1 and check.real_topic == "T" and check.group == "PG"
    assert check.record.properties[c.PROPERTY_UNIQ_KEY] == "U1"
    assert next_due == clock.wall_ms() + INTERVAL_MS
    for times in (2, 3):
        clock.advance_ms(INTERVAL_MS - 1)
        assert t.txns.due_checks(clock.wall_ms())[0] == []
        clock.advance_ms(1)
        (check,), _ = t.txns.due_checks(clock.wall_ms())
        assert check.check_times == times
    clock.advance_ms(INTERVAL_MS)
    checks, next_due = t.txns.due_checks(clock.wall_ms())
    assert checks == [] and next_due is None and t.txns.open_count() == 0
    (kept,) = broker.records(c.TRANS_CHECK_MAX_TIME_TOPIC)
    assert kept.body == b"order-1" and kept.properties[c.PROPERTY_TRANSACTION_CHECK_TIMES] == "3"
    assert broker.store.max_queue_offset("T", 1) == 0
    assert t.journal("txn-discard")[0]["checks"] == 3


def test_resolutions_and_check_counts_survive_a_reopen(broker, tmp_path):
    t = Txn(broker, tmp_path)
    committed, open_one, rolled_back = t.half(uniq="A"), t.half(uniq="B"), t.half(uniq="C")
    assert t.txns.end(committed, "A", commit=True, source="client").code == ResponseCode.SUCCESS
    assert t.txns.end(rolled_back, "C", commit=False, source="client").code == ResponseCode.SUCCESS
    broker.clock.advance_ms(TIMEOUT_MS)
    (check,), _ = t.txns.due_checks(broker.clock.wall_ms())
    assert check.record.properties[c.PROPERTY_UNIQ_KEY] == "B"

    t.reopen()
    assert t.txns.open_count() == 1 and t.txns.half_cursor == 1
    assert t.txns.end(committed, "A", commit=True, source="check").code == ResponseCode.SUCCESS
    assert t.txns.end(rolled_back, "C", commit=True, source="check").code == ResponseCode.INVALID_ARGUMENT
    assert broker.store.max_queue_offset("T", 1) == 1  # A once, C never
    broker.clock.advance_ms(INTERVAL_MS)
    (check,), _ = t.txns.due_checks(broker.clock.wall_ms())
    assert check.check_times == 2  # the count came back from the metadata

    assert t.txns.end(open_one, "B", commit=True, source="check").code == ResponseCode.SUCCESS
    t.reopen()
    assert t.txns.open_count() == 0 and t.txns.half_cursor == 3
    assert t.txns.op_cursor == broker.store.max_queue_offset(c.TRANS_OP_HALF_TOPIC, 0)
    assert broker.store.metadata.get_all(TABLE) == {"half_cursor": 3, "op_cursor": 3}
    assert [r.properties[c.PROPERTY_UNIQ_KEY] for r in broker.records("T", 1)] == ["A", "B"]


def test_the_check_service_sends_due_checks_and_journals_who_got_them(broker, tmp_path):
    t = Txn(broker, tmp_path)
    t.half(uniq="A")
    sent = []
    service = TransactionCheckService(t.txns, broker.clock)
    service.add_sender(lambda check: sent.append(check.transaction_id) or bool(len(sent) > 1))

    async def run() -> None:
        await service.tick()
        assert sent == [] and service.interval_ms == TIMEOUT_MS
        broker.clock.advance_ms(TIMEOUT_MS)
        await service.tick()
        broker.clock.advance_ms(INTERVAL_MS)
        await service.tick()
        assert service.interval_ms == INTERVAL_MS
    asyncio.run(run())
    assert len(sent) == 2
    assert [(e["check_times"], e["delivered"]) for e in t.journal("txn-check")] == [(1, False), (2, True)]
    assert broker.store.metadata.get_all(TABLE)[f"checks:{0}"][0] == 2


def test_a_batch_of_transactional_messages_is_refused_and_stores_nothing(broker, tmp_path):
    from nodes.store.message_batch import encode_checked

    t = Txn(broker, tmp_path)
    body = encode_checked([(b"a", 0, {c.PROPERTY_TRANSACTION_PREPARED: "true"}), (b"b", 0, {})])
    response = t.send.process(SendRequest(topic="T", queue_id=0, batch_body=body, born_timestamp_ms=1))
    assert response.code == ResponseCode.MESSAGE_ILLEGAL and "transaction" in response.remark
    assert broker.store.max_queue_offset("T", 0) == 0
    assert broker.store.max_queue_offset(c.TRANS_HALF_TOPIC, 0) == 0


def test_a_slave_refuses_to_end_a_transaction(broker, tmp_path):
    from nodes.broker.transaction import EndTransactionHandler, EndTransactionRequest

    slave = EndTransactionHandler(None, node_id="broker-a-1", broker_name="broker-a", writable=lambda: True)
    outcome = asyncio.run(slave.handle(EndTransactionRequest("7F000001000055AD0000000000000000", "U1", True)))
    assert outcome.code == ResponseCode.SERVICE_NOT_AVAILABLE and "master of broker-a" in outcome.remark
    t = Txn(broker, tmp_path)
    txn_id = t.half()
    read_only = EndTransactionHandler(t.txns, node_id="broker-a-0", broker_name="broker-a", writable=lambda: False)
    assert asyncio.run(read_only.handle(EndTransactionRequest(txn_id, "U1", True))).code == ResponseCode.NO_PERMISSION
    assert t.txns.open_count() == 1 and broker.store.max_queue_offset("T", 1) == 0


def test_cursors_past_the_queues_end_start_at_the_end_so_new_half_messages_stay_open(broker, tmp_path):
    t = Txn(broker, tmp_path)
    broker.store.metadata.put_many(TABLE, {"half_cursor": 50, "op_cursor": 40})  # a tail lost after it
    t.open_state()
    assert (t.txns.half_cursor, t.txns.op_cursor) == (0, 0)
    txn_id = t.half()
    assert t.txns.open_count() == 1
    assert t.txns.end(txn_id, "U1", commit=True, source="client").code == ResponseCode.SUCCESS
    assert broker.store.max_queue_offset("T", 1) == 1
