"""The consumer process's parts: workload answers, the delivery journal, ConsumerConfig files."""

from __future__ import annotations

import dataclasses

import pytest

from nodes.client import ConsumeConcurrentlyContext, ConsumeConcurrentlyStatus
from nodes.common import constants as c
from nodes.common.config import ConsumerConfig, load_node_config, save_node_config
from nodes.common.errors import ConfigError
from nodes.common.types import MessageExt, MessageQueue
from nodes.consumer.app import allocate_strategy
from nodes.consumer.journal import DeliveryJournal, body_digest, read_journal
from nodes.consumer.workload import WorkloadError, WorkloadListener

MQ = MessageQueue("T", "broker-a", 3)
BASE = ConsumerConfig(namesrv_addrs=("127.0.0.1:1",), subscriptions={"T": "*"})


def msg(i: int, keys: str | None = None) -> MessageExt:
    props = {"KEYS": keys} if keys else {}
    return MessageExt("T", b"body%d" % i, props, f"id{i}", "", 3, i, 100 + i, 0, 5, 4, "broker-a")


def listener(tmp_path, **options):
    config = dataclasses.replace(BASE, **options)
    journal = DeliveryJournal(tmp_path / "deliveries.jsonl", "consumer-0", "g")
    return WorkloadListener(config, journal, sleep=lambda s: None), journal


def test_ack_journals_every_message_before_answering(tmp_path):
    fn, journal = listener(tmp_path)
    ctx = ConsumeConcurrentlyContext(MQ)
    assert fn([msg(0), msg(1)], ctx) is ConsumeConcurrentlyStatus.CONSUME_SUCCESS
    lines = read_journal(journal.path)
    assert [(r["msg_id"], r["result"], r["queue_offset"]) for r in lines] == [
        ("id0", "CONSUME_SUCCESS", 0), ("id1", "CONSUME_SUCCESS", 1)]
    first = lines[0]
    assert (first["event"], first["queue_topic"], first["broker_name"], first["queue_id"]) == (
        "deliver", "T", "broker-a", 3)
    assert "queue" not in first  # the contract's queue fields are flat
    assert first["sharding_key"] is None and first["seq"] is None  # no workload properties on these
    assert first["body_sha256"] == body_digest(b"body0") and first["body_bytes"] == 5
    assert {"wall_ms", "mono_ms", "reconsume_times", "keys", "node", "group"} <= set(first)


def test_the_journal_copies_the_workload_sharding_key_and_seq(tmp_path):
    journal = DeliveryJournal(tmp_path / "deliveries.jsonl", "consumer-0", "g")
    props = [{c.PROPERTY_WORKLOAD_SHARDING_KEY: "k7", c.PROPERTY_WORKLOAD_SEQ: "41"},
             {c.PROPERTY_WORKLOAD_SHARDING_KEY: "k7", c.PROPERTY_WORKLOAD_SEQ: "not-a-number"},
             {c.PROPERTY_WORKLOAD_SEQ: "-3"}]
    msgs = [MessageExt("T", b"b", p, f"id{i}", "", 3, i, 100 + i, 0, 5, 4, "broker-a") for i, p in enumerate(props)]
    journal.record(msgs, MQ, ["CONSUME_SUCCESS"] * 3)
    assert [(r["sharding_key"], r["seq"]) for r in read_journal(journal.path)] == [
        ("k7", 41), ("k7", None), (None, -3)]


def test_fail_keys_fails_chosen_keys_n_times_then_acks(tmp_path):
    fn, journal = listener(tmp_path, workload="fail_keys", fail_keys=("k1",), fail_times=2)
    answers = [fn([msg(0, "k1")], ConsumeConcurrentlyContext(MQ)) for _ in range(3)]
    assert answers == [ConsumeConcurrentlyStatus.RECONSUME_LATER] * 2 + [ConsumeConcurrentlyStatus.CONSUME_SUCCESS]
    assert fn([msg(1, "other")], ConsumeConcurrentlyContext(MQ)) is ConsumeConcurrentlyStatus.CONSUME_SUCCESS
    assert [r["result"] for r in read_journal(journal.path)] == ["RECONSUME_LATER"] * 2 + ["CONSUME_SUCCESS"] * 2


def test_a_partly_failed_batch_acknowledges_up_to_the_first_failure(tmp_path):
    fn, journal = listener(tmp_path, workload="fail_keys", fail_keys=("bad",), fail_times=1)
    ctx = ConsumeConcurrentlyContext(MQ)
    status = fn([msg(0), msg(1), msg(2, "bad"), msg(3)], ctx)
    assert status is ConsumeConcurrentlyStatus.CONSUME_SUCCESS and ctx.ack_index == 1
    assert [r["result"] for r in read_journal(journal.path)] == [
        "CONSUME_SUCCESS", "CONSUME_SUCCESS", "RECONSUME_LATER", "RECONSUME_LATER"]


