"""The name server's remoting adapter: 105 with fastjson's TopicRouteData, 17, and 3 for the rest,
through the app's real listener."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

from support.namesrv_remoting import route_from_body

from nodes.common.clock import FakeClock
from nodes.common.codes import ResponseCode
from nodes.common.config import NamesrvConfig
from nodes.common.types import TopicConfig
from nodes.namesrv.app import NamesrvApp
from nodes.namesrv.handlers import NameServerHandler, RegisterBrokerRequest
from nodes.namesrv.route_table import BrokerData, QueueData, TopicRoute
from nodes.namesrv.transport.remoting import topic_route_json
from nodes.remoting.command import RemotingCommand, decode, encode


def test_the_route_body_is_fastjson_text_with_bare_integer_keys():
    route = TopicRoute(
        queue_datas=[QueueData("broker-a", 4, 4, 6, 0)],
        broker_datas=[BrokerData("DefaultCluster", "broker-a", {0: "127.0.0.1:1", 1: "127.0.0.1:2"},
                                 {0: "127.0.0.1:10911", 1: "127.0.0.1:10912"})])
    assert topic_route_json(route) == (
        '{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10912"},"brokerName":"broker-a",'
        '"cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,'
        '"readQueueNums":4,"writeQueueNums":4,"topicSysFlag":0}]}')


def test_a_broker_without_a_remoting_address_is_left_out_of_broker_addrs():
    route = TopicRoute(
        queue_datas=[QueueData("a", 4, 4, 6), QueueData("b", 2, 2, 6)],
        broker_datas=[BrokerData("C", "a", {0: "g:1", 1: "g:2"}, {1: "r:2"}), BrokerData("C", "b", {0: "g:3"})])
    data = route_from_body(topic_route_json(route).encode())
    assert [(b["brokerName"], b["brokerAddrs"]) for b in data["brokerDatas"]] == [("a", {"1": "r:2"}), ("b", {})]
    assert [q["brokerName"] for q in data["queueDatas"]] == ["a", "b"]


def test_names_are_escaped_as_json_strings():
    route = TopicRoute([QueueData('q"1', 1, 1, 6)], [BrokerData("c\\", 'q"1', {0: "g"}, {0: "r"})])
    data = route_from_body(topic_route_json(route).encode())
    assert data["brokerDatas"][0]["cluster"] == "c\\" and data["queueDatas"][0]["brokerName"] == 'q"1'


async def _ask(port: int, cmd: RemotingCommand) -> RemotingCommand:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(encode(cmd))
        (length,) = struct.unpack(">i", await reader.readexactly(4))
        return decode(await reader.readexactly(length))
    finally:
        writer.close()


def _register(handler: NameServerHandler, broker_id: int, remoting_addr: str) -> None:
    handler.register_broker(RegisterBrokerRequest(
        cluster_name="DefaultCluster", broker_name="broker-a", broker_id=broker_id,
        broker_addr=f"127.0.0.1:{100 + broker_id}", topic_configs=(TopicConfig("T", 4, 4),), data_version=(1, 1),
        remoting_addr=remoting_addr))


def test_the_app_answers_routes_unknown_topics_and_unknown_codes_on_its_listener(tmp_path: Path):
    async def scenario() -> None:
        app = NamesrvApp(NamesrvConfig(run_dir=str(tmp_path)), asyncio.Event(), FakeClock())
        await app.start()
        try:
            port = int(app.remoting_addr.rpartition(":")[2])
            assert port > 0 and app.status().details["remoting_addr"] == app.remoting_addr
            _register(app.handler, 0, "127.0.0.1:10911")
            _register(app.handler, 1, "")  # a slave without a listener: not in brokerAddrs

            found = await _ask(port, RemotingCommand(code=105, opaque=7, ext={"topic": "T"}))
            assert (found.code, found.opaque, found.is_response) == (ResponseCode.SUCCESS, 7, True)
            data = route_from_body(found.body)
            assert data["brokerDatas"] == [{"brokerAddrs": {"0": "127.0.0.1:10911"}, "brokerName": "broker-a",
                                            "cluster": "DefaultCluster"}]
            assert data["queueDatas"] == [{"brokerName": "broker-a", "perm": 6, "readQueueNums": 4,
                                           "writeQueueNums": 4, "topicSysFlag": 0}]
            assert data["filterServerTable"] == {}

            missing = await _ask(port, RemotingCommand(code=105, opaque=8, ext={"topic": "Nope"}))
            assert missing.code == ResponseCode.TOPIC_NOT_EXIST and "Nope" in (missing.remark or "")

            other = await _ask(port, RemotingCommand(code=103, opaque=9))  # REGISTER_BROKER: gRPC only
            assert other.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "103" in (other.remark or "")

            no_topic = await _ask(port, RemotingCommand(code=105, opaque=10))
            assert no_topic.code == ResponseCode.SYSTEM_ERROR and "topic" in (no_topic.remark or "")
        finally:
            await app.stop()
        try:
            await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return
        raise AssertionError("the remoting listener still accepts connections after stop")

    asyncio.run(asyncio.wait_for(scenario(), 20))
