"""The benchmark's limits and workers at tiny sizes: the bare gRPC server, the commitlog scan,
the worker protocol, and the pull loop's pipelining."""

from __future__ import annotations

import concurrent.futures as cf
import errno
import json
import os
import sys
import time
from types import SimpleNamespace

import grpc
import pytest

from harness.bench import limits
from harness.bench.runner import BenchError, Child, _worker_argv
from harness.bench.worker import PullLoop, Windows
from nodes.common.types import MessageQueue, PullStatus
from nodes.store.record import MessageToStore, blank_marker, encode_record
from proto import broker_pb2, broker_pb2_grpc, common_pb2

# One canned server for the module (it keeps no state between calls: every pull gets the same
# records, every send the same answer); its users share a worker so it starts once, not per test.
pytestmark = pytest.mark.xdist_group("bench-limits-server")


@pytest.fixture(scope="module")
def limits_server(tmp_path_factory):
    server = Child([sys.executable, "-m", "harness.bench.limits", "--record-bytes", "100"], "limits",
                   tmp_path_factory.mktemp("limits-server"))
    try:
        yield f"127.0.0.1:{server.expect('READY', 30)}"
    finally:
        server.close()
    assert server.proc.returncode is not None  # gone once its stdin closed


def test_limits_server_streams_canned_records_and_answers_sends(limits_server):
    with grpc.insecure_channel(limits_server) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        requests = [broker_pb2.PullRequest(request_id=i, queue_offset=10, max_msg_nums=n) for i, n in ((1, 3), (2, 1))]
        answers = list(stub.Pull(iter(requests), timeout=10))
        assert [(a.request_id, a.record_count, len(a.records), a.next_begin_offset) for a in answers] == [
            (1, 3, 300, 13), (2, 1, 100, 11)]
        assert all(a.code == common_pb2.SUCCESS for a in answers)
        sent = stub.SendMessage(broker_pb2.SendMessageRequest(
            topic="T", messages=[broker_pb2.OutgoingMessage(body=b"x")] * 2), timeout=10)
        assert sent.code == common_pb2.SUCCESS and len(sent.entries) == 2


@pytest.mark.parametrize("job", [
    {"role": "plain-stream", "batch": 4, "window": 2},
    {"role": "plain-unary", "batch": 3},
    {"role": "plain-stream-publish", "batch": 3},
    {"role": "grpc-stream", "batch": 4, "window": 2},
    {"role": "grpc-unary", "mode": "batch", "batch": 3, "window": 1},
    {"role": "grpc-unary", "mode": "async", "batch": 1, "window": 4},
])
def test_limit_workers_follow_the_protocol(limits_server, tmp_path, job):
    worker = Child(_worker_argv({**job, "addr": limits_server, "seconds": 0.2, "windows": 2, "body_bytes": 64}),
                   "worker", tmp_path)
    try:
        worker.expect("READY", 30)
        worker.go()
        result = json.loads(worker.expect("RESULT", 30))
    finally:
        worker.close()
    assert result["window_seconds"] == 0.2 and len(result["windows"]) == 2 and result["errors"] == 0
    # whole batches only; one 0.2 s window of a worker starved by a loaded machine may count none
    assert all(count % job["batch"] == 0 for count in result["windows"]) and sum(result["windows"]) > 0


def test_plain_references_take_every_record_and_frame_every_body(limits_server):
    from harness.bench.ref_workers import (
        PLAIN_PUBLISH,
        PLAIN_PUBLISH_STREAM,
        PLAIN_STREAM,
        plain_publish_body,
        take_records,
    )

    with grpc.insecure_channel(limits_server) as channel:
        answers = list(channel.stream_stream(PLAIN_STREAM)(iter([(3).to_bytes(4, "big"), (1).to_bytes(4, "big")]),
                                                           timeout=10))
        assert [len(take_records(a)) for a in answers] == [3, 1]
        assert all(len(r) == 100 and int.from_bytes(r[:4], "big") == 100 for r in take_records(answers[0]))
        assert len(channel.unary_unary(PLAIN_PUBLISH)(plain_publish_body([b"ab", b"c"]), timeout=10)) == 16
        publishes = [plain_publish_body([b"ab", b"c"]), plain_publish_body([b"d"] * 5)]
        assert [len(a) for a in channel.stream_stream(PLAIN_PUBLISH_STREAM)(iter(publishes), timeout=10)] == [16, 40]
    assert plain_publish_body([b"ab", b"c"]) == b"\0\0\0\x02" + b"\0\0\0\x02ab" + b"\0\0\0\x01c"


