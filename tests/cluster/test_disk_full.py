"""A broker pair whose stores sit on small tmpfs filesystems, filled with a filler file: sends are
refused with SERVICE_NOT_AVAILABLE (14) and the disk-full remark within the guard's period, no
broker dies, every acknowledged message reads back, and sends work again once the filler is
gone. Filled to 100 % with the guard off (ENOSPC at a segment allocation): still no crash. A
slave whose disk fills stops acknowledging and catches up after.

The harness mounts the tmpfs over the node's store dir before the cluster starts and fills it with
its filler file (`fill_disk`, as the disk-fill nemesis does; the tests run as root). Segments are
larger than what a test sends, so retention (which deletes sealed segments when the disk is this
full) finds nothing to delete and every message stays readable.
"""

from __future__ import annotations

import dataclasses
import json
import re
import signal
import time

import pytest
from support.cluster_rpc import max_phys_offset, wait_for, wait_slave_caught_up, wait_slave_connected

from harness import LocalCluster
from harness.spec import ClusterSpec
from nodes.client import Producer, PullConsumer
from nodes.common import constants as c
from nodes.common.config import Timing
from nodes.common.errors import MqError, RemoteError, ServiceNotAvailableError
from nodes.common.types import Message, SendResult, SendStatus

pytestmark = pytest.mark.cluster  # mounting needs root: without it the harness fails the test saying so

STORE = {"commitlog_segment_bytes": 4 * 1024 * 1024, "message_body_bytes_max": 64 * 1024, "cq_units_per_file": 4096}
FS_BYTES = 16 * 1024 * 1024
BATCH = 10
BODY_BYTES = 1024
MASTER, SLAVE = "broker-a-0", "broker-a-1"


def _spec(time_scale: float, master_switches: tuple[str, ...] = (), *, small_disk: str = MASTER,
          **master_options) -> ClusterSpec:
    spec = ClusterSpec.default(time_scale=time_scale).with_store_filesystem(small_disk, FS_BYTES)
    spec = spec.with_node_options(MASTER, store=STORE, fault_switches=list(master_switches), **master_options)
    return spec.with_node_options(SLAVE, store=STORE)


def _batch(tag: str, n: int) -> list[Message]:
    return [Message("DiskFull", f"{tag}-{n}-{i}:".encode().ljust(BODY_BYTES, b".")) for i in range(BATCH)]


def _read_back(cluster: LocalCluster, acked: list[tuple[SendResult, list[Message]]]) -> None:
    with PullConsumer(cluster.namesrv_addr, "disk-full-check") as consumer:
        for result, msgs in acked:
            pulled = consumer.pull(result.message_queue, result.queue_offset, BATCH)
            assert [m.body for m in pulled.messages] == [m.body for m in msgs]


def _events(cluster: LocalCluster, node_id: str, kind: str) -> list[dict]:
    path = cluster.run_dir / node_id / "events.jsonl"
    return [event for line in path.read_text().splitlines() if (event := json.loads(line))["event"] == kind]


def _alive(cluster: LocalCluster) -> None:
    for node_id in (MASTER, SLAVE):
        assert cluster.node(node_id).describe()["state"] == "RUNNING"
    assert not cluster.unexpected_exits, cluster.unexpected_exits


def test_a_full_disk_refuses_sends_with_14_and_takes_them_again_after(tmp_path, time_scale):
    with LocalCluster(_spec(time_scale), run_dir=tmp_path / "run") as cluster:
        acked = []
        with Producer(cluster.namesrv_addr) as producer:
            for n in range(40):
                msgs = _batch("before", n)
                result = producer.send_batch(msgs)
                assert result.status is SendStatus.SEND_OK
                acked.append((result, msgs))
            cluster.fill_disk(MASTER, 0.95)
            filled_at = time.monotonic()
            period_s = Timing().scaled(time_scale).disk_check_interval_ms / 1000
            refusal = None
            for n in range(10_000):
                msgs = _batch("during", n)
                try:
                    result = producer.send_batch(msgs)
                except ServiceNotAvailableError as exc:
                    refusal = exc
                    break
                acked.append((result, msgs))
            refused_after_s = time.monotonic() - filled_at
            assert refusal is not None
            # above 0.90 when the check refused it, 1.00 when the puts before the check filled the disk
            assert "(code 14)" in str(refusal)
            assert re.search(r"the broker's disk is full \[CL: (0\.9\d|1\.00) CQ: ", refusal.remark), refusal.remark
            assert refused_after_s < period_s + 5, refused_after_s
            _alive(cluster)
            status = cluster.node(MASTER).describe()["details"]["store"]["disk"]
            assert status["full"] and status["commitlog_ratio"] > 0.90
            _read_back(cluster, acked)  # reads go on while writes are refused
            cluster.free_disk(MASTER)
            result = wait_for(lambda: _try_send(producer, _batch("after", 0)), 15, "sends to be taken again")
            acked.append((result, _batch("after", 0)))
        _read_back(cluster, acked)
        assert wait_slave_caught_up(cluster) == max_phys_offset(cluster.node(MASTER))
        _alive(cluster)
        flips = [e["state"] for e in _events(cluster, MASTER, "disk-guard")]
        assert flips[:2] == ["on", "off"], flips
        assert _events(cluster, MASTER, "retention-delete") == []  # the newest segment is never deleted
        print(f"\nrefused {refused_after_s * 1000:.0f} ms after the fill (check period {period_s * 1000:.0f} ms); "
              f"{len(acked) * BATCH} messages acknowledged and read back")


