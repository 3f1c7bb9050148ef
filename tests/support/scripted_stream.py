"""A broker stand-in serving one stream-stream method of `mqlab.v1.Broker` over real gRPC, its
answers scripted by a test: for the client's blocking calls, which must meet a server that never
answers, aborts or ends the call on cue."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc

# the method's body: (request iterator, context) -> the answers to yield
Script = Callable[[Iterator[Any], grpc.ServicerContext], Iterator[Any]]


class ScriptedStream:
    """Serves `method` with `script` on a loopback port (`addr`); counts the calls it saw."""

    def __init__(self, method: str, script: Script, request_type: Any, response_type: Any) -> None:
        self.calls = 0
        self._lock = threading.Lock()
        self._script = script
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        self.server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("mqlab.v1.Broker", {
            method: grpc.stream_stream_rpc_method_handler(
                self._serve, request_deserializer=request_type.FromString,
                response_serializer=response_type.SerializeToString)})])
        self.addr = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.server.start()

    def _serve(self, request_iterator: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        with self._lock:
            self.calls += 1
        yield from self._script(request_iterator, context)

    def stop(self) -> None:
        self.server.stop(None)


def failure_of_a_call_closed_under_it(server: ScriptedStream, call: Callable[[], Any],
                                      close: Callable[[], None]) -> BaseException | None:
    """Start `call` (a blocking request `server` never answers) in a thread, `close` the calls once
    the request is on its way, and return what the call raised (None: it returned or never ended
    within 5 s)."""
    failed: list[BaseException] = []

    def waiter() -> None:
        try:
            call()
        except Exception as exc:
            failed.append(exc)

    thread = threading.Thread(target=waiter)
    thread.start()
    deadline = time.monotonic() + 5
    while server.calls < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)  # the request itself reaches the server's stream
    close()
    thread.join(5)
    return None if thread.is_alive() or not failed else failed[0]
