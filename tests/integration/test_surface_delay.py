"""Clients cannot write into the delay topic, and one undeliverable delayed entry never holds
its level: it is logged once, set aside (counted in Admin.Describe and `mqlab status`), and the
entries behind it are delivered. Against a real master process."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.cluster_rpc import wait_for
from support.examples import examples
from support.local_cluster import module_cluster, module_master_stub

from nodes.client.pull_decode import decode_messages
from nodes.common import constants as c
from proto import broker_pb2, common_pb2

TIMEOUT_S = 10.0


cluster = module_cluster("surface-delay")
pytestmark = pytest.mark.xdist_group("surface-delay")  # one worker starts the module's cluster once
broker = module_master_stub()


def _send(broker, topic: str, properties: dict[str, str], queue_id: int = 0, body: bytes = b"x"):
    return broker.SendMessage(broker_pb2.SendMessageRequest(
        topic=topic, queue_id=queue_id, default_topic_queue_nums=4,
        messages=[broker_pb2.OutgoingMessage(body=body, properties=properties)]), timeout=TIMEOUT_S)


def _create(broker, topic: str, queue_nums: int) -> None:
    answer = broker.CreateTopic(broker_pb2.CreateTopicRequest(config=common_pb2.TopicConfig(
        topic=topic, read_queue_nums=queue_nums, write_queue_nums=queue_nums, perm=6)), timeout=TIMEOUT_S)
    assert answer.code == common_pb2.SUCCESS, answer.remark


def _bodies(broker, topic: str, queue_id: int) -> list[bytes]:
    responses = broker.Pull(iter([broker_pb2.PullRequest(
        request_id=1, consumer_group="surface_reader", topic=topic, queue_id=queue_id, queue_offset=0,
        max_msg_nums=32, has_subscription=True, subscription_expression="*")]), timeout=TIMEOUT_S)
    answer = next(iter(responses))
    if answer.code != common_pb2.SUCCESS:
        return []
    return [m.body for m in decode_messages(answer.records, broker_name="broker-a", min_offset=answer.min_offset,
                                            max_offset=answer.max_offset, tags=None)]


@pytest.mark.parametrize("topic", [c.SCHEDULE_TOPIC, "RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_anything",
                                   "OFFSET_MOVED_EVENT", "SELF_TEST_TOPIC"])
def test_client_sends_to_system_topics_are_refused(broker, topic):
    answer = _send(broker, topic, {c.PROPERTY_REAL_TOPIC: "SurfaceT", c.PROPERTY_REAL_QUEUE_ID: "-1"})
    assert answer.code == common_pb2.NO_PERMISSION and "system topic" in answer.remark


@pytest.mark.parametrize("properties", [
    {c.PROPERTY_REAL_TOPIC: "bad name with spaces"},
    {c.PROPERTY_REAL_TOPIC: c.SCHEDULE_TOPIC},
    {c.PROPERTY_REAL_QUEUE_ID: "-1"},
    {c.PROPERTY_REAL_QUEUE_ID: "999999"},
    {c.PROPERTY_DELAY: "soon"},
    {c.PROPERTY_DELAY: "²"},  # a Unicode digit int() refuses
    {c.PROPERTY_REAL_QUEUE_ID: "٣"},
])
def test_client_set_delay_and_real_properties_are_checked(broker, properties):
    answer = _send(broker, "SurfaceProps", properties)
    assert answer.code == common_pb2.MESSAGE_ILLEGAL and answer.remark


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(delay=st.text(max_size=6), real_qid=st.text(max_size=6))
def test_any_delay_and_real_qid_text_is_answered_with_a_code(broker, delay, real_qid):
    answer = _send(broker, "SurfaceProps", {c.PROPERTY_DELAY: delay, c.PROPERTY_REAL_QUEUE_ID: real_qid})
    assert answer.code in (common_pb2.SUCCESS, common_pb2.MESSAGE_ILLEGAL), answer.remark


def test_an_undeliverable_entry_is_set_aside_and_its_level_moves_on(cluster, broker):
    master = cluster.node("broker-a-0")
    level = 3  # 10 s unscaled: 0.5 s here, room to shrink the topic while the first one waits
    _create(broker, "SurfaceShrink", 8)
    first = _send(broker, "SurfaceShrink", {c.PROPERTY_DELAY: str(level)}, queue_id=7, body=b"stranded")
    assert first.code == common_pb2.SUCCESS
    _create(broker, "SurfaceShrink", 1)  # queue 7 is gone before the first message is due
    second = _send(broker, "SurfaceShrink", {c.PROPERTY_DELAY: str(level)}, queue_id=0, body=b"delivered")
    assert second.code == common_pb2.SUCCESS
    wait_for(lambda: _bodies(broker, "SurfaceShrink", 0) == [b"delivered"], what="the entry behind it delivered")
    schedule = master.describe()["details"]["schedule"]
    assert schedule["set_aside"] == 1
    assert [(e["level"], e["real_topic"], e["real_queue_id"]) for e in schedule["recent_set_aside"]] == [
        (level, "SurfaceShrink", 7)]
    assert "delay_set_aside=1" in master.describe()["status_line"]
    lines = [line for line in master.node_log.read_text().splitlines() if "set aside" in line]
    assert len(lines) == 1 and "Traceback" not in master.node_log.read_text()


def test_a_delay_1_send_is_delivered(cluster, broker):
    answer = _send(broker, "SurfaceDelay1", {c.PROPERTY_DELAY: "1"}, body=b"on time")
    assert answer.code == common_pb2.SUCCESS
    wait_for(lambda: _bodies(broker, "SurfaceDelay1", 0) == [b"on time"], what="the delay-1 message")
