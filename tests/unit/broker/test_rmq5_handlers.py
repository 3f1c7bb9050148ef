"""RocketMQ 5's handlers over a real store: what a SendMessage stores, the queue it picks, the
delay level it rounds to, what it refuses; routes and assignments from a name-server route;
the client registry."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from nodes.broker.ha_master import ReplicationState
from nodes.broker.rmq5.clients import CallContext, Rmq5ClientRegistry
from nodes.broker.rmq5.codes import Rmq5Code, status_of
from nodes.broker.rmq5.route import BrokerQueues, Rmq5Routes, topic_message_type
from nodes.broker.rmq5.send import Rmq5Message, Rmq5Send
from nodes.broker.send import SendHandler, SendProcessor
from nodes.common import constants as c
from nodes.common.codes import ResponseCode
from nodes.common.errors import MqError
from nodes.common.types import TopicConfig

from .conftest import DELAYS_MS, SMALL, Broker

CTX = CallContext(client_id="host@1@0@abc", language="PYTHON", version="5.1.2", peer="ipv4:127.0.0.1:5000")
ID = "0102FC0000000155C10B1DD33500000000"


async def _no_registration() -> None:
    return None


def _rmq5_send(broker: Broker, registry: Rmq5ClientRegistry | None = None) -> Rmq5Send:
    processor = SendProcessor(broker.config, broker.store, broker.topics, broker.clock, groups=broker.groups)
    handler = SendHandler(processor, ReplicationState(broker.clock), _no_registration)
    return Rmq5Send(topics=broker.topics, send=handler.handle, registry=registry or Rmq5ClientRegistry(broker.clock.monotonic_ms),
                    now_ms=broker.clock.wall_ms, body_bytes_max=SMALL.message_body_bytes_max, delay_levels_ms=DELAYS_MS)


def _topic(broker: Broker, name: str = "T", queues: int = 4, **fields: object) -> None:
    broker.topics.put(TopicConfig(name, queues, queues, **fields), broker.clock.wall_ms())  # type: ignore[arg-type]


def _send(sender: Rmq5Send, *messages: Rmq5Message):
    return asyncio.run(sender.send(CTX, list(messages), "127.0.0.1"))


def _msg(body: bytes = b"hello", **fields: object) -> Rmq5Message:
    fields.setdefault("topic", "T")
    fields.setdefault("message_id", ID)
    return Rmq5Message(body=body, **fields)  # type: ignore[arg-type]


def test_a_normal_message_is_stored_with_uniq_key_tag_keys_and_user_properties(broker: Broker) -> None:
    _topic(broker)
    answer = _send(_rmq5_send(broker), _msg(tag="TagA", keys=("k1", "k2"), user_properties={"color": "blue"},
                                            born_timestamp_ms=1_700_000_000_000, born_host="10.1.2.3"))
    assert answer.status.code == Rmq5Code.OK and [e.message_id for e in answer.entries] == [ID]
    [record] = broker.records("T", 0)
    assert record.body == b"hello" and record.born_timestamp_ms == 1_700_000_000_000
    assert record.born_host == ("10.1.2.3", 0)
    assert {k: record.properties[k] for k in ("UNIQ_KEY", "TAGS", "KEYS", "color")} == {
        "UNIQ_KEY": ID, "TAGS": "TagA", "KEYS": "k1 k2", "color": "blue"}


def test_normal_messages_go_round_robin_and_each_answer_names_its_queue_offset(broker: Broker) -> None:
    _topic(broker)
    sender = _rmq5_send(broker)
    offsets = [_send(sender, _msg(f"m{i}".encode())).entries[0].queue_offset for i in range(8)]
    assert [broker.store.max_queue_offset("T", q) for q in range(4)] == [2, 2, 2, 2]
    assert offsets == [0, 0, 0, 0, 1, 1, 1, 1]


def test_a_fifo_group_always_lands_in_one_queue(broker: Broker) -> None:
    _topic(broker, "F", 8, order=True)
    sender = _rmq5_send(broker)
    for seq in range(5):
        for group in ("g-a", "g-b", "g-c", "g-d"):
            answer = _send(sender, _msg(f"{group}:{seq}".encode(), topic="F", message_type="FIFO", message_group=group))
            assert answer.status.code == Rmq5Code.OK, answer
    queues_of: dict[str, set[int]] = {}
    for queue_id in range(8):
        bodies = [r.body.decode() for r in broker.records("F", queue_id)]
        for group in {b.split(":")[0] for b in bodies}:
            queues_of.setdefault(group, set()).add(queue_id)
            assert [int(b.split(":")[1]) for b in bodies if b.startswith(group)] == list(range(5))
    assert all(len(q) == 1 for q in queues_of.values()) and len(queues_of) == 4
    record = broker.records("F", next(iter(queues_of["g-a"])))[0]
    assert record.properties[c.RMQ5_PROPERTY_SHARDING_KEY] == "g-a"


def test_a_transaction_message_is_stored_as_a_half_message_and_answered_with_its_transaction_id(
        broker: Broker) -> None:
    _topic(broker, "X", 1, message_type="TRANSACTION")
    answer = _send(_rmq5_send(broker), _msg(topic="X", message_type="TRANSACTION", tag="TagA"))
    assert answer.status.code == Rmq5Code.OK, answer
    assert broker.store.max_queue_offset("X", 0) == 0  # nothing readable until the commit
    [half] = broker.records(c.TRANS_HALF_TOPIC)
    assert answer.entries[0].transaction_id == half.offset_msg_id
    assert half.properties[c.PROPERTY_REAL_TOPIC] == "X" and half.properties[c.PROPERTY_UNIQ_KEY] == ID
    assert half.properties[c.PROPERTY_TRANSACTION_PREPARED] == "true" and half.tags == "TagA"


@pytest.mark.parametrize(("wait_ms", "level"), [(1, 1), (10, 1), (11, 2), (50, 2), (51, 3), (7_200_000 // 100, 18)])
def test_a_delay_rounds_up_to_the_first_level_at_least_as_long(broker: Broker, wait_ms: int, level: int) -> None:
    _topic(broker, "D", message_type="DELAY")
    due = broker.clock.wall_ms() + wait_ms
    answer = _send(_rmq5_send(broker), _msg(topic="D", message_type="DELAY", delivery_timestamp_ms=due))
    assert answer.status.code == Rmq5Code.OK
    assert DELAYS_MS[level - 1] >= wait_ms and (level == 1 or DELAYS_MS[level - 2] < wait_ms)
    [record] = broker.records(c.SCHEDULE_TOPIC, level - 1)  # held in the level's schedule queue
    assert record.properties[c.PROPERTY_DELAY] == str(level) and record.properties[c.PROPERTY_REAL_TOPIC] == "D"


def test_a_delay_already_due_is_stored_at_once_and_one_past_the_longest_level_is_refused(broker: Broker) -> None:
    _topic(broker, "D", 1, message_type="DELAY")
    sender = _rmq5_send(broker)
    now = broker.clock.wall_ms()
    assert _send(sender, _msg(topic="D", message_type="DELAY", delivery_timestamp_ms=now - 5)).status.code == Rmq5Code.OK
    assert len(broker.records("D", 0)) == 1
    too_far = _send(sender, _msg(topic="D", message_type="DELAY", delivery_timestamp_ms=now + DELAYS_MS[-1] + 1))
    assert too_far.status.code == Rmq5Code.ILLEGAL_DELIVERY_TIME and str(DELAYS_MS[-1]) in too_far.status.message


@pytest.mark.parametrize(("fields", "code"), [
    ({"body": b""}, Rmq5Code.MESSAGE_BODY_EMPTY),
    ({"body": b"x" * (SMALL.message_body_bytes_max + 1)}, Rmq5Code.MESSAGE_BODY_TOO_LARGE),
    ({"message_id": " "}, Rmq5Code.ILLEGAL_MESSAGE_ID),
    ({"tag": "a||b"}, Rmq5Code.ILLEGAL_MESSAGE_TAG),
    ({"tag": "  "}, Rmq5Code.ILLEGAL_MESSAGE_TAG),
    ({"keys": ("ok", "")}, Rmq5Code.ILLEGAL_MESSAGE_KEY),
    ({"user_properties": {"UNIQ_KEY": "mine"}}, Rmq5Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    ({"user_properties": {"k": "a\x01b"}}, Rmq5Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    ({"user_properties": {f"k{i}": "v" for i in range(129)}}, Rmq5Code.MESSAGE_PROPERTIES_TOO_LARGE),
    ({"user_properties": {"big": "v" * (16 * 1024)}}, Rmq5Code.MESSAGE_PROPERTIES_TOO_LARGE),
    ({"message_type": "FIFO", "message_group": "g" * 65}, Rmq5Code.ILLEGAL_MESSAGE_GROUP),
    ({"message_type": "FIFO", "message_group": "g"}, Rmq5Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),  # NORMAL topic
    ({"message_type": "FIFO"}, Rmq5Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),  # says FIFO, has no group
    ({"message_type": "TRANSACTION"}, Rmq5Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),  # NORMAL topic
    ({"message_type": "TRANSACTION", "message_group": "g"}, Rmq5Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    ({"topic": "Nope"}, Rmq5Code.TOPIC_NOT_FOUND),
    ({"topic": "SCHEDULE_TOPIC_XXXX"}, Rmq5Code.ILLEGAL_TOPIC),
])
def test_refusals_store_nothing(broker: Broker, fields: dict[str, object], code: Rmq5Code) -> None:
    _topic(broker, queues=1)
    answer = _send(_rmq5_send(broker), _msg(**fields))
    assert (answer.status.code, answer.entries[0].status.code) == (code, code), answer
    assert broker.store.max_queue_offset("T", 0) == 0


def test_a_request_whose_messages_fare_differently_is_multiple_results(broker: Broker) -> None:
    _topic(broker, queues=1)
    answer = _send(_rmq5_send(broker), _msg(), _msg(b""))
    assert answer.status.code == Rmq5Code.MULTIPLE_RESULTS
    assert [e.status.code for e in answer.entries] == [Rmq5Code.OK, Rmq5Code.MESSAGE_BODY_EMPTY]


def test_stored_but_not_durable_enough_answers_are_the_proxy_s_errors() -> None:
    assert status_of(ResponseCode.FLUSH_SLAVE_TIMEOUT).code == Rmq5Code.SLAVE_PERSISTENCE_TIMEOUT
    assert status_of(ResponseCode.SLAVE_NOT_AVAILABLE).code == Rmq5Code.HA_NOT_AVAILABLE
    assert status_of(ResponseCode.FLUSH_DISK_TIMEOUT).code == Rmq5Code.MASTER_PERSISTENCE_TIMEOUT
    assert status_of(ResponseCode.SYSTEM_BUSY).code == Rmq5Code.TOO_MANY_REQUESTS
    assert status_of(ResponseCode.SERVICE_NOT_AVAILABLE).code == Rmq5Code.INTERNAL_SERVER_ERROR


# ---- routes ---------------------------------------------------------------------------------------

def _routes(broker: Broker, brokers: Sequence[BrokerQueues] | None) -> Rmq5Routes:
    async def source(topic: str) -> list[BrokerQueues] | None:
        return None if brokers is None else list(brokers)
    return Rmq5Routes(broker.topics, source, Rmq5ClientRegistry(broker.clock.monotonic_ms))


def test_a_route_lists_every_master_queue_with_its_endpoint_permission_and_the_topic_s_type(broker: Broker) -> None:
    _topic(broker, "F", 2, order=True)
    brokers = [BrokerQueues("broker-a", 2, 3, c.PERM_DEFAULT, "127.0.0.1:9001"),
               BrokerQueues("broker-b", 1, 1, c.PERM_READ, "127.0.0.1:9002"),
               BrokerQueues("broker-c", 4, 4, c.PERM_DEFAULT, "")]  # no RocketMQ 5 endpoint: left out
    answer = asyncio.run(_routes(broker, brokers).query_route(CTX, "F"))
    assert answer.status.code == Rmq5Code.OK
    assert [(q.broker_name, q.queue_id, q.readable, q.writable, q.port) for q in answer.queues] == [
        ("broker-a", 0, True, True, 9001), ("broker-a", 1, True, True, 9001), ("broker-a", 2, False, True, 9001),
        ("broker-b", 0, True, False, 9002)]
    assert {q.accept_types for q in answer.queues} == {("FIFO",)}


def test_an_unrouted_topic_is_topic_not_found_and_a_bad_name_illegal_topic(broker: Broker) -> None:
    assert asyncio.run(_routes(broker, None).query_route(CTX, "T")).status.code == Rmq5Code.TOPIC_NOT_FOUND
    assert asyncio.run(_routes(broker, []).query_route(CTX, "T")).status.code == Rmq5Code.TOPIC_NOT_FOUND
    assert asyncio.run(_routes(broker, []).query_route(CTX, "bad topic")).status.code == Rmq5Code.ILLEGAL_TOPIC


def test_a_route_query_no_name_server_answers_is_an_internal_error_saying_so(broker: Broker) -> None:
    async def unreachable(topic: str) -> list[BrokerQueues] | None:
        raise MqError("name server 127.0.0.1:1 unavailable")
    routes = Rmq5Routes(broker.topics, unreachable, Rmq5ClientRegistry(broker.clock.monotonic_ms))
    answer = asyncio.run(routes.query_route(CTX, "T"))
    assert answer.status.code == Rmq5Code.INTERNAL_SERVER_ERROR and "name server" in answer.status.message


def test_an_assignment_is_one_whole_broker_per_readable_master(broker: Broker) -> None:
    brokers = [BrokerQueues("broker-a", 4, 4, c.PERM_DEFAULT, "127.0.0.1:9001"),
               BrokerQueues("broker-b", 4, 4, c.PERM_WRITE, "127.0.0.1:9002")]
    answer = asyncio.run(_routes(broker, brokers).query_assignment(CTX, "T", "G"))
    assert [(q.broker_name, q.queue_id) for q in answer.queues] == [("broker-a", -1)]
    none = asyncio.run(_routes(broker, brokers[1:]).query_assignment(CTX, "T", "G"))
    assert none.status.code == Rmq5Code.FORBIDDEN
    assert asyncio.run(_routes(broker, brokers).query_assignment(CTX, "T", "")).status.code == \
        Rmq5Code.ILLEGAL_CONSUMER_GROUP


def test_a_topic_s_type_is_its_message_type_else_fifo_for_an_order_topic_else_normal() -> None:
    assert topic_message_type(TopicConfig("T", message_type="DELAY", order=True)) == "DELAY"
    assert topic_message_type(TopicConfig("T", order=True)) == "FIFO"
    assert topic_message_type(TopicConfig("T")) == topic_message_type(None) == "NORMAL"


# ---- the client registry ----------------------------------------------------------------------------

def test_the_registry_records_clients_keeps_the_newest_stream_and_forgets_on_termination(broker: Broker) -> None:
    registry = Rmq5ClientRegistry(broker.clock.monotonic_ms, idle_forget_ms=1_000)
    registry.heartbeat(CTX, "PRODUCER", "")
    registry.settings(CTX, "PRODUCER", "", ("T",))
    first = registry.open_stream(CTX, lambda _cmd: None)
    second = registry.open_stream(CTX, lambda _cmd: None)
    registry.close_stream(CTX.client_id, first)  # an older stream's end leaves the newer one
    [client] = registry.describe()["clients"]
    assert (client["client_type"], client["topics"], client["heartbeats"], client["telemetry_open"]) == (
        "PRODUCER", ["T"], 1, True)
    registry.close_stream(CTX.client_id, second)
    broker.clock.advance_ms(1_001)
    assert registry.describe()["clients"] == []  # idle and streamless: forgotten
    registry.heartbeat(CTX, "PRODUCER", "")
    registry.terminate(CTX, "")
    assert registry.describe()["clients"] == [] and registry.terminated == 1
