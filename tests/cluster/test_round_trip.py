"""A 100k-message round trip through real processes: every acknowledged message comes back once."""

import hashlib

import pytest

from nodes.client import Producer, PullConsumer
from nodes.common.types import Message, PullStatus, SendStatus

pytestmark = pytest.mark.cluster

TOTAL = 100_000
BATCH = 100


def _body(i: int) -> bytes:
    return f"{i:08d}:".encode() + hashlib.sha256(str(i).encode()).hexdigest().encode()


@pytest.mark.slow
def test_100k_messages_round_trip_exactly_once(local_cluster):
    expected: dict[str, bytes] = {}
    with Producer(local_cluster.namesrv_addr) as producer:
        for start in range(0, TOTAL, BATCH):
            msgs = [Message("RoundTrip", _body(i)) for i in range(start, start + BATCH)]
            result = producer.send_batch(msgs)
            assert result.status is SendStatus.SEND_OK
            expected.update(zip(result.msg_ids, (m.body for m in msgs), strict=True))
    assert len(expected) == TOTAL

    received: dict[str, bytes] = {}
    duplicates = 0
    with PullConsumer(local_cluster.namesrv_addr, "round-trip") as consumer:
        for mq in consumer.fetch_queues("RoundTrip"):
            offset = consumer.query_offset(mq)
            while True:
                result = consumer.pull(mq, offset, 32)
                if result.status is not PullStatus.FOUND:
                    assert result.status is PullStatus.NO_NEW_MSG
                    break
                for m in result.messages:
                    duplicates += m.msg_id in received
                    received[m.msg_id] = m.body
                offset = result.next_begin_offset
            consumer.update_offset(mq, offset)
    assert duplicates == 0
    assert received.keys() == expected.keys()
    assert all(received[k] == v for k, v in expected.items())
