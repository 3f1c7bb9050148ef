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
timer, and one settle callback that the reader calls with the answer (`send`; `pull` wraps it
in a future for coroutines). No per-message work happens here.
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

# settle(response, None) or settle(None, error): called once per request, on the loop
Settle = Callable[[broker_pb2.PullResponse | None, BaseException | None], None]


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
        self.pending: dict[int, Settle] = {}
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

    def send(self, fields: dict[str, Any], timeout_ms: int, settle: Settle) -> int:
        """Send one pull request (`fields` of PullRequest, without request_id) and return at once
        (loop thread). `settle(response, None)` is called with its answer by the stream's reader,
        in the turn that read it, or `settle(None, error)` once: RequestTimeoutError when no
        answer came within `timeout_ms` (a late one is dropped), TransportError when the stream
        broke first. `settle` must not raise (what it raises is logged and dropped). Returns the
        request id (see `forget`)."""
        session = self._ensure_session()
        request_id = next(self._ids)
        pending = session.pending
        timer: asyncio.TimerHandle | None = None

        def answered(response: broker_pb2.PullResponse | None, error: BaseException | None) -> None:
            # the reader (or _fail_session) popped this entry; the timer is now moot
            if timer is not None:
                timer.cancel()
            settle(response, error)

        def expire() -> None:
            if pending.pop(request_id, None) is not None:
                settle(None, RequestTimeoutError(
                    f"pull {fields.get('topic')}:{fields.get('queue_id')}@{fields.get('queue_offset')} "
                    f"from {self.addr}: no answer within {timeout_ms} ms"))

        pending[request_id] = answered
        session.feed.push(broker_pb2.PullRequest(request_id=request_id, **fields))
        # A timer of our own is lighter than asyncio.wait_for on this hot path.
        timer = asyncio.get_running_loop().call_later(rpc.timeout_s(timeout_ms), expire)
        return request_id

    def forget(self, request_id: int) -> None:
        """Drop a sent request nobody waits for any more: its answer, if one comes, is ignored,
        and its settle callback is told CancelledError now."""
        session = self._session
        answered = session.pending.pop(request_id, None) if session is not None else None
        if answered is not None:
            answered(None, asyncio.CancelledError())

    async def pull(self, fields: dict[str, Any], timeout_ms: int) -> broker_pb2.PullResponse:
        """`send` for a coroutine: await the answer.

        Raises:
            RequestTimeoutError: no answer within `timeout_ms` (a late answer is dropped).
            TransportError: the stream broke before the answer came.
        """
        fut: asyncio.Future[broker_pb2.PullResponse] = asyncio.get_running_loop().create_future()

        def settle(response: broker_pb2.PullResponse | None, error: BaseException | None) -> None:
            if fut.done():  # the awaiting task was cancelled
                return
            if error is None:
                fut.set_result(response)  # type: ignore[arg-type]
            else:
                fut.set_exception(error)

        request_id = self.send(fields, timeout_ms, settle)
        try:
            return await fut
        except asyncio.CancelledError:
            self.forget(request_id)
            raise

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
                    settle = pending.pop(resp.request_id, None)
                    if settle is not None:
                        try:
                            settle(resp, None)
                        except Exception:  # one caller's bug must not break everyone's stream
                            log.exception("settling the pull answer %d from %s failed", resp.request_id, self.addr)
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
        pending = list(session.pending.values())
        session.pending.clear()
        for settle in pending:
            try:
                settle(None, error)
            except Exception:
                log.exception("failing a pull on %s failed", self.addr)

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
