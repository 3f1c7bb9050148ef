"""Link toxics with real processes: latency on the producer's link to the master slows its sends."""

import statistics
import time

import pytest
from support.cluster_rpc import wait_slave_caught_up

from harness import LocalCluster
from harness.spec import ClusterSpec
from harness.toxics import Latency
from nodes.client import Producer, PullConsumer
from nodes.common.types import Message, SendStatus

pytestmark = pytest.mark.cluster

LATENCY_MS = 150  # each way: a send's round trip on the link gets at least 300 ms


def _timed_sends(producer, label, count=4):
    took = []
    for i in range(count):
        start = time.monotonic()
        result = producer.send_orderly(Message("Slow", f"{label}-{i}".encode()), "k")
        took.append(time.monotonic() - start)
        assert result.status is SendStatus.SEND_OK
    return result, took


def test_latency_on_the_producer_master_link_slows_sends_until_removed(tmp_path, time_scale):
    with LocalCluster(ClusterSpec.default(time_scale=time_scale), run_dir=tmp_path / "run", links=True) as cluster:
        overrides = cluster.client_dial_overrides("producer-0")
        with Producer(cluster.namesrv_addr, dial_overrides=overrides) as producer:
            _timed_sends(producer, "warm", 2)  # route and channel in place before measuring
            _, before = _timed_sends(producer, "before")
            toxic_id = cluster.add_toxic("producer-0", "broker-a-0", Latency(LATENCY_MS))
            _, during = _timed_sends(producer, "during")
            cluster.remove_toxic("producer-0", "broker-a-0", toxic_id)
            last, after = _timed_sends(producer, "after")
        assert min(during) >= 2 * LATENCY_MS / 1000, during  # the live channel got slow at once
        assert statistics.median(before) < LATENCY_MS / 1000, before
        assert statistics.median(after) < LATENCY_MS / 1000, after
        link = cluster.link_stats()["producer-0->broker-a-0"]
        assert link["forward_max_hold_ms"] >= LATENCY_MS and link["backward_max_hold_ms"] >= LATENCY_MS
        applied = link["toxics"][toxic_id]
        assert applied["active"] is False and applied["delayed_chunks"] >= 2 * len(during)
        wait_slave_caught_up(cluster)
        with PullConsumer(cluster.namesrv_addr, "g", timing=cluster.timing) as consumer:
            pulled = consumer.pull(last.message_queue, 0, 64)
        bodies = [m.body.decode() for m in pulled.messages]
        expected = [f"{label}-{i}" for label, n in (("warm", 2), ("before", 4), ("during", 4), ("after", 4))
                    for i in range(n)]
        assert bodies == expected  # slow, not lost, duplicated or reordered
