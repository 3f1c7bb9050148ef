"""Test-only fault switches against a real broker and push consumer over gRPC: each one, ON,
breaks its rule; OFF, the rule holds."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import grpc
import pytest
from support.cluster_rpc import wait_for
from support.inprocess import InProcessCluster

from nodes.client import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    MessageQueue,
    Producer,
    PushConsumer,
)
from nodes.common import wire
from proto import consumer_pb2, consumer_pb2_grpc

TIMEOUT_S = 10.0
MESSAGES = 20


@pytest.mark.parametrize("switch_on", [False, True])
def test_lock_no_exclusion_hands_a_live_lock_to_a_second_client(tmp_path, caplog, switch_on):
    switches = ("lock-no-exclusion",) if switch_on else ()
    with caplog.at_level(logging.WARNING, logger="nodes"), \
            InProcessCluster(tmp_path, fault_switches=switches) as cluster:
        queue = [wire.mq_to_pb(MessageQueue("LT", "broker-a", 0))]
        with grpc.insecure_channel(cluster.broker_addr) as channel:
            stub = consumer_pb2_grpc.ConsumerManagerStub(channel)
            a = stub.LockBatchMQ(consumer_pb2.LockBatchRequest(consumer_group="lg", client_id="A", queues=queue),
                                 timeout=TIMEOUT_S)
            b = stub.LockBatchMQ(consumer_pb2.LockBatchRequest(consumer_group="lg", client_id="B", queues=queue),
                                 timeout=TIMEOUT_S)
    assert len(a.locked) == 1
    assert len(b.locked) == (1 if switch_on else 0)  # B's grant overlaps A's live 60 s lease
    warned = any("fault switch lock-no-exclusion is ON" in r.getMessage() for r in caplog.records)
    assert warned is switch_on


@pytest.mark.parametrize("switch_on", [False, True])
def test_commit_pulled_offset_stores_offsets_of_messages_never_consumed(tmp_path, switch_on):
    """One message is consumed, the other 19 block in the listener: the broker's stored offset
    must stay at 1 (the lowest unconsumed); with the switch it jumps to what was pulled."""
    with InProcessCluster(tmp_path) as cluster:
        with Producer(cluster.namesrv_addr, timing=cluster.timing) as producer:
            results = [producer.send_orderly(Message("FS", b"m%d" % i), "one-key") for i in range(MESSAGES)]
        mq = results[0].message_queue
        assert {r.message_queue for r in results} == {mq}
        release = threading.Event()
        consumed: list[int] = []

        def listener(msgs, ctx):
            for m in msgs:
                if m.queue_offset != 0:
                    release.wait(TIMEOUT_S * 3)  # still "processing" when the offset is persisted
                consumed.append(m.queue_offset)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        consumer = PushConsumer(cluster.namesrv_addr, "fs-group",
                                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, timing=cluster.timing,
                                fault_switches=("commit-pulled-offset",) if switch_on else ())
        consumer.subscribe("FS")
        consumer.register_listener(listener)
        consumer.start()
        try:
            def stored() -> int:
                return cluster.call(cluster.broker.offsets.query, "fs-group", "FS", mq.queue_id)

            wait_for(lambda: stored() >= 1, what="the first persisted offset")
            time.sleep(cluster.timing.consumer_offset_persist_ms * 4 / 1000)  # a few more persist rounds
            assert consumed == [0]
            assert stored() == (MESSAGES if switch_on else 1)
        finally:
            release.set()
            consumer.shutdown()


def test_recovery_trust_checkpoint_reaches_the_store(tmp_path):
    with InProcessCluster(tmp_path, fault_switches=("recovery-trust-checkpoint",)) as cluster:
        assert cluster.broker.store.config.recovery_trust_checkpoint is True
        assert cluster.broker.config.store.recovery_trust_checkpoint is False  # the config file keeps the list


def test_the_store_switches_reach_the_store_and_events_reach_the_event_log(tmp_path):
    switches = ("recovery-keep-torn-tail", "read-skip-crc")
    with InProcessCluster(tmp_path, fault_switches=switches) as cluster:
        config = cluster.broker.store.config
        assert config.recovery_keep_torn_tail is True and config.read_skip_crc is True
        assert not cluster.broker.config.store.read_skip_crc  # the config file keeps the list
        events = (Path(cluster.broker.config.run_dir) / "events.jsonl").read_text()
        assert '"event":"store-recovered"' in events  # the broker passed its event log to the store
        assert cluster.broker.status().status_line.endswith(" store_errors=0")  # what `mqlab status` shows
