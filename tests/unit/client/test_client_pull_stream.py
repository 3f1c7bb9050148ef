"""PullStream: request ids, out-of-order answers, timeouts, breaks and re-opening, over a fake call."""

from __future__ import annotations

import asyncio

import grpc
import grpc.aio
import pytest

from nodes.client.rpc.pull_stream import PullStream
from nodes.common.errors import RequestTimeoutError, TransportError
from proto import broker_pb2, common_pb2


class FakeRpcError(grpc.RpcError):
    def code(self):
        return grpc.StatusCode.UNAVAILABLE

    def details(self):
        return "connection reset"


class FakeCall:
    """A batched bidi call: drains the request feed, answers whatever the test puts in `answers`."""

    def __init__(self, feed):
        self.requests: list[broker_pb2.PullRequest] = []
        self.answers: asyncio.Queue = asyncio.Queue()
        self.cancelled = False
        self.arrived = asyncio.Event()
        self._pump = asyncio.create_task(self._drain(feed))

    async def _drain(self, feed):
        async for batch in feed:
            self.requests.extend(batch.requests)
            self.arrived.set()

    async def read(self):
        item = await self.answers.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def cancel(self):
        self.cancelled = True
        self._pump.cancel()

    def answer(self, request, **kw):
        self.answers.put_nowait(broker_pb2.PullResponseBatch(responses=[
            broker_pb2.PullResponse(request_id=request.request_id, code=common_pb2.SUCCESS, **kw)]))


class Opener:
    def __init__(self):
        self.calls: list[FakeCall] = []

    def __call__(self):
        def start(feed):
            call = FakeCall(feed)
            self.calls.append(call)
            return call

        return start


async def wait_requests(call, n):
    while len(call.requests) < n:
        call.arrived.clear()
        await call.arrived.wait()


def pull_fields(queue_id=0):
    return {"consumer_group": "g", "topic": "T", "queue_id": queue_id, "queue_offset": 0, "max_msg_nums": 32}


def test_answers_are_matched_by_request_id_out_of_order():
    async def scenario():
        opener = Opener()
        stream = PullStream("b:1", opener)
        first = asyncio.create_task(stream.pull(pull_fields(0), 1000))
        second = asyncio.create_task(stream.pull(pull_fields(1), 1000))
        call = await asyncio.wait_for(_first_call(opener), 1)
        await wait_requests(call, 2)
        r0, r1 = call.requests
        assert (r0.queue_id, r1.queue_id) == (0, 1) and r0.request_id != r1.request_id
        call.answer(r1, next_begin_offset=11)
        call.answer(r0, next_begin_offset=10)
        assert (await first).next_begin_offset == 10
        assert (await second).next_begin_offset == 11
        assert stream.pending_count == 0 and len(opener.calls) == 1
        await stream.close()

    asyncio.run(scenario())


async def _first_call(opener):
    while not opener.calls:
        await asyncio.sleep(0)
    return opener.calls[0]


def test_timeout_raises_and_a_late_answer_is_dropped():
    async def scenario():
        opener = Opener()
        stream = PullStream("b:1", opener)
        with pytest.raises(RequestTimeoutError, match="no answer within 20 ms"):
            await stream.pull(pull_fields(), 20)
        call = opener.calls[0]
        call.answer(call.requests[0])  # too late: nobody waits for it
        follow_up = asyncio.create_task(stream.pull(pull_fields(), 1000))
        await wait_requests(call, 2)
        call.answer(call.requests[1], next_begin_offset=5)
        assert (await follow_up).next_begin_offset == 5
        await stream.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("ending", [FakeRpcError(), grpc.aio.EOF])
def test_a_broken_stream_fails_pending_pulls_and_reopens_on_the_next_pull(ending):
    async def scenario():
        opener = Opener()
        stream = PullStream("b:1", opener)
        pending = [asyncio.create_task(stream.pull(pull_fields(i), 1000)) for i in range(3)]
        call = await _first_call(opener)
        await wait_requests(call, 3)
        call.answers.put_nowait(ending)
        for task in pending:
            with pytest.raises(TransportError):
                await task
        assert call.cancelled and stream.pending_count == 0
        retry = asyncio.create_task(stream.pull(pull_fields(), 1000))
        while len(opener.calls) < 2:
            await asyncio.sleep(0)
        second = opener.calls[1]
        await wait_requests(second, 1)
        second.answer(second.requests[0], next_begin_offset=1)
        assert (await retry).next_begin_offset == 1
        assert stream.opened_count == 2
        await stream.close()

    asyncio.run(scenario())


def test_close_fails_pending_pulls_and_cancels_the_call():
    async def scenario():
        opener = Opener()
        stream = PullStream("b:1", opener)
        pending = asyncio.create_task(stream.pull(pull_fields(), 1000))
        call = await _first_call(opener)
        await wait_requests(call, 1)
        await stream.close()
        with pytest.raises(TransportError, match="closed"):
            await pending
        assert call.cancelled
        await stream.close()  # idempotent

    asyncio.run(scenario())


# --- send: the callback form a waiting caller's pull uses (no future, settled by the reader) ----

