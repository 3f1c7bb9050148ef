"""ConsumerRegistry: change detection, the three removal paths, duplicates."""

import json

import pytest

from nodes.broker.consumers import ConsumerRegistration, ConsumerRegistry, Subscription
from nodes.common import constants as c
from nodes.common.clock import FakeClock
from nodes.common.events import EventLog

EXPIRY_MS = 120_000


def reg(group="g", *subs, model=c.MESSAGE_MODEL_CLUSTERING):
    return ConsumerRegistration(group=group, message_model=model,
                                subscriptions=tuple(subs) or (Subscription("T", "*", 1),))


@pytest.fixture
def changes():
    return []


@pytest.fixture
def registry(changes):
    return ConsumerRegistry(channel_expiry_ms=EXPIRY_MS, on_change=lambda g, ids: changes.append((g, ids)))


def test_first_heartbeat_is_a_change_and_a_repeat_is_not(registry, changes):
    assert registry.register("c1", reg(), 0, channel_key="p1") is True
    assert changes == [("g", ["c1"])]
    assert registry.register("c1", reg(), 1_000, channel_key="p1") is False
    assert changes == [("g", ["c1"])]
    assert registry.client_ids("g") == ["c1"]


def test_second_member_notifies_everyone_in_the_group(registry, changes):
    registry.register("c1", reg(), 0, channel_key="p1")
    registry.register("c2", reg(), 0, channel_key="p2")
    assert changes[-1] == ("g", ["c1", "c2"])


def test_topic_added_or_dropped_is_a_change_but_a_newer_version_is_not(registry, changes):
    registry.register("c1", reg("g", Subscription("A", "*", 1)), 0)
    changes.clear()
    assert registry.register("c1", reg("g", Subscription("A", "*", 1), Subscription("B", "*", 1)), 1) is True
    assert registry.register("c1", reg("g", Subscription("A", "x", 5), Subscription("B", "*", 1)), 2) is False
    assert registry.find("g").subscriptions["A"] == Subscription("A", "x", 5)
    # an older version never replaces a newer one
    registry.register("c1", reg("g", Subscription("A", "old", 3), Subscription("B", "*", 1)), 3)
    assert registry.find("g").subscriptions["A"].expression == "x"
    assert registry.register("c1", reg("g", Subscription("A", "x", 5)), 4) is True
    assert set(registry.find("g").subscriptions) == {"A"}
    assert len(changes) == 2


def test_group_without_notifications_changes_silently(registry, changes):
    assert registry.register("c1", reg(), 0, notify=False) is True
    assert changes == []


def test_unregister_raises_a_change_and_forgets_an_empty_group(registry, changes):
    registry.register("c1", reg(), 0, channel_key="p1")
    registry.register("c2", reg(), 0, channel_key="p2")
    changes.clear()
    assert registry.unregister("c1", "g") is True
    assert changes == [("g", ["c2"])]
    registry.unregister("c2", "g")
    assert registry.find("g") is None and registry.client_ids("g") == []
    assert registry.unregister("c2", "g") is False  # unknown group: nothing, no change
    assert len(changes) == 2


def test_channel_closed_changes_every_group_it_left(registry, changes):
    registry.register("c1", reg("g1"), 0)
    registry.register("c1", reg("g2"), 0)
    registry.register("c2", reg("g2"), 0)
    changes.clear()
    assert registry.channel_closed("c1") == ["g1", "g2"]
    assert changes == [("g1", []), ("g2", ["c2"])]
    assert registry.channel_closed("c1") == []  # nothing left to remove: no change
    assert len(changes) == 2


def test_channel_closed_notifies_even_a_group_that_turned_notifications_off(registry, changes):
    registry.register("c1", reg(), 0, notify=False)
    registry.register("c2", reg(), 0, notify=False)
    registry.channel_closed("c1")
    assert changes == [("g", ["c2"])]


def test_silent_consumers_expire_without_a_change(registry, changes):
    registry.register("c1", reg(), 0)
    registry.register("c2", reg(), 0)
    changes.clear()
    registry.register("c2", reg(), 60_000)  # c2 keeps heartbeating
    assert registry.scan_expired(EXPIRY_MS) == []  # exactly at the limit: still there
    assert registry.scan_expired(EXPIRY_MS + 1) == [("g", "c1")]
    assert registry.client_ids("g") == ["c2"]
    assert changes == []  # as in RocketMQ: peers only notice at their next rebalance
    assert registry.scan_expired(60_000 + EXPIRY_MS + 1) == [("g", "c2")]
    assert registry.find("g") is None and not registry.has_client("c2")
    assert changes == []


def test_one_client_id_on_two_connections_is_listed_twice(registry):
    registry.register("shared", reg(), 0, channel_key="ipv4:127.0.0.1:1111")
    registry.register("shared", reg(), 0, channel_key="ipv4:127.0.0.1:2222")
    registry.register("other", reg(), 0, channel_key="ipv4:127.0.0.1:3333")
    assert sorted(registry.client_ids("g")) == ["other", "shared", "shared"]
    assert registry.describe() == {"g": registry.client_ids("g")}
    registry.channel_closed("shared")
    assert registry.client_ids("g") == ["other"]


def test_heartbeat_keeps_the_latest_model_and_type(registry):
    registry.register("c1", reg(model=c.MESSAGE_MODEL_CLUSTERING), 0)
    registry.register("c1", reg(model=c.MESSAGE_MODEL_BROADCASTING), 1)
    assert registry.find("g").message_model == c.MESSAGE_MODEL_BROADCASTING


def test_joins_and_leaves_are_recorded_as_events(tmp_path):
    clock = FakeClock()
    events = EventLog(tmp_path / "events.jsonl", "broker-a-0", clock)
    registry = ConsumerRegistry(channel_expiry_ms=EXPIRY_MS, events=events)
    registry.register("c1", reg(), 0, channel_key="p1")
    registry.register("c2", reg(), 0, channel_key="p2")
    registry.register("c3", reg(), 0, channel_key="p3")
    registry.unregister("c1", "g")
    registry.channel_closed("c2")
    registry.scan_expired(EXPIRY_MS + 1)
    events.close()
    lines = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [(e["event"], e["client_id"], e.get("reason")) for e in lines] == [
        ("consumer-join", "c1", None), ("consumer-join", "c2", None), ("consumer-join", "c3", None),
        ("consumer-leave", "c1", "unregister"), ("consumer-leave", "c2", "channel-closed"),
        ("consumer-leave", "c3", "expired")]
    assert all(e["group"] == "g" for e in lines)
