"""The operator requests over remoting (what RocketMQ 4.x's mqadmin sends a broker) -> the same
handlers gRPC calls: UPDATE_AND_CREATE_TOPIC (17, refused by a slave like a delete), UPDATE_AND_CREATE_SUBSCRIPTIONGROUP
(200, mqadmin updateSubGroup), DELETE_TOPIC_IN_BROKER (215),
GET_TOPIC_STATS_INFO (202), GET_CONSUME_STATS (208), GET_CONSUMER_CONNECTION_LIST (203) and
GET_BROKER_RUNTIME_INFO (28).

Answers carry RocketMQ's bodies as fastjson writes them: keys in alphabetical order, and the
maps keyed by a MessageQueue (TopicStatsTable's and ConsumeStats' `offsetTable`) written with
the queue's JSON object as the key, which is not standard JSON but what a Java admin tool
reads (`object_keyed_map_from_text` reads it back). Where RocketMQ's body has no place for
mqlab's extra facts (last puller, lock holder) they stay on gRPC. GET_BROKER_RUNTIME_INFO's
KVTable uses RocketMQ's key where one exists (commitLogMinOffset, commitLogMaxOffset,
commitLogDiskRatio, masterAddr) and names the others as RocketMQ would.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from nodes.broker.admin_queries import (
    BrokerRuntimeRequest,
    BrokerRuntimeResponse,
    ConsumerConnectionsRequest,
    ConsumerConnectionsResponse,
    ConsumeStatsRequest,
    ConsumeStatsResponse,
    TopicStatsRequest,
    TopicStatsResponse,
)
from nodes.broker.group_admin import UpdateGroupRequest
from nodes.broker.pull import subscription_tags
from nodes.broker.request_table import RequestKind, RequestTable
from nodes.broker.topic_admin import CreateTopicRequest, DeleteTopicRequest
from nodes.broker.transport import remoting_codes
from nodes.broker.transport.remoting_json import BodyError, dumps, loads
from nodes.common import constants as c
from nodes.common.codes import ResponseCode
from nodes.common.types import TopicConfig
from nodes.remoting.command import RemotingCommand
from nodes.remoting.server import Channel
from nodes.store.record import tag_hash

LANGUAGE_UNKNOWN = "OTHER"  # RocketMQ's LanguageCode for a client that named none (mqlab's gRPC clients)


class RemotingAdmin:
    def __init__(self, table: RequestTable) -> None:
        self._create_topic = table[RequestKind.CREATE_TOPIC]
        self._delete_topic = table[RequestKind.DELETE_TOPIC]
        self._topic_stats = table[RequestKind.TOPIC_STATS]
        self._consume_stats = table[RequestKind.CONSUME_STATS]
        self._connections = table[RequestKind.CONSUMER_CONNECTIONS]
        self._runtime = table[RequestKind.BROKER_RUNTIME]
        self._update_group = table[RequestKind.UPDATE_SUBSCRIPTION_GROUP]

    async def create_topic(self, cmd: RemotingCommand, channel: Channel) -> RemotingCommand:
        """CreateTopicRequestHeader: topic, readQueueNums, writeQueueNums, perm (required, as
        RocketMQ's @CFNotNull), topicSysFlag, order, and RocketMQ 5's attributes
        (`+message.type=FIFO`; without it a topic keeps its stored type)."""
        config = TopicConfig(cmd.ext_str("topic"), cmd.ext_int("readQueueNums"), cmd.ext_int("writeQueueNums"),
                             cmd.ext_int("perm"), cmd.ext_int("topicSysFlag", 0), cmd.ext_bool("order"),
                             topic_attributes(cmd.ext_str("attributes", "")).get(MESSAGE_TYPE_ATTRIBUTE, ""))
        answer = await self._create_topic(CreateTopicRequest(config))
        return remoting_codes.answer(cmd, answer.code, answer.remark)

    def update_group(self, cmd: RemotingCommand, channel: Channel) -> RemotingCommand:
        """The body is a whole SubscriptionGroupConfig as fastjson writes it; of its fields mqlab
        keeps `consumeMessageOrderly` and `retryMaxTimes`. As in RocketMQ the body replaces the
        group's config, so a field it leaves out takes RocketMQ's default."""
        body = loads(cmd.body)
        if not isinstance(body, dict) or not isinstance(body.get("groupName"), str):
            raise BodyError("the body must be a SubscriptionGroupConfig object with a groupName")
        orderly = body.get("consumeMessageOrderly", False)
        retry_max_times = body.get("retryMaxTimes", c.GROUP_RETRY_MAX_TIMES)
        if not isinstance(orderly, bool) or isinstance(retry_max_times, bool) or not isinstance(retry_max_times, int):
            raise BodyError("consumeMessageOrderly must be a boolean and retryMaxTimes an integer")
        answer = self._update_group(UpdateGroupRequest(body["groupName"], consume_message_orderly=orderly,
                                                       retry_max_times=retry_max_times))
        return remoting_codes.answer(cmd, answer.code, answer.remark)

    async def delete_topic(self, cmd: RemotingCommand, channel: Channel) -> RemotingCommand:
        answer = await self._delete_topic(DeleteTopicRequest(cmd.ext_str("topic")))
        return remoting_codes.answer(cmd, answer.code, answer.remark)

    def topic_stats(self, cmd: RemotingCommand, channel: Channel) -> RemotingCommand:
        answer: TopicStatsResponse = self._topic_stats(TopicStatsRequest(cmd.ext_str("topic")))
        if answer.code != ResponseCode.SUCCESS:
            return remoting_codes.answer(cmd, answer.code, answer.remark)
        return remoting_codes.answer(cmd, answer.code, body=topic_stats_body(cmd.ext_str("topic"), answer))

    def consume_stats(self, cmd: RemotingCommand, channel: Channel) -> RemotingCommand:
        answer: ConsumeStatsResponse = self._consume_stats(
            ConsumeStatsRequest(cmd.ext_str("consumerGroup"), cmd.ext_str("topic", "")))
        if answer.code != ResponseCode.SUCCESS:
            return remoting_codes.answer(cmd, answer.code, answer.remark)
        return remoting_codes.answer(cmd, answer.code, body=consume_stats_body(answer))

    def connections(self, cmd: RemotingCommand, channel: Channel) -> RemotingCommand:
        answer: ConsumerConnectionsResponse = self._connections(
            ConsumerConnectionsRequest(cmd.ext_str("consumerGroup")))
        if answer.code != ResponseCode.SUCCESS:
            return remoting_codes.answer(cmd, answer.code, answer.remark)
        return remoting_codes.answer(cmd, answer.code, body=connections_body(answer))

    def runtime(self, cmd: RemotingCommand, channel: Channel) -> RemotingCommand:
        answer: BrokerRuntimeResponse = self._runtime(BrokerRuntimeRequest())
        return remoting_codes.answer(cmd, answer.code, answer.remark, body=runtime_body(answer))


# --- headers and bodies ---------------------------------------------------------------------------

MESSAGE_TYPE_ATTRIBUTE = "message.type"


def topic_attributes(text: str) -> dict[str, str]:
    """RocketMQ 5's attribute string, `+key=value` entries joined by commas (a `-key` entry, which
    deletes an attribute, sets nothing here)."""
    attributes = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = entry[1:].partition("=")
        if entry.startswith("+") and sep:
            attributes[key] = value
    return attributes


def _mq_key(topic: str, broker_name: str, queue_id: int) -> dict[str, Any]:
    return {"brokerName": broker_name, "queueId": queue_id, "topic": topic}


def object_keyed_map(entries: Iterable[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    """A map whose keys are objects, as fastjson writes a Map<MessageQueue, ...>."""
    return "{" + ",".join(f"{dumps(key).decode()}:{dumps(value).decode()}" for key, value in entries) + "}"


def object_keyed_map_from_text(text: str) -> list[tuple[Any, Any]]:
    """The (key, value) pairs of a map written by `object_keyed_map` (keys may be any JSON)."""
    decoder = json.JSONDecoder()
    pairs: list[tuple[Any, Any]] = []
    pos = _skip(text, 0)
    if text[pos:pos + 1] != "{":
        raise BodyError("an object-keyed map must start with '{'")
    pos = _skip(text, pos + 1)
    if text[pos:pos + 1] == "}":
        return pairs
    while True:
        key, pos = decoder.raw_decode(text, pos)
        pos = _skip(text, pos)
        if text[pos:pos + 1] != ":":
            raise BodyError(f"expected ':' at {pos} of an object-keyed map")
        value, pos = decoder.raw_decode(text, _skip(text, pos + 1))
        pairs.append((key, value))
        pos = _skip(text, pos)
        if text[pos:pos + 1] == "}":
            return pairs
        if text[pos:pos + 1] != ",":
            raise BodyError(f"expected ',' or '}}' at {pos} of an object-keyed map")
        pos = _skip(text, pos + 1)


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def topic_stats_body(topic: str, answer: TopicStatsResponse) -> bytes:
    """TopicStatsTable: {"offsetTable":{MessageQueue: TopicOffset}}."""
    table = object_keyed_map(
        (_mq_key(topic, answer.broker_name, q.queue_id),
         {"lastUpdateTimestamp": q.last_store_timestamp_ms, "maxOffset": q.max_offset, "minOffset": q.min_offset})
        for q in answer.queues)
    return f'{{"offsetTable":{table}}}'.encode()


def consume_stats_body(answer: ConsumeStatsResponse) -> bytes:
    """ConsumeStats: {"consumeTps":0.0,"offsetTable":{MessageQueue: OffsetWrapper}}. A queue the
    group never committed shows consumerOffset 0, as RocketMQ's does; mqlab keeps no TPS."""
    table = object_keyed_map(
        (_mq_key(q.topic, answer.broker_name, q.queue_id),
         {"brokerOffset": q.broker_offset, "consumerOffset": max(0, q.consumer_offset),
          "lastTimestamp": q.last_consumed_store_timestamp_ms})
        for q in answer.queues)
    return f'{{"consumeTps":0.0,"offsetTable":{table}}}'.encode()


