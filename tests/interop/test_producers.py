"""Real producers -> mqlab consumers: what Apache's C++ client and ali-ons send arrives in mqlab's
PullConsumer with the same body, tags, keys and properties, once, where the producer was told.

Waits are bounded by the producers' own send timeouts (3-5 s per send); nothing here waits on a
client timer. A delayed message waits for level 2 (5 s) scaled by the cluster's time scale.
"""

from __future__ import annotations

import json

import pytest

from interop.mqlab_side import make_topic, read_until
from nodes.common.types import MessageExt

pytestmark = pytest.mark.cluster

USER_PROPS = {"color": "blue", "region": "lab-1"}
SEND_BUDGET_S = 60.0  # every send in a plan, each bounded by the client's 3-5 s send timeout
READ_BUDGET_S = 20.0


def _by_body(messages: list[MessageExt]) -> dict[str, MessageExt]:
    bodies = [m.body.decode() for m in messages]
    duplicates = sorted({b for b in bodies if bodies.count(b) > 1})
    assert not duplicates, f"delivered more than once: {duplicates}"
    return dict(zip(bodies, messages, strict=True))


def _assert_same_message(got: MessageExt, sent: dict) -> None:
    assert got.topic == sent["topic"]
    assert got.tags == sent.get("tags"), got.properties
    assert got.keys == sent.get("keys"), got.properties
    for key, value in (sent.get("props") or {}).items():
        assert got.properties.get(key) == value, f"property {key} of {sent['body']}: {got.properties}"


def test_cpp_producer_sync_oneway_orderly_batch_and_delay_reach_mqlab(shared_cluster, clients):
    """Every send mode of the C++ client on code 10 (V1 header; a batch is "batch":"1" on the same
    code); the topic does not exist beforehand, so the first send auto-creates it from TBW102."""
    topic = "InteropCppProduce"

    def msg(body: str, **extra: object) -> dict:
        return {"topic": topic, "body": body, "tags": "TagA", "keys": f"key-{body} order-7",
                "props": USER_PROPS, **extra}

    plan = [
        *({"send": "sync", **msg(f"sync-{i}")} for i in range(3)),
        *({"send": "oneway", **msg(f"oneway-{i}")} for i in range(2)),
        *({"send": "orderly", "arg": arg, **msg(f"orderly-{arg}")} for arg in (0, 1, 2, 3, 7)),
        {"send": "batch", "messages": [{**msg(f"batch-{i}"), "tags": "TagB"} for i in range(3)]},
        {"send": "delay", "level": 2, **msg("delay-0")},
    ]
    sent_items = {m["body"]: m for item in plan for m in item.get("messages", [item])}
    producer = clients.cpp("produce", shared_cluster.namesrv_remoting_addr, group="PG_cpp", plan=json.dumps(plan),
                           warmup_topic=f"{topic}WarmUp")
    events = producer.finish(SEND_BUDGET_S)
    assert [e["ok"] for e in producer.of("warmup")][-1:] == [True], producer.story()
    assert not producer.of("error"), producer.story()
    sent = {json.dumps(e["body"]): e for e in events if e["event"] == "sent"}
    assert len(sent) == len(plan)
    assert all(e["status"] in ("OK", None) for e in sent.values()), sent

    got = _by_body(read_until(shared_cluster, topic, "mqlab-reads-cpp", len(sent_items), READ_BUDGET_S))
    assert set(got) == set(sent_items), "every acknowledged (and every oneway) message is delivered"
    for body, item in sent_items.items():
        _assert_same_message(got[body], item)

    for e in sent.values():
        if e["send"] in ("sync", "orderly", "delay"):
            m = got[e["body"]]
            assert e["msg_id"] == m.msg_id, "the C++ client reports UNIQ_KEY as the message id"
            if e["send"] != "delay":  # a delayed message's queue offset is the schedule topic's
                assert e["offset"] == m.queue_offset, f"{e['body']}: the answer's queueOffset (a string)"
    for arg in (0, 1, 2, 3, 7):
        e = sent[json.dumps(f"orderly-{arg}")]
        assert e["queue"] == arg % 4 and got[f"orderly-{arg}"].queue_id == e["queue"], "the client picks the queue"

    batch = [got[f"batch-{i}"] for i in range(3)]
    assert {m.queue_id for m in batch} == {batch[0].queue_id}, "one batch goes to one queue"
    assert [m.queue_offset for m in batch] == list(range(batch[0].queue_offset, batch[0].queue_offset + 3)), \
        "a batch is stored as its messages, not as one message"
    assert all(m.tags == "TagB" for m in batch)
    assert sent[json.dumps([f"batch-{i}" for i in range(3)])]["offset"] == batch[0].queue_offset

    delayed = got["delay-0"]
    assert delayed.properties.get("REAL_TOPIC") == topic, "the delayed message went through the schedule topic"


def test_ali_ons_producer_v2_header_reaches_mqlab(shared_cluster, clients):
    """ali-ons sends SEND_MESSAGE_V2 (310) with the short a..l header and no UNIQ_KEY; it reports
    the broker's offset message id."""
    topic = "InteropOnsProduce"
    make_topic(shared_cluster, topic)
    plan = [{"topic": topic, "body": f"ons-{i}", "tags": "TagJ", "keys": f"k-{i} shared", "props": USER_PROPS}
            for i in range(6)]
    producer = clients.ons("produce", shared_cluster.namesrv_remoting_addr, group="PG_ons", plan=json.dumps(plan))
    events = producer.finish(SEND_BUDGET_S)
    assert not producer.of("error"), producer.story()
    sent = {e["body"]: e for e in events if e["event"] == "sent"}
    assert set(sent) == {p["body"] for p in plan}
    assert all(e["status"] == "SEND_OK" for e in sent.values()), sent

    got = _by_body(read_until(shared_cluster, topic, "mqlab-reads-ons", len(plan), READ_BUDGET_S))
    assert set(got) == set(sent)
    for item in plan:
        m, e = got[item["body"]], sent[item["body"]]
        _assert_same_message(m, item)
        assert "UNIQ_KEY" not in m.properties, "ali-ons sends no UNIQ_KEY"
        assert e["msg_id"] == m.offset_msg_id, "ali-ons reports the broker's offset message id"
        assert (e["queue"], e["offset"]) == (m.queue_id, m.queue_offset)


def test_ali_ons_does_not_auto_create_a_topic(shared_cluster, clients):
    """ali-ons throws on the name server's 17 for an unknown topic before it would try the TBW102
    route, so, unlike the C++ client, it needs its topic created first (the docs say so)."""
    topic = "InteropOnsUnknown"
    plan = [{"topic": topic, "body": "never-stored"}]
    producer = clients.ons("produce", shared_cluster.namesrv_remoting_addr, group="PG_ons_new", plan=json.dumps(plan))
    producer.finish(SEND_BUDGET_S)
    assert not producer.of("sent")
    assert [e["body"] for e in producer.of("error") if e["where"] == "send"] == ["never-stored"]
    assert not [e for e in producer.of("error") if e["where"] == "httpclient"], "no HTTP name-server lookup"