def test_tcp_reference_counts_record_sized_units(tmp_path):
    server = Child([sys.executable, "-m", "harness.bench.limits", "--record-bytes", "100"], "limits", tmp_path)
    try:
        tcp_port = int(server.expect("TCP", 30))
        server.expect("READY", 30)
        worker = Child(_worker_argv({"role": "tcp", "host": "127.0.0.1", "tcp_port": tcp_port, "record_bytes": 100,
                                     "seconds": 0.2, "windows": 2}), "worker", tmp_path)
        try:
            worker.expect("READY", 30)
            worker.go()
            result = json.loads(worker.expect("RESULT", 30))
        finally:
            worker.close()
    finally:
        server.close()
    assert len(result["windows"]) == 2 and all(count > 0 for count in result["windows"])


def test_a_failing_worker_reports_its_error(tmp_path):
    worker = Child(_worker_argv({"role": "no-such-role"}), "worker", tmp_path)
    try:
        with pytest.raises(BenchError, match="KeyError"):
            worker.expect("READY", 30)
    finally:
        worker.close()


def test_a_worker_exits_when_the_benchmark_goes_away(limits_server, tmp_path):
    worker = Child(_worker_argv({"role": "grpc-stream", "addr": limits_server, "batch": 1, "window": 1,
                                 "seconds": 60, "windows": 1, "body_bytes": 8}), "worker", tmp_path)
    worker.expect("READY", 30)
    worker.proc.stdin.close()  # no GO: the benchmark died or gave up
    assert worker.proc.wait(10) == 3
    worker.close()


def test_scan_walks_every_segment_to_its_end(tmp_path):
    segment = bytearray(64 * 1024)
    pos = 0
    for i in range(3):
        record = encode_record(MessageToStore("T", 0, b"b" * (10 + i)), queue_offset=i, phys_offset=pos,
                               store_timestamp_ms=1)
        segment[pos:pos + len(record)] = record
        pos += len(record)
    sizes = pos
    segment[pos:pos + 8] = blank_marker(len(segment) - pos)
    (tmp_path / f"{0:020d}").write_bytes(bytes(segment))
    (tmp_path / f"{len(segment):020d}").write_bytes(bytes(segment[:sizes]) + bytes(1024))  # a second segment
    (tmp_path / "checkpoint").write_bytes(b"not a segment")
    measured, mean_record_bytes = limits.scan_commitlog(tmp_path, seconds_min=0.0, body_bytes=7)
    assert measured.messages == 6 and measured.payload_bytes == 42
    assert mean_record_bytes == sizes // 3


