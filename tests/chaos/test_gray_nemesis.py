"""The gray nemesis on real processes: each gray op through NemesisRunner against a cluster with link
proxies, clock control and store filesystems, journaled with its proof, and undone by its recovery."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from chaos.nemesis import NemesisRunner
from chaos.nemesis_journal import nemesis_history_path, read_nemesis
from chaos.nemesis_ops import ClockFault, DiskFill, LinkToxic, Starve
from harness import LocalCluster
from harness.disk import disk_usage
from harness.spec import ClusterSpec
from nodes.client import Message, Producer
from nodes.common.clock import SYSTEM_CLOCK

TOPIC = "GrayTopic"
MASTER, SLAVE = "broker-a-0", "broker-a-1"
TIME_SCALE = float(os.environ.get("MQLAB_TEST_TIME_SCALE", "0.05"))


@pytest.fixture
def cluster(tmp_path):
    spec = (ClusterSpec.default(time_scale=TIME_SCALE)
            .with_consumers(1, group="gray_group", subscriptions={TOPIC: "*"}, orderly=True,
                            consume_from_where="CONSUME_FROM_FIRST_OFFSET")
            .with_store_filesystem("brokers", 32 * 1024 * 1024))
    spec = spec.with_clock_control(MASTER, wall=True).with_clock_control("consumer-0")
    small = {"commitlog_segment_bytes": 256 * 1024, "message_body_bytes_max": 64 * 1024, "cq_units_per_file": 16_384}
    spec = spec.with_node_options(MASTER, store=small).with_node_options(SLAVE, store=small)
    with LocalCluster(spec, run_dir=tmp_path / "run", links=True) as cl:
        yield cl
        assert not cl.unexpected_exits, f"nodes died unexpectedly: {cl.unexpected_exits}"


def _end_detail(rows: list[dict], op: str) -> dict:
    end = next(r for r in rows if r["op"] == op and r["phase"] == "end")
    assert not end.get("error"), end
    return json.loads(end["detail"])


@pytest.mark.cluster
def test_each_gray_op_applies_journals_its_proof_and_is_undone(cluster: LocalCluster, tmp_path: Path):
    history = nemesis_history_path(tmp_path / "run")
    with NemesisRunner(cluster, history, random.Random(7), SYSTEM_CLOCK) as nemesis:
        toxic = nemesis.start(LinkToxic("isolate", "consumer-0", toxic={"kind": "latency", "latency_ms": 40},
                                        duration_ms=1_000))
        clock = nemesis.start(ClockFault(MASTER, jump_ms=-30_000, rate=0.5, duration_ms=1_000))
        starve = nemesis.start(Starve(SLAVE, share=0.2, duration_ms=1_000))
        fill = nemesis.start(DiskFill("slave", ratio=0.97, duration_ms=1_000))
        assert all(o.ok for o in (toxic, clock, starve, fill)), (toxic, clock, starve, fill)
        store = cluster.node(SLAVE).run_dir / "store"
        assert disk_usage(store).used_bytes / disk_usage(store).total_bytes >= 0.96
        assert {f.op for f in nemesis.faults()} == {"link-toxic", "clock", "starve", "disk-fill"}
        outcomes = nemesis.recover_all()
    assert [o.op for o in outcomes] and all(o.ok for o in outcomes), outcomes
    assert disk_usage(store).used_bytes / disk_usage(store).total_bytes < 0.5
    rows = read_nemesis(history)
    links = _end_detail(rows, "link-toxic")
    assert links["toxic"] == {"kind": "latency", "latency_ms": 40} and links["links"]
    assert all(link.startswith("consumer-0->") or link.endswith("->consumer-0") for link in links["links"])
    moved = _end_detail(rows, "clock")["nodes"][MASTER]
    assert moved["wall"]["wall_offset_ms"] == -30_000 and moved["rate"]["rate"] == 0.5
    filled = _end_detail(rows, "disk-fill")["nodes"][SLAVE]
    assert filled["target_ratio"] == 0.97 and filled["after"]["ratio"] >= 0.96, filled
    removed = _end_detail(rows, "remove-toxic")
    assert removed["removed"] == len(links["links"])
    assert {r["op"] for r in rows if r["phase"] == "end"} >= {"clock-reset", "unstarve", "free-disk", "remove-toxic"}
    # the cluster still works: a send to the master through its faulted-and-healed links
    with Producer(cluster.namesrv_addr, timing=cluster.timing, default_topic_queue_nums=2) as producer:
        assert producer.send(Message(TOPIC, b"after the gray faults")).msg_id
