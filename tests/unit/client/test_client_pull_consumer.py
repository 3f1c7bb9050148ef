"""PullConsumer: arguments, pulls, offsets and queue offsets through a fake broker (no sockets)."""

from __future__ import annotations

import pytest

from nodes.client import MessageQueue, PullConsumer, PullStatus
from nodes.client.pull_api import PullApi
from nodes.client.pull_consumer import check_pull_args
from nodes.common import constants as c
from nodes.common import errors
from nodes.common.config import Timing
from nodes.common.errors import BrokerNotFoundError, ClientStateError, InvalidArgumentError
from nodes.store.record import MessageToStore, encode_record
from proto import broker_pb2, common_pb2

MQ = MessageQueue("T", "broker-a", 1)


def record(queue_offset, tags=None):
    props = {c.PROPERTY_TAGS: tags} if tags else {}
    return encode_record(MessageToStore(topic="T", queue_id=1, body=b"m%d" % queue_offset, properties=props),
                         queue_offset=queue_offset, phys_offset=queue_offset * 1000, store_timestamp_ms=5)


class Broker:
    """Answers every broker method from a small in-memory state."""

    def __init__(self):
        self.records = [record(i, tags="a" if i % 2 == 0 else "b") for i in range(5)]
        self.offsets: dict[tuple[str, str, int], int] = {}
        self.pull_code = None
        self.offset_code = None

    def __call__(self, addr, method, request):
        if method == "Pull":
            if self.pull_code is not None:
                return broker_pb2.PullResponse(code=self.pull_code, remark="OFFSET_OVERFLOW_ONE",
                                               next_begin_offset=request["queue_offset"])
            batch = self.records[request["queue_offset"]:request["queue_offset"] + request["max_msg_nums"]]
            return broker_pb2.PullResponse(
                code=common_pb2.SUCCESS, remark="FOUND", records=b"".join(batch), record_count=len(batch),
                next_begin_offset=request["queue_offset"] + len(batch), min_offset=0, max_offset=len(self.records))
        if method == "QueryConsumerOffset":
            if self.offset_code is not None:
                return broker_pb2.QueryConsumerOffsetResponse(code=self.offset_code, remark="x")
            key = (request.consumer_group, request.topic, request.queue_id)
            if key not in self.offsets:
                return broker_pb2.QueryConsumerOffsetResponse(code=common_pb2.QUERY_NOT_FOUND)
            return broker_pb2.QueryConsumerOffsetResponse(code=common_pb2.SUCCESS, offset=self.offsets[key])
        if method == "UpdateConsumerOffset":
            if self.offset_code is not None:
                return broker_pb2.UpdateConsumerOffsetResponse(code=self.offset_code, remark="x")
            self.offsets[(request.consumer_group, request.topic, request.queue_id)] = request.offset
            return broker_pb2.UpdateConsumerOffsetResponse(code=common_pb2.SUCCESS)
        if method == "GetQueueOffset":
            value = {broker_pb2.MIN: 0, broker_pb2.MAX: 5, broker_pb2.BY_TIMESTAMP: request.timestamp_ms % 5}
            return broker_pb2.GetQueueOffsetResponse(code=common_pb2.SUCCESS, offset=value[request.kind])
        raise AssertionError(method)


@pytest.fixture
def make_consumer(fakes, wired_instance_factory):
    made: list[PullConsumer] = []

    def make(routes=None, start=True, **kw):
        broker = Broker()
        consumer = PullConsumer("127.0.0.1:9876", "cg", **kw)
        inst = wired_instance_factory({"T": fakes.two_broker_route()} if routes is None else routes, broker,
                                      timing=consumer.timing)
        consumer._instance = inst
        consumer._api = PullApi(inst, "cg")
        made.append(consumer)
        if start:
            consumer.start()
        return consumer, inst, broker

    yield make
    for consumer in made:
        consumer.shutdown()


def calls(inst, method):
    return [(addr, req) for addr, m, req in inst.calls if m == method]


# --- arguments --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("args", "match"), [
    (("T", 0, 32, "*"), "MessageQueue"),
    ((MQ, -1, 32, "*"), "offset must be"),
    ((MQ, True, 32, "*"), "offset must be"),
    ((MQ, 0, 0, "*"), "positive"),
    ((MQ, 0, -5, "*"), "positive"),
    ((MQ, 0, 1025, "*"), "1024"),
    ((MQ, 0, 32, 7), "tag expression"),
])
def test_check_pull_args_rejects(args, match):
    with pytest.raises(InvalidArgumentError, match=match) as info:
        check_pull_args(*args)
    assert isinstance(info.value, ValueError)


def test_check_pull_args_accepts_limits_and_defaults_expression():
    assert check_pull_args(MQ, 0, 1024, None) == "*"
    assert check_pull_args(MQ, 9, 1, "a || b") == "a || b"


def test_bad_pull_arguments_send_nothing(make_consumer):
    consumer, inst, _ = make_consumer()
    for bad in ((MQ, -1), (MQ, 0, 2000)):
        with pytest.raises(InvalidArgumentError):
            consumer.pull(*bad)
        with pytest.raises(InvalidArgumentError):
            consumer.pull_block_if_not_found(*bad)
    with pytest.raises(InvalidArgumentError, match="timeout_ms"):
        consumer.pull_block_if_not_found(MQ, 0, timeout_ms=0)
    assert inst.calls == []


def test_constructor_rejects_bad_group():
    with pytest.raises(InvalidArgumentError):
        PullConsumer("127.0.0.1:9876", "")


