"""Same-run reference limits: a bare gRPC server with no storage, a raw scan of the commitlog
and raw appends into a fresh file.

Owns the limits server (`python -m harness.bench.limits --record-bytes R`, one process, prints
`READY <port>`, serves until stdin closes), `scan_commitlog` and `append_fresh`. The server
speaks the broker's own service with canned answers, so the limit clients
(`harness.bench.worker`) send and receive exactly the message types and sizes the real path does:

    Pull          every PullRequest answered at once with `max_msg_nums` records of
                  `record_bytes` each (prebuilt bytes): one stream message per pull
    SendMessage   answered SUCCESS with one SendEntry per message, like a broker that stores
                  nothing

and, for the plain references (`harness.bench.ref_workers`), raw-bytes methods with no protobuf:

    benchplain.Plain/Stream    each request (a 4-byte count) answered with that many records of
                               `record_bytes` back to back, each led by its 4-byte total size
    benchplain.Plain/Publish   each request (count, then length-prefixed bodies) answered with
                               8 bytes per message, the size of an offset
    benchplain.Plain/PublishStream  the same requests and answers on one stream-stream call,
                               as mqlab's producer sends over the broker's send stream
    TCP                        a loopback socket (`TCP <port>` before `READY`) written full of
                               records as fast as the reader takes them

`scan_commitlog` walks the broker's segment files through read-only mappings by the records'
framing (total size, magic) and copies each record out, as a reader that decodes nothing would.
`append_fresh` copies records into a new sparse file through a shared mapping, a batch of them
per copy, as a store appending to its newest segment does, with nothing else: what storing each
message's bytes once costs this machine (the kernel finding a page-cache page for every new
page written; on a virtual machine also the host backing it).
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import mmap
import os
import struct
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc.aio

from harness.bench.ref_workers import COUNT, PLAIN_SERVICE
from harness.bench.results import Measured
from nodes.client.rpc.send_wire import request_message_count
from nodes.common import constants as c
from nodes.common import rpc
from proto import broker_pb2, broker_pb2_grpc, common_pb2

SIZE_AND_MAGIC = struct.Struct(">iI")  # the first two fields of every commitlog record and blank marker
SCAN_SECONDS_MIN = 0.5  # the scan repeats passes until it has run this long
# The append stops at this many bytes if its time is not up first: the file is deleted right
# after (before the kernel writes it back), and 512 MiB bounds the page cache it takes meanwhile.
APPEND_BYTES_MAX = 512 * 1024 * 1024
# The append's file is allocated before it is mapped (a write into a page a full filesystem
# cannot back is SIGBUS, which kills the benchmark with its cluster still running) and leaves
# this much of the filesystem free for the brokers writing beside it; below the minimum it
# does not run at all.
APPEND_FREE_KEPT_BYTES = 64 * 1024 * 1024
APPEND_BYTES_MIN = 8 * 1024 * 1024
APPEND_BATCH_RECORDS = 32  # records per copy: a send of 32
SEGMENT_NAME_DIGITS = 20
TCP_BLOB_BYTES = 1 << 20  # what the TCP reference writes per call


class LimitServicer(broker_pb2_grpc.BrokerServicer):
    """The broker's service minus the broker: canned answers of the real sizes."""

    def __init__(self, record_bytes: int) -> None:
        self._record = os.urandom(record_bytes)
        self._blobs: dict[int, bytes] = {}
        self._send_answers: dict[tuple[int, bool], broker_pb2.SendMessageResponse] = {}

    def _blob(self, count: int) -> bytes:
        blob = self._blobs.get(count)
        if blob is None:
            blob = self._blobs[count] = self._record * count
        return blob

    async def Pull(self, request_iterator: AsyncIterator[broker_pb2.PullRequest],
                   context: grpc.aio.ServicerContext) -> AsyncIterator[broker_pb2.PullResponse]:
        async for req in request_iterator:
            count = max(1, req.max_msg_nums)
            yield broker_pb2.PullResponse(
                request_id=req.request_id, code=common_pb2.SUCCESS, remark="FOUND",
                next_begin_offset=req.queue_offset + count, min_offset=0, max_offset=req.queue_offset + count,
                records=self._blob(count), record_count=count)

    async def SendMessage(self, request: broker_pb2.SendMessageRequest,
                          context: grpc.aio.ServicerContext) -> broker_pb2.SendMessageResponse:
        # The broker's answer of the same size: entries for `messages`, compact for a batch body.
        count = request_message_count(request)
        key = (count, bool(request.batch_body))
        answer = self._send_answers.get(key)
        if answer is None:
            if request.batch_body:
                answer = broker_pb2.SendMessageResponse(
                    code=common_pb2.SUCCESS, queue_id=request.queue_id, first_queue_offset=0,
                    phys_offsets=[i * 1024 for i in range(count)], offset_msg_id_prefix="0" * 16)
            else:
                answer = broker_pb2.SendMessageResponse(
                    code=common_pb2.SUCCESS, queue_id=request.queue_id,
                    entries=[broker_pb2.SendEntry(offset_msg_id=f"{i:032X}", queue_offset=i, phys_offset=i * 1024)
                             for i in range(count)])
            self._send_answers[key] = answer
        return answer


