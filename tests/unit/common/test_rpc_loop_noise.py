"""The client loops' exception handler drops grpc.aio's poller noise and nothing else."""

from __future__ import annotations

import asyncio

import pytest

from nodes.common.rpc import ignore_grpc_poller_noise


class _PollerHandle:
    def __repr__(self) -> str:
        return "<Handle PollerCompletionQueue._handle_events(<_UnixSelectorEventLoop running=True>)()>"


class _OtherHandle:
    def __repr__(self) -> str:
        return "<Handle Server._on_request()>"


@pytest.fixture
def loop_and_seen():
    loop = asyncio.new_event_loop()
    seen: list[dict] = []
    loop.default_exception_handler = seen.append  # what would be logged
    yield loop, seen
    loop.close()


@pytest.mark.parametrize("exc", [RuntimeError("Event loop is closed"), BlockingIOError(11, "again")])
def test_the_pollers_wake_ups_for_other_or_closed_loops_are_dropped(loop_and_seen, exc):
    loop, seen = loop_and_seen
    ignore_grpc_poller_noise(loop, {"exception": exc, "handle": _PollerHandle(), "message": "Exception in callback"})
    assert seen == []


@pytest.mark.parametrize("context", [
    {"exception": RuntimeError("Event loop is closed"), "handle": _OtherHandle()},  # not grpc's poller
    {"exception": RuntimeError("something else"), "handle": _PollerHandle()},  # a real error in the poller
    {"exception": ValueError("bad"), "handle": _PollerHandle()},
    {"message": "Task was destroyed but it is pending!"},
])
def test_everything_else_reaches_the_default_handler(loop_and_seen, context):
    loop, seen = loop_and_seen
    ignore_grpc_poller_noise(loop, context)
    assert seen == [context]
