"""RocketMQ's send retry policy, pinned as a table and derived from the error attributes alone.

For every answer code a broker can give a send: whether it comes back as a SendResult status,
is retried on another broker (synchronous `send` / asynchronous `send_async`), or is raised.
Failures to get an answer are retried by both paths; a refusal only by the synchronous one,
and only when it is `retriable` (DefaultMQProducerImpl's retryResponseCodes).
"""

from __future__ import annotations

import pytest

from nodes.client.rpc.api import send_result_from_response
from nodes.client.send_attempts import retries_send
from nodes.common import errors
from nodes.common.types import SendStatus
from proto import broker_pb2, common_pb2

STATUS, RETRY, RAISE = "status", "retry", "raise"

# code name -> (what a sync send does, what an async send does); SendStatus for a status
ANSWERS: dict[str, tuple[object, object]] = {
    "SUCCESS": (SendStatus.SEND_OK, SendStatus.SEND_OK),
    "FLUSH_DISK_TIMEOUT": (SendStatus.FLUSH_DISK_TIMEOUT, SendStatus.FLUSH_DISK_TIMEOUT),
    "FLUSH_SLAVE_TIMEOUT": (SendStatus.FLUSH_SLAVE_TIMEOUT, SendStatus.FLUSH_SLAVE_TIMEOUT),
    "SLAVE_NOT_AVAILABLE": (SendStatus.SLAVE_NOT_AVAILABLE, SendStatus.SLAVE_NOT_AVAILABLE),
    "TOPIC_NOT_EXIST": (RETRY, RAISE),
    "SERVICE_NOT_AVAILABLE": (RETRY, RAISE),
    "SYSTEM_ERROR": (RETRY, RAISE),
    "NO_PERMISSION": (RETRY, RAISE),
    "SYSTEM_BUSY": (RAISE, RAISE),
    "MESSAGE_ILLEGAL": (RAISE, RAISE),
    "INVALID_ARGUMENT": (RAISE, RAISE),
    "SUBSCRIPTION_NOT_EXIST": (RAISE, RAISE),
    "SUBSCRIPTION_NOT_LATEST": (RAISE, RAISE),
    "SUBSCRIPTION_GROUP_NOT_EXIST": (RAISE, RAISE),
    "TOPIC_ROUTE_NOT_EXIST": (RAISE, RAISE),
    "QUERY_NOT_FOUND": (RAISE, RAISE),
    "PULL_NOT_FOUND": (RAISE, RAISE),
    "PULL_RETRY_IMMEDIATELY": (RAISE, RAISE),
    "PULL_OFFSET_MOVED": (RAISE, RAISE),
    "CONSUMER_NOT_ONLINE": (RAISE, RAISE),
    "CODE_UNSPECIFIED": (RAISE, RAISE),
}

# failures without a broker answer: (error, sync, async)
NO_ANSWER = [
    (errors.TransportError("unavailable"), RETRY, RETRY),
    (errors.BrokerNotFoundError("no master"), RETRY, RETRY),
    (errors.RequestTimeoutError("deadline"), RETRY, RETRY),
    (errors.OutcomeUnknownError("reset"), RETRY, RETRY),
    (errors.InvalidMessageError("properties too long"), RAISE, RAISE),
    (errors.InvariantViolation("entry count"), RAISE, RAISE),
]


def outcome(code: int, *, asynchronous: bool) -> object:
    """What the producer does with a broker's answer `code` to a one-message send."""
    resp = broker_pb2.SendMessageResponse(code=code, queue_id=0, entries=[
        broker_pb2.SendEntry(offset_msg_id="0" * 32, queue_offset=7, phys_offset=0)])
    try:
        return send_result_from_response(resp, "T", "broker-a", ["ID"]).status
    except errors.MqError as err:
        return RETRY if retries_send(err, asynchronous=asynchronous) else RAISE


def test_the_table_covers_every_answer_code():
    assert set(ANSWERS) == set(common_pb2.Code.keys())


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_answer_codes(name):
    code = common_pb2.Code.Value(name)
    assert (outcome(code, asynchronous=False), outcome(code, asynchronous=True)) == ANSWERS[name]


def test_a_code_this_build_does_not_know_is_raised():
    assert outcome(999, asynchronous=False) == RAISE and outcome(999, asynchronous=True) == RAISE


@pytest.mark.parametrize(("err", "sync", "asynchronous"), NO_ANSWER, ids=lambda v: type(v).__name__)
def test_failures_without_an_answer(err, sync, asynchronous):
    assert (RETRY if retries_send(err, asynchronous=False) else RAISE) == sync
    assert (RETRY if retries_send(err, asynchronous=True) else RAISE) == asynchronous


def test_only_refusals_are_answered_and_only_timeouts_are_indeterminate():
    assert errors.for_code("NO_PERMISSION").answered and not errors.TransportError().answered
    assert errors.OutcomeUnknownError().indeterminate and not errors.BrokerNotFoundError().indeterminate
    assert errors.for_code("TOPIC_NOT_EXIST").refresh_route and not errors.for_code("SYSTEM_BUSY").retriable
