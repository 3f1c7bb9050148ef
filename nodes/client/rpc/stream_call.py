"""The skeleton both pipelined streams share (`PullStream`, `SendStream`): one long-lived
bidirectional call per broker address, opened on first use and again after it broke.

Owns the call's lifecycle only: the request feed handed to grpc, the reader task, the table of
requests waiting for answers (request id -> whatever the subclass settles them with), and
closing. What a request and an answer look like, how the reader settles answers and how a broken
call fails the waiting requests are the subclass's (`_new_feed`, `_reader_routine`,
`_fail_closed`). Loop-confined.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)

_END = None  # queue sentinel: the request side is done

RequestT = TypeVar("RequestT")
PendingT = TypeVar("PendingT")


class RequestFeed(Generic[RequestT]):
    """The request iterator handed to grpc: each queued request, until `finish`. A plain async
    iterator (not an async generator), so nothing needs asyncgen finalization."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[RequestT | None] = asyncio.Queue()

    def push(self, request: RequestT) -> None:
        self._queue.put_nowait(request)

    def finish(self) -> None:
        self._queue.put_nowait(_END)

    def __aiter__(self) -> RequestFeed[RequestT]:
        return self

    async def __anext__(self) -> Any:
        request = await self._queue.get()
        if request is _END:
            raise StopAsyncIteration
        return request


class Session(Generic[PendingT]):
    """One open call: its request feed, its reader task, and the requests waiting on it."""

    def __init__(self, call: Any, feed: RequestFeed[Any]) -> None:
        self.call = call
        self.feed = feed
        self.pending: dict[int, PendingT] = {}
        self.reader: asyncio.Task[None] | None = None
        self.closed = False


class StreamCall(Generic[PendingT]):
    """One broker address's call of one kind (`kind`: "pull", "send"), re-opened lazily."""

    kind = "stream"

    def __init__(self, addr: str, open_call: Callable[[], Callable[..., Any]]) -> None:
        """`open_call()` returns the stub's stream-stream multicallable."""
        self.addr = addr
        self._open_call = open_call
        self._ids = itertools.count(1)
        self._session: Session[PendingT] | None = None
        self.opened_count = 0  # how many calls this stream has opened (1 + reconnects)

    @property
    def pending_count(self) -> int:
        return len(self._session.pending) if self._session else 0

    def _ensure_session(self) -> Session[PendingT]:
        session = self._session
        if session is not None and not session.closed:
            return session
        feed = self._new_feed()
        session = Session[PendingT](self._open_call()(feed), feed)
        session.reader = asyncio.create_task(self._reader_routine(session),
                                             name=f"{self.kind}-stream-reader-{self.addr}")
        self._session = session
        self.opened_count += 1
        if self.opened_count > 1:
            log.info("%s stream to %s re-opened (%d)", self.kind, self.addr, self.opened_count)
        return session

    async def close(self) -> None:
        """Cancel the call and fail whatever is waiting; the next request opens a new call."""
        session, self._session = self._session, None
        if session is None:
            return
        self._cancel_call(session)
        self._fail_closed(session)
        if session.reader is not None:
            session.reader.cancel()
            await asyncio.gather(session.reader, return_exceptions=True)

    def _cancel_call(self, session: Session[PendingT]) -> None:
        """Mark the session closed, cancel its call and end its request feed (once)."""
        if session.closed:
            return
        session.closed = True
        if session.pending:
            log.warning("%s stream to %s broke; failing %d requests in flight", self.kind, self.addr,
                        len(session.pending))
        session.call.cancel()
        # A call that already ended with an error ignores `cancel`, and gRPC's task feeding it our
        # requests would wait on the feed until collected, pending: end the feed so it finishes.
        session.feed.finish()

    # ---- the subclass's ----------------------------------------------------------------------

    def _new_feed(self) -> RequestFeed[Any]:
        return RequestFeed()

    async def _reader_routine(self, session: Session[PendingT]) -> None:
        raise NotImplementedError

    def _fail_closed(self, session: Session[PendingT]) -> None:
        """Fail what waits on a session closed by `close`."""
        raise NotImplementedError
