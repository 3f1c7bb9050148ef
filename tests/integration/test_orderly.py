"""Orderly consumption against an in-process name server and broker over real gRPC: queue locks
on the wire, per-key order with two consumers, suspend, dead letters, unlock on shutdown."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import grpc
from support.cluster_rpc import wait_for
from support.rpc import pull_once

from nodes.client import (
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
)
from nodes.common import wire
from nodes.store.record import iter_records
from proto import common_pb2, consumer_pb2, consumer_pb2_grpc

TIMEOUT_S = 10.0
SUCCESS = ConsumeOrderlyStatus.SUCCESS
SUSPEND = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


class Recorder:
    """An orderly listener: records (queue id, offset, body, start, end, reconsume times) per message."""

    def __init__(self, answer: Any = None, work_s: float = 0.0) -> None:
        self.rows: list[tuple[int, int, str, float, float, int]] = []
        self.lock = threading.Lock()
        self.answer = answer or (lambda m, n: SUCCESS)
        self.work_s = work_s

    def __call__(self, msgs, ctx) -> ConsumeOrderlyStatus:
        start = time.monotonic()
        time.sleep(self.work_s)
        with self.lock:
            answers = []
            for m in msgs:
                seen = sum(1 for r in self.rows if r[2] == m.body.decode()) + 1
                answers.append(self.answer(m, seen))
            end = time.monotonic()
            self.rows += [(ctx.message_queue.queue_id, m.queue_offset, m.body.decode(), start, end,
                           m.reconsume_times) for m in msgs]
        return SUSPEND if SUSPEND in answers else SUCCESS

    def bodies(self) -> list[str]:
        with self.lock:
            return [r[2] for r in self.rows]


def orderly_consumer(cluster, group: str, listener, topic: str = "OT", **kwargs) -> PushConsumer:
    kwargs.setdefault("consume_thread_min", 4)
    kwargs.setdefault("consume_from_where", FIRST)
    pc = PushConsumer(cluster.namesrv_addr, group, timing=cluster.timing, **kwargs)
    pc.subscribe(topic)
    pc.register_orderly_listener(listener)
    return pc


def send_keys(cluster, topic: str, keys: int, per_key: int, queues: int = 4) -> list[str]:
    """Send `per_key` messages for each of `keys` sharding keys, interleaved; bodies are 'k<key>:<seq>'."""
    sent = []
    with Producer(cluster.namesrv_addr, timing=cluster.timing, default_topic_queue_nums=queues) as producer:
        for seq in range(per_key):
            for key in range(keys):
                body = f"k{key}:{seq}"
                producer.send_orderly(Message(topic, body.encode(), keys=f"k{key}"), f"k{key}")
                sent.append(body)
    return sent


def broker_events(cluster, event: str = "lock") -> list[dict[str, Any]]:
    path = Path(cluster.root) / "broker-a-0" / "events.jsonl"
    return [r for r in (json.loads(line) for line in path.read_text().splitlines()) if r["event"] == event]


def lock_stub(cluster) -> tuple[grpc.Channel, consumer_pb2_grpc.ConsumerManagerStub]:
    channel = grpc.insecure_channel(cluster.broker_addr)
    return channel, consumer_pb2_grpc.ConsumerManagerStub(channel)


def test_lock_and_unlock_over_grpc(cluster):
    queues = [wire.mq_to_pb(MessageQueue("LT", "broker-a", i)) for i in range(3)]
    channel, stub = lock_stub(cluster)
    with channel:
        a = stub.LockBatchMQ(consumer_pb2.LockBatchRequest(consumer_group="lg", client_id="A", queues=queues[:2]),
                             timeout=TIMEOUT_S)
        assert a.code == common_pb2.SUCCESS and [q.queue_id for q in a.locked] == [0, 1]
        b = stub.LockBatchMQ(consumer_pb2.LockBatchRequest(consumer_group="lg", client_id="B", queues=queues),
                             timeout=TIMEOUT_S)
        assert [q.queue_id for q in b.locked] == [2]
        # B cannot unlock A's queue; A can
        stub.UnlockBatchMQ(consumer_pb2.UnlockBatchRequest(consumer_group="lg", client_id="B", queues=queues[:1]),
                           timeout=TIMEOUT_S)
        again = stub.LockBatchMQ(consumer_pb2.LockBatchRequest(consumer_group="lg", client_id="B", queues=queues[:1]),
                                 timeout=TIMEOUT_S)
        assert list(again.locked) == []
        unlock = stub.UnlockBatchMQ(consumer_pb2.UnlockBatchRequest(consumer_group="lg", client_id="A",
                                                                    queues=queues[:1]), timeout=TIMEOUT_S)
        assert unlock.code == common_pb2.SUCCESS
        now_b = stub.LockBatchMQ(consumer_pb2.LockBatchRequest(consumer_group="lg", client_id="B", queues=queues[:1]),
                                 timeout=TIMEOUT_S)
        assert [q.queue_id for q in now_b.locked] == [0]
        bad = stub.LockBatchMQ(consumer_pb2.LockBatchRequest(consumer_group="", client_id="B"), timeout=TIMEOUT_S)
        assert bad.code == common_pb2.INVALID_ARGUMENT
    lease_ms = cluster.timing.broker_lock_lease_ms
    actions = [(e["action"], e["client_id"], e["queue_id"]) for e in broker_events(cluster) if e["group"] == "lg"]
    assert actions == [("granted", "A", 0), ("granted", "A", 1), ("denied", "B", 0), ("denied", "B", 1),
                       ("granted", "B", 2), ("denied", "B", 0), ("released", "A", 0), ("granted", "B", 0)]
    grant = next(e for e in broker_events(cluster) if e["action"] == "granted")
    assert 0 <= grant["mono_ms"] + lease_ms - grant["lease_end_mono_ms"] <= 50  # stamped as it was granted


def test_two_orderly_consumers_consume_every_key_in_send_order(cluster):
    sent = send_keys(cluster, "OT", keys=24, per_key=12)
    rec_a, rec_b = Recorder(work_s=0.001), Recorder(work_s=0.001)
    events: list[dict[str, Any]] = []
    with orderly_consumer(cluster, "og", rec_a, on_event=events.append) as a, \
            orderly_consumer(cluster, "og", rec_b, on_event=events.append) as b:
        wait_for(lambda: set(rec_a.bodies()) | set(rec_b.bodies()) >= set(sent), what="every message")
        wait_for(lambda: {mq.queue_id for mq in a.owned_queues() if mq.topic == "OT"}
                 | {mq.queue_id for mq in b.owned_queues() if mq.topic == "OT"} == {0, 1, 2, 3}
                 and len([mq for mq in a.owned_queues() if mq.topic == "OT"]) == 2, what="a 2 / 2 split")
        owned_a = {mq.queue_id for mq in a.owned_queues() if mq.topic == "OT"}
        assert all(q["locked"] for q in a.describe()["queues"])
    for rec in (rec_a, rec_b):  # each consumer saw each key in send order (a handover may replay a prefix)
        per_key: dict[str, list[int]] = defaultdict(list)
        for body in rec.bodies():
            key, seq = body.split(":")
            per_key[key].append(int(seq))
        for key, seqs in per_key.items():
            firsts = list(dict.fromkeys(seqs))
            assert firsts == sorted(firsts), (key, seqs)
    # and overall, the first delivery of every key's messages came in send order
    rows = sorted(rec_a.rows + rec_b.rows, key=lambda r: r[3])
    firsts: dict[str, list[int]] = defaultdict(list)
    for _, _, body, *_ in rows:
        key, seq = body.split(":")
        if int(seq) not in firsts[key]:
            firsts[key].append(int(seq))
    assert all(seqs == list(range(12)) for seqs in firsts.values()) and len(firsts) == 24
    # never two consumers on one queue at the same time
    for qid in range(4):
        ia = [(r[3], r[4]) for r in rec_a.rows if r[0] == qid]
        ib = [(r[3], r[4]) for r in rec_b.rows if r[0] == qid]
        assert not any(s1 < e2 and s2 < e1 for s1, e1 in ia for s2, e2 in ib), f"queue {qid} consumed by both"
    kinds = {(e["action"], e["side"]) for e in events if e["event"] == "lock"}
    assert {("requested", "client"), ("granted", "client"), ("released", "client")} <= kinds
    # after both shut down the broker holds no lock of the group, and its last grants match the split
    channel, stub = lock_stub(cluster)
    with channel:
        probe = stub.LockBatchMQ(consumer_pb2.LockBatchRequest(
            consumer_group="og", client_id="probe", queues=[wire.mq_to_pb(MessageQueue("OT", "broker-a", i))
                                                             for i in range(4)]), timeout=TIMEOUT_S)
    assert [q.queue_id for q in probe.locked] == [0, 1, 2, 3]
    assert owned_a and len(owned_a) == 2


def test_suspend_blocks_only_its_queue_for_the_suspend_time_and_redelivers_the_same_message_first(cluster):
    sent = send_keys(cluster, "ST", keys=4, per_key=6)
    poison = sent[8]  # k0:2
    suspend_ms = 300
    rec = Recorder(answer=lambda m, n: SUSPEND if m.body.decode() == poison and n <= 2 else SUCCESS)
    with orderly_consumer(cluster, "sg", rec, topic="ST", suspend_current_queue_time_ms=suspend_ms):
        wait_for(lambda: set(rec.bodies()) >= set(sent), what="every message")
    rows = list(rec.rows)
    tries = [r for r in rows if r[2] == poison]
    assert [r[5] for r in tries] == [0, 1, 2]  # the same message, again and again, counting reconsumes
    qid = tries[0][0]
    same_queue = [r for r in rows if r[0] == qid]
    first_try = same_queue.index(tries[0])
    assert [r[2] for r in same_queue[first_try:first_try + 3]] == [poison] * 3  # nothing else of the queue between
    for before, after in itertools.pairwise(tries):
        assert after[3] - before[4] >= suspend_ms / 1000 * 0.9, (before, after)
    # other queues went on meanwhile
    others = [r for r in rows if r[0] != qid and tries[0][4] < r[3] < tries[-1][3]]
    assert others, "the other queues were blocked too"


def test_a_message_out_of_retries_is_dead_lettered_and_the_queue_goes_on(cluster):
    sent = send_keys(cluster, "DT", keys=1, per_key=5, queues=1)
    poison = sent[1]
    rec = Recorder(answer=lambda m, n: SUSPEND if m.body.decode() == poison else SUCCESS)
    with orderly_consumer(cluster, "dg", rec, topic="DT", max_reconsume_times=2,
                          suspend_current_queue_time_ms=20):
        wait_for(lambda: set(rec.bodies()) >= set(sent), what="every message")
        time.sleep(0.2)
    assert [r[5] for r in rec.rows if r[2] == poison] == [0, 1, 2]
    assert [r[2] for r in rec.rows if r[2] != poison] == [b for b in sent if b != poison]

    def dead() -> list[Any]:
        resp = pull_once(cluster.broker_addr, consumer_group="reader", topic="%DLQ%dg", queue_id=0, queue_offset=0)
        return list(iter_records(resp.records)) if resp.code == common_pb2.SUCCESS else []

    wait_for(lambda: dead(), budget_s=10, what="the dead letter")
    [record] = dead()
    assert record.body == poison.encode() and record.reconsume_times == 2


def test_shutdown_unlocks_and_persists_the_offsets(cluster):
    sent = send_keys(cluster, "UT", keys=8, per_key=5)
    rec = Recorder()
    pc = orderly_consumer(cluster, "ug", rec, topic="UT")
    with pc:
        wait_for(lambda: set(rec.bodies()) >= set(sent), what="every message")
        client_id = pc.client_id
    lock_events = [e for e in broker_events(cluster) if e["group"] == "ug" and e["topic"] == "UT"]
    assert {e["queue_id"] for e in lock_events if e["action"] == "released"} == {0, 1, 2, 3}
    assert all(e["client_id"] == client_id for e in lock_events)
    with PullConsumer(cluster.namesrv_addr, "ug", timing=cluster.timing) as puller:
        for mq in puller.fetch_queues("UT"):
            assert puller.query_offset(mq) == puller.max_offset(mq)
