"""produce / consume / verdict logic behind the CLI, against in-memory client fakes."""

from __future__ import annotations

from collections import Counter

import pytest

from harness import tools
from nodes.common.errors import RequestTimeoutError
from nodes.common.types import MessageExt, SendStatus


def test_bodies_have_the_requested_size_and_carry_their_id():
    body = tools.make_body("t1", 42, 1024)
    assert len(body) == 1024
    assert tools.body_id(body) == ("t1", 42)
    assert tools.make_body("t1", 42, 1024) == body != tools.make_body("t1", 43, 1024)
    assert tools.make_body("t1", 7, 3) == b"t1:0000000007:"  # never shorter than its header
    assert tools.body_id(b"hello") is None
    assert tools.body_id(b"a:b:c") is None


def test_produce_sync_acks_every_message(fake_mq):
    producer = fake_mq.Producer("ns")
    producer.start()
    progress = []
    stats = tools.produce(producer, "T", 50, body_bytes=100, tag="x", on_progress=progress.append)
    assert (stats.attempted, stats.ok, stats.failed) == (50, 50, 0)
    assert stats.acked == set(range(50)) and stats.bytes_ok == 5000
    assert sum(progress) == 50 and stats.msgs_per_s > 0
    assert sum(len(q) for q in fake_mq.broker.queues.values()) == 50


def test_produce_keys_each_message_by_its_number(fake_mq):
    producer = fake_mq.Producer("ns")
    producer.start()
    tools.produce(producer, "T", 12, body_bytes=64, tag="x", keys="order-{n}")
    stored = [m for q in fake_mq.broker.queues.values() for m in q]
    by_seq = {tools.body_id(m.body)[1]: m.properties.get("KEYS") for m in stored}
    assert by_seq == {n: f"order-{n}" for n in range(12)}
    tools.produce(producer, "U", 2, body_bytes=64, tag="y")
    assert all("KEYS" not in m.properties for q in fake_mq.broker.queues.values() for m in q if m.topic == "U")


def test_produce_counts_failures_and_non_ok_statuses(fake_mq):
    fake_mq.broker.fail = {b"x:0000000003:": RequestTimeoutError("send: no answer"),
                           b"x:0000000004:": SendStatus.FLUSH_SLAVE_TIMEOUT}
    producer = fake_mq.Producer("ns")
    producer.start()
    stats = tools.produce(producer, "T", 10, body_bytes=64, tag="x")
    assert (stats.ok, stats.failed) == (8, 1)
    assert stats.not_ok == Counter({"FLUSH_SLAVE_TIMEOUT": 1})
    assert 3 not in stats.acked and 4 not in stats.acked
    assert stats.errors == Counter({"RequestTimeoutError: send: no answer": 1})


def test_produce_in_batches(fake_mq):
    producer = fake_mq.Producer("ns")
    producer.start()
    stats = tools.produce(producer, "T", 25, batch=10, tag="x")
    assert producer.batches == [10, 10, 5]
    assert stats.ok == 25 and stats.acked == set(range(25))


def test_produce_async_keeps_the_window(fake_mq):
    producer = fake_mq.Producer("ns")
    producer.start()
    stats = tools.produce(producer, "T", 200, inflight=8, tag="x")
    assert stats.ok == 200
    assert 1 <= producer.max_outstanding <= 8


def _filled(fake_mq, n, tag="x", body_bytes=64):
    producer = fake_mq.Producer("ns")
    producer.start()
    tools.produce(producer, "T", n, body_bytes=body_bytes, tag=tag)
    consumer = fake_mq.PullConsumer("ns", "g")
    queues = sorted(consumer.fetch_queues("T"))
    return consumer, queues


def test_consume_reads_every_queue_up_to_its_target_and_commits(fake_mq):
    consumer, queues = _filled(fake_mq, 100)
    offsets = tools.start_offsets(consumer, queues, "first")
    targets = {mq: consumer.max_offset(mq) for mq in queues}
    got = []
    stats = tools.consume(consumer, queues, offsets, batch=7, targets=targets, on_message=got.append)
    assert stats.received == len(got) == 100 and stats.stopped_by == "caught up"
    assert {mq: q.offset for mq, q in stats.queues.items()} == targets
    assert {mq: fake_mq.broker.committed[("g", mq)] for mq in queues} == targets


def test_consume_stops_at_count_and_commits_only_what_it_delivered(fake_mq):
    consumer, queues = _filled(fake_mq, 100)
    stats = tools.consume(consumer, queues, tools.start_offsets(consumer, queues, "first"), count=10, batch=4,
                          idle_timeout_s=5)
    assert stats.received == 10 and stats.stopped_by == "count"
    committed = sum(fake_mq.broker.committed.get(("g", mq), 0) for mq in queues)
    assert committed == 10 == sum(q.received for q in stats.queues.values())


def test_consume_from_committed_continues_where_the_group_stopped(fake_mq):
    consumer, queues = _filled(fake_mq, 40)
    tools.consume(consumer, queues, tools.start_offsets(consumer, queues, "committed"), count=15, idle_timeout_s=5)
    rest = tools.consume(consumer, queues, tools.start_offsets(consumer, queues, "committed"), idle_timeout_s=0.3)
    assert rest.received == 25 and rest.stopped_by == "idle 0.3 s"
    with pytest.raises(ValueError, match="first' or 'committed"):
        tools.start_offsets(consumer, queues, "last")


def test_consume_survives_pull_errors_and_reports_them(fake_mq):
    consumer, queues = _filled(fake_mq, 20)
    fake_mq.broker.pull_errors = 3
    stats = tools.consume(consumer, queues, tools.start_offsets(consumer, queues, "first"),
                          targets={mq: consumer.max_offset(mq) for mq in queues})
    assert stats.received == 20
    assert stats.errors == Counter({"RequestTimeoutError: pull: no answer": 3})


def _ext(body: bytes) -> MessageExt:
    return MessageExt(topic="T", body=body, properties={}, msg_id="", offset_msg_id="", queue_id=0, queue_offset=0,
                      commitlog_offset=0, reconsume_times=0, store_timestamp_ms=0, born_timestamp_ms=0,
                      broker_name="b")


def test_delivery_log_verdict_finds_lost_duplicate_corrupt_and_unexpected():
    log = tools.DeliveryLog("t", 64)
    for seq in (0, 1, 1, 3):
        log(_ext(tools.make_body("t", seq, 64)))
    log(_ext(tools.make_body("t", 4, 64)[:-1] + b"!"))  # corrupt
    log(_ext(tools.make_body("other", 9, 64)))  # another run's message
    log(_ext(tools.make_body("t", 99, 64)))  # never sent
    verdict = log.verdict(sent=5, acked={0, 1, 2, 3, 4})
    assert verdict.lost == [2] and verdict.duplicates == 1 and verdict.corrupt == [4]
    assert verdict.unexpected == 2 and verdict.received == 7
    assert not verdict.ok
    clean = tools.DeliveryLog("t", 64)
    clean(_ext(tools.make_body("t", 0, 64)))
    clean(_ext(tools.make_body("t", 0, 64)))
    assert clean.verdict(sent=1, acked={0}).ok  # duplicates alone are allowed (at least once)

