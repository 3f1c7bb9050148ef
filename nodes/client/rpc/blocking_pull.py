"""BlockingPulls: a synchronous pull made in the caller's own thread, on a synchronous gRPC stream.

Why: a caller that waits for one pull at a time (`PullConsumer.pull`) going through the
client's loop pays a hand-off to the loop, gRPC's hop from its poller thread to the loop when
the answer comes, and the loop's hand-over back to the caller (docs/benchmark.md, "Where the
time goes": a pull loop's rate 1.15x, its client CPU 290 -> 232 us per pull, in paired runs).

Owns: the pull's request and answer on a `Broker.PullBatch` call of `BlockingStreams` (one per
calling thread and address, one pull in flight on it at a time). Does not interpret answers:
codes and records are `api.process_pull_response`'s, routing `pull_api`'s.

Failures read as the loop's `PullStream`'s: RequestTimeoutError when no answer came within
the timeout, TransportError when the stream broke or ended; that call is dropped and the
thread's next pull opens another. Thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from nodes.client.rpc.blocking_stream import BlockingStreams
from nodes.client.rpc.pull_stream import pull_stream_error, pull_timeout_error
from nodes.common.errors import TransportError
from proto import broker_pb2, broker_pb2_grpc


class BlockingPulls(BlockingStreams):
    """Synchronous pulls over synchronous `PullBatch` calls, one per calling thread and address.

    Args:
        dial: makes the synchronous channel of a broker address.
    """

    def __init__(self, dial: Callable[[str], grpc.Channel]) -> None:
        super().__init__(dial, lambda channel, requests: broker_pb2_grpc.BrokerStub(channel).PullBatch(requests),
                         "pull")

    def pull(self, addr: str, fields: dict[str, Any], timeout_ms: int) -> broker_pb2.PullResponse:
        """Send one pull (`fields` of PullRequest, without request_id) to `addr` and wait for its
        answer in this thread.

        Raises:
            RequestTimeoutError: no answer within `timeout_ms`.
            TransportError: the stream broke or ended before the answer.
        """
        request_id = next(self.request_ids)

        def answer_of(message: broker_pb2.PullResponseBatch) -> broker_pb2.PullResponse | None:
            for response in message.responses:
                if response.request_id == request_id:
                    return response
            return None

        def broken(exc: grpc.RpcError, expired: bool) -> Exception:
            return pull_timeout_error(fields, addr, timeout_ms) if expired else pull_stream_error(exc, addr)

        request = broker_pb2.PullRequestBatch(requests=[broker_pb2.PullRequest(request_id=request_id, **fields)])
        return self.exchange(addr, request, timeout_ms, answer_of,
                             lambda: TransportError(f"pull stream to {addr} ended by the broker"), broken)
