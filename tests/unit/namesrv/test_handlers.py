"""The name server's request handling with plain values: no gRPC."""

from __future__ import annotations

from nodes.common.clock import FakeClock
from nodes.common.codes import ResponseCode
from nodes.common.types import TopicConfig
from nodes.namesrv.handlers import BrokerRef, NameServerHandler, RegisterBrokerRequest
from nodes.namesrv.route_table import RouteTable

MASTER = "127.0.0.1:10911"
SLAVE = "127.0.0.1:10921"


def _register(handler: NameServerHandler, broker_id: int, addr: str, token: str = "t-0"):
    return handler.register_broker(RegisterBrokerRequest(
        cluster_name="c", broker_name="broker-a", broker_id=broker_id, broker_addr=addr, ha_server_addr=addr,
        topic_configs=(TopicConfig("T", 4, 4),), data_version=(1, 1), node_id=f"broker-a-{broker_id}",
        channel_token=token))


def test_registration_routes_and_the_slaves_master():
    handler = NameServerHandler(RouteTable(), FakeClock())
    assert handler.route("T").code == ResponseCode.TOPIC_ROUTE_NOT_EXIST
    assert _register(handler, 0, MASTER).code == ResponseCode.SUCCESS
    assert _register(handler, 1, SLAVE).master_addr == MASTER
    route = handler.route("T")
    assert route.code == ResponseCode.SUCCESS and route.route is not None
    assert route.route.broker_datas[0].broker_addrs == {0: MASTER, 1: SLAVE}
    info = handler.cluster_info()
    assert [live.broker_addr for live in info.live] == [MASTER, SLAVE] and info.topics == ("T",)


def test_a_registration_needs_a_name_an_address_and_an_id():
    handler = NameServerHandler(RouteTable(), FakeClock())
    assert _register(handler, -1, MASTER).code == ResponseCode.INVALID_ARGUMENT
    assert _register(handler, 0, "").code == ResponseCode.INVALID_ARGUMENT


def test_a_closed_channel_removes_its_registration_unless_the_server_is_stopping():
    handler = NameServerHandler(RouteTable(), FakeClock())
    _register(handler, 0, MASTER, token="t-1")
    channel = BrokerRef("broker-a", 0, MASTER, channel_token="t-1")
    assert handler.channel_opened(channel) and handler.open_channels == 1
    handler.channel_closed(channel)
    assert handler.open_channels == 0 and handler.route("T").code == ResponseCode.TOPIC_ROUTE_NOT_EXIST

    _register(handler, 0, MASTER, token="t-2")
    assert not handler.channel_opened(BrokerRef("broker-a", 0, MASTER, channel_token="old"))
    handler.close_channels()
    handler.channel_closed(BrokerRef("broker-a", 0, MASTER, channel_token="t-2"))
    assert handler.route("T").code == ResponseCode.SUCCESS


def test_unregister_removes_the_broker():
    handler = NameServerHandler(RouteTable(), FakeClock())
    _register(handler, 0, MASTER)
    assert handler.unregister_broker(BrokerRef("broker-a", 0, MASTER)) == ResponseCode.SUCCESS
    assert handler.route("T").code == ResponseCode.TOPIC_ROUTE_NOT_EXIST


def test_a_registration_carries_the_remoting_address_into_the_route():
    handler = NameServerHandler(RouteTable(), FakeClock())
    handler.register_broker(RegisterBrokerRequest(
        cluster_name="c", broker_name="broker-a", broker_id=0, broker_addr=MASTER,
        topic_configs=(TopicConfig("T", 4, 4),), data_version=(1, 1), remoting_addr="127.0.0.1:20911"))
    route = handler.route("T").route
    assert route is not None and route.broker_datas[0].remoting_addrs == {0: "127.0.0.1:20911"}
    assert route.broker_datas[0].broker_addrs == {0: MASTER}


def _register_topics(handler: NameServerHandler, broker_name: str, addr: str, topics: tuple[str, ...],
                     version: int, broker_id: int = 0):
    return handler.register_broker(RegisterBrokerRequest(
        cluster_name="c", broker_name=broker_name, broker_id=broker_id, broker_addr=addr,
        topic_configs=tuple(TopicConfig(t, 4, 4) for t in topics), data_version=(1, version)))


def test_topic_list_names_every_routed_topic_and_a_master_dropping_a_topic_drops_its_route():
    handler = NameServerHandler(RouteTable(), FakeClock(), time_scale=0.05)
    _register_topics(handler, "broker-a", MASTER, ("A", "Shared"), 1)
    _register_topics(handler, "broker-b", "127.0.0.1:10931", ("B", "Shared"), 1)
    listed = handler.topic_list()
    assert listed.topics == ("A", "B", "Shared") and listed.time_scale == 0.05
    assert handler.cluster_info().time_scale == 0.05  # what a client asks at start

    _register_topics(handler, "broker-a", MASTER, ("Shared",), 2)  # broker-a deleted A
    assert handler.route("A").code == ResponseCode.TOPIC_ROUTE_NOT_EXIST
    shared = handler.route("Shared").route
    assert shared is not None and sorted(q.broker_name for q in shared.queue_datas) == ["broker-a", "broker-b"]
    assert handler.topic_list().topics == ("B", "Shared")
    # a slave's table is never taken, so it cannot drop a topic either
    _register_topics(handler, "broker-b", "127.0.0.1:10932", (), 3, broker_id=1)
    assert handler.route("B").code == ResponseCode.SUCCESS
