"""PullStream: one long-lived bidirectional `Broker.PullBatch` call per broker address.

Owns the call, the request-id counter and the table of pending requests. Pulls for every
queue on that broker are pipelined on it; each response names its request and may arrive
out of order (a long-polled request answers later). Does not interpret responses: codes and
records are `ClientApi`'s business, routing `pull_api`'s.

If the stream breaks, every pending pull fails with TransportError and the stream is
re-opened lazily by the next `pull`. Loop-confined.

Every request queued while the call was busy writing goes out in one stream message
(a PullRequestBatch), and the broker answers likewise, so gRPC's per-message cost (most of a
small pull's cost in Python) is paid once per batch.

Hot path per pull: one PullRequest message, one queue put, one dict insert and pop, one
future. No per-message work happens here.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import Any

import grpc
import grpc.aio

from nodes.client.rpc.grpc_errors import rpc_error
from nodes.common import rpc
from nodes.common.errors import RequestTimeoutError, TransportError
from proto import broker_pb2

log = logging.getLogger(__name__)

_END = None  # queue sentinel: the request side is done


class _RequestFeed:
    """The request iterator handed to grpc: one PullRequestBatch of everything `push` queued by
    then, until `finish`. A plain async iterator (not an async generator), so nothing needs
    asyncgen finalization.
    """

    def __init__(self) -> None:
        self._queue: asyncio.Queue[broker_pb2.PullRequest | None] = asyncio.Queue()
        self._ended = False

    def push(self, request: broker_pb2.PullRequest) -> None:
        self._queue.put_nowait(request)

    def finish(self) -> None:
        self._queue.put_nowait(_END)

    def __aiter__(self) -> _RequestFeed:
        return self

    async def __anext__(self) -> broker_pb2.PullRequestBatch:
        if self._ended:
            raise StopAsyncIteration
        request = await self._queue.get()
        if request is _END:
            raise StopAsyncIteration
        requests = [request]
        queue = self._queue
        while not queue.empty():
            more = queue.get_nowait()
            if more is _END:
                self._ended = True  # send what came before the end, then stop
                break
            requests.append(more)
        return broker_pb2.PullRequestBatch(requests=requests)


class _Session:
    """One open call: its request feed, its reader task, and the requests waiting on it."""

    def __init__(self, call: Any, feed: _RequestFeed) -> None:
        self.call = call
        self.feed = feed
        self.pending: dict[int, asyncio.Future[broker_pb2.PullResponse]] = {}
        self.reader: asyncio.Task[None] | None = None
        self.closed = False


class PullStream:
    """Pipelined pulls to one broker address over one bidirectional call."""

    def __init__(self, addr: str, open_call: Callable[[], Callable[..., Any]]) -> None:
        """`open_call()` returns the stub's `PullBatch` method (a stream-stream multicallable)."""
        self.addr = addr
        self._open_call = open_call
        self._ids = itertools.count(1)
        self._session: _Session | None = None
        self.opened_count = 0  # how many calls this stream has opened (1 + reconnects)

    @property
    def pending_count(self) -> int:
        return len(self._session.pending) if self._session else 0

    def _ensure_session(self) -> _Session:
        session = self._session
        if session is not None and not session.closed:
            return session
        feed = _RequestFeed()
        call = self._open_call()(feed)
        session = _Session(call, feed)
        session.reader = asyncio.create_task(self._reader_routine(session), name=f"pull-stream-reader-{self.addr}")
        self._session = session
        self.opened_count += 1
        if self.opened_count > 1:
            log.info("pull stream to %s re-opened (%d)", self.addr, self.opened_count)
        return session

    async def pull(self, fields: dict[str, Any], timeout_ms: int) -> broker_pb2.PullResponse:
        """Send one pull request (`fields` of PullRequest, without request_id) and await its answer.

        Raises:
            RequestTimeoutError: no answer within `timeout_ms` (a late answer is dropped).
            TransportError: the stream broke before the answer came.
        """
        session = self._ensure_session()
        request_id = next(self._ids)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[broker_pb2.PullResponse] = loop.create_future()
        session.pending[request_id] = fut
        session.feed.push(broker_pb2.PullRequest(request_id=request_id, **fields))
        # A timer on the future itself is lighter than asyncio.wait_for on this hot path.
        timer = loop.call_later(rpc.timeout_s(timeout_ms), self._expire, fut, fields, timeout_ms)
        try:
            return await fut
        finally:
            timer.cancel()
            session.pending.pop(request_id, None)

    def _expire(self, fut: asyncio.Future[broker_pb2.PullResponse], fields: dict[str, Any],
                timeout_ms: int) -> None:
        if not fut.done():
            fut.set_exception(RequestTimeoutError(
                f"pull {fields.get('topic')}:{fields.get('queue_id')}@{fields.get('queue_offset')} "
                f"from {self.addr}: no answer within {timeout_ms} ms"))

    async def _reader_routine(self, session: _Session) -> None:
        error: TransportError | None = None
        try:
            pending = session.pending
            call = session.call
            while True:
                message = await call.read()
                if message is grpc.aio.EOF:
                    error = TransportError(f"pull stream to {self.addr} ended by the broker")
                    break
                for resp in message.responses:
                    fut = pending.pop(resp.request_id, None)
                    if fut is not None and not fut.done():
                        fut.set_result(resp)
        except grpc.RpcError as exc:
            mapped = rpc_error(exc, f"pull stream to {self.addr}")
            error = mapped if isinstance(mapped, TransportError) else TransportError(str(mapped))
        except asyncio.CancelledError:
            error = TransportError(f"pull stream to {self.addr} closed")
            raise
        finally:
            self._fail_session(session, error or TransportError(f"pull stream to {self.addr} closed"))

    def _fail_session(self, session: _Session, error: TransportError) -> None:
        if not session.closed:
            session.closed = True
            if session.pending:
                log.warning("%s; failing %d pending pulls", error, len(session.pending))
            session.call.cancel()
        for fut in session.pending.values():
            if not fut.done():
                fut.set_exception(error)
        session.pending.clear()

    async def close(self) -> None:
        """Cancel the call and fail whatever is pending; a later `pull` opens a new call."""
        session, self._session = self._session, None
        if session is None:
            return
        self._fail_session(session, TransportError(f"pull stream to {self.addr} closed"))
        session.feed.finish()
        if session.reader is not None:
            session.reader.cancel()
            await asyncio.gather(session.reader, return_exceptions=True)
