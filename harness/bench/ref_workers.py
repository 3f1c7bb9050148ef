"""The same-run references' client processes (roles of `python -m harness.bench.worker`).

    plain-stream   a bare grpc stream-stream call (raw bytes, no protobuf, no mqlab code):
                   ask for `batch` records, get them back-to-back in one message, take every
                   record out as its own bytes object; `window` asks in flight
    plain-unary    bare grpc unary calls carrying `batch` length-prefixed bodies, one at a time
    plain-stream-publish  the same requests as round trips on one stream-stream call, one at a
                   time: the wire a synchronous send of mqlab's producer rides on (its send stream)
    tcp            one loopback TCP socket the limits server writes records into as fast as it
                   can; counts record-sized units
    redis-pull     Redis Streams XREADGROUP `batch` (then XACK of their ids, or NOACK), reading
                   every entry's id and body, round and round the preloaded stream
    redis-xadd     Redis Streams: `batch` XADDs in one pipeline, one pipeline at a time; against
                   a master with a replica attached (`redis-xadd-replicated`), and with `WAIT 1`
                   after each pipeline (`redis-xadd-wait`: answered once a replica has it)
    grpc-stream    mqlab's own Pull stream shape against the limits server, counting records
                   without reading them (transport-only)

The plain and Redis clients use grpc / redis-py (with hiredis) and nothing of mqlab, so they
measure what the machine and those libraries do with the same bytes.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from typing import Any

import grpc

from harness.bench.worker_protocol import Windows, await_go, emit, result

PLAIN_SERVICE = "benchplain.Plain"
PLAIN_STREAM = f"/{PLAIN_SERVICE}/Stream"
PLAIN_PUBLISH = f"/{PLAIN_SERVICE}/Publish"
PLAIN_PUBLISH_STREAM = f"/{PLAIN_SERVICE}/PublishStream"
COUNT = struct.Struct(">i")  # a plain request's message count; also each record's leading total size
TCP_READ_BYTES = 1 << 20
REDIS_STREAM_CAP = 100_000  # XADD MAXLEN ~ this, so a send reference does not fill the memory
REDIS_WAIT_TIMEOUT_MS = 3_000  # WAIT's timeout: a SYNC_MASTER's slave timeout
WARM_UP_TIMEOUT_S = 30.0
_GRPC_OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]


def plain_publish_body(bodies: list[bytes]) -> bytes:
    """A plain publish request: the count, then each body with its length in front."""
    parts = [COUNT.pack(len(bodies))]
    for body in bodies:
        parts.append(COUNT.pack(len(body)))
        parts.append(body)
    return b"".join(parts)


class _Feed:
    """Request iterator for a bare stream call: yields what was put, one message each."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()

    def __aiter__(self) -> _Feed:
        return self

    async def __anext__(self) -> Any:
        item = await self.queue.get()
        if item is None:
            raise StopAsyncIteration
        return item


def take_records(blob: bytes) -> list[bytes]:
    """Every record of a plain answer as its own bytes object (what a client hands its user)."""
    out = []
    append = out.append
    unpack_from = COUNT.unpack_from
    pos, end = 0, len(blob)
    while pos < end:
        size = unpack_from(blob, pos)[0]
        append(blob[pos:pos + size])
        pos += size
    return out


async def _plain_stream(job: dict[str, Any]) -> dict[str, Any]:
    batch, window = job["batch"], job["window"]
    async with grpc.aio.insecure_channel(job["addr"], options=_GRPC_OPTIONS) as channel:
        feed = _Feed()
        call = channel.stream_stream(PLAIN_STREAM)(feed, wait_for_ready=True)
        ask = COUNT.pack(batch)
        feed.queue.put_nowait(ask)
        take_records(await call.read())  # warm up
        emit("READY")
        await asyncio.get_running_loop().run_in_executor(None, await_go)
        windows = Windows.from_now(job)
        for _ in range(window):
            feed.queue.put_nowait(ask)
        inflight, touched = window, 0
        while inflight:
            records = take_records(await call.read())
            inflight -= 1
            for record in records:
                touched += len(record)
            windows.add(len(records))
            if windows.is_open():
                feed.queue.put_nowait(ask)
                inflight += 1
        windows.close()
        feed.queue.put_nowait(None)
        call.cancel()
        return result(windows.messages, windows.seconds, cpu_s=windows.cpu_s, bytes_touched=touched)


