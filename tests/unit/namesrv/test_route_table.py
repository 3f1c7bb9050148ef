from nodes.common import constants as c
from nodes.common.types import TopicConfig
from nodes.namesrv.route_table import RouteTable

NOW_MS = 1_000_000


def _register(table: RouteTable, broker_id: int, addr: str, topics=(), version=(1, 0), now_ms=NOW_MS,
              broker_name="broker-a", token=""):
    return table.register(cluster="C", broker_name=broker_name, broker_id=broker_id, broker_addr=addr,
                          ha_server_addr=addr, topic_configs=list(topics), data_version=version, now_ms=now_ms,
                          channel_token=token)


def test_route_lists_queue_data_and_addresses_by_broker_id():
    table = RouteTable()
    _register(table, 0, "h:1", [TopicConfig("T", 4, 2, c.PERM_DEFAULT)])
    _register(table, 1, "h:2")
    route = table.route("T")
    assert route is not None
    assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas] == [
        ("broker-a", 4, 2, 6)]
    assert route.broker_datas[0].broker_addrs == {0: "h:1", 1: "h:2"}


def test_unknown_topic_has_no_route():
    table = RouteTable()
    _register(table, 0, "h:1", [TopicConfig("T")])
    assert table.route("nope") is None


def test_topics_are_taken_only_from_masters():
    table = RouteTable()
    _register(table, 1, "h:2", [TopicConfig("FromSlave")])
    assert table.route("FromSlave") is None


def test_topics_update_only_when_data_version_changes():
    table = RouteTable()
    _register(table, 0, "h:1", [TopicConfig("T", 4, 4)], version=(1, 0))
    _register(table, 0, "h:1", [TopicConfig("T", 8, 8)], version=(1, 0))
    assert table.route("T").queue_datas[0].read_queue_nums == 4
    _register(table, 0, "h:1", [TopicConfig("T", 8, 8)], version=(1, 1))
    assert table.route("T").queue_datas[0].read_queue_nums == 8


def test_slave_learns_master_address_only_while_master_is_registered():
    table = RouteTable()
    assert _register(table, 1, "h:2").master_addr == ""
    _register(table, 0, "h:1")
    assert _register(table, 1, "h:2").master_addr == "h:1"


def test_expiry_removes_silent_broker_and_its_queues_when_no_address_is_left():
    table = RouteTable()
    _register(table, 0, "h:1", [TopicConfig("T")], now_ms=NOW_MS)
    _register(table, 1, "h:2", now_ms=NOW_MS + 100_000)
    expired = table.expire(NOW_MS + 120_001, c.BROKER_EXPIRY_MS)
    assert expired == ["h:1"]
    route = table.route("T")
    # the live slave keeps the queues visible (consumers can still read)
    assert route is not None and route.broker_datas[0].broker_addrs == {1: "h:2"}
    table.expire(NOW_MS + 300_000, c.BROKER_EXPIRY_MS)
    assert table.route("T") is None and table.topics() == []


def test_expiry_keeps_a_broker_silent_for_exactly_the_limit():
    table = RouteTable()
    _register(table, 0, "h:1", [TopicConfig("T")])
    assert table.expire(NOW_MS + c.BROKER_EXPIRY_MS, c.BROKER_EXPIRY_MS) == []


def test_unregister_removes_at_once():
    table = RouteTable()
    _register(table, 0, "h:1", [TopicConfig("T")])
    assert table.unregister(broker_name="broker-a", broker_id=0, broker_addr="h:1")
    assert table.route("T") is None
    assert not table.unregister(broker_name="broker-a", broker_id=0, broker_addr="h:1")


def test_an_address_holds_one_broker_id():
    table = RouteTable()
    _register(table, 1, "h:1")
    _register(table, 0, "h:1")
    assert table.brokers["broker-a"].broker_addrs == {0: "h:1"}


def test_channel_destroy_removes_the_broker_as_expiry_would():
    table = RouteTable()
    _register(table, 0, "h:1", [TopicConfig("T")], token="p1-0")
    _register(table, 1, "h:2", token="p2-0")
    assert table.on_channel_destroy("h:1", "p1-0")
    assert "h:1" not in table.live
    # the live slave keeps the queues visible, as after expiry
    assert table.route("T").broker_datas[0].broker_addrs == {1: "h:2"}
    assert table.on_channel_destroy("h:2", "p2-0")
    assert table.route("T") is None and table.topics() == [] and table.brokers == {}


def test_channel_destroy_with_a_stale_token_keeps_the_new_registration():
    table = RouteTable()
    _register(table, 0, "h:1", [TopicConfig("T")], token="old-0")
    # restarted at the same address: a new process token
    _register(table, 0, "h:1", [TopicConfig("T")], token="new-0")
    assert not table.on_channel_destroy("h:1", "old-0")
    assert table.live["h:1"].channel_token == "new-0"
    assert table.route("T").broker_datas[0].broker_addrs == {0: "h:1"}


def test_channel_destroy_of_an_unknown_address_or_without_a_token_removes_nothing():
    table = RouteTable()
    _register(table, 0, "h:1", [TopicConfig("T")], token="p1-0")
    assert not table.on_channel_destroy("h:9", "p1-0")
    assert not table.on_channel_destroy("h:1", "")
    # a registration that carried no token is never removed by a channel end
    _register(table, 1, "h:2")
    assert not table.on_channel_destroy("h:2", "")
    assert set(table.live) == {"h:1", "h:2"}


def test_channel_destroy_after_unregister_finds_nothing():
    table = RouteTable()
    _register(table, 0, "h:1", [TopicConfig("T")], token="p1-0")
    assert table.unregister(broker_name="broker-a", broker_id=0, broker_addr="h:1")
    assert not table.on_channel_destroy("h:1", "p1-0")


def _register_remoting(table: RouteTable, broker_id: int, addr: str, remoting_addr: str) -> None:
    table.register(cluster="C", broker_name="broker-a", broker_id=broker_id, broker_addr=addr, ha_server_addr=addr,
                   topic_configs=[TopicConfig("T")], data_version=(1, 0), now_ms=NOW_MS, remoting_addr=remoting_addr)


def test_remoting_addresses_are_kept_per_broker_id_and_go_with_their_registration():
    table = RouteTable()
    _register_remoting(table, 0, "h:1", "h:11")
    _register_remoting(table, 1, "h:2", "h:12")
    route = table.route("T")
    assert route is not None and route.broker_datas[0].remoting_addrs == {0: "h:11", 1: "h:12"}
    _register_remoting(table, 1, "h:2", "")  # restarted without a listener: the old address goes
    assert table.brokers["broker-a"].remoting_addrs == {0: "h:11"}
    _register_remoting(table, 1, "h:2", "h:12")
    table.unregister(broker_name="broker-a", broker_id=1, broker_addr="h:2")
    assert table.brokers["broker-a"].remoting_addrs == {0: "h:11"}


def test_a_node_that_changes_id_takes_its_remoting_address_along():
    table = RouteTable()
    _register_remoting(table, 1, "h:2", "h:12")
    _register_remoting(table, 0, "h:2", "h:12")  # promoted
    assert table.brokers["broker-a"].remoting_addrs == {0: "h:12"}
