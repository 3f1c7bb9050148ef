"""Fixtures for the harness unit tests: ports, stand-in node processes, cleanup."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.ports import PortAllocator
from harness.process import NodeProcess
from nodes.common.errors import RequestTimeoutError
from nodes.common.types import (
    Message,
    MessageExt,
    MessageQueue,
    PullResult,
    PullStatus,
    SendResult,
    SendStatus,
)

STANDIN = Path(__file__).with_name("standin_node.py")


def standin_argv(mode: str, *, node_id: str = "n-0", port: int = 0, config: Path | None = None,
                 run_dir: Path | None = None) -> list[str]:
    argv = [sys.executable, str(STANDIN), mode]
    if config is not None:
        return [*argv, "--config", str(config)]
    argv += ["--node-id", node_id, "--port", str(port)]
    if run_dir is not None:
        argv += ["--run-dir", str(run_dir)]
    return argv


@pytest.fixture
def ports() -> Iterator[PortAllocator]:
    with PortAllocator() as allocator:
        yield allocator


@pytest.fixture
def make_node(tmp_path: Path, ports: PortAllocator) -> Iterator[Callable[..., NodeProcess]]:
    """Build NodeProcesses running the stand-in; every one is closed (and checked) at teardown."""
    made: list[NodeProcess] = []

    def make(mode: str = "ready", *, node_id: str = "n-0", **kwargs: object) -> NodeProcess:
        port = ports.allocate(1)[0]
        run_dir = tmp_path / node_id
        proc = NodeProcess(node_id, "broker", run_dir, port=port,
                           argv=standin_argv(mode, node_id=node_id, port=port, run_dir=run_dir), **kwargs)
        made.append(proc)
        return proc

    yield make
    for proc in made:
        proc.close()
        assert proc.live_pids() == []


@pytest.fixture
def standin_cmd() -> Callable[..., list[str]]:
    """`standin_cmd(mode, node_id=..., port=..., config=..., run_dir=...)` -> argv of the stand-in."""
    return standin_argv


# ---- in-memory client fakes (the shapes of nodes.client.Producer / PullConsumer) --------


class FakeBroker:
    """Topic queues in memory; `fail` maps a body prefix to an exception or a SendStatus."""

    def __init__(self, queues: int = 4) -> None:
        self.queue_count = queues
        self.queues: dict[MessageQueue, list[MessageExt]] = {}
        self.committed: dict[tuple[str, MessageQueue], int] = {}
        self.fail: dict[bytes, object] = {}
        self.drop_every: int = 0  # store-and-forget every Nth message (to make the demo lose some)
        self.pull_errors = 0  # the next N pulls raise
        self.lock = threading.Lock()
        self._next = 0

    def put(self, msg: Message) -> SendResult:
        for prefix, outcome in self.fail.items():
            if msg.body.startswith(prefix):
                if isinstance(outcome, BaseException):
                    raise outcome
                status = outcome
                break
        else:
            status = SendStatus.SEND_OK
        with self.lock:
            self._next += 1
            mq = MessageQueue(msg.topic, "broker-a", self._next % self.queue_count)
            queue = self.queues.setdefault(mq, [])
            if not (self.drop_every and self._next % self.drop_every == 0):
                queue.append(MessageExt(
                    topic=msg.topic, body=bytes(msg.body), properties=msg.all_properties(), msg_id=f"id{self._next}",
                    offset_msg_id="", queue_id=mq.queue_id, queue_offset=len(queue), commitlog_offset=0,
                    reconsume_times=0, store_timestamp_ms=0, born_timestamp_ms=0, broker_name="broker-a"))
            return SendResult(status, f"id{self._next}", mq, len(queue) - 1)


class FakeProducer:
    broker: FakeBroker

    def __init__(self, namesrv_addr: str, group: str = "DEFAULT_PRODUCER", **_: object) -> None:
        self.started = False
        self.batches: list[int] = []
        self.outstanding = 0
        self.max_outstanding = 0

    def start(self) -> None:
        self.started = True

    def shutdown(self) -> None:
        self.started = False

    def send(self, msg: Message) -> SendResult:
        assert self.started
        return self.broker.put(msg)

    def send_batch(self, msgs: list[Message]) -> SendResult:
        self.batches.append(len(msgs))
        results = [self.broker.put(m) for m in msgs]
        return results[-1]

    def send_async(self, msg: Message) -> Future:
        fut: Future = Future()
        self.outstanding += 1
        self.max_outstanding = max(self.max_outstanding, self.outstanding)

        def run() -> None:
            time.sleep(0.001)
            self.outstanding -= 1
            try:
                fut.set_result(self.broker.put(msg))
            except Exception as exc:
                fut.set_exception(exc)

        threading.Thread(target=run, daemon=True).start()
        return fut


class FakePullConsumer:
    broker: FakeBroker
    hold_s = 0.02  # a long poll that finds nothing returns after this

    def __init__(self, namesrv_addr: str, group: str, **_: object) -> None:
        self.group = group
        self.updates: list[tuple[MessageQueue, int]] = []

    def start(self) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def fetch_queues(self, topic: str) -> list[MessageQueue]:
        return [mq for mq in self.broker.queues if mq.topic == topic]

    def min_offset(self, mq: MessageQueue) -> int:
        return 0

    def max_offset(self, mq: MessageQueue) -> int:
        return len(self.broker.queues.get(mq, []))

    def query_offset(self, mq: MessageQueue) -> int:
        return self.broker.committed.get((self.group, mq), -1)

    def update_offset(self, mq: MessageQueue, offset: int) -> None:
        self.updates.append((mq, offset))
        self.broker.committed[(self.group, mq)] = offset

    def pull_block_if_not_found(self, mq: MessageQueue, offset: int, max_nums: int = 32,
                                sub_expression: str = "*") -> PullResult:
        with self.broker.lock:
            if self.broker.pull_errors:
                self.broker.pull_errors -= 1
                raise RequestTimeoutError("pull: no answer")
            queue = self.broker.queues.get(mq, [])
            found = list(queue[offset:offset + max_nums])
        if not found:
            time.sleep(self.hold_s)
            return PullResult(PullStatus.NO_NEW_MSG, offset, 0, len(queue))
        return PullResult(PullStatus.FOUND, offset + len(found), 0, len(queue), found)


class FakePushConsumer:
    """Delivers every queue of the subscribed topics from the group's committed offset, one message
    per listener call on a background thread; a success commits the next offset."""

    broker: FakeBroker
    idle_s = 0.005

    def __init__(self, namesrv_addr: str, group: str, *args: object, **_: object) -> None:
        self.group = group
        self.topics: list[str] = []
        self.listener = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def subscribe(self, topic: str, expression: str = "*") -> None:
        self.topics.append(topic)

    def register_listener(self, listener: object) -> None:
        self.listener = listener

    def start(self) -> None:
        self._thread = threading.Thread(target=self._deliver, daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(0.5)  # a listener held past --count is released after shutdown

    def fetch_subscribe_message_queues(self, topic: str) -> list[MessageQueue]:
        from nodes.common.errors import RouteNotFoundError

        queues = [mq for mq in self.broker.queues if mq.topic == topic]
        if not queues:
            raise RouteNotFoundError(f"no route of {topic}")
        return queues

    def describe(self) -> dict:
        return {"queues": [{"topic": mq.topic, "broker_name": mq.broker_name, "queue_id": mq.queue_id,
                            "offset": offset} for (group, mq), offset in self.broker.committed.items()
                           if group == self.group]}

    def _deliver(self) -> None:
        from nodes.common.types import ConsumeConcurrentlyStatus

        while not self._stop.is_set():
            delivered = False
            for mq in [mq for mq in list(self.broker.queues) if mq.topic in self.topics]:
                offset = self.broker.committed.get((self.group, mq), 0)
                queue = self.broker.queues[mq]
                if offset >= len(queue):
                    continue
                ctx = SimpleNamespace(message_queue=mq, ack_index=2**31 - 1)
                status = self.listener([queue[offset]], ctx)
                if self._stop.is_set():
                    return  # a result after shutdown is dropped
                if status is ConsumeConcurrentlyStatus.CONSUME_SUCCESS:
                    self.broker.committed[(self.group, mq)] = offset + 1
                delivered = True
            if not delivered:
                self._stop.wait(self.idle_s)


@pytest.fixture
def fake_mq() -> SimpleNamespace:
    """A fresh FakeBroker plus Producer / PullConsumer classes bound to it."""
    broker = FakeBroker()
    producer = type("Producer", (FakeProducer,), {"broker": broker})
    consumer = type("PullConsumer", (FakePullConsumer,), {"broker": broker})
    push_consumer = type("PushConsumer", (FakePushConsumer,), {"broker": broker})
    return SimpleNamespace(broker=broker, Producer=producer, PullConsumer=consumer, PushConsumer=push_consumer)
