"""The operator answers' remoting bodies: RocketMQ's shapes as fastjson writes them."""

from __future__ import annotations

import json

import pytest

from nodes.broker.admin_queries import (
    BrokerRuntimeResponse,
    ConsumerConnection,
    ConsumerConnectionsResponse,
    ConsumeStatsResponse,
    QueueConsumeStats,
    QueueStats,
    TopicStatsResponse,
)
from nodes.broker.consumers import Subscription
from nodes.broker.transport.convert import peer_address
from nodes.broker.transport.remoting_admin import (
    connections_body,
    consume_stats_body,
    object_keyed_map,
    object_keyed_map_from_text,
    runtime_body,
    topic_attributes,
    topic_stats_body,
)
from nodes.broker.transport.remoting_json import BodyError
from nodes.common.codes import ResponseCode
from nodes.store.record import tag_hash


def test_an_object_keyed_map_reads_back_what_it_wrote():
    entries = [({"brokerName": "b", "queueId": 0, "topic": "T"}, {"maxOffset": 3}),
               ({"brokerName": "b", "queueId": 1, "topic": "T, {odd}"}, {"maxOffset": 0})]
    text = object_keyed_map(entries)
    assert text.startswith('{{"brokerName":"b","queueId":0,"topic":"T"}:{"maxOffset":3},')
    assert object_keyed_map_from_text(text) == entries
    assert object_keyed_map_from_text(" { } ") == []
    with pytest.raises(BodyError):
        object_keyed_map_from_text('{{"a":1} {"b":2}}')


def test_topic_stats_body_is_a_topic_stats_table():
    answer = TopicStatsResponse(ResponseCode.SUCCESS, broker_name="broker-a",
                                queues=(QueueStats(0, 1, 5, 1_700), QueueStats(1, 0, 0, 0)))
    body = topic_stats_body("T", answer).decode()
    assert body.startswith('{"offsetTable":{') and body.endswith("}}")
    pairs = object_keyed_map_from_text(body[len('{"offsetTable":'):-1])
    assert pairs[0] == ({"brokerName": "broker-a", "queueId": 0, "topic": "T"},
                        {"lastUpdateTimestamp": 1_700, "maxOffset": 5, "minOffset": 1})


def test_consume_stats_body_shows_a_missing_offset_as_zero():
    answer = ConsumeStatsResponse(ResponseCode.SUCCESS, broker_name="broker-a", queues=(
        QueueConsumeStats("T", 0, 9, -1, 0), QueueConsumeStats("T", 1, 4, 4, 1_234)))
    body = consume_stats_body(answer).decode()
    assert body.startswith('{"consumeTps":0.0,"offsetTable":')
    pairs = object_keyed_map_from_text(body[len('{"consumeTps":0.0,"offsetTable":'):-1])
    assert [value for _, value in pairs] == [{"brokerOffset": 9, "consumerOffset": 0, "lastTimestamp": 0},
                                            {"brokerOffset": 4, "consumerOffset": 4, "lastTimestamp": 1_234}]


def test_connections_body_names_an_unknown_language_other_and_splits_tags():
    answer = ConsumerConnectionsResponse(
        ResponseCode.SUCCESS, consume_type="CONSUME_PASSIVELY", message_model="CLUSTERING",
        connections=(ConsumerConnection("grpc-client", "ipv4:127.0.0.1:1", "grpc", "", 0, 5),),
        subscriptions=(Subscription("T", "a || b", 3), Subscription("U", "*", 1)))
    body = json.loads(connections_body(answer))
    assert body["connectionSet"] == [{"clientAddr": "ipv4:127.0.0.1:1", "clientId": "grpc-client",
                                      "language": "OTHER", "version": 0}]
    assert body["consumeFromWhere"] is None
    assert body["subscriptionTable"]["T"]["tagsSet"] == ["a", "b"]
    assert body["subscriptionTable"]["T"]["codeSet"] == [tag_hash("a"), tag_hash("b")]
    assert body["subscriptionTable"]["U"]["tagsSet"] == [] and body["subscriptionTable"]["U"]["subString"] == "*"


def test_runtime_body_is_a_kv_table_of_strings():
    answer = BrokerRuntimeResponse(ResponseCode.SUCCESS, broker_name="broker-a", role="SLAVE", max_phys_offset=42,
                                   slave_lag_bytes=-1, writes_refused=True, writes_refused_reason="a slave",
                                   master_addr="127.0.0.1:1", time_scale=0.05)
    table = json.loads(runtime_body(answer))["table"]
    assert all(isinstance(value, str) for value in table.values())
    assert (table["brokerRole"], table["commitLogMaxOffset"], table["slaveLagBytes"], table["writesRefused"],
            table["masterAddr"], table["timeScale"]) == ("SLAVE", "42", "-1", "true", "127.0.0.1:1", "0.05")


def test_a_grpc_peer_shows_as_its_address():
    assert peer_address("ipv4:127.0.0.1:5000") == "127.0.0.1:5000"
    assert peer_address("ipv6:[::1]:5000") == "[::1]:5000"
    assert peer_address("127.0.0.1:5000") == "127.0.0.1:5000"


def test_topic_attributes_read_rocketmq5s_attribute_string():
    assert topic_attributes("+message.type=FIFO") == {"message.type": "FIFO"}
    assert topic_attributes(" +a=1, -b ,+message.type=DELAY,") == {"a": "1", "message.type": "DELAY"}
    assert topic_attributes("") == {} and topic_attributes("+novalue") == {}
