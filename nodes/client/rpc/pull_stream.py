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
import logging
from collections.abc import Callable
from typing import Any

import grpc
import grpc.aio

from nodes.client.rpc.grpc_errors import rpc_error
from nodes.client.rpc.stream_call import RequestFeed, Session, StreamCall
from nodes.common import rpc
from nodes.common.errors import RequestTimeoutError, TransportError
from proto import broker_pb2

log = logging.getLogger(__name__)

# settle(response, None) or settle(None, error): called once per request, on the loop
Settle = Callable[[broker_pb2.PullResponse | None, BaseException | None], None]


def pull_timeout_error(fields: dict[str, Any], addr: str, timeout_ms: int) -> RequestTimeoutError:
    """A pull (`fields` of its PullRequest) that got no answer within `timeout_ms`."""
    return RequestTimeoutError(f"pull {fields.get('topic')}:{fields.get('queue_id')}@{fields.get('queue_offset')} "
                               f"from {addr}: no answer within {timeout_ms} ms")


def pull_stream_error(exc: grpc.RpcError, addr: str) -> TransportError:
    """What a broken pull stream to `addr` fails its pulls with: a TransportError (what `rpc_error`
    makes of the break, or one with its text), as for a lost connection."""
    mapped = rpc_error(exc, f"pull stream to {addr}")
    return mapped if isinstance(mapped, TransportError) else TransportError(str(mapped))


class _BatchingFeed(RequestFeed[broker_pb2.PullRequest]):
    """One PullRequestBatch of every request `push` queued by the time grpc asks for the next."""

    def __init__(self) -> None:
        super().__init__()
        self._ended = False

    async def __anext__(self) -> broker_pb2.PullRequestBatch:
        if self._ended:
            raise StopAsyncIteration
        requests = [await super().__anext__()]  # StopAsyncIteration at the end
        queue = self._queue
        while not queue.empty():
            more = queue.get_nowait()
            if more is None:  # the end: send what came before it, then stop
                self._ended = True
                break
            requests.append(more)
        return broker_pb2.PullRequestBatch(requests=requests)


class PullStream(StreamCall[Settle]):
    """Pipelined pulls to one broker address over one bidirectional call."""

    kind = "pull"

    def _new_feed(self) -> RequestFeed[broker_pb2.PullRequest]:
        return _BatchingFeed()

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
                settle(None, pull_timeout_error(fields, self.addr, timeout_ms))

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

    async def _reader_routine(self, session: Session[Settle]) -> None:
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
            error = pull_stream_error(exc, self.addr)
        except asyncio.CancelledError:
            error = TransportError(f"pull stream to {self.addr} closed")
            raise
        finally:
            self._fail_session(session, error or TransportError(f"pull stream to {self.addr} closed"))

    def _fail_session(self, session: Session[Settle], error: TransportError) -> None:
        self._cancel_call(session)
        pending = list(session.pending.values())
        session.pending.clear()
        for settle in pending:
            try:
                settle(None, error)
            except Exception:
                log.exception("failing a pull on %s failed", self.addr)

    def _fail_closed(self, session: Session[Settle]) -> None:
        self._fail_session(session, TransportError(f"pull stream to {self.addr} closed"))
