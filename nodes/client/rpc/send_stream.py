"""SendStream: one long-lived bidirectional `Broker.SendStream` call per broker address.

Owns the call, the request-id counter and the table of sends waiting for their answers.
Every send to that broker (one message, a batch, a coalesced `send_async` batch) goes over it,
several at once when several are in flight; each answer names its request (the broker answers
a send when it is done, so answers may come out of order). Does not read answers: codes and
offsets are `ClientApi`'s business, retries the producer's.

Why a stream: a unary call costs gRPC's per-call setup (call object, metadata, deadline,
completion queue round trips) on both ends, most of a small send's CPU in Python; a message on
an open stream costs about half of that (docs/benchmark.md, "Sends over a stream").

Failures read as a unary `SendMessage`'s would: if the stream breaks, every send waiting on it
fails with the error `grpc_errors.rpc_error` makes of the break (OutcomeUnknownError once the
requests may have reached the broker, a plain TransportError when no connection was ever made),
and the next send opens a new call. A send with no answer within its timeout fails with
RequestTimeoutError and its late answer is dropped. Loop-confined.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import grpc
import grpc.aio

from nodes.client.rpc.grpc_errors import rpc_error
from nodes.client.rpc.stream_call import Session, StreamCall
from nodes.common import rpc
from nodes.common.errors import MqError, OutcomeUnknownError, RequestTimeoutError
from proto import broker_pb2

log = logging.getLogger(__name__)

# a send waiting for its answer: its future, and what the send is (for its error)
_Waiting = tuple["asyncio.Future[broker_pb2.SendMessageResponse]", str]
# How a broken session fails each waiting send: what -> its error.
_FailWith = Callable[[str], MqError]


class SendStream(StreamCall[_Waiting]):
    """Sends to one broker address over one bidirectional call, several in flight.

    grpc's own task writes what the request feed yields. Writing from the sending coroutine
    instead (no hop through that task when nobody else is writing) was tried: a bare round trip
    got slightly faster, but the benchmark's `send_batch` of 1024 cost the client 25-40 % more CPU."""

    kind = "send"

    def __init__(self, addr: str, open_call: Callable[[], Callable[..., Any]]) -> None:
        """`open_call()` returns the stub's `SendStream` method (a stream-stream multicallable)."""
        super().__init__(addr, open_call)
        self.pending_high_water = 0  # the most sends ever in flight on it at once

    async def send(self, request: broker_pb2.SendMessageRequest, timeout_ms: int,
                   what: str) -> broker_pb2.SendMessageResponse:
        """Send `request` (its request_id is set here) and await its answer.

        Raises:
            RequestTimeoutError: no answer within `timeout_ms` (a late answer is dropped).
            OutcomeUnknownError: the stream broke after the request may have reached the broker.
            TransportError: the stream broke before any connection was made (nothing was sent).
        """
        session = self._ensure_session()
        request_id = next(self._ids)
        request.request_id = request_id
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[broker_pb2.SendMessageResponse] = loop.create_future()
        pending = session.pending
        pending[request_id] = (fut, what)
        if len(pending) > self.pending_high_water:
            self.pending_high_water = len(pending)
        session.feed.push(request)
        # A timer on the future itself is lighter than asyncio.wait_for on this hot path.
        timer = loop.call_later(rpc.timeout_s(timeout_ms), _expire, fut, what)
        try:
            return await fut
        finally:
            timer.cancel()
            pending.pop(request_id, None)

    async def _reader_routine(self, session: Session[_Waiting]) -> None:
        fail_with: _FailWith = self._closed_error
        try:
            pending = session.pending
            call = session.call
            while True:
                resp = await call.read()
                if resp is grpc.aio.EOF:
                    fail_with = self._ended_error
                    break
                entry = pending.pop(resp.request_id, None)
                if entry is not None and not entry[0].done():
                    entry[0].set_result(resp)
        except grpc.RpcError as exc:
            fail_with = self._broken_error(exc)
        finally:
            self._fail_session(session, fail_with)

    def _broken_error(self, exc: grpc.RpcError) -> _FailWith:
        """Each waiting send's error for a call that failed with `exc`, as a unary send's."""
        def fail_with(what: str) -> MqError:
            return send_broken_error(exc, what, self.addr)
        return fail_with

    def _ended_error(self, what: str) -> MqError:
        return send_ended_error(what, self.addr)

    def _closed_error(self, what: str) -> MqError:
        return OutcomeUnknownError(f"{what}: the send stream to {self.addr} was closed before the answer; "
                                   "the request may have been applied")

    def _fail_session(self, session: Session[_Waiting], fail_with: _FailWith) -> None:
        self._cancel_call(session)
        for fut, what in session.pending.values():
            if not fut.done():
                fut.set_exception(fail_with(what))
        session.pending.clear()

    def _fail_closed(self, session: Session[_Waiting]) -> None:
        self._fail_session(session, self._closed_error)


def _expire(fut: asyncio.Future[broker_pb2.SendMessageResponse], what: str) -> None:
    if not fut.done():
        fut.set_exception(send_timeout_error(what))


# A send's failures, as a unary send's would read (shared with `BlockingSends`)
def send_broken_error(exc: grpc.RpcError, what: str, addr: str) -> MqError:
    """The stream to `addr` failed with `exc` while the send waited."""
    return rpc_error(exc, f"{what} (send stream to {addr})", side_effects=True)


def send_ended_error(what: str, addr: str) -> MqError:
    """The broker ended the stream to `addr` before the send's answer."""
    return OutcomeUnknownError(f"{what}: the send stream to {addr} was ended by the broker "
                               "before the answer; the request may have been applied")


def send_timeout_error(what: str) -> MqError:
    """No answer within the send's timeout (map_rpc_error's wording for a unary call's deadline)."""
    return RequestTimeoutError(f"{what}: deadline exceeded; the outcome is unknown")
