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
import collections
import itertools
import logging
from collections.abc import Callable
from typing import Any

import grpc
import grpc.aio

from nodes.client.rpc.grpc_errors import rpc_error
from nodes.common import rpc
from nodes.common.errors import MqError, OutcomeUnknownError, RequestTimeoutError
from proto import broker_pb2

log = logging.getLogger(__name__)

class _Session:
    """One open call: the requests waiting to be written, whether a send is writing them, and
    the sends waiting for answers (request id -> (future, what the send is, for its error))."""

    def __init__(self, call: Any) -> None:
        self.call = call
        self.outbox: collections.deque[broker_pb2.SendMessageRequest] = collections.deque()
        self.writing = False
        self.pending: dict[int, tuple[asyncio.Future[broker_pb2.SendMessageResponse], str]] = {}
        self.reader: asyncio.Task[None] | None = None
        self.closed = False


# How a broken session fails each waiting send: what -> its error.
_FailWith = Callable[[str], MqError]


class SendStream:
    """Sends to one broker address over one bidirectional call, several in flight."""

    def __init__(self, addr: str, open_call: Callable[[], Callable[..., Any]]) -> None:
        """`open_call()` returns the stub's `SendStream` method (a stream-stream multicallable)."""
        self.addr = addr
        self._open_call = open_call
        self._ids = itertools.count(1)
        self._session: _Session | None = None
        self.opened_count = 0  # how many calls this stream has opened (1 + reconnects)
        self.pending_high_water = 0  # the most sends ever in flight on it at once

    @property
    def pending_count(self) -> int:
        return len(self._session.pending) if self._session else 0

    def _ensure_session(self) -> _Session:
        session = self._session
        if session is not None and not session.closed:
            return session
        call = self._open_call()()  # no request iterator: the sends write (`_write_outbox`)
        session = _Session(call)
        session.reader = asyncio.create_task(self._reader_routine(session), name=f"send-stream-reader-{self.addr}")
        self._session = session
        self.opened_count += 1
        if self.opened_count > 1:
            log.info("send stream to %s re-opened (%d)", self.addr, self.opened_count)
        return session

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
        # A timer on the future itself is lighter than asyncio.wait_for on this hot path.
        timer = loop.call_later(rpc.timeout_s(timeout_ms), _expire, fut, what)
        try:
            session.outbox.append(request)
            if not session.writing:
                await self._write_outbox(session)
            return await fut
        finally:
            timer.cancel()
            pending.pop(request_id, None)

    async def _write_outbox(self, session: _Session) -> None:
        """Write the queued requests, one write at a time (gRPC takes one per call at a time),
        from the coroutine of the send that found nobody writing: a lone send costs no hop
        through a writer task; requests queued meanwhile go out from the same loop."""
        session.writing = True
        call, outbox = session.call, session.outbox
        try:
            while outbox and not session.closed:
                await call.write(outbox.popleft())
        except asyncio.CancelledError:
            # A write cut off half-way leaves the call unusable: break the session (its sends
            # fail as on a broken stream) so that the next send opens a new call.
            self._fail_session(session, self._closed_error)
            raise
        except (grpc.RpcError, asyncio.InvalidStateError):
            pass  # the call is over; its reader fails every waiting send with the reason
        finally:
            session.writing = False

    async def _reader_routine(self, session: _Session) -> None:
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
            return rpc_error(exc, f"{what} (send stream to {self.addr})", side_effects=True)
        return fail_with

    def _ended_error(self, what: str) -> MqError:
        return OutcomeUnknownError(f"{what}: the send stream to {self.addr} was ended by the broker "
                                   "before the answer; the request may have been applied")

    def _closed_error(self, what: str) -> MqError:
        return OutcomeUnknownError(f"{what}: the send stream to {self.addr} was closed before the answer; "
                                   "the request may have been applied")

    def _fail_session(self, session: _Session, fail_with: _FailWith) -> None:
        if not session.closed:
            session.closed = True
            if session.pending:
                log.warning("send stream to %s broke; failing %d sends in flight", self.addr, len(session.pending))
            session.call.cancel()
            session.outbox.clear()
        for fut, what in session.pending.values():
            if not fut.done():
                fut.set_exception(fail_with(what))
        session.pending.clear()

    async def close(self) -> None:
        """Cancel the call and fail whatever is waiting; a later `send` opens a new call."""
        session, self._session = self._session, None
        if session is None:
            return
        self._fail_session(session, self._closed_error)
        if session.reader is not None:
            session.reader.cancel()
            await asyncio.gather(session.reader, return_exceptions=True)


def _expire(fut: asyncio.Future[broker_pb2.SendMessageResponse], what: str) -> None:
    if not fut.done():
        # map_rpc_error's wording for a unary call's deadline
        fut.set_exception(RequestTimeoutError(f"{what}: deadline exceeded; the outcome is unknown"))
