"""ClientInstance: the background event loop, connections and routes behind client facades.

Owns one daemon asyncio loop thread, the `ClientApi` (channels, pull streams, every broker and
name-server call), and the `RouteCache` with its polling service. Does not own any sending
or pulling policy: `Producer` and the consumers bring that.

The public client API is synchronous (DESIGN §5); everything here runs on the loop, and sync
callers enter it through `run(coro, timeout_s)` or `submit(coro)`.

Lifecycle: INIT -> STARTING -> RUNNING -> STOPPING -> STOPPED (forward only).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import re
import threading
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

from nodes.client.routes import RouteCache, RouteRefreshService, RouteSnapshot
from nodes.client.rpc.api import ClientApi
from nodes.common import constants as c
from nodes.common.config import Timing
from nodes.common.errors import ClientStateError, InvalidArgumentError, RequestTimeoutError, TransportError
from nodes.common.service import Lifecycle, LifecycleState

log = logging.getLogger(__name__)

T = TypeVar("T")

# How long the sync side waits beyond an operation's own deadline before giving up on the
# loop (the coroutine normally reports its own timeout first).
SYNC_WAIT_SLACK_S = 2.0
START_BUDGET_S = 10.0
CLOSE_BUDGET_S = 10.0

GROUP_NAME_CHARS_MAX = 255  # Validators.CHARACTER_MAX_LENGTH
_GROUP_RE = re.compile(c.TOPIC_NAME_PATTERN)

_instance_ids = itertools.count()


def validate_group(group: str, role: str) -> None:
    """RocketMQ's Validators#checkGroup: non-blank, [%|a-zA-Z0-9_-], at most 255 characters."""
    if not isinstance(group, str) or not group.strip():
        raise InvalidArgumentError(f"{role} group name is empty; pass a group name")
    if len(group) > GROUP_NAME_CHARS_MAX:
        raise InvalidArgumentError(f"{role} group name is longer than {GROUP_NAME_CHARS_MAX} characters")
    if not _GROUP_RE.match(group):
        raise InvalidArgumentError(f"{role} group name {group!r} has characters outside [%|a-zA-Z0-9_-]")


def parse_namesrv_addrs(namesrv_addr: str) -> list[str]:
    """RocketMQ's `namesrvAddr`: one or more "host:port" separated by ';'."""
    addrs = [a.strip() for a in namesrv_addr.split(";") if a.strip()] if isinstance(namesrv_addr, str) else []
    if not addrs:
        raise InvalidArgumentError(
            f"namesrv_addr {namesrv_addr!r} names no address; pass 'host:port' (several separated by ';')")
    for addr in addrs:
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise InvalidArgumentError(f"name server address {addr!r} is not 'host:port'")
    return addrs