def _try_send(producer: Producer, msgs: list[Message]) -> SendResult | None:
    try:
        result = producer.send_batch(msgs)
    except RemoteError:
        return None
    return result if result.status is SendStatus.SEND_OK else None


def test_a_disk_filled_to_100_percent_with_the_guard_off_ends_in_refusals_not_a_crash(tmp_path, time_scale):
    spec = _spec(time_scale, master_switches=(c.FAULT_IGNORE_DISK_FULL,))
    with LocalCluster(spec, run_dir=tmp_path / "run") as cluster:
        acked, failure = [], None
        with Producer(cluster.namesrv_addr) as producer:
            for n in range(5):
                msgs = _batch("before", n)
                acked.append((producer.send_batch(msgs), msgs))
            cluster.fill_disk(MASTER, 1.0)  # 100 %: the current segment is allocated, the next is not
            for n in range(5, 2_000):  # 20 MB: past the 4 MiB segment
                msgs = _batch("full", n)
                try:
                    result = producer.send_batch(msgs)
                except RemoteError as exc:
                    failure = exc
                    break
                acked.append((result, msgs))
            assert failure is not None and failure.code == "SYSTEM_ERROR", failure
            assert "create mapped file failed" in failure.remark
            _alive(cluster)
            _read_back(cluster, acked)
            cluster.free_disk(MASTER)
            assert wait_for(lambda: _try_send(producer, _batch("after", 0)), 15, "sends to be taken again")
        _alive(cluster)
        assert _events(cluster, MASTER, "disk-guard") == []  # the guard is off


def test_a_slave_whose_disk_fills_stops_acknowledging_and_catches_up_after(tmp_path, time_scale):
    spec = dataclasses.replace(_spec(time_scale, small_disk=SLAVE, broker_role="SYNC_MASTER"),
                               timing={"slave_timeout_ms": 1_500})
    with LocalCluster(spec, run_dir=tmp_path / "run") as cluster:
        wait_slave_connected(cluster)
        with Producer(cluster.namesrv_addr) as producer:
            assert producer.send_batch(_batch("synced", 0)).status is SendStatus.SEND_OK
            cluster.fill_disk(SLAVE, 0.95)
            slave = cluster.node(SLAVE)
            wait_for(lambda: slave.describe()["details"]["store"]["disk"]["full"], 10, "the slave's guard")
            stopped_at = max_phys_offset(slave)
            statuses = {producer.send_batch(_batch("unsynced", n)).status for n in range(3)}
            assert statuses <= {SendStatus.FLUSH_SLAVE_TIMEOUT, SendStatus.SLAVE_NOT_AVAILABLE}, statuses
            assert max_phys_offset(slave) == stopped_at < max_phys_offset(cluster.node(MASTER))
            cluster.free_disk(SLAVE)
            wait_slave_caught_up(cluster)
            assert producer.send_batch(_batch("synced", 1)).status is SendStatus.SEND_OK
        _alive(cluster)
        assert [e["state"] for e in _events(cluster, SLAVE, "disk-guard")][:2] == ["on", "off"]


def test_the_sparse_segments_switch_lets_a_full_disk_kill_the_broker_with_sigbus(tmp_path, time_scale):
    """The switch a no-SIGBUS check is proven with: writes into pages nothing allocated."""
    spec = _spec(time_scale, master_switches=(c.FAULT_SPARSE_SEGMENTS, c.FAULT_IGNORE_DISK_FULL))
    with LocalCluster(spec, run_dir=tmp_path / "run") as cluster:
        with Producer(cluster.namesrv_addr, send_timeout_ms=2_000, retry_times=0) as producer:
            assert producer.send_batch(_batch("before", 0)).status is SendStatus.SEND_OK
            cluster.fill_disk(MASTER, 1.0)
            with pytest.raises(MqError):  # the broker dies under the send: no answer
                for n in range(2_000):
                    producer.send_batch(_batch("full", n))
        exits = wait_for(lambda: cluster.unexpected_exits, 10, "the master to die")
        assert [(e.node_id, e.exit_code) for e in exits] == [(MASTER, -signal.SIGBUS)], exits
