"""The time scale as a cluster fact: mqlab's clients built with only a name server address take the
cluster's scale for their timers at start(); one given its own timing keeps it and warns, naming
the margins its timers break against the brokers'."""

from __future__ import annotations

import logging
import time

import pytest

from nodes.client import ConsumeConcurrentlyStatus, Producer, PullConsumer, PushConsumer
from nodes.common.config import Timing

pytestmark = pytest.mark.cluster

WARN_BUDGET_S = 10.0


def test_clients_take_the_clusters_time_scale_or_warn_of_the_margins_theirs_break(local_cluster, caplog):
    cluster = local_cluster
    scale = cluster.spec.time_scale
    assert scale < 1
    scaled = Timing().scaled(scale)
    caplog.set_level(logging.WARNING, logger="nodes.client.cluster_timing")
    consumer = PushConsumer(cluster.namesrv_addr, "scale-group")
    consumer.subscribe("ScaleTopic")
    consumer.register_listener(lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    producer, puller = Producer(cluster.namesrv_addr, "scale-pg"), PullConsumer(cluster.namesrv_addr, "scale-pull")
    assert consumer.timing == producer.timing == puller.timing == Timing()  # not known before start()
    with consumer, producer, puller:
        assert consumer.timing == producer.timing == puller.timing == scaled
        assert consumer.timing.lock_renew_interval_ms == round(Timing().lock_renew_interval_ms * scale)
        assert consumer._instance.heartbeat.interval_ms == scaled.client_heartbeat_ms
    assert "time scale" not in caplog.text

    own = PullConsumer(cluster.namesrv_addr, "scale-own", timing=Timing(), instance_name="own-timing")
    with own:
        assert own.timing == Timing()
        deadline = time.monotonic() + WARN_BUDGET_S  # asked in the background: start() does not wait
        while not (warnings := [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]):
            assert time.monotonic() < deadline, "no warning about the client's own timing"
            time.sleep(0.05)
        assert own.timing == Timing()
    lease_s, expiry_s = scaled.broker_lock_lease_ms / 1000, scaled.consumer_channel_expiry_ms / 1000
    assert len(warnings) == 1, warnings
    assert f"lock lease {lease_s:g} s on the brokers vs lock renewal every 20 s here" in warnings[0]
    assert f"silent-client expiry {expiry_s:g} s on the brokers vs a heartbeat every 30 s here" in warnings[0]