def connections_body(answer: ConsumerConnectionsResponse) -> bytes:
    """ConsumerConnection: the connection set, the group's consume settings and its
    subscriptionTable (topic -> SubscriptionData)."""
    return dumps({
        "connectionSet": [{"clientAddr": conn.peer, "clientId": conn.client_id,
                           "language": conn.language or LANGUAGE_UNKNOWN, "version": conn.version}
                          for conn in answer.connections],
        "consumeFromWhere": answer.consume_from_where or None,
        "consumeType": answer.consume_type,
        "messageModel": answer.message_model,
        "subscriptionTable": {
            sub.topic: {"classFilterMode": False, "codeSet": [tag_hash(t) for t in subscription_tags(sub.expression)],
                        "expressionType": "TAG", "subString": sub.expression or "*", "subVersion": sub.sub_version,
                        "tagsSet": subscription_tags(sub.expression), "topic": sub.topic}
            for sub in answer.subscriptions},
    })


def runtime_body(answer: BrokerRuntimeResponse) -> bytes:
    """KVTable: {"table":{name: text}} (every value a string, as RocketMQ's)."""
    table = {
        "brokerName": answer.broker_name, "brokerId": answer.broker_id, "brokerRole": answer.role,
        "commitLogMinOffset": answer.min_phys_offset, "commitLogMaxOffset": answer.max_phys_offset,
        "commitLogDiskRatio": answer.disk_used_ratio, "diskFreeBytes": answer.disk_free_bytes,
        "slaveLagBytes": answer.slave_lag_bytes, "writesRefused": "true" if answer.writes_refused else "false",
        "writesRefusedReason": answer.writes_refused_reason, "timeScale": answer.time_scale,
        "topicCount": answer.topics, "storeErrors": answer.store_errors, "masterAddr": answer.master_addr,
    }
    return dumps({"table": {key: str(value) for key, value in sorted(table.items())}})
