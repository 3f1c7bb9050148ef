"""Route rules and the RouteCache, without sockets."""

from __future__ import annotations

import asyncio

import pytest

from nodes.client.routes import (
    FoundBroker,
    RouteCache,
    RouteSnapshot,
    auto_create_route,
    pick_publish_address,
    pick_subscribe_address,
    publish_queues,
    subscribe_queues,
)
from nodes.client.rpc.api import route_from_pb
from nodes.common import constants as c
from nodes.common.errors import BrokerNotFoundError, RouteNotFoundError, TransportError
from nodes.common.types import MessageQueue
from proto import namesrv_pb2

RW, R, W = c.PERM_DEFAULT, c.PERM_READ, c.PERM_WRITE


def mqs(topic, broker, n):
    return [MessageQueue(topic, broker, i) for i in range(n)]


# --- publish list -------------------------------------------------------------------------
def test_publish_queues_sorted_by_broker_name_with_write_queue_count(fakes):
    route = fakes.make_route(("broker-b", 8, 2, RW, {0: "b:1"}), ("broker-a", 8, 3, RW, {0: "a:1"}))
    assert publish_queues("T", route) == mqs("T", "broker-a", 3) + mqs("T", "broker-b", 2)


def test_publish_queues_skip_broker_without_master(fakes):
    route = fakes.make_route(("broker-a", 4, 4, RW, {1: "a1:1"}), ("broker-b", 4, 2, RW, {0: "b0:1", 1: "b1:1"}))
    assert publish_queues("T", route) == mqs("T", "broker-b", 2)


def test_publish_queues_skip_unwritable_queue_data(fakes):
    route = fakes.make_route(("broker-a", 4, 4, R, {0: "a:1"}), ("broker-b", 4, 1, W, {0: "b:1"}))
    assert publish_queues("T", route) == mqs("T", "broker-b", 1)


def test_publish_queues_empty_when_no_master_anywhere(fakes):
    assert publish_queues("T", fakes.make_route(("broker-a", 4, 4, RW, {1: "a1:1"}))) == []


def test_publish_queues_follow_order_topic_conf(fakes):
    route = fakes.make_route(("broker-a", 8, 8, RW, {1: "a1:1"}), order_topic_conf="broker-b:2;broker-a:1")
    assert publish_queues("T", route) == mqs("T", "broker-b", 2) + mqs("T", "broker-a", 1)


def test_auto_create_route_caps_queue_counts_at_producer_default(fakes):
    tbw = fakes.make_route(("broker-a", 8, 8, 7, {0: "a:1"}), ("broker-b", 2, 2, 7, {0: "b:1"}))
    capped = auto_create_route(tbw, c.PRODUCER_DEFAULT_TOPIC_QUEUE_NUMS)
    assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums) for q in capped.queue_datas] == [
        ("broker-a", 4, 4), ("broker-b", 2, 2)]
    assert publish_queues("NEW", capped) == mqs("NEW", "broker-a", 4) + mqs("NEW", "broker-b", 2)


# --- subscribe list -----------------------------------------------------------------------
def test_subscribe_queues_readable_only_read_count_sorted_master_not_needed(fakes):
    route = fakes.make_route(("broker-b", 2, 8, RW, {1: "b1:1"}), ("broker-a", 3, 1, R, {0: "a:1"}),
                             ("broker-c", 5, 5, W, {0: "c:1"}))
    assert subscribe_queues("T", route) == mqs("T", "broker-a", 3) + mqs("T", "broker-b", 2)


# --- find broker address -----------------------------------------------------------
ADDRS = {0: "m:1", 1: "s1:1", 3: "s3:1"}


@pytest.mark.parametrize(("addrs", "broker_id", "only_this", "expected"), [
    (ADDRS, 0, False, FoundBroker("m:1", False)),  # the master, as asked
    (ADDRS, 1, False, FoundBroker("s1:1", True, 1)),  # the suggested slave
    (ADDRS, 2, True, FoundBroker("s3:1", True, 3)),  # id 2 is missing: try id + 1
    (ADDRS, 5, False, FoundBroker("m:1", False)),  # nothing near: first (lowest) entry
    (ADDRS, 5, True, None),  # ... unless only this broker will do
    ({1: "s1:1", 2: "s2:1"}, 0, False, FoundBroker("s1:1", True, 1)),  # master gone: fall back to a slave
    ({1: "s1:1"}, 0, True, None),  # master gone, only the master asked: nothing (no +1 for the master)
    ({}, 0, False, None),
    (None, 0, False, None),
])
def test_pick_subscribe_address(addrs, broker_id, only_this, expected):
    assert pick_subscribe_address(addrs, broker_id, only_this) == expected


