"""PushConsumer against an in-process name server and broker over real gRPC."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from support.cluster_rpc import wait_for

from nodes.client import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    MessageModel,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
)
from nodes.common.errors import TransportError
from nodes.common.types import PullStatus

OK = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER
SEND_BACK_MODULE = Path(__file__).resolve().parents[2] / "nodes" / "broker" / "send_back.py"
needs_send_back = pytest.mark.requires(
    SEND_BACK_MODULE.exists(),
    "the broker's send-back (nodes/broker/send_back.py: retry topic, delay levels, DLQ) has not landed yet")


class Recorder:
    """A listener that records every delivery; `answer(msg)` decides per message."""

    def __init__(self, answer: Any = None) -> None:
        self.deliveries: list[tuple[str, str, str, int, bytes]] = []  # msg_id, topic, queue topic, times, body
        self.lock = threading.Lock()
        self.answer = answer or (lambda m, n: OK)

    def __call__(self, msgs, ctx) -> ConsumeConcurrentlyStatus:
        with self.lock:
            statuses = []
            for m in msgs:
                self.deliveries.append((m.msg_id, m.topic, ctx.message_queue.topic, m.reconsume_times, m.body))
                seen = sum(1 for d in self.deliveries if d[0] == m.msg_id)
                statuses.append(self.answer(m, seen))
        return LATER if LATER in statuses else OK

    def ids(self) -> Counter[str]:
        with self.lock:
            return Counter(d[0] for d in self.deliveries)


def send(cluster, topic: str, n: int, *, tags: str | None = None, queues: int = 4) -> dict[str, bytes]:
    sent = {}
    with Producer(cluster.namesrv_addr, timing=cluster.timing, default_topic_queue_nums=queues) as producer:
        for i in range(n):
            body = f"{topic}-{i}".encode()
            sent[producer.send(Message(topic, body, tags=tags)).msg_id] = body
    return sent


def consumer(cluster, group: str, listener, *topics: str, **kwargs) -> PushConsumer:
    kwargs.setdefault("consume_thread_min", 4)
    pc = PushConsumer(cluster.namesrv_addr, group, timing=cluster.timing, **kwargs)
    for topic in topics or ("T",):
        pc.subscribe(topic)
    pc.register_listener(listener)
    return pc


def test_every_message_sent_is_received_and_its_offset_committed(cluster):
    sent = send(cluster, "T", 200)
    rec = Recorder()
    events: list[dict] = []
    with consumer(cluster, "g1", rec, on_event=events.append) as pc:
        wait_for(lambda: set(rec.ids()) >= set(sent), what="every message")
        assert sorted(mq.queue_id for mq in pc.owned_queues() if mq.topic == "T") == [0, 1, 2, 3]
    got = {d[0]: d[4] for d in rec.deliveries}
    assert got == sent and max(rec.ids().values()) == 1
    with PullConsumer(cluster.namesrv_addr, "g1", timing=cluster.timing) as puller:
        committed = {mq.queue_id: puller.query_offset(mq) for mq in puller.fetch_queues("T")}
        assert committed == {mq.queue_id: puller.max_offset(mq) for mq in puller.fetch_queues("T")}
    kinds = Counter(e["event"] for e in events)
    assert kinds["rebalance"] >= 1 and kinds["offset-commit"] >= 4 and kinds["pull-route"] >= 4


def test_a_restarted_group_resumes_from_its_committed_offsets(cluster):
    first = send(cluster, "T", 50)
    rec = Recorder()
    with consumer(cluster, "g2", rec):
        wait_for(lambda: set(rec.ids()) >= set(first), what="the first batch")
    second = send(cluster, "T", 30)
    rec2 = Recorder()
    with consumer(cluster, "g2", rec2):
        wait_for(lambda: set(rec2.ids()) >= set(second), what="the second batch")
        time.sleep(0.3)
    assert set(rec2.ids()) == set(second)  # nothing of the first batch again


def test_tag_subscriptions_deliver_only_matching_tags(cluster):
    wanted = send(cluster, "Tags", 20, tags="a")
    send(cluster, "Tags", 20, tags="b")
    rec = Recorder()
    pc = PushConsumer(cluster.namesrv_addr, "g3", timing=cluster.timing, consume_thread_min=2)
    pc.subscribe("Tags", "a || c")
    pc.register_listener(rec)
    with pc:
        wait_for(lambda: set(rec.ids()) >= set(wanted), what="the tag-a messages")
        time.sleep(0.3)
    assert set(rec.ids()) == set(wanted)


@needs_send_back
def test_reconsume_later_redelivers_through_the_retry_topic(cluster):
    sent = send(cluster, "T", 10)
    rec = Recorder(answer=lambda m, n: LATER if n == 1 else OK)
    with consumer(cluster, "g4", rec):
        wait_for(lambda: all(rec.ids()[i] >= 2 for i in sent), what="every message twice")
    by_id = defaultdict(list)
    for msg_id, topic, queue_topic, times, body in rec.deliveries:
        by_id[msg_id].append((topic, queue_topic, times, body))
    for msg_id, body in sent.items():
        first, again = by_id[msg_id][:2]
        assert first == ("T", "T", 0, body)
        assert again == ("T", "%RETRY%g4", 1, body)  # same id and body, original topic, one more try


@needs_send_back
def test_a_message_failing_past_max_reconsume_times_goes_to_the_dlq(cluster):
    sent = send(cluster, "T", 1)
    (msg_id,) = sent
    rec = Recorder(answer=lambda m, n: LATER)
    with consumer(cluster, "g5", rec, max_reconsume_times=1):
        wait_for(lambda: rec.ids()[msg_id] >= 2, what="the retry")
        time.sleep(0.5)
    assert rec.ids()[msg_id] == 2  # the first delivery and one retry, then the DLQ
    with PullConsumer(cluster.namesrv_addr, "dlq-reader", timing=cluster.timing) as puller:
        dlq = MessageQueue("%DLQ%g5", "broker-a", 0)
        wait_for(lambda: puller.max_offset(dlq) >= 1, what="the DLQ message")
        result = puller.pull(dlq, 0)
    assert result.status is PullStatus.FOUND and result.messages[0].msg_id == msg_id


@needs_send_back
def test_a_failed_send_back_falls_back_to_the_internal_producer(cluster):
    sent = send(cluster, "T", 3)
    rec = Recorder(answer=lambda m, n: LATER if n == 1 else OK)
    events: list[dict] = []
    pc = consumer(cluster, "g6", rec, on_event=events.append)
    original = pc._instance.api.consumer_stub

    class NoSendBack:
        def __init__(self, stub: Any) -> None:
            self._stub = stub

        def __getattr__(self, name: str) -> Any:
            return getattr(self._stub, name)

        async def ConsumerSendMsgBack(self, request, timeout=None):
            raise TransportError("send-back refused by the test")

    pc._instance.api.consumer_stub = lambda addr: NoSendBack(original(addr))
    with pc:
        wait_for(lambda: all(rec.ids()[i] >= 2 for i in sent), what="every message twice")
    backs = [e for e in events if e["event"] == "send-back"]
    assert {e["via"] for e in backs} == {"producer"} and all(e["ok"] for e in backs)
    retried = [d for d in rec.deliveries if d[2] == "%RETRY%g6"]
    assert sorted(d[0] for d in retried) == sorted(sent) and all(d[1] == "T" and d[3] == 1 for d in retried)


def test_two_consumers_share_the_queues_and_rebalance_on_join_and_leave(cluster):
    send(cluster, "T", 1, queues=8)
    a_rec, b_rec = Recorder(), Recorder()
    a = consumer(cluster, "g7", a_rec)
    a.start()
    try:
        def topic_queues(pc):
            return sorted(mq.queue_id for mq in pc.owned_queues() if mq.topic == "T")

        wait_for(lambda: topic_queues(a) == list(range(8)), what="a to own every queue")
        with consumer(cluster, "g7", b_rec) as b:
            # the broker notifies a when b registers: no waiting for the 20 s (scaled) rebalance
            wait_for(lambda: len(topic_queues(a)) == 4 and len(topic_queues(b)) == 4, budget_s=5,
                     what="an even split")
            assert sorted(topic_queues(a) + topic_queues(b)) == list(range(8))
            sent = send(cluster, "T", 100, queues=8)
            wait_for(lambda: set(a_rec.ids()) | set(b_rec.ids()) >= set(sent), what="every message")
            assert a_rec.ids() and b_rec.ids()
        wait_for(lambda: topic_queues(a) == list(range(8)), budget_s=5, what="a to take the queues back")
    finally:
        a.shutdown()


def test_broadcasting_delivers_everything_to_every_consumer_and_keeps_offsets_locally(cluster, tmp_path):
    sent = send(cluster, "B", 40)
    recs = [Recorder(), Recorder()]
    consumers = [consumer(cluster, "g8", rec, "B", message_model=MessageModel.BROADCASTING,
                          consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                          instance_name=f"node{i}", offset_store_dir=tmp_path / "offsets")
                 for i, rec in enumerate(recs)]
    for pc in consumers:
        pc.start()
    try:
        for rec in recs:
            wait_for(lambda rec=rec: set(rec.ids()) >= set(sent), what="every message at every consumer")
    finally:
        for pc in consumers:
            pc.shutdown()
    files = sorted((tmp_path / "offsets").glob("*/g8/offsets.json"))
    assert [f.parent.parent.name.split("@")[1] for f in files] == ["node0", "node1"]
    for f in files:
        table = json.loads(f.read_text())["offsetTable"]
        assert sum(e["offset"] for e in table) == 40
