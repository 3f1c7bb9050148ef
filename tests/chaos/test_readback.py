"""The end-of-run read-back (against a fake pull consumer) and the integrity digests on sends and deliveries."""

from __future__ import annotations

import json
import zlib
from typing import Any

from chaos.readback import Replica, read_back
from chaos.workload import ProducerWorkload, ProducerWorkloadConfig
from nodes.common import constants as c
from nodes.common.config import Timing
from nodes.common.types import MessageExt, MessageQueue, PullResult, PullStatus
from nodes.consumer.journal import DeliveryJournal, read_journal

T = "ChaosTopic"


def _msg(offset: int, body: bytes) -> MessageExt:
    return MessageExt(T, body, {}, f"id{offset}", "", 0, offset, 0, 0, 0, 0, "broker-a")


class FakeConsumer:
    """Queue 0 of broker-a holds offsets 0..4; the slave (id 1) flips a body and lacks offset 4."""

    def __init__(self, namesrv: str, group: str, *, pull_from_broker_id: int, **_: Any) -> None:
        self.broker_id = pull_from_broker_id

    def start(self) -> None: ...

    def shutdown(self) -> None: ...

    def fetch_queues(self, topic: str) -> list[MessageQueue]:
        if topic != T:
            raise LookupError("no route")
        return [MessageQueue(T, "broker-a", 0), MessageQueue(T, "broker-b", 0)]

    def min_offset(self, mq: MessageQueue) -> int:
        return 0

    def max_offset(self, mq: MessageQueue) -> int:
        return 5

    def pull(self, mq: MessageQueue, offset: int, max_nums: int) -> PullResult:
        have = 5 if self.broker_id == 0 else 4
        batch = [_msg(o, b"x" if self.broker_id == 0 or o != 2 else b"y") for o in range(offset, min(have, offset + 2))]
        status = PullStatus.FOUND if batch else PullStatus.NO_NEW_MSG
        return PullResult(status, offset + len(batch), 0, have, batch, broker_id=self.broker_id)


def test_read_back_writes_every_replicas_copy_and_state(tmp_path):
    positions = {"broker-a-0": 1000, "broker-a-1": 900}
    replicas = [Replica(n, "broker-a", int(n[-1]), lambda n=n: {"details": {"store": {"max_phys_offset": positions[n]}}})
                for n in ("broker-a-1", "broker-a-0")]
    summary = read_back(replicas, "ns", (T, "%RETRY%g"), tmp_path, timing=Timing(), catch_up_ms=0,
                        make_consumer=FakeConsumer)
    lines = [json.loads(x) for x in summary.path.read_text().splitlines()]
    states = {r["node"]: r for r in lines if r["event"] == "replica-state"}
    assert states["broker-a-0"]["caught_up"] is True
    assert (states["broker-a-1"]["caught_up"], states["broker-a-1"]["max_phys_offset"],
            states["broker-a-1"]["master_max_phys_offset"]) == (False, 900, 1000)
    reads = [(r["replica_id"], r["queue_offset"], r["body_crc32"]) for r in lines if r["event"] == "readback"]
    assert [o for i, o, _ in reads if i == 0] == [0, 1, 2, 3, 4]  # only broker-a's queues
    assert [o for i, o, _ in reads if i == 1] == [0, 1, 2, 3]
    assert dict(((i, o), crc) for i, o, crc in reads)[(1, 2)] == zlib.crc32(b"y") != zlib.crc32(b"x")
    assert (summary.replicas, summary.behind, summary.messages, summary.errors) == (2, 1, 9, 2)  # no %RETRY% route


def test_the_journal_records_the_body_digest_it_was_handed(tmp_path):
    journal = DeliveryJournal(tmp_path / "deliveries.jsonl", "consumer-0", "g")
    journal.record([_msg(0, b"hello")], MessageQueue(T, "broker-a", 0), ["CONSUME_SUCCESS"])
    journal.close()
    assert read_journal(journal.path)[0]["body_crc32"] == zlib.crc32(b"hello")


def test_the_producer_sends_and_records_the_body_digest(tmp_path, monkeypatch):
    import chaos.workload as wl

    sent: list[Any] = []

    class FakeProducer:
        send_timeout_ms = 10

        def __init__(self, *_: Any, **__: Any) -> None: ...

        def send_orderly(self, msg: Any, key: str) -> Any:
            sent.append(msg)
            raise RuntimeError("no broker")  # an unknown outcome: the invoke line is what matters

    monkeypatch.setattr(wl, "Producer", FakeProducer)
    workload = ProducerWorkload("ns", tmp_path, ProducerWorkloadConfig(T, keys=1, threads=1), timing=Timing())
    workload._send_one("key-0", 0)
    workload._history.close()
    lines = [json.loads(x) for x in workload.path.read_text().splitlines()]
    crc = zlib.crc32(sent[0].body)
    assert sent[0].properties[c.PROPERTY_WORKLOAD_BODY_CRC32] == str(crc)
    assert [(r["type"], r["body_crc32"]) for r in lines] == [("invoke", crc), ("info", crc)]