def test_calls_before_start_are_refused(make_consumer):
    consumer, _, _ = make_consumer(start=False)
    with pytest.raises(ClientStateError, match="start"):
        consumer.pull(MQ, 0)


# --- queues and pulls -----------------------------------------------------------------------------
def test_fetch_queues_sorted_and_unknown_topic_raises(make_consumer):
    consumer, _, _ = make_consumer()
    assert consumer.fetch_queues("T") == [MessageQueue("T", b, i) for b in ("broker-a", "broker-b") for i in range(2)]
    with pytest.raises(errors.RouteNotFoundError, match="NOPE"):
        consumer.fetch_queues("NOPE")
    with pytest.raises(InvalidArgumentError):
        consumer.fetch_queues("bad topic")


def test_pull_found_decodes_filters_and_reports(make_consumer):
    consumer, inst, _ = make_consumer()
    result = consumer.pull(MQ, 1, 3, "a")
    assert result.status is PullStatus.FOUND and result.store_status == "FOUND"
    assert result.next_begin_offset == 4 and result.max_offset == 5
    assert [(m.queue_offset, m.tags, m.body) for m in result.messages] == [(2, "a", b"m2")]
    assert result.messages[0].broker_name == "broker-a"
    ((addr, fields),) = calls(inst, "Pull")
    assert addr == "a0:1" and fields["suspend"] is False and fields["commit_offset"] is False
    assert fields["has_subscription"] is True and fields["subscription_expression"] == "a"


def test_pull_maps_not_found_and_errors(make_consumer):
    consumer, _, broker = make_consumer()
    broker.pull_code = common_pb2.PULL_OFFSET_MOVED
    assert consumer.pull(MQ, 99).status is PullStatus.OFFSET_ILLEGAL
    broker.pull_code = common_pb2.SUBSCRIPTION_GROUP_NOT_EXIST
    with pytest.raises(errors.SubscriptionGroupNotExistError):
        consumer.pull(MQ, 0)


def test_pull_unknown_topic_and_unknown_broker_raise(make_consumer):
    consumer, inst, _ = make_consumer()
    with pytest.raises(errors.RouteNotFoundError, match="create it first"):
        consumer.pull(MessageQueue("NOPE", "broker-a", 0), 0)
    with pytest.raises(BrokerNotFoundError, match="broker-zz"):
        consumer.pull(MessageQueue("T", "broker-zz", 0), 0)
    assert calls(inst, "Pull") == []


def test_pull_block_if_not_found_suspends_with_default_or_given_hold(make_consumer):
    timing = Timing().scaled(0.01)
    consumer, inst, _ = make_consumer(timing=timing)
    consumer.pull_block_if_not_found(MQ, 0)
    consumer.pull_block_if_not_found(MQ, 0, timeout_ms=1234)
    (_, first), (_, second) = calls(inst, "Pull")
    assert first["suspend"] is True and first["suspend_timeout_ms"] == timing.broker_suspend_max_ms
    assert second["suspend_timeout_ms"] == 1234


# --- consumer offsets -----------------------------------------------------------------------------
def test_query_offset_not_found_is_minus_one_then_follows_updates(make_consumer):
    consumer, inst, _ = make_consumer()
    assert consumer.query_offset(MQ) == -1
    consumer.update_offset(MQ, 4)
    assert consumer.query_offset(MQ) == 4
    assert {addr for addr, _ in calls(inst, "QueryConsumerOffset") + calls(inst, "UpdateConsumerOffset")} == {"a0:1"}
    ((_, update),) = calls(inst, "UpdateConsumerOffset")
    assert (update.consumer_group, update.topic, update.queue_id, update.offset) == ("cg", "T", 1, 4)


def test_offsets_go_to_a_slave_when_the_master_is_gone(make_consumer, fakes):
    route = fakes.make_route(("broker-a", 4, 4, c.PERM_DEFAULT, {1: "a1:1"}))
    consumer, inst, _ = make_consumer(routes={"T": route})
    consumer.update_offset(MQ, 2)
    assert consumer.query_offset(MQ) == 2
    assert {addr for addr, _ in calls(inst, "QueryConsumerOffset")} == {"a1:1"}


def test_offset_error_codes_raise(make_consumer):
    consumer, _, broker = make_consumer()
    broker.offset_code = common_pb2.SYSTEM_ERROR
    with pytest.raises(errors.SystemError_):
        consumer.query_offset(MQ)
    with pytest.raises(errors.SystemError_):
        consumer.update_offset(MQ, 1)
    with pytest.raises(InvalidArgumentError):
        consumer.update_offset(MQ, -1)


# --- queue offsets ----------------------------------------------------------------------------------
def test_min_max_and_search_offset_ask_the_master(make_consumer):
    consumer, inst, _ = make_consumer()
    assert (consumer.min_offset(MQ), consumer.max_offset(MQ), consumer.search_offset(MQ, 7)) == (0, 5, 2)
    reqs = calls(inst, "GetQueueOffset")
    assert [r.kind for _, r in reqs] == [broker_pb2.MIN, broker_pb2.MAX, broker_pb2.BY_TIMESTAMP]
    assert {addr for addr, _ in reqs} == {"a0:1"} and reqs[2][1].timestamp_ms == 7
    with pytest.raises(InvalidArgumentError):
        consumer.search_offset(MQ, -1)


def test_queue_offsets_need_a_master(make_consumer, fakes):
    route = fakes.make_route(("broker-a", 4, 4, c.PERM_DEFAULT, {1: "a1:1"}))
    consumer, _, _ = make_consumer(routes={"T": route})
    with pytest.raises(BrokerNotFoundError, match="no master"):
        consumer.max_offset(MQ)
