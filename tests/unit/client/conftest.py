"""Fakes for client unit tests: routes built by hand and a broker answered by a function.

No sockets: `FakeInstance` stands in for `ClientInstance` on an event loop, and
`WiredInstance` is a real `ClientInstance` (real loop thread) whose stubs are fakes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from support.decoders import DECODERS, decoder

from nodes.client.instance import ClientInstance
from nodes.client.routes import BrokerData, QueueData, RouteCache, RouteSnapshot
from nodes.client.rpc.api import ClientApi
from nodes.common import constants as c
from nodes.common.config import Timing
from nodes.store import message_batch
from proto import broker_pb2, common_pb2, namesrv_pb2

# handler(addr, method_name, request) -> response, or an exception instance to raise
Handler = Callable[[str, str, Any], Any]


def make_route(*brokers: tuple[str, int, int, int, dict[int, str]], order_topic_conf: str = "") -> RouteSnapshot:
    """brokers: (broker_name, read_queue_nums, write_queue_nums, perm, {broker_id: addr})."""
    return RouteSnapshot(
        queue_datas=tuple(QueueData(name, r, w, perm) for name, r, w, perm, _ in brokers),
        broker_datas=tuple(BrokerData(name, dict(addrs)) for name, _, _, _, addrs in brokers),
        order_topic_conf=order_topic_conf,
    )


def two_broker_route(queues: int = 2) -> RouteSnapshot:
    return make_route(("broker-a", queues, queues, c.PERM_DEFAULT, {0: "a0:1", 1: "a1:1"}),
                      ("broker-b", queues, queues, c.PERM_DEFAULT, {0: "b0:1"}))


def sent_messages(request: broker_pb2.SendMessageRequest) -> list[broker_pb2.OutgoingMessage]:
    """The messages of a send request, from its `messages` or its batch body."""
    if request.batch_body:
        return [broker_pb2.OutgoingMessage(body=body, flag=flag, properties=properties,
                                           born_timestamp_ms=request.born_timestamp_ms)
                for body, flag, properties in message_batch.decode(request.batch_body)]
    return list(request.messages)


def send_ok(request: broker_pb2.SendMessageRequest, code: int = common_pb2.SUCCESS,
            first_offset: int = 0) -> broker_pb2.SendMessageResponse:
    """A broker's answer: message i at queue offset first_offset + i, phys offset i * 100, offset
    msg id = i as 32 hex digits; compact for a batch body, as the broker answers it."""
    count = len(sent_messages(request))
    if request.batch_body:
        return broker_pb2.SendMessageResponse(code=code, queue_id=request.queue_id, first_queue_offset=first_offset,
                                              phys_offsets=[i * 100 for i in range(count)],
                                              offset_msg_id_prefix="0" * 16)
    return broker_pb2.SendMessageResponse(
        code=code, queue_id=request.queue_id,
        entries=[broker_pb2.SendEntry(offset_msg_id=f"{i * 100:032X}", queue_offset=first_offset + i,
                                      phys_offset=i * 100) for i in range(count)])


class _Stub:
    def __init__(self, owner: Any, addr: str) -> None:
        self._owner = owner
        self._addr = addr

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method == "Notifications":
            return lambda request: _QuietStream()
        if method == "GetClusterInfo":  # asked once at start for the time scale: RocketMQ's unscaled timers
            async def cluster_info(request: Any, timeout: float | None = None) -> Any:
                return namesrv_pb2.GetClusterInfoResponse(code=common_pb2.SUCCESS, time_scale=1.0)

            return cluster_info

        async def call(request: Any, timeout: float | None = None) -> Any:
            return self._owner.answer(self._addr, method, request)

        return call


class _QuietStream:
    """A server stream that stays open and says nothing until it is cancelled."""

    def __init__(self) -> None:
        self._cancelled = asyncio.Event()

    def __aiter__(self) -> _QuietStream:
        return self

    async def __anext__(self) -> Any:
        await self._cancelled.wait()
        raise StopAsyncIteration

    def cancel(self) -> None:
        self._cancelled.set()


class _FakeStream:
    def __init__(self, owner: Any, addr: str) -> None:
        self._owner = owner
        self.addr = addr

    async def pull(self, fields: dict[str, Any], timeout_ms: int) -> Any:
        return self._owner.answer(self.addr, "Pull", fields)

    def send(self, fields: dict[str, Any], timeout_ms: int, settle: Callable[[Any, BaseException | None], None]) -> int:
        """PullStream.send: answered a loop turn later, as the real stream's reader would."""
        def answer() -> None:
            try:
                response = self._owner.answer(self.addr, "Pull", fields)
            except BaseException as exc:
                settle(None, exc)
                return
            settle(response, None)

        asyncio.get_running_loop().call_soon(answer)
        return 0


class _FakeBlockingPulls:
    """ClientApi.blocking_pulls: a caller's synchronous pull answered by the handler in its thread."""

    def __init__(self, owner: Any) -> None:
        self._owner = owner

    def pull(self, addr: str, fields: dict[str, Any], timeout_ms: int) -> Any:
        return self._owner.answer(addr, "Pull", fields)

    def close_calls(self) -> None:
        pass

    def close(self) -> None:
        pass


