"""SYNC_FLUSH's group commit (RocketMQ's GroupCommitService): callers ask for the commitlog to be
fsync'd through a phys offset and get a future; one thread runs the fsyncs.

Every request waiting when an fsync starts is answered by it; requests arriving during that
fsync wait together for the next one, so a burst of sends costs one fsync per round, not one
per send. A future completes (None) once an fsync that started after its record was appended
has returned, or with the exception the fsync raised. How long a caller waits is the caller's
business (the broker answers FLUSH_DISK_TIMEOUT after `sync_flush_timeout_ms`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError

log = logging.getLogger(__name__)


class GroupCommitService:
    def __init__(self, flush_commitlog: Callable[[], int], name: str = "group-commit") -> None:
        """`flush_commitlog()` fsyncs the commitlog and returns the phys offset it now covers."""
        self._flush_commitlog = flush_commitlog
        self._name = name
        self._cond = threading.Condition()
        self._pending: list[tuple[int, Future[None]]] = []
        self._flushed_phys_offset = 0
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.fsyncs = 0  # how many fsyncs answered requests (tests compare it with the requests)

    def start(self, flushed_phys_offset: int) -> None:
        self._flushed_phys_offset = flushed_phys_offset
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def request(self, end_phys_offset: int) -> Future[None]:
        """A future completed once the commitlog is durable through `end_phys_offset`."""
        future: Future[None] = Future()
        with self._cond:
            if end_phys_offset <= self._flushed_phys_offset:
                future.set_result(None)
            elif self._stopping:
                future.set_exception(RuntimeError("the store is closing"))
            else:
                self._pending.append((end_phys_offset, future))
                self._cond.notify()
        return future

    def stop(self) -> None:
        """Answer what is pending with one last fsync and end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stopping:
                    self._cond.wait()
                if not self._pending:
                    return
                batch, self._pending = self._pending, []
            try:
                flushed = self._flush_commitlog()
            except Exception as exc:  # answered as a failed flush; the next round tries again
                log.exception("group commit: the commitlog fsync failed")
                for _, future in batch:
                    _settle(future, exc)
                continue
            self.fsyncs += 1
            with self._cond:
                self._flushed_phys_offset = max(self._flushed_phys_offset, flushed)
                flushed = self._flushed_phys_offset
                later = [(end, future) for end, future in batch if end > flushed]
                self._pending[:0] = later  # appended after the fsync's snapshot: the next round
            for end, future in batch:
                if end <= flushed:
                    _settle(future, None)


def _settle(future: Future[None], exc: BaseException | None) -> None:
    """Complete `future` unless its waiter cancelled it already."""
    try:
        if exc is None:
            future.set_result(None)
        else:
            future.set_exception(exc)
    except InvalidStateError:
        pass