async def _plain_unary(job: dict[str, Any]) -> dict[str, Any]:
    batch = job["batch"]
    body = b"b" * job["body_bytes"]
    async with grpc.aio.insecure_channel(job["addr"], options=_GRPC_OPTIONS) as channel:
        publish = channel.unary_unary(PLAIN_PUBLISH)
        await publish(plain_publish_body([body] * batch), wait_for_ready=True, timeout=WARM_UP_TIMEOUT_S)
        emit("READY")
        await asyncio.get_running_loop().run_in_executor(None, await_go)
        windows = Windows.from_now(job)
        while windows.is_open():
            # the request is built per call from the bodies, as a publisher would
            answer = await publish(plain_publish_body([body] * batch))
            windows.add(len(answer) // 8)
        windows.close()
        return result(windows.messages, windows.seconds, cpu_s=windows.cpu_s)


async def _plain_stream_publish(job: dict[str, Any]) -> dict[str, Any]:
    batch = job["batch"]
    body = b"b" * job["body_bytes"]
    async with grpc.aio.insecure_channel(job["addr"], options=_GRPC_OPTIONS) as channel:
        feed = _Feed()
        call = channel.stream_stream(PLAIN_PUBLISH_STREAM)(feed, wait_for_ready=True)
        feed.queue.put_nowait(plain_publish_body([body] * batch))
        await asyncio.wait_for(call.read(), WARM_UP_TIMEOUT_S)
        emit("READY")
        await asyncio.get_running_loop().run_in_executor(None, await_go)
        windows = Windows.from_now(job)
        while windows.is_open():
            # one round trip at a time, the request built per call from the bodies, as a
            # synchronous publisher would
            feed.queue.put_nowait(plain_publish_body([body] * batch))
            answer = await call.read()
            windows.add(len(answer) // 8)
        windows.close()
        feed.queue.put_nowait(None)
        call.cancel()
        return result(windows.messages, windows.seconds, cpu_s=windows.cpu_s)


def run_tcp(job: dict[str, Any]) -> dict[str, Any]:
    record_bytes = job["record_bytes"]
    with socket.create_connection((job["host"], job["tcp_port"]), timeout=WARM_UP_TIMEOUT_S) as sock:
        buf = bytearray(TCP_READ_BYTES)
        view = memoryview(buf)
        sock.recv_into(view)  # warm up
        emit("READY")
        await_go()
        windows = Windows.from_now(job)
        carry = 0
        while windows.is_open():
            got = sock.recv_into(view)
            if not got:
                raise RuntimeError("the limits server closed the TCP stream")
            carry += got
            whole, carry = divmod(carry, record_bytes)
            windows.add(whole)
        windows.close()
    return result(windows.messages, windows.seconds, cpu_s=windows.cpu_s)


def _redis(job: dict[str, Any]) -> Any:
    import redis

    return redis.Redis(host=job["host"], port=job["redis_port"])


def run_redis_pull(job: dict[str, Any]) -> dict[str, Any]:
    batch, noack, stream = job["batch"], job["noack"], job["stream"]
    client = _redis(job)
    group = f"bench-{job['batch']}-{'noack' if noack else 'ack'}-{time.monotonic_ns()}"
    client.xgroup_create(stream, group, id="0")
    touched = 0

    def read_batch() -> int:
        nonlocal touched
        answer = client.xreadgroup(group, "c1", {stream: ">"}, count=batch, noack=noack)
        if not answer or not answer[0][1]:
            client.xgroup_setid(stream, group, id="0")  # the next pass over the stream
            return 0
        entries = answer[0][1]
        ids = []
        for entry_id, fields in entries:  # what a consumer reads: the id and the body
            touched += len(fields[b"b"])
            ids.append(entry_id)
        if not noack:
            client.xack(stream, group, *ids)
        return len(entries)

    try:
        read_batch()  # warm up
        emit("READY")
        await_go()
        windows = Windows.from_now(job)
        while windows.is_open():
            windows.add(read_batch())
        windows.close()
    finally:
        client.xgroup_destroy(stream, group)
        client.close()
    return result(windows.messages, windows.seconds, cpu_s=windows.cpu_s, bytes_touched=touched)


def run_redis_xadd(job: dict[str, Any]) -> dict[str, Any]:
    batch, stream, wait = job["batch"], job["stream"], job.get("wait", False)
    wait_timeout_ms = job.get("wait_timeout_ms", REDIS_WAIT_TIMEOUT_MS)
    body = b"b" * job["body_bytes"]
    client = _redis(job)
    errors = 0

    def add_batch() -> int:
        nonlocal errors
        pipe = client.pipeline(transaction=False)
        for _ in range(batch):
            pipe.xadd(stream, {b"b": body}, maxlen=REDIS_STREAM_CAP, approximate=True)
        added = len(pipe.execute())
        if wait and client.wait(1, wait_timeout_ms) < 1:
            errors += 1  # no replica confirmed it in time: a SYNC_MASTER's FLUSH_SLAVE_TIMEOUT
            return 0
        return added

    try:
        add_batch()  # warm up
        emit("READY")
        await_go()
        windows = Windows.from_now(job)
        while windows.is_open():
            windows.add(add_batch())
        windows.close()
        client.delete(stream)
    finally:
        client.close()
    return result(windows.messages, windows.seconds, cpu_s=windows.cpu_s, errors=errors)


async def _grpc_stream(job: dict[str, Any]) -> dict[str, Any]:
    from nodes.common import rpc
    from proto import broker_pb2, broker_pb2_grpc

    batch, window = job["batch"], job["window"]
    channel = rpc.make_channel(job["addr"])
    try:
        stub = broker_pb2_grpc.BrokerStub(channel)
        feed = _Feed()
        call = stub.Pull(feed, wait_for_ready=True)
        ids = iter(range(1, 1 << 62))

        def request() -> broker_pb2.PullRequest:
            return broker_pb2.PullRequest(request_id=next(ids), consumer_group="bench", topic="BenchLimit",
                                          queue_id=0, queue_offset=0, max_msg_nums=batch, has_subscription=True,
                                          subscription_expression="*")

        feed.queue.put_nowait(request())  # warm up: the connection and the server's blob
        await call.read()
        emit("READY")
        await asyncio.get_running_loop().run_in_executor(None, await_go)
        windows = Windows.from_now(job)
        for _ in range(window):
            feed.queue.put_nowait(request())
        inflight = window
        while inflight:
            resp = await call.read()
            inflight -= 1
            windows.add(resp.record_count)
            if windows.is_open():
                feed.queue.put_nowait(request())
                inflight += 1
        windows.close()
        feed.queue.put_nowait(None)
        call.cancel()
        return result(windows.messages, windows.seconds, cpu_s=windows.cpu_s)
    finally:
        await channel.close()


async def _grpc_unary(job: dict[str, Any]) -> dict[str, Any]:
    from nodes.client.rpc.send_wire import Outgoing, build_request
    from nodes.common import constants as c
    from nodes.common import rpc
    from nodes.common.types import Message
    from proto import broker_pb2_grpc

    mode, batch, window = job["mode"], job["batch"], job["window"]
    channel = rpc.make_channel(job["addr"])
    try:
        stub = broker_pb2_grpc.BrokerStub(channel)
        # The bytes a Producer sends: the same request shape (a batch body for several), a
        # unique id per message.
        msg = Message("BenchLimit", b"b" * job["body_bytes"], properties={c.PROPERTY_UNIQ_KEY: "0" * 32})
        out = Outgoing(msg.body, msg.flag, msg.all_properties(), int(time.time() * 1000))
        request = build_request([out] * batch, producer_group="bench", topic="BenchLimit", queue_id=0,
                                born_host="127.0.0.1:0")
        await stub.SendMessage(request, wait_for_ready=True, timeout=WARM_UP_TIMEOUT_S)  # warm up
        emit("READY")
        await asyncio.get_running_loop().run_in_executor(None, await_go)
        windows = Windows.from_now(job)

        async def caller() -> None:
            while windows.is_open():
                await stub.SendMessage(request)
                windows.add(batch)

        await asyncio.gather(*(caller() for _ in range(window if mode == "async" else 1)))
        windows.close()
        return result(windows.messages, windows.seconds, cpu_s=windows.cpu_s)
    finally:
        await channel.close()


ROLES = {
    "plain-stream": lambda job: asyncio.run(_plain_stream(job)),
    "plain-unary": lambda job: asyncio.run(_plain_unary(job)),
    "plain-stream-publish": lambda job: asyncio.run(_plain_stream_publish(job)),
    "tcp": run_tcp,
    "redis-pull": run_redis_pull,
    "redis-xadd": run_redis_xadd,
    "grpc-stream": lambda job: asyncio.run(_grpc_stream(job)),
    "grpc-unary": lambda job: asyncio.run(_grpc_unary(job)),
}