def test_fail_with_probability_is_seeded(tmp_path):
    fn, _ = listener(tmp_path, workload="fail", fail_probability=0.5, seed=7)
    first = [fn([msg(i)], ConsumeConcurrentlyContext(MQ)) for i in range(40)]
    again, _ = listener(tmp_path / "b", workload="fail", fail_probability=0.5, seed=7)
    assert first == [again([msg(i)], ConsumeConcurrentlyContext(MQ)) for i in range(40)]
    assert 5 < first.count(ConsumeConcurrentlyStatus.RECONSUME_LATER) < 35


def test_raise_journals_an_exception_result_then_raises(tmp_path):
    fn, journal = listener(tmp_path, workload="raise", fail_probability=1.0)
    with pytest.raises(WorkloadError):
        fn([msg(0), msg(1)], ConsumeConcurrentlyContext(MQ))
    assert [r["result"] for r in read_journal(journal.path)] == ["EXCEPTION", "EXCEPTION"]


def test_sleep_is_spent_per_message(tmp_path):
    slept: list[float] = []
    config = dataclasses.replace(BASE, sleep_ms=20)
    fn = WorkloadListener(config, DeliveryJournal(tmp_path / "j.jsonl", "c", "g"), sleep=slept.append)
    fn([msg(0), msg(1)], ConsumeConcurrentlyContext(MQ))
    assert slept == [0.04]


def test_a_torn_last_line_is_skipped(tmp_path):
    path = tmp_path / "deliveries.jsonl"
    path.write_text('{"msg_id": "a"}\n{"msg_id": "b"}\n{"msg_id": ')
    assert [r["msg_id"] for r in read_journal(path)] == ["a", "b"]


def test_consumer_config_round_trips_through_its_file(tmp_path):
    config = dataclasses.replace(BASE, node_id="consumer-2", group="g1", subscriptions={"T": "a || b", "U": "*"},
                                 fail_keys=("k1", "k2"), workload="fail_keys", message_model="BROADCASTING")
    path = tmp_path / "config.json"
    save_node_config(path, "consumer", config)
    role, loaded = load_node_config(path)
    assert role == "consumer" and loaded == config


@pytest.mark.parametrize(("changes", "message"), [
    ({"namesrv_addrs": ()}, "namesrv_addrs"),
    ({"subscriptions": {}}, "subscriptions"),
    ({"message_model": "ALL"}, "message_model"),
    ({"allocate_strategy": "RANDOM"}, "allocate_strategy"),
    ({"consume_from_where": "NOW"}, "consume_from_where"),
    ({"workload": "explode"}, "workload"),
    ({"fail_probability": 1.5}, "fail_probability"),
    ({"consume_thread_min": 0}, "consume_thread_min"),
])
def test_bad_consumer_configs_are_refused(changes, message):
    with pytest.raises(ConfigError, match=message):
        dataclasses.replace(BASE, **changes).validate()


def test_every_configurable_strategy_name_resolves():
    assert [allocate_strategy(n).name for n in ("AVG", "AVG_BY_CIRCLE", "CONSISTENT_HASH")] == [
        "AVG", "AVG_BY_CIRCLE", "CONSISTENT_HASH"]


def test_consumer_nodes_in_a_spec_render_consumer_configs():
    from harness.spec import ClusterSpec

    spec = ClusterSpec.from_toml_text("""
time_scale = 0.05
[[nodes]]
id = "namesrv-0"
role = "namesrv"
[[nodes]]
id = "broker-a-0"
role = "broker"
broker_name = "broker-a"
broker_id = 0
[[nodes]]
id = "consumer-0"
role = "consumer"
[consumer-0]
group = "g1"
subscriptions = { T = "a || b" }
workload = "fail_keys"
fail_keys = ["k1", "k2"]
""")
    assert [n.id for n in spec.start_order()] == ["namesrv-0", "broker-a-0", "consumer-0"]
    config = spec.render("consumer-0", ports={"namesrv-0": 1, "broker-a-0": 2, "consumer-0": 3}, run_dir="/r")
    assert isinstance(config, ConsumerConfig)
    assert config.namesrv_addrs == ("127.0.0.1:1",) and config.port == 3 and config.run_dir == "/r/consumer-0"
    assert config.fail_keys == ("k1", "k2") and config.subscriptions == {"T": "a || b"}
    assert config.timing.rebalance_interval_ms == 1000  # scaled like every other node's