class _FakeBlockingSends:
    """ClientApi.blocking_sends: a caller's synchronous send answered by the handler in its thread."""

    def __init__(self, owner: Any) -> None:
        self._owner = owner

    def send(self, addr: str, request: Any, timeout_ms: int, what: str) -> Any:
        return self._owner.answer(addr, "SendMessage", request)

    def close_calls(self) -> None:
        pass

    def close(self) -> None:
        pass


class _FakeSendStream:
    """The send stream's surface; its sends reach the handler as "SendMessage" (one semantics)."""

    def __init__(self, owner: Any, addr: str) -> None:
        self._owner = owner
        self.addr = addr

    async def send(self, request: Any, timeout_ms: int, what: str) -> Any:
        return self._owner.answer(self.addr, "SendMessage", request)


class _Answering:
    handler: Handler

    def answer(self, addr: str, method: str, request: Any) -> Any:
        self.calls.append((addr, method, request))
        result = self.handler(addr, method, request)
        if isinstance(result, BaseException):
            raise result
        return result


class FakeApi(ClientApi):
    """The real ClientApi (requests built, answers read) over stubs and streams answered by `owner`."""

    def __init__(self, owner: _Answering) -> None:
        super().__init__()
        self._owner = owner
        self.blocking_pulls = _FakeBlockingPulls(owner)  # type: ignore[assignment]
        self.blocking_sends = _FakeBlockingSends(owner)  # type: ignore[assignment]

    def broker_stub(self, addr: str) -> Any:
        return _Stub(self._owner, addr)

    def consumer_stub(self, addr: str) -> Any:
        return _Stub(self._owner, addr)

    def namesrv_stub(self, addr: str) -> Any:
        return _Stub(self._owner, addr)

    def pull_stream(self, addr: str) -> Any:
        return _FakeStream(self._owner, addr)

    def send_stream(self, addr: str) -> Any:
        return _FakeSendStream(self._owner, addr)


class FakeInstance(_Answering):
    """ClientInstance's loop-side surface: routes from a table, brokers from `handler`."""

    def __init__(self, routes: dict[str, RouteSnapshot], handler: Handler) -> None:
        self.route_table = dict(routes)
        self.handler = handler
        self.calls: list[tuple[str, str, Any]] = []
        self.fetches: list[str] = []
        self.fetch_error: BaseException | None = None
        self.routes = RouteCache(self._fetch)
        self.running = True
        self.commit_seq = 0
        self.api = FakeApi(self)

    def next_commit_seq(self) -> int:
        self.commit_seq += 1
        return self.commit_seq

    async def _fetch(self, topic: str) -> RouteSnapshot | None:
        self.fetches.append(topic)
        if self.fetch_error is not None:
            raise self.fetch_error
        return self.route_table.get(topic)

    def in_loop_thread(self) -> bool:
        return False


class WiredInstance(_Answering, ClientInstance):
    """A real ClientInstance (loop thread, run/submit) whose name server and brokers are fakes."""

    def __init__(self, routes: dict[str, RouteSnapshot], handler: Handler, **kwargs: Any) -> None:
        # The scheduled route refresh would fetch at a time the machine's load decides, in the
        # middle of what a test counts; tests that want it pass their own timing.
        kwargs.setdefault("timing", Timing(route_poll_first_ms=c.ROUTE_POLL_MS))
        ClientInstance.__init__(self, "127.0.0.1:9876", **kwargs)
        self.route_table = dict(routes)
        self.handler = handler
        self.calls = []
        self.fetches: list[str] = []
        self.api = FakeApi(self)

    async def _fetch_route(self, topic: str) -> RouteSnapshot | None:
        self.fetches.append(topic)
        return self.route_table.get(topic)


@pytest.fixture
def fakes() -> SimpleNamespace:
    """The helpers of this module, for tests (importlib mode cannot import a conftest)."""
    return SimpleNamespace(make_route=make_route, two_broker_route=two_broker_route, send_ok=send_ok,
                           sent_messages=sent_messages, FakeInstance=FakeInstance)


@pytest.fixture
def wired_instance_factory() -> Iterator[Callable[..., WiredInstance]]:
    created: list[WiredInstance] = []

    def make(*args: Any, **kwargs: Any) -> WiredInstance:
        inst = WiredInstance(*args, **kwargs)
        created.append(inst)
        return inst

    yield make
    for inst in created:
        inst.close()


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep Producer.start() from asking the OS for the local address."""
    monkeypatch.setattr("nodes.client.producer.local_ipv4", lambda: "10.0.0.1")



@pytest.fixture(params=DECODERS)
def decode_impl(request: pytest.FixtureRequest) -> Callable[..., list[Any]]:
    """Each implementation of decode_messages in turn: the compiled one, then the Python loop."""
    return decoder(request.param)


@pytest.fixture
def instance():
    """A started ClientInstance; closed after the test."""
    inst = ClientInstance("127.0.0.1:9876", name="t")
    inst.start()
    yield inst
    inst.close()