def test_append_copies_batches_of_records_into_a_fresh_file_and_deletes_it(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "APPEND_BYTES_MAX", 4 * 1024 * 1024)
    measured = limits.append_fresh(tmp_path, 1000, seconds_min=60.0, body_bytes=7)
    # the byte cap ends it long before its time: every whole batch of 32 records that fits
    assert measured.messages == (4 * 1024 * 1024 // 32_000) * 32
    assert measured.payload_bytes == measured.messages * 7 and measured.seconds > 0
    assert list(tmp_path.iterdir()) == []
    quick = limits.append_fresh(tmp_path, 1000, seconds_min=0.0)
    assert quick.messages == 1024 and quick.payload_bytes == 1024 * 1000  # time is looked at every 1024
    assert list(tmp_path.iterdir()) == []


def test_append_leaves_a_small_disk_its_margin_and_refuses_below_its_minimum(tmp_path, monkeypatch):
    real_statvfs = os.statvfs

    def free(free_bytes: int):
        def statvfs(path):
            st = real_statvfs(path)
            return os.statvfs_result((st.f_bsize, 4096, st.f_blocks, free_bytes // 4096, free_bytes // 4096,
                                      *tuple(st)[5:]))
        monkeypatch.setattr(limits.os, "statvfs", statvfs)

    free(limits.APPEND_FREE_KEPT_BYTES + 10 * 2**20)  # 10 MiB to spare: the window is cut to them
    assert limits.append_window_bytes(tmp_path) == 10 * 2**20
    measured = limits.append_fresh(tmp_path, 1000, seconds_min=60.0)
    assert measured.messages == (10 * 2**20 // 32_000) * 32  # it stopped at the smaller window
    free(limits.APPEND_FREE_KEPT_BYTES + 2**20)  # 1 MiB to spare: not worth a measure, and says so
    with pytest.raises(OSError, match=r"MiB free in .* free space there") as refused:
        limits.append_fresh(tmp_path, 1000)
    assert refused.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []  # refused before a file was made


def test_scan_of_an_empty_directory_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="no commitlog segments"):
        limits.scan_commitlog(tmp_path)


# ---- the pull loop ------------------------------------------------------------------------------

MQ0, MQ1 = MessageQueue("T", "b", 0), MessageQueue("T", "b", 1)
FAKE_MSG = SimpleNamespace(body=b"xyz", topic="T", queue_offset=5, properties={"a": "1"})


class FakeBroker:
    """pull_async against in-memory queues; `short` answers give at most that many messages."""

    def __init__(self, short: int | None = None) -> None:
        self.pulls: list[tuple[int, int, int]] = []
        self.short = short

    def pull_async(self, mq, offset, count):
        self.pulls.append((mq.queue_id, offset, count))
        got = count if self.short is None else min(count, self.short)
        fut: cf.Future = cf.Future()
        fut.set_result(SimpleNamespace(status=PullStatus.FOUND, messages=[FAKE_MSG] * got, next_begin_offset=offset + got))
        return fut


def test_pull_loop_one_pass_reads_every_queue_once_with_offsets_ahead_of_answers():
    broker = FakeBroker()
    loop = PullLoop(broker.pull_async, {MQ0: 10, MQ1: 5, MessageQueue("T", "b", 2): 0}, batch=4, window=3,
                    one_pass=True)
    loop.run(Windows(time.monotonic(), 60.0, 1))
    assert loop.messages == 15
    assert loop.touched == 15 * (3 + 1 + 5 + 1)  # every message read: body, topic, offset, properties
    assert sorted(broker.pulls) == [(0, 0, 4), (0, 4, 4), (0, 8, 2), (1, 0, 4), (1, 4, 1)]


def test_pull_loop_pulls_the_gap_a_short_answer_leaves():
    broker = FakeBroker(short=3)
    loop = PullLoop(broker.pull_async, {MQ0: 8}, batch=4, window=1, one_pass=True)
    loop.run(Windows(time.monotonic(), 60.0, 1))
    assert loop.messages == 8
    assert broker.pulls == [(0, 0, 4), (0, 3, 1), (0, 4, 4), (0, 7, 1)]


def test_pull_loop_wraps_around_until_the_windows_close():
    broker = FakeBroker()
    windows = Windows(time.monotonic(), 0.05, 2)
    loop = PullLoop(broker.pull_async, {MQ0: 4}, batch=4, window=2)
    loop.run(windows)
    assert loop.messages > 8 and sum(windows.messages) <= loop.messages
    assert {offset for _, offset, _ in broker.pulls} == {0}


def test_pull_loop_counts_failures_and_pulls_again():
    calls = []

    def flaky(mq, offset, count):
        calls.append(offset)
        fut: cf.Future = cf.Future()
        if len(calls) == 1:
            fut.set_exception(RuntimeError("broker away"))
        else:
            fut.set_result(SimpleNamespace(status=PullStatus.FOUND, messages=[FAKE_MSG] * count,
                                           next_begin_offset=offset + count))
        return fut

    loop = PullLoop(flaky, {MQ0: 4}, batch=4, window=1, one_pass=True)
    loop.run(Windows(time.monotonic(), 60.0, 1))
    assert (loop.messages, loop.errors, calls) == (4, 1, [0, 0])
    assert "broker away" in loop.error_samples[0]


def test_pull_loop_needs_a_queue_with_messages():
    with pytest.raises(RuntimeError, match="nothing to pull"):
        PullLoop(FakeBroker().pull_async, {MQ0: 0}, batch=4, window=1)