class Settled:
    """Records every settle(response, error) call."""

    def __init__(self):
        self.calls: list[tuple[object, BaseException | None]] = []
        self.event = asyncio.Event()

    def __call__(self, response, error):
        self.calls.append((response, error))
        self.event.set()


def test_send_settles_once_with_the_answer_in_the_readers_turn():
    async def scenario():
        opener = Opener()
        stream = PullStream("b:1", opener)
        settled = Settled()
        request_id = stream.send(pull_fields(3), 1000, settled)
        call = await _first_call(opener)
        await wait_requests(call, 1)
        assert call.requests[0].request_id == request_id and call.requests[0].queue_id == 3
        assert settled.calls == [] and stream.pending_count == 1
        call.answer(call.requests[0], next_begin_offset=7)
        await asyncio.wait_for(settled.event.wait(), 1)
        [(response, error)] = settled.calls
        assert error is None and response.next_begin_offset == 7 and stream.pending_count == 0
        await stream.close()
        assert len(settled.calls) == 1  # closing does not settle an answered request again

    asyncio.run(scenario())


def test_send_settles_a_timeout_once_and_ignores_the_late_answer():
    async def scenario():
        opener = Opener()
        stream = PullStream("b:1", opener)
        settled = Settled()
        stream.send(pull_fields(), 20, settled)
        await asyncio.wait_for(settled.event.wait(), 1)
        [(response, error)] = settled.calls
        assert response is None and isinstance(error, RequestTimeoutError)
        call = opener.calls[0]
        await wait_requests(call, 1)
        call.answer(call.requests[0])  # too late
        await asyncio.sleep(0.01)
        assert len(settled.calls) == 1 and stream.pending_count == 0
        await stream.close()

    asyncio.run(scenario())


def test_send_settles_a_broken_stream_with_transport_error():
    async def scenario():
        opener = Opener()
        stream = PullStream("b:1", opener)
        settled = Settled()
        stream.send(pull_fields(), 1000, settled)
        call = await _first_call(opener)
        await wait_requests(call, 1)
        call.answers.put_nowait(FakeRpcError())
        await asyncio.wait_for(settled.event.wait(), 1)
        [(response, error)] = settled.calls
        assert response is None and isinstance(error, TransportError)
        await stream.close()

    asyncio.run(scenario())


def test_a_settle_that_raises_does_not_break_the_stream_for_the_others():
    async def scenario():
        opener = Opener()
        stream = PullStream("b:1", opener)

        def broken(response, error):
            raise RuntimeError("caller bug")

        settled = Settled()
        stream.send(pull_fields(0), 1000, broken)
        stream.send(pull_fields(1), 1000, settled)
        call = await _first_call(opener)
        await wait_requests(call, 2)
        call.answer(call.requests[0])
        call.answer(call.requests[1], next_begin_offset=2)
        await asyncio.wait_for(settled.event.wait(), 1)
        assert settled.calls[0][0].next_begin_offset == 2 and stream.opened_count == 1
        await stream.close()

    asyncio.run(scenario())


def test_a_cancelled_pull_forgets_its_request():
    async def scenario():
        opener = Opener()
        stream = PullStream("b:1", opener)
        task = asyncio.create_task(stream.pull(pull_fields(), 1000))
        call = await _first_call(opener)
        await wait_requests(call, 1)
        assert stream.pending_count == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert stream.pending_count == 0
        call.answer(call.requests[0])  # nobody waits for it: dropped
        await asyncio.sleep(0.01)
        assert stream.opened_count == 1
        await stream.close()

    asyncio.run(scenario())


# --- over real gRPC: a call the server ended leaves nothing running -----------------------

def test_a_stream_the_server_ended_leaves_no_request_task_pending():
    """gRPC's task that feeds a call's requests outlives a call that ended with an error (its
    `cancel` does nothing then); left waiting on the feed, it was destroyed pending at the next
    collection ("Task was destroyed but it is pending!" on stderr after every broken stream)."""
    from proto import broker_pb2_grpc

    async def abort_first(request_iterator, context):
        async for _batch in request_iterator:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "going away (test)")

    async def scenario():
        server = grpc.aio.server()
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("mqlab.v1.Broker", {
            "PullBatch": grpc.stream_stream_rpc_method_handler(
                abort_first, request_deserializer=broker_pb2.PullRequestBatch.FromString,
                response_serializer=broker_pb2.PullResponseBatch.SerializeToString)})])
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        stream = PullStream(f"127.0.0.1:{port}", lambda: broker_pb2_grpc.BrokerStub(channel).PullBatch)
        try:
            with pytest.raises(TransportError):
                await stream.pull(pull_fields(), 5000)
            for _ in range(20):  # the feed's end reaches gRPC's task within a few loop turns
                await asyncio.sleep(0.01)
            feeding = [t for t in asyncio.all_tasks() if "_consume_request_iterator" in repr(t.get_coro())]
            assert feeding == []
        finally:
            await stream.close()
            await channel.close()
            await server.stop(None)

    asyncio.run(scenario())
