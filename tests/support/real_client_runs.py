"""A chaos run's cluster for tests of one real client: started, the suite's topic routed, the
producer workload sending into it."""

from __future__ import annotations

from chaos.run_setup import create_topic
from chaos.runner import RunOptions, plan
from chaos.suites import QUEUES, SUITES, TOPIC
from chaos.workload import ProducerWorkload, ProducerWorkloadConfig
from harness import LocalCluster


def start_with_workload(cluster: LocalCluster, suite: str, client: str, *, rate_per_s: float = 50) -> ProducerWorkload:
    """Start the (wired) cluster, create the topic as a run of `suite` with `client` would, and
    start the producer workload (the caller stops it)."""
    cluster.start()
    create_topic(cluster, TOPIC, QUEUES, plan(RunOptions(SUITES[suite], client=client))[1])
    producer = ProducerWorkload(cluster.namesrv_addr, cluster.run_dir, ProducerWorkloadConfig(TOPIC, rate_per_s=rate_per_s),
                                timing=cluster.timing, dial_overrides=cluster.client_dial_overrides("producer-0"))
    producer.start()
    return producer
