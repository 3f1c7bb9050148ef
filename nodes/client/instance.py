"""ClientInstance: one per process and client id, shared by the facades using that id.

Like RocketMQ's MQClientInstance (handed out by `MQClientManager`, here `CLIENT_MANAGER`), it
owns one daemon asyncio loop thread, the `ClientApi` (channels, pull streams, every broker and
name-server call), the `RouteCache` with its polling service, the heartbeats of the consumers
using it, and the registry of the producer and consumer groups using it (one facade per
group and role). Facades `acquire` it on start and `release` it on shutdown; the last release
closes it. Does not own any sending or pulling policy: `Producer` and the consumers bring that.

The client id is `ip@instanceName`; the default instance name becomes `pid#nanos`, so only
facades given the same instance name share an instance (RocketMQ's changeInstanceNameToPID).

The public client API is synchronous; everything here runs on the loop, and sync
callers enter it through `run(coro, timeout_s)` (which waits on a `SyncCall`, the lightest
hand-off for a caller that only waits) or `submit(coro)` (a concurrent future, for callers
that keep several in flight). Work that needs no coroutine -- a pull whose route is cached --
enters through `run_started` / `submit_started`: a loop callback begins it and whatever ends it
settles the caller's wait or future directly, with no task in between.

Lifecycle: INIT -> STARTING -> RUNNING -> STOPPING -> STOPPED (forward only).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

from nodes.client.cluster_timing import cluster_time_scale, timing_for_cluster
from nodes.client.heartbeat import HeartbeatService, RegisteredConsumer
from nodes.client.msg_id import local_ipv4
from nodes.client.routes import RouteCache, RouteRefreshService, RouteSnapshot
from nodes.client.rpc.api import ClientApi
from nodes.client.rpc.loop_noise import quiet_grpc_poller_noise
from nodes.client.sync_call import Settle, SyncCall
from nodes.common import constants as c
from nodes.common.config import Timing
from nodes.common.errors import ClientStateError, InvalidArgumentError, MqError, RequestTimeoutError
from nodes.common.service import Lifecycle, LifecycleState
from nodes.common.types import MessageModel

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

ROLE_PRODUCER = "producer"
ROLE_CONSUMER = "consumer"


def make_client_id(instance_name: str, message_model: MessageModel = MessageModel.CLUSTERING, *,
                   ip: str | None = None, pid: int | None = None, nanos: int | None = None) -> str:
    """`ip@instanceName`; in CLUSTERING the default instance name becomes `pid#nanoTime`.

    BROADCASTING keeps the instance name, so a restarted broadcasting consumer finds its local
    offset file again (the file lives under the client id).
    """
    name = instance_name
    if message_model is MessageModel.CLUSTERING and instance_name == c.CLIENT_INSTANCE_NAME_DEFAULT:
        name = f"{os.getpid() if pid is None else pid}#{time.monotonic_ns() if nanos is None else nanos}"
    return f"{local_ipv4() if ip is None else ip}@{name}"


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
    """One background loop plus the connections, routes and heartbeats client facades share."""

    def __init__(self, namesrv_addr: str, *, name: str = "client", client_id: str = "",
                 timing: Timing | None = None, dial_overrides: Mapping[str, str] | None = None,
                 producer_default_queue_nums: int | None = None, manager: ClientManager | None = None) -> None:
        self.namesrv_addrs = parse_namesrv_addrs(namesrv_addr)
        self.timing = timing or Timing()
        self.timing.validate()
        # no timing given: the cluster's is taken at start (cluster_timing)
        self.timing_given = timing is not None
        self.cluster_time_scale: float | None = None
        self.name = f"{name}-{next(_instance_ids)}"
        self.client_id = client_id or self.name
        self._manager = manager
        self._users = 0  # facades that acquired the instance and have not released it
        self._users_lock = threading.Lock()
        self._groups: set[tuple[str, str]] = set()  # (role, group) of the facades using it
        self._heartbeat: HeartbeatService | None = None
        self.api = ClientApi(dial_overrides)
        self.lifecycle = LifecycleState(f"client {self.name}")
        kwargs = {} if producer_default_queue_nums is None else {
            "producer_default_queue_nums": producer_default_queue_nums}
        self.routes = RouteCache(self._fetch_route, **kwargs)
        self._namesrv_index = 0
        self.route_source = ""  # the name server that answered the last route request
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
        quiet_grpc_poller_noise(loop)
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
        if self.timing_given:  # only a warning depends on the answer: start does not wait for it
            asyncio.get_running_loop().create_task(self._check_time_scale(), name=f"time-scale-{self.name}")
        else:
            await self._check_time_scale()
        self._route_service = RouteRefreshService(self.routes, self.timing.route_poll_ms,
                                                  self.timing.route_poll_first_ms)
        self._route_service.start()

    async def _check_time_scale(self) -> None:
        """The cluster's time scale: taken for the timers when none were given (cluster_timing)."""
        self.cluster_time_scale = await cluster_time_scale(self.api, self.namesrv_addrs, self.timing.rpc_timeout_ms)
        self.timing = timing_for_cluster(self.name, self.timing, given=self.timing_given,
                                         scale=self.cluster_time_scale)

    def close(self) -> None:
        """Stop polling, close pull streams and channels, stop the loop and join its thread."""
        if self._manager is not None:
            self._manager.forget(self)
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
        if self._heartbeat is not None:
            await self._heartbeat.stop()
            await self._heartbeat.close_notifications()
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

    def call_in_loop(self, fn: Callable[[Any], None], arg: Any) -> None:
        """`fn(arg)` on the loop soon (from any thread); dropped once the client is stopping."""
        loop = self._loop
        if self.running and loop is not None:
            try:
                loop.call_soon_threadsafe(fn, arg)
            except RuntimeError:  # the loop closed meanwhile
                pass

    def submit(self, coro: Coroutine[Any, Any, T], what: str = "call") -> concurrent.futures.Future[T]:
        """Schedule `coro` on the loop; the caller gets a concurrent future."""
        try:
            loop = self._require_running(what)
        except ClientStateError:
            coro.close()
            raise
        return asyncio.run_coroutine_threadsafe(coro, loop)

    def submit_started(self, start: Callable[[Settle], None], what: str = "call") -> concurrent.futures.Future[Any]:
        """Like `submit`, for work begun by `start(settle)` on the loop (see `run_started`): the
        future is resolved by `settle` itself, with no task or loop future to chain from. It can
        be cancelled until the loop begins the work, not after (the work keeps its own deadline)."""
        loop = self._require_running(what)
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def settle(result: Any, error: BaseException | None) -> None:
            try:
                if error is None:
                    fut.set_result(result)
                else:
                    fut.set_exception(error)
            except concurrent.futures.InvalidStateError:  # settled already: only the first counts
                pass

        def begin() -> None:
            if not fut.set_running_or_notify_cancel():
                return  # cancelled before the loop got to it: never started
            try:
                start(settle)
            except BaseException as exc:
                settle(None, exc)

        loop.call_soon_threadsafe(begin)
        return fut

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
        try:
            loop = self._require_running(what)
        except ClientStateError:
            coro.close()
            raise
        return self._wait_call(SyncCall(loop, coro), timeout_s, what)

    def run_started(self, start: Callable[[Settle], None], timeout_s: float, what: str = "call") -> Any:
        """Like `run`, for work begun by `start(settle)` on the loop and ended by whoever calls
        `settle(result, error)` (see `SyncCall.started`): no task on the loop. On a timeout the
        work is not cancelled; it must end on its own deadline.

        Raises:
            ClientStateError: not running, or called from the loop thread (it would deadlock).
            RequestTimeoutError: no answer in time; the outcome is unknown.
            whatever `settle` was given as the error.
        """
        if self.in_loop_thread():
            raise ClientStateError(
                f"{what}: a blocking client call from the client's own event loop thread (e.g. inside a "
                "send_async callback) would deadlock; call it from another thread")
        return self._wait_call(SyncCall.started(self._require_running(what), start), timeout_s, what)

    @staticmethod
    def _wait_call(call: SyncCall[T], timeout_s: float, what: str) -> T:
        try:
            finished = call.wait(timeout_s)
        except BaseException:  # e.g. KeyboardInterrupt while waiting: do not leave the call running
            call.cancel()
            raise
        if not finished:
            call.cancel()
            raise RequestTimeoutError(f"{what}: no answer within {timeout_s:.1f} s; the outcome is unknown")
        return call.result()

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

    # --- sharing ------------------------------------------------------------------------
    def acquire(self) -> None:
        """A facade starts using the instance: the first one starts it."""
        with self._users_lock:
            if self._users == 0 and self.lifecycle.state == Lifecycle.INIT:
                self.start()
            elif not self.running:
                raise ClientStateError(f"{self.name} is {self.lifecycle.state.name}; it cannot be used again")
            self._users += 1

    def release(self) -> None:
        """A facade stops using the instance: the last one closes it."""
        with self._users_lock:
            self._users = max(0, self._users - 1)
            if self._users:
                return
        self.close()

    def register_group(self, role: str, group: str) -> None:
        """registerProducer / registerConsumer: one facade per role and group on an instance."""
        with self._users_lock:
            if (role, group) in self._groups:
                raise ClientStateError(
                    f"a {role} of group {group} already uses client {self.client_id}; give this one another "
                    "instance_name or another group")
            self._groups.add((role, group))

    def unregister_group(self, role: str, group: str) -> None:
        with self._users_lock:
            self._groups.discard((role, group))

    def attach(self, role: str, group: str) -> None:
        """A facade (`role` producer or consumer, of `group`) starts using the instance."""
        self.acquire()
        try:
            self.register_group(role, group)
        except BaseException:
            self.release()
            raise

    def detach(self, role: str, group: str) -> None:
        """The facade that attached as (`role`, `group`) stops using the instance."""
        self.unregister_group(role, group)
        self.release()

    def same_settings(self, namesrv_addr: str, timing: Timing | None, dial_overrides: Mapping[str, str] | None,
                      producer_default_queue_nums: int | None) -> bool:
        same_timing = (timing is None and not self.timing_given) or (timing or Timing()) == self.timing
        return (parse_namesrv_addrs(namesrv_addr) == self.namesrv_addrs and same_timing
                and dict(dial_overrides or {}) == dict(self.dial_overrides)
                and producer_default_queue_nums in (None, self.routes.producer_default_queue_nums))

    # --- consumers' heartbeats (loop only) ------------------------------------------------
    @property
    def heartbeat(self) -> HeartbeatService | None:
        return self._heartbeat

    async def register_consumer(self, group: str, consumer: RegisteredConsumer) -> HeartbeatService:
        """Include `group` in the instance's heartbeats (started with the first consumer)."""
        if self._heartbeat is None:
            self._heartbeat = HeartbeatService(self.api, self.routes, self.client_id, interval_ms=self.timing.client_heartbeat_ms,
                                               timeout_ms=self.timing.rpc_timeout_ms)
            self._heartbeat.register(group, consumer)
            self._heartbeat.start()
        else:
            self._heartbeat.register(group, consumer)
        return self._heartbeat

    async def unregister_consumer(self, group: str, topics: list[str]) -> None:
        """Leave `group` out of the heartbeats and unregister it at its brokers; after the last
        consumer, stop heartbeating and close the notification streams."""
        heartbeat = self._heartbeat
        if heartbeat is None:
            return
        heartbeat.forget(group)
        await heartbeat.unregister(group, topics)
        if not heartbeat.consumers:
            self._heartbeat = None
            await heartbeat.stop()
            await heartbeat.close_notifications()

    def next_commit_seq(self) -> int:
        """The next offset-commit sequence number; take it when reading the value to commit, so the
        broker can drop a commit that overtook a later one on another stream (UpdateConsumerOffsetRequest)."""
        return next(self._commit_seqs)

    async def _fetch_route(self, topic: str) -> RouteSnapshot | None:
        """GetRouteInfo from the name servers, starting with the last one that answered."""
        last_error: MqError | None = None
        n = len(self.namesrv_addrs)
        for i in range(n):
            index = (self._namesrv_index + i) % n
            addr = self.namesrv_addrs[index]
            try:
                route = await self.api.get_route(addr, topic, self.timing.rpc_timeout_ms)
            except MqError as err:
                if err.answered:  # a refusal: another name server would not know better
                    raise
                last_error = err  # no answer: try the next one
                continue
            self._namesrv_index = index
            self.route_source = addr
            return route
        assert last_error is not None
        raise last_error


