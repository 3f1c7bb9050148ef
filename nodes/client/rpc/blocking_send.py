"""BlockingSends: a synchronous send made in the caller's own thread, on a synchronous gRPC stream.

Why: `Producer.send` waits for one answer at a time, and through the client's loop it paid the
hand-off to the loop, gRPC's hop from its poller thread to the loop when the answer came, and
the loop's hand-over back to the caller: a fifth of a one-message send's time and a third of its
client CPU (docs/benchmark.md, "One message at a time").

Owns: the send's request and answer on a `Broker.SendStream` call of `BlockingStreams` (one per
calling thread and address, one send in flight on it at a time). Does not read answers (codes
and offsets are `ClientApi`'s) nor retry (the producer's).

Failures read as the loop's `SendStream`'s: RequestTimeoutError when no answer came within the
timeout, OutcomeUnknownError when the stream broke or ended after the request may have reached
the broker, a plain TransportError when no connection was ever made; that call is dropped and
the thread's next send opens another. Thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc

from nodes.client.rpc.blocking_stream import BlockingStreams
from nodes.client.rpc.send_stream import send_broken_error, send_ended_error, send_timeout_error
from proto import broker_pb2, broker_pb2_grpc


class BlockingSends(BlockingStreams):
    """Synchronous sends over synchronous `SendStream` calls, one per calling thread and address.

    Args:
        dial: makes the synchronous channel of a broker address.
    """

    def __init__(self, dial: Callable[[str], grpc.Channel]) -> None:
        super().__init__(dial, lambda channel, requests: broker_pb2_grpc.BrokerStub(channel).SendStream(requests),
                         "send")

    def send(self, addr: str, request: broker_pb2.SendMessageRequest, timeout_ms: int,
             what: str) -> broker_pb2.SendMessageResponse:
        """Send `request` (its request_id is set here) to `addr` and wait for its answer in this thread.

        Raises:
            RequestTimeoutError: no answer within `timeout_ms`.
            OutcomeUnknownError: the stream broke or ended after the request may have reached the broker.
            TransportError: the stream broke before any connection was made (nothing was sent).
        """
        request_id = request.request_id = next(self.request_ids)

        def broken(exc: grpc.RpcError, expired: bool) -> Exception:
            return send_timeout_error(what) if expired else send_broken_error(exc, what, addr)

        return self.exchange(addr, request, timeout_ms,
                             lambda response: response if response.request_id == request_id else None,
                             lambda: send_ended_error(what, addr), broken)
