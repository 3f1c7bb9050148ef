"""The link proxies' request journal on a real cluster: an orderly mqlab consumer process's locks,
offset commits, heartbeats and unlocks (gRPC through its links to the brokers) are journalled with
the broker's answers, and every commit answered success is one the master stored."""

from __future__ import annotations

import json

import pytest
from support.cluster_rpc import wait_for

from harness import LocalCluster, NodeSpec
from harness.request_journal import journal_path
from harness.spec import ClusterSpec
from nodes.client import Message, Producer
from nodes.consumer.journal import read_journal

pytestmark = pytest.mark.cluster

TOPIC = "JournalTopic"
GROUP = "journal_group"


def test_an_mqlab_consumers_requests_are_journalled_with_the_brokers_answers(tmp_path, time_scale):
    run_dir = tmp_path / "run"
    with LocalCluster(ClusterSpec.default(time_scale=time_scale), run_dir=run_dir, links=True) as cluster:
        with Producer(cluster.namesrv_addr, timing=cluster.timing, default_topic_queue_nums=4) as producer:
            for i in range(40):
                producer.send_orderly(Message(TOPIC, f"m{i}".encode()), f"k{i % 4}")
        cluster.wait_until_routable(TOPIC)
        proc = cluster.add_node(NodeSpec("consumer-0", "consumer", options={
            "group": GROUP, "subscriptions": {TOPIC: "*"}, "orderly": True,
            "consume_from_where": "CONSUME_FROM_FIRST_OFFSET"}))
        wait_for(lambda: len(read_journal(proc.run_dir / "deliveries.jsonl")) >= 40, 30, "40 deliveries")
        wait_for(lambda: any(json.loads(x).get("kind") == "offset-commit"
                             for x in _text(journal_path(run_dir)).splitlines()), 20, "a journalled commit")
        proc.stop()  # graceful: persists offsets, unlocks its queues, unregisters
        assert not cluster.unexpected_exits
    lines = [json.loads(x) for x in _text(journal_path(run_dir)).splitlines()]
    assert lines and all(x["src"] == "consumer-0" and x["dst"].startswith("broker-a-") for x in lines)
    assert {x["protocol"] for x in lines} == {"grpc"}
    answered = [x for x in lines if x["event"] == "answer"]
    kinds = {x["kind"] for x in answered}
    assert {"offset-commit", "lock", "heartbeat", "unlock"} <= kinds, kinds
    assert all(x["answered_mono_ms"] >= x["sent_mono_ms"] for x in answered)
    locks = [x for x in answered if x["kind"] == "lock" and x["dst"] == "broker-a-0"]
    assert {x["queue_id"] for x in locks if x["locked"]} == {0, 1, 2, 3}
    commits = [x for x in answered if x["kind"] == "offset-commit" and x["ok"] and x["dst"] == "broker-a-0"]
    assert commits and all(x["group"] == GROUP and x["client_id"] for x in commits)
    # every commit the master answered success is one it stored (a broker offset-commit event of that value
    # or higher by the answer) - what the `requests` check holds it to, here without Spark
    stored = [json.loads(x) for x in _text(run_dir / "broker-a-0" / "events.jsonl").splitlines()]
    stored = [e for e in stored if e["event"] == "offset-commit" and e["group"] == GROUP]
    for commit in commits:
        values = [e["offset"] for e in stored if e["queue_id"] == commit["queue_id"]
                  and e["mono_ms"] <= commit["answered_mono_ms"] + 5]
        assert values and max(values) >= commit["offset"], (commit, values)
    requests = {(x["link"], x["conn"], x["request_id"], x["entry"]) for x in lines if x["event"] == "request"}
    assert {(x["link"], x["conn"], x["request_id"], x["entry"]) for x in answered} <= requests


def _text(path):
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""
