"""The gRPC adapter maps a request's exception in one place: SYSTEM_ERROR for that request,
a node crash for a broken invariant."""

from __future__ import annotations

import asyncio

import pytest

from nodes.broker.request_table import RequestKind, RequestTable
from nodes.broker.transport.consumer_servicer import ConsumerManagerServicer
from nodes.common import grpc_adapter
from nodes.common.errors import InvariantViolation
from proto import common_pb2, consumer_pb2


def _servicer(error: Exception) -> ConsumerManagerServicer:
    def lock_batch(_request: object) -> object:
        raise error

    table = RequestTable()
    table.register(RequestKind.LOCK_BATCH_MQ, lock_batch)
    return ConsumerManagerServicer(table)


def _lock(servicer: ConsumerManagerServicer) -> consumer_pb2.LockBatchResponse:
    request = consumer_pb2.LockBatchRequest(consumer_group="g", client_id="c")
    return asyncio.run(servicer.LockBatchMQ(request, None))


def test_an_unexpected_exception_answers_system_error():
    response = _lock(_servicer(KeyError("boom")))
    assert response.code == common_pb2.SYSTEM_ERROR and "boom" in response.remark


def test_a_kind_with_no_handler_answers_system_error():
    response = asyncio.run(_servicer(KeyError()).UnlockBatchMQ(consumer_pb2.UnlockBatchRequest(), None))
    assert response.code == common_pb2.SYSTEM_ERROR and "UNLOCK_BATCH_MQ" in response.remark


def test_a_broken_invariant_crashes_the_node(monkeypatch):
    crashed: list[BaseException] = []
    monkeypatch.setattr(grpc_adapter, "crash_node", crashed.append)
    with pytest.raises(InvariantViolation):
        _lock(_servicer(InvariantViolation("queue offsets went backwards")))
    assert len(crashed) == 1