def test_pick_publish_address_is_master_only():
    assert pick_publish_address(ADDRS) == "m:1"
    assert pick_publish_address({1: "s1:1"}) is None
    assert pick_publish_address(None) is None


def test_route_from_pb_keeps_everything():
    pb = namesrv_pb2.TopicRouteData(
        queue_datas=[namesrv_pb2.QueueData(broker_name="broker-a", read_queue_nums=4, write_queue_nums=2, perm=6)],
        broker_datas=[namesrv_pb2.BrokerData(cluster="C", broker_name="broker-a", broker_addrs={0: "h:1", 1: "h:2"})],
        order_topic_conf="")
    route = route_from_pb(pb)
    assert route.queue_datas[0].write_queue_nums == 2 and route.queue_datas[0].writable
    assert route.broker_addrs("broker-a") == {0: "h:1", 1: "h:2"}
    assert route.broker_addrs("broker-x") is None


# --- RouteCache -----------------------------------------------------------------------------
class Fetcher:
    def __init__(self, table):
        self.table = table
        self.asked: list[str] = []
        self.error = None

    async def __call__(self, topic):
        self.asked.append(topic)
        if self.error:
            raise self.error
        return self.table.get(topic)


def test_cache_publish_info_fetches_once_then_serves_from_cache(fakes):
    fetch = Fetcher({"T": fakes.two_broker_route()})
    cache = RouteCache(fetch)
    first = asyncio.run(cache.publish_info("T"))
    again = asyncio.run(cache.publish_info("T"))
    assert first == again == mqs("T", "broker-a", 2) + mqs("T", "broker-b", 2)
    assert fetch.asked == ["T"]
    assert cache.used_topics() == {"T"}


def test_cache_falls_back_to_tbw102_for_unknown_topic(fakes):
    tbw = fakes.make_route(("broker-a", 8, 8, 7, {0: "a:1"}))
    fetch = Fetcher({c.AUTO_CREATE_TOPIC_KEY: tbw})
    cache = RouteCache(fetch)
    assert asyncio.run(cache.publish_info("NEW")) == mqs("NEW", "broker-a", 4)
    assert fetch.asked == ["NEW", c.AUTO_CREATE_TOPIC_KEY]
    assert cache.find_broker_address_in_publish("broker-a") == "a:1"
    # polling while the name server still has no route keeps the TBW102-derived list
    asyncio.run(cache.refresh_all())
    assert asyncio.run(cache.publish_info("NEW")) == mqs("NEW", "broker-a", 4)
    # ... until the topic's own route appears
    fetch.table["NEW"] = fakes.make_route(("broker-a", 8, 8, RW, {0: "a:1"}))
    asyncio.run(cache.refresh_all())
    assert asyncio.run(cache.publish_info("NEW")) == mqs("NEW", "broker-a", 8)


def test_cache_publish_info_raises_without_any_route():
    cache = RouteCache(Fetcher({}))
    with pytest.raises(RouteNotFoundError, match="create the topic"):
        asyncio.run(cache.publish_info("NOPE"))


def test_cache_publish_info_raises_when_topic_has_no_master(fakes):
    fetch = Fetcher({"T": fakes.make_route(("broker-a", 4, 4, RW, {1: "a1:1"})),
                     c.AUTO_CREATE_TOPIC_KEY: fakes.make_route(("broker-a", 8, 8, 7, {0: "a:1"}))})
    cache = RouteCache(fetch)
    with pytest.raises(RouteNotFoundError, match="live master"):
        asyncio.run(cache.publish_info("T"))
    assert c.AUTO_CREATE_TOPIC_KEY not in fetch.asked  # the topic exists: no auto-create fallback