class ClientManager:
    """MQClientManager: the one ClientInstance per client id in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._instances: dict[str, ClientInstance] = {}

    def instance(self, client_id: str, namesrv_addr: str, *, name: str, timing: Timing | None = None,
                 dial_overrides: Mapping[str, str] | None = None,
                 producer_default_queue_nums: int | None = None) -> ClientInstance:
        """The instance of `client_id`, created (not started) if there is none in use.

        Raises:
            InvalidArgumentError: the instance exists with other settings (name servers, timing,
                dial overrides): one client id cannot talk two ways.
        """
        with self._lock:
            inst = self._instances.get(client_id)
            if inst is not None and inst.lifecycle.state not in (Lifecycle.STOPPING, Lifecycle.STOPPED):
                if not inst.same_settings(namesrv_addr, timing, dial_overrides, producer_default_queue_nums):
                    raise InvalidArgumentError(
                        f"client id {client_id} is in use with other settings (name servers, timing, dial "
                        "overrides); give this client another instance_name")
                return inst
            inst = ClientInstance(namesrv_addr, name=name, client_id=client_id, timing=timing,
                                  dial_overrides=dial_overrides, producer_default_queue_nums=producer_default_queue_nums,
                                  manager=self)
            self._instances[client_id] = inst
            return inst

    def forget(self, inst: ClientInstance) -> None:
        with self._lock:
            if self._instances.get(inst.client_id) is inst:
                del self._instances[inst.client_id]


CLIENT_MANAGER = ClientManager()
