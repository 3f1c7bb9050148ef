"""BlockingStreams: synchronous gRPC streams for calls made in their caller's own thread.

Why: a caller that waits for one answer at a time (`PullConsumer.pull`, `Producer.send`) going
through the client's loop pays a hand-off to the loop, gRPC's hop from its poller thread to the
loop when the answer comes, and the loop's hand-over back to the caller. On a synchronous
stream the caller queues its request and then blocks on gRPC's completion queue itself, which
wakes it with the answer (docs/benchmark.md: "Where the time goes" for the pull loop, "One
message at a time" for the send).

Owns: one synchronous channel per broker address (shared by the calling threads), one call per
calling thread and address (its requests fed from a queue, one request in flight on it at a
time), per-request deadlines (one watchdog thread cancels the call of a request that outlived
its timeout), and closing all of it. Does not know what travels on the calls: which method, the
requests and the answers are `BlockingPulls`' and `BlockingSends`'.

Thread-safe; closing it closes what is open, and a later request opens anew (as the loop's
streams do).
"""

from __future__ import annotations

import heapq
import itertools
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from nodes.common import rpc

# open_stream(channel, requests): the stub's stream-stream call fed from `requests`
OpenStream = Callable[[grpc.Channel, Iterator[Any]], Any]


class StreamCall:
    """One thread's call to one address."""

    __slots__ = ("addr", "requests", "responses", "thread")

    def __init__(self, channel: grpc.Channel, addr: str, open_stream: OpenStream) -> None:
        self.addr = addr
        self.thread = threading.current_thread()
        self.requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        # gRPC takes the requests from this iterator on a thread of its own; None ends it.
        self.responses = open_stream(channel, iter(self.requests.get, None))

    def cancel(self) -> None:
        self.responses.cancel()

    def close(self) -> None:
        self.requests.put(None)
        self.responses.cancel()


# A watched request: [deadline (monotonic s), sequence number, its call or None once answered,
# expired]. Lists, so the caller and the watchdog can mark an entry in place; the sequence
# number keeps calls out of the heap's comparisons.
_Watch = list[Any]
_CALL, _EXPIRED = 2, 3


class _Watchdog:
    """Cancels the call of every request still unanswered at its deadline (one daemon thread)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._heap: list[_Watch] = []
        self._cond = threading.Condition()
        self._numbers = itertools.count()
        self._thread: threading.Thread | None = None  # started by the first watch after a close

    def watch(self, deadline_s: float, call: StreamCall) -> _Watch:
        entry = [deadline_s, next(self._numbers), call, False]
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            heapq.heappush(self._heap, entry)
            if self._heap[0] is entry:  # sooner than what the thread sleeps towards
                self._cond.notify()
        return entry

    @staticmethod
    def answered(entry: _Watch) -> None:
        # The entry stays in the heap until its deadline (cheaper than removing it now): at most
        # the requests of one timeout's span, each a push of O(log n).
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
                        entry[_EXPIRED] = True  # set before the cancel wakes its caller
                        call.cancel()
                self._cond.wait(heap[0][0] - now if heap else None)

    def close(self) -> None:
        """Stop the thread (its requests' calls are closed by then); a later watch starts another."""
        with self._cond:
            thread, self._thread = self._thread, None
            self._heap.clear()
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)


class BlockingStreams:
    """Synchronous calls of one stream-stream method, one per calling thread and address.

    Args:
        dial: makes the synchronous channel of a broker address.
        open_stream: opens the method's call on a channel, fed from an iterator of requests.
        name: what the calls carry ("pull", "send"), for the watchdog thread's name.
    """

    def __init__(self, dial: Callable[[str], grpc.Channel], open_stream: OpenStream, name: str) -> None:
        self._dial = dial
        self._open_stream = open_stream
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}
        self._calls: dict[tuple[int, str], StreamCall] = {}  # (thread ident, addr)
        self.request_ids = itertools.count(1)
        self._watchdog = _Watchdog(f"blocking-{name}-watchdog")

    @property
    def open_calls(self) -> int:
        return len(self._calls)

    def call(self, addr: str) -> StreamCall:
        """This thread's open call to `addr` (opened if it has none, or only a finished one)."""
        key = (threading.get_ident(), addr)
        call = self._calls.get(key)
        # A call that is done (the watchdog cancelled it just as its request was answered, or
        # the broker ended it) is replaced, and so is one of a thread that ended under the same ident.
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
            call = self._calls[key] = StreamCall(channel, addr, self._open_stream)
        return call

    def exchange(self, addr: str, request: Any, timeout_ms: int, answer_of: Callable[[Any], Any],
                 ended: Callable[[], Exception], broken: Callable[[grpc.RpcError, bool], Exception]) -> Any:
        """Send `request` on this thread's call to `addr` and return the first answer that
        `answer_of` finds in the stream's messages (None: not in this one), within `timeout_ms`.

        Raises `ended()` when the broker ended the call first, `broken(exc, expired)` when the
        call failed with `exc` (`expired`: the watchdog cancelled it at the timeout); either way
        the call is dropped and this thread's next request opens another.
        """
        call = self.call(addr)
        watch = self._watchdog.watch(time.monotonic() + rpc.timeout_s(timeout_ms), call)
        error: Exception
        try:
            call.requests.put(request)
            for message in call.responses:
                answer = answer_of(message)
                if answer is not None:
                    return answer
            error = ended()
        except grpc.RpcError as exc:
            error = broken(exc, watch[_EXPIRED])
        finally:
            self._watchdog.answered(watch)
        self.drop(call)
        raise error

    def _close_calls_of_ended_threads(self) -> None:
        """(lock held) A thread that ended leaves its calls behind; close them."""
        for key, call in list(self._calls.items()):
            if not call.thread.is_alive():
                del self._calls[key]
                call.close()

    def drop(self, call: StreamCall) -> None:
        """Close a call that failed; this thread's next request opens another (the calling thread's)."""
        with self._lock:
            key = (threading.get_ident(), call.addr)
            if self._calls.get(key) is call:
                del self._calls[key]
        call.close()

    def close_calls(self) -> None:
        """Close every call (a thread waiting on one gets its failure); the next request opens another."""
        with self._lock:
            calls = list(self._calls.values())
            self._calls.clear()
        for call in calls:
            call.close()

    def close(self) -> None:
        """Close the calls, the channels and the watchdog's thread (a later request opens new ones)."""
        self.close_calls()
        with self._lock:
            channels = list(self._channels.values())
            self._channels.clear()
        for channel in channels:
            channel.close()
        self._watchdog.close()