def test_cache_subscribe_info_unknown_topic_raises_without_tbw102(fakes):
    fetch = Fetcher({c.AUTO_CREATE_TOPIC_KEY: fakes.make_route(("broker-a", 8, 8, 7, {0: "a:1"}))})
    cache = RouteCache(fetch)
    with pytest.raises(RouteNotFoundError, match="no route on the name server"):
        asyncio.run(cache.subscribe_info("NOPE"))


def test_cache_subscribe_info_refresh_asks_again(fakes):
    fetch = Fetcher({"T": fakes.two_broker_route(1)})
    cache = RouteCache(fetch)
    assert len(asyncio.run(cache.subscribe_info("T"))) == 2
    fetch.table["T"] = fakes.two_broker_route(3)
    assert len(asyncio.run(cache.subscribe_info("T"))) == 2  # cached
    assert len(asyncio.run(cache.subscribe_info("T", refresh=True))) == 6


def test_cache_subscribe_address_falls_back_to_slave_and_refreshes_once(fakes):
    fetch = Fetcher({"T": fakes.make_route(("broker-a", 4, 4, RW, {1: "a1:1"}))})
    cache = RouteCache(fetch)
    asyncio.run(cache.ensure_route("T"))
    assert asyncio.run(cache.subscribe_address("T", "broker-a", 0)) == FoundBroker("a1:1", True, 1)
    with pytest.raises(BrokerNotFoundError):
        asyncio.run(cache.subscribe_address("T", "broker-zz", 0))
    assert fetch.asked == ["T", "T"]  # one refresh for the unknown broker


def test_cache_publish_address_raises_without_master(fakes):
    cache = RouteCache(Fetcher({"T": fakes.make_route(("broker-a", 4, 4, RW, {1: "a1:1"}))}))
    with pytest.raises(BrokerNotFoundError, match="no master"):
        asyncio.run(cache.publish_address("T", "broker-a"))


def test_cache_latest_route_wins_and_offline_addresses_are_cleaned(fakes):
    fetch = Fetcher({"T": fakes.make_route(("broker-a", 4, 4, RW, {0: "a0:1", 1: "a1:1"}))})
    cache = RouteCache(fetch)
    asyncio.run(cache.ensure_route("T"))
    assert cache.find_broker_address_in_subscribe("broker-a", 1, True) == FoundBroker("a1:1", True, 1)
    fetch.table["T"] = fakes.make_route(("broker-a", 4, 4, RW, {0: "a0:1"}))
    asyncio.run(cache.refresh_all())
    assert cache.find_broker_address_in_subscribe("broker-a", 1, True) is None
    assert cache.find_broker_address_in_subscribe("broker-a", 1, False) == FoundBroker("a0:1", False)


def test_cache_refresh_all_survives_name_server_errors(fakes):
    fetch = Fetcher({"T": fakes.two_broker_route()})
    cache = RouteCache(fetch)
    asyncio.run(cache.ensure_route("T"))
    fetch.error = TransportError("name server down")
    asyncio.run(cache.refresh_all())  # logged, not raised
    assert cache.route("T") == fakes.two_broker_route()


def test_route_snapshot_is_comparable(fakes):
    assert fakes.two_broker_route() == fakes.two_broker_route()
    assert RouteSnapshot() != fakes.two_broker_route()


def test_cache_listeners_hear_each_route_change_once_until_removed(fakes):
    fetch = Fetcher({"T": fakes.make_route(("broker-a", 4, 2, RW, {0: "a0:1"}), ("broker-b", 4, 2, RW, {0: "b0:1"}))})
    cache = RouteCache(fetch)
    heard: list[tuple[str, list[MessageQueue]]] = []

    def listener(topic, route):
        heard.append((topic, subscribe_queues(topic, route)))

    cache.add_listener(listener)
    asyncio.run(cache.ensure_route("T"))
    asyncio.run(cache.refresh_all())  # the same route again: nothing to hear
    fetch.table["T"] = fakes.make_route(("broker-a", 4, 2, RW, {0: "a0:1"}))  # broker-b expired
    asyncio.run(cache.refresh_all())
    assert heard == [("T", mqs("T", "broker-a", 4) + mqs("T", "broker-b", 4)), ("T", mqs("T", "broker-a", 4))]
    cache.remove_listener(listener)
    fetch.table["T"] = fakes.two_broker_route()
    asyncio.run(cache.refresh_all())
    assert len(heard) == 2
