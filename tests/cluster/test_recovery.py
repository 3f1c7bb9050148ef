"""Real processes, real SIGKILL: what was acknowledged survives."""

import pytest

from nodes.client import Producer, PullConsumer
from nodes.common.types import Message

pytestmark = pytest.mark.cluster


def _pull_exact(consumer, result):
    pulled = consumer.pull(result.message_queue, result.queue_offset, 1)
    assert pulled.messages, f"queue offset {result.queue_offset} of {result.message_queue} is gone"
    return pulled.messages[0]


@pytest.mark.slow
def test_sigkill_right_after_the_last_send_ok_loses_nothing(local_cluster):
    bodies = {}
    with Producer(local_cluster.namesrv_addr) as producer:
        acked = []
        for i in range(2_000):
            body = f"acked-{i}-".encode() * (1 + i % 7)
            result = producer.send(Message("Crash", body, tags=f"t{i % 3}", keys=f"k{i}"))
            acked.append(result)
            bodies[result.msg_id] = body
        local_cluster.kill("broker-a-0")  # right after the last SEND_OK
    local_cluster.restart("broker-a-0")
    local_cluster.wait_until_routable()
    with PullConsumer(local_cluster.namesrv_addr, "after-crash") as consumer:
        for result in acked:
            message = _pull_exact(consumer, result)
            assert message.msg_id == result.msg_id
            assert message.body == bodies[result.msg_id]
            assert message.queue_offset == result.queue_offset
    recovery = local_cluster.node("broker-a-0").describe()["details"]["recovery"]
    assert recovery["clean_shutdown"] is False


def test_restart_after_clean_stop_keeps_offsets_topics_and_messages(local_cluster):
    with Producer(local_cluster.namesrv_addr) as producer:
        sent = [producer.send(Message("Keep", f"m{i}".encode())) for i in range(100)]
    with PullConsumer(local_cluster.namesrv_addr, "keeper") as consumer:
        queues = consumer.fetch_queues("Keep")
        for mq in queues:
            consumer.update_offset(mq, 1 + mq.queue_id)
    local_cluster.stop("broker-a-0")
    local_cluster.restart("broker-a-0")
    local_cluster.wait_until_routable()
    with PullConsumer(local_cluster.namesrv_addr, "keeper") as consumer:
        assert consumer.fetch_queues("Keep") == queues
        for mq in queues:
            assert consumer.query_offset(mq) == 1 + mq.queue_id
        for result in sent:
            assert _pull_exact(consumer, result).msg_id == result.msg_id
    recovery = local_cluster.node("broker-a-0").describe()["details"]["recovery"]
    assert recovery["clean_shutdown"] is True