def plain_record(record_bytes: int) -> bytes:
    """A record of the plain references: its total size (4 bytes, big-endian), then noise."""
    size = max(record_bytes, COUNT.size)
    return COUNT.pack(size) + os.urandom(size - COUNT.size)


def plain_handler(record_bytes: int) -> grpc.GenericRpcHandler:
    """Raw-bytes Stream and Publish (no serializers: requests and answers are bytes)."""
    record = plain_record(record_bytes)
    blobs: dict[int, bytes] = {}

    async def stream(request_iterator: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        async for request in request_iterator:
            count = max(1, COUNT.unpack_from(request)[0])
            blob = blobs.get(count)
            if blob is None:
                blob = blobs[count] = record * count
            yield blob

    async def publish(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return bytes(8 * COUNT.unpack_from(request)[0])

    async def publish_stream(request_iterator: AsyncIterator[bytes],
                             context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        async for request in request_iterator:
            yield bytes(8 * COUNT.unpack_from(request)[0])

    return grpc.method_handlers_generic_handler(PLAIN_SERVICE, {
        "Stream": grpc.stream_stream_rpc_method_handler(stream),
        "Publish": grpc.unary_unary_rpc_method_handler(publish),
        "PublishStream": grpc.stream_stream_rpc_method_handler(publish_stream),
    })


async def _tcp_writer(record_bytes: int) -> asyncio.Server:
    blob = plain_record(record_bytes) * max(1, TCP_BLOB_BYTES // max(record_bytes, COUNT.size))

    async def feed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                writer.write(blob)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(feed, "127.0.0.1", 0)


async def serve(record_bytes: int) -> None:
    server = rpc.make_server()
    broker_pb2_grpc.add_BrokerServicer_to_server(LimitServicer(record_bytes), server)
    server.add_generic_rpc_handlers((plain_handler(record_bytes),))
    port = rpc.bind(server, "127.0.0.1", 0)
    await server.start()
    tcp = await _tcp_writer(record_bytes)
    print(f"TCP {tcp.sockets[0].getsockname()[1]}", flush=True)
    print(f"READY {port}", flush=True)
    loop = asyncio.get_running_loop()
    # Serve until the parent closes our stdin (or dies): nothing outlives the benchmark.
    await loop.run_in_executor(None, sys.stdin.read)
    tcp.close()
    await server.stop(0.5)


# ---- the commitlog scan ------------------------------------------------------------------

def segment_files(commitlog_dir: Path) -> list[Path]:
    """The commitlog's segment files, in offset order."""
    return sorted(p for p in Path(commitlog_dir).iterdir()
                  if p.is_file() and len(p.name) == SEGMENT_NAME_DIGITS and p.name.isdigit())


def _scan_segment(mm: mmap.mmap) -> tuple[int, int]:
    """(records, record bytes) of one mapped segment, walking the framing to the first gap."""
    records = size_total = 0
    pos, end = 0, len(mm)
    unpack_from = SIZE_AND_MAGIC.unpack_from
    while pos + SIZE_AND_MAGIC.size <= end:
        size, magic = unpack_from(mm, pos)
        if magic != c.RECORD_MAGIC or size <= 0 or pos + size > end:
            break  # a blank marker, zeros (not written yet) or damage: the walk ends here
        mm[pos:pos + size]  # the copy a reader makes
        records += 1
        size_total += size
        pos += size
    return records, size_total


def scan_commitlog(commitlog_dir: Path, *, seconds_min: float = SCAN_SECONDS_MIN,
                   body_bytes: int | None = None) -> tuple[Measured, int]:
    """Scan every segment (again and again for at least `seconds_min`).

    Returns (the measurement, the mean record size in bytes). Payload bytes count `body_bytes`
    per record when given (so MB/s compares with the clients'), else the record bytes.
    """
    files = segment_files(commitlog_dir)
    if not files:
        raise FileNotFoundError(f"no commitlog segments in {commitlog_dir}")
    maps = []
    try:
        for path in files:
            with path.open("rb") as f:
                maps.append(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
        records = record_bytes = passes = 0
        start = time.monotonic()
        while True:
            for mm in maps:
                n, size = _scan_segment(mm)
                records += n
                record_bytes += size
            passes += 1
            elapsed = time.monotonic() - start
            if elapsed >= seconds_min or not records:
                break
    finally:
        for mm in maps:
            mm.close()
    mean_record_bytes = record_bytes // records if records else 0
    payload = records * body_bytes if body_bytes is not None else record_bytes
    return Measured(records, payload, elapsed), mean_record_bytes


def append_fresh(directory: Path, record_bytes: int, *, seconds_min: float = SCAN_SECONDS_MIN,
                 body_bytes: int | None = None) -> Measured:
    """Append `record_bytes`-sized records, APPEND_BATCH_RECORDS per copy, into a new file in
    `directory` through a shared mapping, until `seconds_min` have passed or the file's window
    is written; the file is deleted after. The window is APPEND_BYTES_MAX or what the
    filesystem can spare (see APPEND_FREE_KEPT_BYTES), allocated before the clock starts, so
    the measure is the copy into backed pages: a ceiling for the store, which allocates too.
    Payload bytes count `body_bytes` per record when given. Raises OSError (ENOSPC) when the
    filesystem cannot spare APPEND_BYTES_MIN."""
    blob = os.urandom(record_bytes) * APPEND_BATCH_RECORDS
    window_bytes = append_window_bytes(directory)
    path = Path(directory) / f"bench-append-{os.getpid()}.tmp"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    records = 0
    try:
        os.posix_fallocate(fd, 0, window_bytes)
        with mmap.mmap(fd, window_bytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as mm:
            pos, step = 0, len(blob)
            start = time.monotonic()
            while pos + step <= window_bytes:
                mm[pos:pos + step] = blob
                pos += step
                records += APPEND_BATCH_RECORDS
                if records % 1024 == 0 and time.monotonic() - start >= seconds_min:
                    break
            elapsed = time.monotonic() - start
    finally:
        os.close(fd)
        path.unlink()
    payload = records * (body_bytes if body_bytes is not None else record_bytes)
    return Measured(records, payload, elapsed)


def append_window_bytes(directory: Path) -> int:
    """How much the append may write in `directory`: APPEND_BYTES_MAX, or the filesystem's free
    bytes less APPEND_FREE_KEPT_BYTES; an OSError(ENOSPC) saying so below APPEND_BYTES_MIN."""
    st = os.statvfs(directory)
    free_bytes = st.f_bavail * st.f_frsize
    window_bytes = min(APPEND_BYTES_MAX, free_bytes - APPEND_FREE_KEPT_BYTES)
    if window_bytes < min(APPEND_BYTES_MAX, APPEND_BYTES_MIN):
        raise OSError(errno.ENOSPC, f"{free_bytes / 2**20:.0f} MiB free in {directory}: the append reference needs "
                      f"{(APPEND_BYTES_MIN + APPEND_FREE_KEPT_BYTES) / 2**20:.0f} MiB (it leaves "
                      f"{APPEND_FREE_KEPT_BYTES / 2**20:.0f} MiB to the brokers); free space there for this reference")
    return window_bytes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m harness.bench.limits", description=__doc__.splitlines()[0])
    parser.add_argument("--record-bytes", type=int, required=True, help="size of every streamed record")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.record_bytes))


if __name__ == "__main__":
    main()
