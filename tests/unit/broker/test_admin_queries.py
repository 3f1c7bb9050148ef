"""The operator queries and topic deletion called directly with plain values: no transport."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from nodes.broker.admin_queries import (
    UNKNOWN,
    AdminQueryHandler,
    BrokerRuntimeRequest,
    ConsumerConnectionsRequest,
    ConsumeStatsRequest,
    ListConsumerGroupsRequest,
    TopicStatsRequest,
)
from nodes.broker.client_manage import ClientManageHandler, HeartbeatRequest
from nodes.broker.consumers import ClientConnection, ConsumerRegistration, ConsumerRegistry, Subscription
from nodes.broker.ha_master import ReplicationState, SlaveReport
from nodes.broker.last_pullers import LastPullers
from nodes.broker.offsets import ConsumerOffsetTable
from nodes.broker.pull import PullProcessor, PullRequest
from nodes.broker.pull_hold import PullRequestHoldService
from nodes.broker.queue_locks import QueueLockManager
from nodes.broker.rmq5.route import topic_message_type
from nodes.broker.topic_admin import DeleteTopicRequest, TopicAdminHandler
from nodes.common import constants as c
from nodes.common.codes import ResponseCode
from nodes.common.config import BrokerConfig, Timing
from nodes.common.types import MessageQueue, TopicConfig

from .conftest import Broker

G = "g"
LEASE_MS = 60_000


@dataclasses.dataclass
class Admin:
    broker: Broker
    handler: AdminQueryHandler
    consumers: ConsumerRegistry
    offsets: ConsumerOffsetTable
    pulls: PullProcessor
    locks: QueueLockManager
    replication: ReplicationState

    def pull(self, topic: str = "T", queue_id: int = 0, client_id: str = "c1", group: str = G) -> None:
        session = self.pulls.open_session(respond=lambda answer: None)
        session.handle(PullRequest(consumer_group=group, topic=topic, queue_id=queue_id, queue_offset=0,
                                   max_msg_nums=32, has_subscription=True, subscription_expression="*",
                                   client_id=client_id))


def _admin(broker: Broker, config: BrokerConfig | None = None) -> Admin:
    config = config or broker.config
    consumers = ConsumerRegistry(channel_expiry_ms=120_000)
    offsets = ConsumerOffsetTable(broker.store.metadata)
    pullers = LastPullers()
    pulls = PullProcessor(config, broker.store, broker.topics, broker.groups, offsets, broker.clock,
                          PullRequestHoldService(broker.store, broker.clock, 1_000), consumers=consumers,
                          last_pullers=pullers)
    locks = QueueLockManager(lease_ms=LEASE_MS)
    replication = ReplicationState(broker.clock)
    handler = AdminQueryHandler(config=config, store=broker.store, topics=broker.topics, groups=broker.groups,
                                offsets=offsets, consumers=consumers, last_pullers=pullers, clock=broker.clock,
                                replication=replication, queue_locks=locks if config.is_master else None,
                                lock_now_ms=broker.clock.monotonic_ms)
    return Admin(broker, handler, consumers, offsets, pulls, locks, replication)


def _topic(broker: Broker, topic: str = "T", queues: int = 2) -> None:
    broker.topics.put(TopicConfig(topic, queues, queues, c.PERM_DEFAULT), broker.clock.wall_ms())


# --- topic stats ---------------------------------------------------------------------------------

def test_topic_stats_shows_each_queue_with_the_store_time_of_its_last_message(broker):
    admin = _admin(broker)
    _topic(broker)
    broker.put("T", 0)
    broker.clock.advance_ms(500)
    broker.put("T", 0)
    last_ms = broker.records("T", 0)[-1].store_timestamp_ms
    answer = admin.handler.topic_stats(TopicStatsRequest("T"))
    assert answer.code == ResponseCode.SUCCESS and answer.broker_name == broker.config.broker_name
    assert [(q.queue_id, q.min_offset, q.max_offset) for q in answer.queues] == [(0, 0, 2), (1, 0, 0)]
    assert answer.queues[0].last_store_timestamp_ms == last_ms == broker.clock.wall_ms()
    assert answer.queues[1].last_store_timestamp_ms == 0


@pytest.mark.parametrize(("config", "shown"), [
    (TopicConfig("Plain"), "NORMAL"),
    (TopicConfig("Orderly", order=True), "FIFO"),  # unset on an order topic: FIFO, as the 5.x route says
    (TopicConfig("Delayed", order=True, message_type="DELAY"), "DELAY"),
    (TopicConfig("Fifo", message_type="FIFO", order=True), "FIFO"),
])
def test_topic_stats_names_the_message_type_the_5x_route_accepts(broker, config, shown):
    broker.topics.put(config, broker.clock.wall_ms())
    answer = _admin(broker).handler.topic_stats(TopicStatsRequest(config.topic))
    assert answer.code == ResponseCode.SUCCESS
    assert answer.message_type == shown == topic_message_type(config)


@pytest.mark.parametrize(("topic", "code"), [("", ResponseCode.INVALID_ARGUMENT),
                                             ("bad topic!", ResponseCode.INVALID_ARGUMENT),
                                             ("x" * 300, ResponseCode.INVALID_ARGUMENT),
                                             ("Nowhere", ResponseCode.TOPIC_NOT_EXIST)])
def test_topic_stats_refuses_bad_and_unknown_topics(broker, topic, code):
    answer = _admin(broker).handler.topic_stats(TopicStatsRequest(topic))
    assert answer.code == code and answer.remark and not answer.queues


# --- consume stats -------------------------------------------------------------------------------

def test_consume_stats_shows_offsets_lag_last_puller_and_lock_holder(broker):
    admin = _admin(broker)
    _topic(broker)
    for _ in range(3):
        broker.put("T", 0)
    admin.offsets.commit(G, "T", 0, 2)
    admin.pull("T", 0, client_id="c1")
    broker.clock.advance_ms(700)
    admin.locks.try_lock_batch(G, [MessageQueue("T", broker.config.broker_name, 0)], "c2",
                               broker.clock.monotonic_ms())
    broker.clock.advance_ms(1_000)

    answer = admin.handler.consume_stats(ConsumeStatsRequest(G, "T"))
    assert answer.code == ResponseCode.SUCCESS
    q0, q1 = answer.queues
    assert (q0.topic, q0.queue_id, q0.broker_offset, q0.consumer_offset) == ("T", 0, 3, 2)
    assert q0.last_consumed_store_timestamp_ms == broker.records("T", 0)[1].store_timestamp_ms
    assert (q0.last_puller_client_id, q0.last_pull_age_ms) == ("c1", 1_700)
    assert (q0.lock_holder_client_id, q0.lock_lease_left_ms) == ("c2", LEASE_MS - 1_000)
    assert (q1.consumer_offset, q1.last_consumed_store_timestamp_ms) == (-1, 0)
    assert (q1.last_puller_client_id, q1.last_pull_age_ms, q1.lock_holder_client_id) == ("", UNKNOWN, "")

    broker.clock.advance_ms(LEASE_MS)  # the lease ran out: no holder shown
    assert admin.handler.consume_stats(ConsumeStatsRequest(G, "T")).queues[0].lock_holder_client_id == ""


def test_consume_stats_for_every_topic_covers_subscriptions_offsets_and_the_retry_topic(broker):
    admin = _admin(broker)
    _topic(broker, "A", 1)
    _topic(broker, "B", 1)
    _topic(broker, "Other", 1)
    _topic(broker, c.RETRY_GROUP_TOPIC_PREFIX + G, 1)
    admin.consumers.register("c1", ConsumerRegistration(G, subscriptions=(Subscription("A", "*", 1),)), 0)
    admin.offsets.commit(G, "B", 0, 0)
    answer = admin.handler.consume_stats(ConsumeStatsRequest(G))
    assert answer.code == ResponseCode.SUCCESS
    assert [q.topic for q in answer.queues] == ["%RETRY%g", "A", "B"]


def test_consume_stats_refuses_bad_names_unknown_topics_and_unknown_groups(broker):
    admin = _admin(broker)
    _topic(broker)
    handler = admin.handler
    assert handler.consume_stats(ConsumeStatsRequest("")).code == ResponseCode.INVALID_ARGUMENT
    assert handler.consume_stats(ConsumeStatsRequest("g g")).code == ResponseCode.INVALID_ARGUMENT
    assert handler.consume_stats(ConsumeStatsRequest(G, "no/topic")).code == ResponseCode.INVALID_ARGUMENT
    assert handler.consume_stats(ConsumeStatsRequest(G, "Nowhere")).code == ResponseCode.TOPIC_NOT_EXIST
    unknown = handler.consume_stats(ConsumeStatsRequest("nobody"))
    assert unknown.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST and "nobody" in unknown.remark
    assert "nobody" not in broker.groups.groups  # asking created no group


def test_a_slave_answers_consume_stats_from_copied_offsets_with_no_lock_holder(broker):
    slave = _admin(broker, dataclasses.replace(broker.config, broker_id=1))
    _topic(broker, "T", 1)
    broker.put("T", 0)
    slave.offsets.put_all({'["T","g"]': {"0": 1}})
    answer = slave.handler.consume_stats(ConsumeStatsRequest(G))
    assert answer.code == ResponseCode.SUCCESS and answer.broker_id == 1
    assert [(q.broker_offset, q.consumer_offset, q.lock_holder_client_id) for q in answer.queues] == [(1, 1, "")]


# --- connections and groups ----------------------------------------------------------------------

def test_connections_list_each_client_with_its_protocol_language_and_heartbeat_age(broker):
    admin = _admin(broker)
    manage = ClientManageHandler(config=broker.config, registry=admin.consumers, groups=broker.groups,
                                 topics=broker.topics, clock=broker.clock, on_topics_changed=_nothing)
    reg = ConsumerRegistration(G, c.CONSUME_TYPE_PASSIVELY, c.MESSAGE_MODEL_CLUSTERING, "CONSUME_FROM_LAST_OFFSET",
                               (Subscription("T", "TagA", 7),))
    asyncio.run(manage.heartbeat(HeartbeatRequest("grpc-client", (reg,), channel_key="ipv4:127.0.0.1:5000")))
    broker.clock.advance_ms(300)
    asyncio.run(manage.heartbeat(HeartbeatRequest(
        "cpp-client", (reg,), channel_key="remoting:127.0.0.1:6000#3",
        connection=ClientConnection("127.0.0.1:6000", c.PROTOCOL_REMOTING, "CPP", 399))))

    answer = admin.handler.consumer_connections(ConsumerConnectionsRequest(G))
    assert answer.code == ResponseCode.SUCCESS
    assert (answer.consume_type, answer.message_model, answer.consume_from_where) == (
        c.CONSUME_TYPE_PASSIVELY, c.MESSAGE_MODEL_CLUSTERING, "CONSUME_FROM_LAST_OFFSET")
    assert [(x.client_id, x.peer, x.protocol, x.language, x.version, x.last_heartbeat_age_ms)
            for x in answer.connections] == [
        ("cpp-client", "127.0.0.1:6000", "remoting", "CPP", 399, 0),
        ("grpc-client", "ipv4:127.0.0.1:5000", "grpc", "", 0, 300)]
    assert answer.subscriptions == (Subscription("T", "TagA", 7),)


def test_connections_of_a_group_with_no_client_answer_consumer_not_online(broker):
    admin = _admin(broker)
    admin.consumers.register("c1", ConsumerRegistration(G), 0, channel_key="p")
    admin.consumers.unregister("c1", G)
    answer = admin.handler.consumer_connections(ConsumerConnectionsRequest(G))
    assert answer.code == ResponseCode.CONSUMER_NOT_ONLINE and not answer.connections and G in answer.remark
    assert admin.handler.consumer_connections(ConsumerConnectionsRequest("")).code == ResponseCode.INVALID_ARGUMENT


def test_group_list_joins_online_groups_offsets_and_configs(broker):
    admin = _admin(broker)
    _topic(broker, "A", 1)
    admin.consumers.register("c1", ConsumerRegistration("live", subscriptions=(Subscription("A", "*", 1),)), 0,
                             channel_key="p1")
    admin.consumers.register("c2", ConsumerRegistration("live", subscriptions=(Subscription("A", "*", 1),)), 0,
                             channel_key="p2")
    admin.offsets.commit("gone", "A", 0, 0)
    broker.groups.find("configured")
    groups = {g.group: g for g in admin.handler.list_consumer_groups(ListConsumerGroupsRequest()).groups}
    assert set(groups) == {"live", "gone", "configured"}
    assert (groups["live"].online_clients, groups["live"].topics, groups["live"].consume_type) == (
        2, ("A",), c.CONSUME_TYPE_PASSIVELY)
    assert (groups["gone"].online_clients, groups["gone"].topics, groups["gone"].consume_type) == (0, ("A",), "")


# --- broker runtime ------------------------------------------------------------------------------

def test_master_runtime_shows_offsets_slave_lag_disk_and_time_scale(broker):
    config = dataclasses.replace(broker.config, timing=Timing().scaled(0.05), time_scale=0.05)
    admin = _admin(broker, config)
    assert admin.handler.broker_runtime(BrokerRuntimeRequest()).slave_lag_bytes == UNKNOWN  # no slave yet
    broker.put("T", 0)
    broker.put("T", 0)
    end = broker.store.max_phys_offset
    conn = admin.replication.open(SlaveReport(max_phys_offset=0, slave_node_id="s", broker_id=1))
    admin.replication.ack(conn, end // 2)
    answer = admin.handler.broker_runtime(BrokerRuntimeRequest())
    assert answer.code == ResponseCode.SUCCESS and answer.role == "ASYNC_MASTER"
    assert (answer.min_phys_offset, answer.max_phys_offset, answer.slave_lag_bytes) == (0, end, end - end // 2)
    assert 0 < answer.disk_used_ratio <= 1 and answer.disk_free_bytes > 0
    assert answer.time_scale == 0.05 and answer.topics == len(broker.topics.topics)
    assert not answer.writes_refused and answer.master_addr == ""

    admin.replication.writes.close("waiting for the slave")
    held = admin.handler.broker_runtime(BrokerRuntimeRequest())
    assert held.writes_refused and "waiting for the slave" in held.writes_refused_reason


def test_slave_runtime_refuses_writes_and_names_its_master(broker):
    config = dataclasses.replace(broker.config, broker_id=1)
    admin = _admin(broker, config)
    admin.handler._master_addr = lambda: "127.0.0.1:9999"
    answer = admin.handler.broker_runtime(BrokerRuntimeRequest())
    assert (answer.role, answer.master_addr, answer.slave_lag_bytes) == ("SLAVE", "127.0.0.1:9999", UNKNOWN)
    assert answer.writes_refused and "slave" in answer.writes_refused_reason


# --- delete topic --------------------------------------------------------------------------------

async def _nothing() -> None:
    return None


def test_delete_topic_drops_its_config_and_registers_at_once(broker):
    registrations: list[int] = []
    forgotten: list[str] = []

    async def register() -> None:
        registrations.append(1)

    handler = TopicAdminHandler(broker.topics, broker.clock, register, on_topic_deleted=forgotten.append)
    _topic(broker)
    version = broker.topics.data_version
    answer = asyncio.run(handler.delete_topic(DeleteTopicRequest("T")))
    assert answer.code == ResponseCode.SUCCESS and "retention" in answer.remark
    assert broker.topics.get("T") is None and broker.topics.data_version != version
    assert registrations == [1] and forgotten == ["T"]
    again = asyncio.run(handler.delete_topic(DeleteTopicRequest("T")))
    assert again.code == ResponseCode.TOPIC_NOT_EXIST and registrations == [1]


@pytest.mark.parametrize("topic", ["", "bad topic", c.AUTO_CREATE_TOPIC_KEY, "SCHEDULE_TOPIC_XXXX",
                                   "RMQ_SYS_TRANS_HALF_TOPIC", "%RETRY%g", "%DLQ%g"])
def test_delete_topic_refuses_bad_system_retry_and_dlq_topics(broker, topic):
    handler = TopicAdminHandler(broker.topics, broker.clock, _nothing)
    for name in ("%RETRY%g", "%DLQ%g", "SCHEDULE_TOPIC_XXXX"):
        _topic(broker, name, 1)
    answer = asyncio.run(handler.delete_topic(DeleteTopicRequest(topic)))
    assert answer.code == ResponseCode.INVALID_ARGUMENT and answer.remark
    for name in ("%RETRY%g", "%DLQ%g", "SCHEDULE_TOPIC_XXXX"):
        assert broker.topics.get(name) is not None


def test_a_slave_refuses_to_delete_a_topic(broker):
    handler = TopicAdminHandler(broker.topics, broker.clock, _nothing, is_master=False, broker_name="broker-a")
    _topic(broker)
    answer = asyncio.run(handler.delete_topic(DeleteTopicRequest("T")))
    assert answer.code == ResponseCode.NO_PERMISSION and "master" in answer.remark
    assert broker.topics.get("T") is not None