class ClientInstance:
    """One background loop plus the connections and routes a client facade needs."""

    def __init__(self, namesrv_addr: str, *, name: str = "client", timing: Timing | None = None,
                 dial_overrides: Mapping[str, str] | None = None,
                 producer_default_queue_nums: int | None = None) -> None:
        self.namesrv_addrs = parse_namesrv_addrs(namesrv_addr)
        self.timing = timing or Timing()
        self.timing.validate()
        self.name = f"{name}-{next(_instance_ids)}"
        self.api = ClientApi(dial_overrides)
        self.lifecycle = LifecycleState(f"client {self.name}")
        kwargs = {} if producer_default_queue_nums is None else {
            "producer_default_queue_nums": producer_default_queue_nums}
        self.routes = RouteCache(self._fetch_route, **kwargs)
        self._namesrv_index = 0
        self._commit_seqs = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._route_service: RouteRefreshService | None = None

    # --- lifecycle -------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.lifecycle.state == Lifecycle.RUNNING

    def start(self) -> None:
        if self.lifecycle.state != Lifecycle.INIT:
            raise ClientStateError(f"{self.name} was already started (state {self.lifecycle.state.name})")
        self.lifecycle.transition(Lifecycle.STARTING)
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=self._thread_main, name=f"mqlab-{self.name}", daemon=True)
        self._thread.start()
        try:
            self._wait(asyncio.run_coroutine_threadsafe(self._astart(), loop), START_BUDGET_S, "start")
        except BaseException:
            self.close()
            raise
        self.lifecycle.transition(Lifecycle.RUNNING)

    def _thread_main(self) -> None:
        assert self._loop is not None
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    async def _astart(self) -> None:
        self._route_service = RouteRefreshService(self.routes, self.timing.route_poll_ms)
        self._route_service.start()

    def close(self) -> None:
        """Stop polling, close pull streams and channels, stop the loop and join its thread."""
        if self.lifecycle.state in (Lifecycle.STOPPING, Lifecycle.STOPPED, Lifecycle.INIT):
            if self.lifecycle.state == Lifecycle.INIT:
                self.lifecycle.transition(Lifecycle.STOPPED)
            return
        self.lifecycle.transition(Lifecycle.STOPPING)
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            fut = asyncio.run_coroutine_threadsafe(self._aclose(), loop)
            try:
                fut.result(CLOSE_BUDGET_S)
            except BaseException as exc:  # closing must go on: log, then stop the loop anyway
                log.warning("%s: close did not finish cleanly: %r", self.name, exc)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(CLOSE_BUDGET_S)
            if thread.is_alive():
                log.warning("%s: loop thread did not stop within %.0f s", self.name, CLOSE_BUDGET_S)
        if loop is not None and not loop.is_running():
            loop.close()
        self.lifecycle.transition(Lifecycle.STOPPED)

    async def _aclose(self) -> None:
        if self._route_service is not None:
            await self._route_service.stop()
        await self.api.close_streams()
        current = asyncio.current_task()
        others = [t for t in asyncio.all_tasks() if t is not current]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        await self.api.close()
        loop = asyncio.get_running_loop()
        await loop.shutdown_asyncgens()
        await loop.shutdown_default_executor()

    # --- entering the loop from sync code ----------------------------------------------
    def in_loop_thread(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def _require_running(self, what: str) -> asyncio.AbstractEventLoop:
        if not self.running or self._loop is None:
            raise ClientStateError(f"{what}: the client is {self.lifecycle.state.name}; call start() first")
        return self._loop

    def submit(self, coro: Coroutine[Any, Any, T], what: str = "call") -> concurrent.futures.Future[T]:
        """Schedule `coro` on the loop; the caller gets a concurrent future."""
        try:
            loop = self._require_running(what)
        except ClientStateError:
            coro.close()
            raise
        return asyncio.run_coroutine_threadsafe(coro, loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float, what: str = "call") -> T:
        """Run `coro` on the loop and wait at most `timeout_s` for its result.

        Raises:
            ClientStateError: not running, or called from the loop thread (it would deadlock).
            RequestTimeoutError: no answer in time; the coroutine is cancelled, outcome unknown.
            whatever `coro` raises (already mapped to the mqlab error tree).
        """
        if self.in_loop_thread():
            coro.close()
            raise ClientStateError(
                f"{what}: a blocking client call from the client's own event loop thread (e.g. inside a "
                "send_async callback) would deadlock; call it from another thread")
        return self._wait(self.submit(coro, what), timeout_s, what)

    @staticmethod
    def _wait(fut: concurrent.futures.Future[T], timeout_s: float, what: str) -> T:
        try:
            return fut.result(timeout_s)
        except TimeoutError:
            if fut.done():  # the coroutine's own TimeoutError, not our wait
                raise
            fut.cancel()
            raise RequestTimeoutError(f"{what}: no answer within {timeout_s:.1f} s; the outcome is unknown") from None
        except BaseException:
            if not fut.done():
                fut.cancel()
            raise

    @property
    def dial_overrides(self) -> Mapping[str, str]:
        return self.api.dial_overrides

    def next_commit_seq(self) -> int:
        """The next offset-commit sequence number; take it when reading the value to commit, so the
        broker can drop a commit that overtook a later one on another stream (UpdateConsumerOffsetRequest)."""
        return next(self._commit_seqs)

    async def _fetch_route(self, topic: str) -> RouteSnapshot | None:
        """GetRouteInfo from the name servers, starting with the last one that answered."""
        last_error: TransportError | None = None
        n = len(self.namesrv_addrs)
        for i in range(n):
            index = (self._namesrv_index + i) % n
            addr = self.namesrv_addrs[index]
            try:
                route = await self.api.get_route(addr, topic, self.timing.rpc_timeout_ms)
            except TransportError as err:
                last_error = err
                continue
            self._namesrv_index = index
            return route
        assert last_error is not None
        raise last_error
