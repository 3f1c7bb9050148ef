"""BlockingPulls: a synchronous pull made in the caller's own thread, on a synchronous gRPC stream.

Why: a caller that waits for one pull at a time (`PullConsumer.pull`) going through the
client's loop pays a hand-off to the loop, gRPC's hop from its poller thread to the loop when
the answer comes, and the loop's hand-over back to the caller. On a synchronous stream the
caller queues its request and then blocks on gRPC's completion queue itself, which wakes it
with the answer (docs/benchmark.md, "Where the time goes": a pull loop's rate 1.15x, its
client CPU 290 -> 232 us per pull, in paired runs).

Owns: one synchronous channel per broker address (shared by the calling threads), one
`Broker.PullBatch` call per calling thread and address (its requests fed from a queue, one
pull in flight on it at a time), per-pull deadlines (one watchdog thread cancels the call of
a pull that outlived its timeout), and closing all of it. Does not interpret answers: codes
and records are `api.process_pull_response`'s, routing `pull_api`'s.

Failures read as the loop's `PullStream`'s: RequestTimeoutError when no answer came within
the timeout, TransportError when the stream broke or ended; that call is dropped and the
thread's next pull opens another. Thread-safe; closing it closes what is open, and a later
pull opens anew (as the loop's streams do).
"""

from __future__ import annotations

import heapq
import itertools
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

from nodes.client.rpc.pull_stream import pull_stream_error, pull_timeout_error
from nodes.common import rpc
from nodes.common.errors import TransportError
from proto import broker_pb2, broker_pb2_grpc


class _Call:
    """One thread's `PullBatch` call to one address."""

    __slots__ = ("addr", "requests", "responses", "thread")

    def __init__(self, channel: grpc.Channel, addr: str) -> None:
        self.addr = addr
        self.thread = threading.current_thread()
        self.requests: queue.SimpleQueue[broker_pb2.PullRequestBatch | None] = queue.SimpleQueue()
        # gRPC takes the requests from this iterator on a thread of its own; None ends it.
        self.responses = broker_pb2_grpc.BrokerStub(channel).PullBatch(iter(self.requests.get, None))

    def cancel(self) -> None:
        self.responses.cancel()

    def close(self) -> None:
        self.requests.put(None)
        self.responses.cancel()


# A watched pull: [deadline (monotonic s), sequence number, its call or None once answered,
# expired]. Lists, so the pull and the watchdog can mark an entry in place; the sequence number
# keeps calls out of the heap's comparisons.
_Watch = list[Any]
_CALL, _EXPIRED = 2, 3


class _Watchdog:
    """Cancels the call of every pull still unanswered at its deadline (one daemon thread)."""

    def __init__(self) -> None:
        self._heap: list[_Watch] = []
        self._cond = threading.Condition()
        self._numbers = itertools.count()
        self._thread: threading.Thread | None = None  # started by the first watch after a close

    def watch(self, deadline_s: float, call: _Call) -> _Watch:
        entry = [deadline_s, next(self._numbers), call, False]
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="blocking-pull-watchdog", daemon=True)
                self._thread.start()
            heapq.heappush(self._heap, entry)
            if self._heap[0] is entry:  # sooner than what the thread sleeps towards
                self._cond.notify()
        return entry

    @staticmethod
    def answered(entry: _Watch) -> None:
        # The entry stays in the heap until its deadline (cheaper than removing it now): at most
        # the pulls of one timeout's span, each a push of O(log n).
        entry[_CALL] = None

    def _run(self) -> None:
        me = threading.current_thread()
        with self._cond:
            while self._thread is me:
                now = time.monotonic()
                heap = self._heap
                while heap and heap[0][0] <= now:
                    entry = heapq.heappop(heap)
                    call = entry[_CALL]
                    if call is not None:
                        entry[_EXPIRED] = True  # set before the cancel wakes its pull
                        call.cancel()
                self._cond.wait(heap[0][0] - now if heap else None)

    def close(self) -> None:
        """Stop the thread (its pulls' calls are closed by then); a later watch starts another."""
        with self._cond:
            thread, self._thread = self._thread, None
            self._heap.clear()
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)


class BlockingPulls:
    """Synchronous pulls over synchronous `PullBatch` calls, one per calling thread and address.

    Args:
        dial: makes the synchronous channel of a broker address.
    """

    def __init__(self, dial: Callable[[str], grpc.Channel]) -> None:
        self._dial = dial
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}
        self._calls: dict[tuple[int, str], _Call] = {}  # (thread ident, addr)
        self._ids = itertools.count(1)
        self._watchdog = _Watchdog()

    def pull(self, addr: str, fields: dict[str, Any], timeout_ms: int) -> broker_pb2.PullResponse:
        """Send one pull (`fields` of PullRequest, without request_id) to `addr` and wait for its
        answer in this thread.

        Raises:
            RequestTimeoutError: no answer within `timeout_ms`.
            TransportError: the stream broke or ended before the answer.
        """
        call = self._call(addr)
        request_id = next(self._ids)
        watch = self._watchdog.watch(time.monotonic() + rpc.timeout_s(timeout_ms), call)
        error: Exception
        try:
            call.requests.put(broker_pb2.PullRequestBatch(
                requests=[broker_pb2.PullRequest(request_id=request_id, **fields)]))
            for message in call.responses:
                for response in message.responses:
                    if response.request_id == request_id:
                        return response
            error = TransportError(f"pull stream to {addr} ended by the broker")
        except grpc.RpcError as exc:
            error = (pull_timeout_error(fields, addr, timeout_ms) if watch[_EXPIRED]
                     else pull_stream_error(exc, addr))
        finally:
            self._watchdog.answered(watch)
        self._drop(call)
        raise error

    def _call(self, addr: str) -> _Call:
        key = (threading.get_ident(), addr)
        call = self._calls.get(key)
        # A call that is done (the watchdog cancelled it just as its pull was answered, or the
        # broker ended it) is replaced, and so is one of a thread that ended under the same ident.
        if call is not None and call.thread is threading.current_thread() and not call.responses.done():
            return call
        with self._lock:
            self._close_calls_of_ended_threads()
            stale = self._calls.pop(key, None)
            if stale is not None:
                stale.close()
            channel = self._channels.get(addr)
            if channel is None:
                channel = self._channels[addr] = self._dial(addr)
            call = self._calls[key] = _Call(channel, addr)
        return call

    def _close_calls_of_ended_threads(self) -> None:
        """(lock held) A thread that ended leaves its calls behind; close them."""
        for key, call in list(self._calls.items()):
            if not call.thread.is_alive():
                del self._calls[key]
                call.close()

    def _drop(self, call: _Call) -> None:
        with self._lock:
            key = (threading.get_ident(), call.addr)
            if self._calls.get(key) is call:
                del self._calls[key]
        call.close()

    def close_calls(self) -> None:
        """Close every call (a thread waiting on one gets TransportError); the next pull opens another."""
        with self._lock:
            calls = list(self._calls.values())
            self._calls.clear()
        for call in calls:
            call.close()

    def close(self) -> None:
        """Close the calls, the channels and the watchdog's thread (a later pull opens new ones)."""
        self.close_calls()
        with self._lock:
            channels = list(self._channels.values())
            self._channels.clear()
        for channel in channels:
            channel.close()
        self._watchdog.close()
