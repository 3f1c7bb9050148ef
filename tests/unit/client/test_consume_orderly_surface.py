"""Orderly surfaces without a network: PushConsumer's orderly registration and checks, the consumer
process's orderly listener (the workloads' answers) and its journalled call interval."""

from __future__ import annotations

import dataclasses

import pytest

from nodes.client import ConsumeOrderlyContext, ConsumeOrderlyStatus, PushConsumer
from nodes.common.clock import FakeClock
from nodes.common.config import ConsumerConfig, Timing
from nodes.common.errors import ClientStateError, InvalidArgumentError
from nodes.common.types import MessageExt, MessageQueue
from nodes.consumer.journal import DeliveryJournal, read_journal
from nodes.consumer.workload import OrderlyWorkloadListener, WorkloadError

MQ = MessageQueue("T", "broker-a", 3)
BASE = ConsumerConfig(namesrv_addrs=("127.0.0.1:1",), subscriptions={"T": "*"}, orderly=True)


def msg(i: int, keys: str | None = None) -> MessageExt:
    props = {"KEYS": keys} if keys else {}
    return MessageExt("T", b"body%d" % i, props, f"id{i}", "", 3, i, 100 + i, 0, 5, 4, "broker-a")


def listener(tmp_path, **options):
    config = dataclasses.replace(BASE, **options)
    clock = FakeClock()
    journal = DeliveryJournal(tmp_path / "deliveries.jsonl", "consumer-0", "g", clock)
    fn = OrderlyWorkloadListener(config, journal, sleep=lambda s: clock.advance_ms(int(s * 1000)), clock=clock)
    return fn, journal, clock


def test_ack_answers_success_and_journals_the_call_interval(tmp_path):
    fn, journal, clock = listener(tmp_path, sleep_ms=7)
    ctx = ConsumeOrderlyContext(MQ, consume_start_mono_ms=clock.monotonic_ms() - 2)
    assert fn([msg(0), msg(1)], ctx) is ConsumeOrderlyStatus.SUCCESS
    lines = read_journal(journal.path)
    assert [(r["msg_id"], r["result"], r["orderly"]) for r in lines] == [("id0", "SUCCESS", True),
                                                                         ("id1", "SUCCESS", True)]
    start, end = lines[0]["consume_start_mono_ms"], lines[0]["consume_end_mono_ms"]
    assert end - start == 2 + 14 and all(r["consume_start_mono_ms"] == start for r in lines)


def test_a_failing_key_suspends_the_whole_call_n_times(tmp_path):
    fn, journal, _ = listener(tmp_path, workload="fail_keys", fail_keys=("k1",), fail_times=2)
    answers = [fn([msg(0), msg(1, "k1")], ConsumeOrderlyContext(MQ)) for _ in range(3)]
    suspend = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
    assert answers == [suspend, suspend, ConsumeOrderlyStatus.SUCCESS]
    assert [r["result"] for r in read_journal(journal.path)] == [suspend.value] * 4 + ["SUCCESS"] * 2
    assert fn.results == {suspend.value: 4, "SUCCESS": 2}


def test_fail_and_raise_with_certainty(tmp_path):
    fail, _, _ = listener(tmp_path, workload="fail", fail_probability=1.0)
    assert fail([msg(0)], ConsumeOrderlyContext(MQ)) is ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
    raising, journal, _ = listener(tmp_path / "r", workload="raise", fail_probability=1.0)
    with pytest.raises(WorkloadError):
        raising([msg(0)], ConsumeOrderlyContext(MQ))
    assert read_journal(journal.path)[0]["result"] == "EXCEPTION"


def test_concurrent_journal_lines_say_they_are_not_orderly(tmp_path):
    journal = DeliveryJournal(tmp_path / "d.jsonl", "consumer-0", "g")
    journal.record([msg(0)], MQ, ["CONSUME_SUCCESS"])
    (line,) = read_journal(journal.path)
    assert line["orderly"] is False and "consume_start_mono_ms" not in line


# --- PushConsumer ---------------------------------------------------------------------------------

def test_an_orderly_listener_makes_retries_unbounded_by_default():
    consumer = PushConsumer("127.0.0.1:9876", "g")
    consumer.register_orderly_listener(lambda msgs, ctx: ConsumeOrderlyStatus.SUCCESS)
    assert consumer.orderly and consumer.effective_max_reconsume_times == 2**31 - 1
    consumer.register_listener(lambda msgs, ctx: None)  # the last registration wins
    assert not consumer.orderly and consumer.effective_max_reconsume_times == 16
    limited = PushConsumer("127.0.0.1:9876", "g", max_reconsume_times=3)
    limited.register_orderly_listener(lambda msgs, ctx: ConsumeOrderlyStatus.SUCCESS)
    assert limited.effective_max_reconsume_times == 3


def test_orderly_argument_and_timing_checks():
    with pytest.raises(InvalidArgumentError, match="suspend_current_queue_time_ms"):
        PushConsumer("127.0.0.1:9876", "g", suspend_current_queue_time_ms=-5)
    consumer = PushConsumer("127.0.0.1:9876", "g")
    with pytest.raises(InvalidArgumentError, match="callable"):
        consumer.register_orderly_listener("not a function")
    bad = dataclasses.replace(Timing(), client_lock_lease_ms=Timing().broker_lock_lease_ms)
    broken = PushConsumer("127.0.0.1:9876", "g", timing=bad)
    broken.subscribe("T")
    broken.register_orderly_listener(lambda msgs, ctx: ConsumeOrderlyStatus.SUCCESS)
    with pytest.raises(InvalidArgumentError, match="client_lock_lease_ms < broker_lock_lease_ms"):
        broken.start()
    with pytest.raises(ClientStateError, match="register_orderly_listener"):
        PushConsumer("127.0.0.1:9876", "g").start()  # no listener at all
