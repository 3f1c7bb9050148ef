"""A master that loses its unflushed log tail (a power loss) and its slave end up with identical
logs, with real processes: the master restores the tail from a slave ahead of it, or a slave
that turned out diverged cuts back to the common prefix and copies again; under SYNC_MASTER
no acknowledged message is lost."""

import contextlib
import dataclasses
import json
import random
import threading
import time
from pathlib import Path

import pytest
from support.cluster_rpc import digest, max_phys_offset, wait_for, wait_slave_caught_up

from harness import LocalCluster
from harness.spec import ClusterSpec
from nodes.client import Producer, PullConsumer
from nodes.common import constants as c
from nodes.common.types import Message, SendStatus
from nodes.store.faults import corrupt_sealed_record

pytestmark = pytest.mark.cluster

SEGMENT_BYTES = 1024 * 1024
SMALL_STORE = {"commitlog_segment_bytes": SEGMENT_BYTES, "message_body_bytes_max": 256 * 1024}
TOPIC = "Converge"


def _spec(time_scale, **master_options):
    spec = ClusterSpec.default(time_scale=time_scale)
    spec = spec.with_node_options("broker-a-0", store=SMALL_STORE, **master_options)
    return spec.with_node_options("broker-a-1", store=SMALL_STORE)


def _lose_tail(cluster, lost_bytes: int) -> int:
    """SIGKILL the master and rewrite its newest commitlog segment as a power loss leaves it: the
    last `lost_bytes` never reached the disk (zeros), with a torn, garbled partial record where
    the disk's copy ends. Returns the phys offset the disk kept."""
    master = cluster.node("broker-a-0")
    written = max_phys_offset(master)
    cluster.kill("broker-a-0")
    segments = sorted((Path(master.run_dir) / "store" / "commitlog").iterdir())
    newest = segments[-1]
    start = int(newest.name)
    kept = max(start, written - lost_bytes)
    with newest.open("r+b") as f:
        f.seek(kept - start)
        f.write(b"\x00" * (written - kept))
        f.seek(kept - start)
        f.write(bytes([0, 0, 1, 0]) + b"\xda\xa3\x20\xa7" + b"\x5a" * 40)  # a header claiming 256 bytes
    return kept


def _send(producer, n, tag):
    results = [producer.send(Message(TOPIC, f"{tag}-{i}".encode() * 20)) for i in range(n)]
    assert {r.status for r in results} == {SendStatus.SEND_OK}
    return results


def _assert_identical(cluster) -> int:
    master, slave = cluster.node("broker-a-0"), cluster.node("broker-a-1")
    end = wait_slave_caught_up(cluster)
    assert digest(slave.addr, end) == digest(master.addr, end)
    return end


def _assert_readable(cluster, acked) -> None:
    with PullConsumer(cluster.namesrv_addr, "readback") as consumer:
        for result in acked:
            pulled = consumer.pull(result.message_queue, result.queue_offset, 1)
            assert pulled.messages and pulled.messages[0].msg_id == result.msg_id, result


def _recovered_end(cluster) -> int:
    """Where the master's recovery ended its log (the record the torn bytes fell in is gone too)."""
    return int(cluster.node("broker-a-0").describe()["details"]["recovery"]["commitlog_max_phys_offset"])


def _events(cluster, node_id):
    path = Path(cluster.node(node_id).run_dir) / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_master_restores_its_lost_tail_from_the_slave(tmp_path, time_scale):
    with LocalCluster(_spec(time_scale), run_dir=tmp_path / "run") as cluster:
        with Producer(cluster.namesrv_addr) as producer:
            acked = _send(producer, 300, "before")
        slave_end = wait_slave_caught_up(cluster)
        kept = _lose_tail(cluster, lost_bytes=16 * 1024)
        assert kept < slave_end
        cluster.restart("broker-a-0")
        master = cluster.node("broker-a-0")
        recovered = _recovered_end(cluster)
        assert recovered <= kept
        wait_for(lambda: max_phys_offset(master) == slave_end, 30, "the master to take its tail back from the slave")
        cluster.wait_until_routable()
        with Producer(cluster.namesrv_addr) as producer:
            acked += _send(producer, 50, "after")
        assert _assert_identical(cluster) > slave_end
        _assert_readable(cluster, acked)  # even ASYNC_FLUSH lost nothing: the slave held it
        restored = [e for e in _events(cluster, "broker-a-0") if e.get("event") == "ha-restored"]
        assert restored and restored[0]["from_phys_offset"] == recovered


def test_a_slave_ahead_of_a_master_that_wrote_on_cuts_back_and_copies_again(tmp_path, time_scale):
    with LocalCluster(_spec(time_scale), run_dir=tmp_path / "run") as cluster:
        with Producer(cluster.namesrv_addr) as producer:
            _send(producer, 300, "before")
        slave_end = wait_slave_caught_up(cluster)
        cluster.pause("broker-a-1")  # it comes back only after the master wrote past its lost end
        _lose_tail(cluster, lost_bytes=16 * 1024)
        cluster.restart("broker-a-0")
        kept = _recovered_end(cluster)
        cluster.wait_until_routable()
        with Producer(cluster.namesrv_addr) as producer:
            after = _send(producer, 100, "after")
        assert max_phys_offset(cluster.node("broker-a-0")) > slave_end  # the slave is not ahead, it differs
        cluster.resume("broker-a-1")
        _assert_identical(cluster)
        _assert_readable(cluster, after)
        refused = [e for e in _events(cluster, "broker-a-1")
                   if e.get("event") == "store-error" and e.get("kind") == "replica-refused"]
        assert refused and refused[0]["phys_offset"] == kept and refused[0]["bytes"] == slave_end - kept


def test_sync_master_loses_no_acknowledged_message_to_a_power_loss(tmp_path, time_scale):
    spec = dataclasses.replace(_spec(time_scale, broker_role="SYNC_MASTER"), timing={"slave_timeout_ms": 1_500})
    with LocalCluster(spec, run_dir=tmp_path / "run") as cluster:
        wait_for(lambda: cluster.node("broker-a-0").describe()["details"]["slaves"], 30, "the slave to connect")
        with Producer(cluster.namesrv_addr) as producer:
            acked = _send(producer, 300, "before")
        _lose_tail(cluster, lost_bytes=16 * 1024)
        cluster.restart("broker-a-0")
        cluster.wait_until_routable()
        with Producer(cluster.namesrv_addr) as producer:
            sent = [producer.send(Message(TOPIC, f"after-{i}".encode())) for i in range(50)]
        acked += [r for r in sent if r.status is SendStatus.SEND_OK]
        _assert_identical(cluster)
        _assert_readable(cluster, acked)


def test_switch_replica_skip_chunk_leaves_the_slave_behind_for_good(tmp_path, time_scale):
    """The breaking switch of replica convergence: a master that never sends one record (the
    first from REPLICA_SKIP_CHUNK_AT_PHYS_OFFSET) and resumes past it never lets its slave catch up
    (the slave sees the gap, reconnects, and is skipped again), also after a master restart."""
    spec = _spec(time_scale, fault_switches=["replica-skip-chunk"])
    with LocalCluster(spec, run_dir=tmp_path / "run") as cluster:
        master, slave = cluster.node("broker-a-0"), cluster.node("broker-a-1")
        with Producer(cluster.namesrv_addr) as producer:
            _send(producer, 20, "first")
            wait_for(lambda: max_phys_offset(slave) > 0, 30, "the slave to receive the first chunk")
            _send(producer, 100, "then")
        master_end = max_phys_offset(master)
        # a healthy slave catches up within a few heartbeats; this one keeps reconnecting short of it
        connects = wait_for(lambda: (n := slave.describe()["details"]["ha_client"]["connects"]) >= 3 and n,
                            30, "the slave to reconnect after the gap, again and again")
        assert connects >= 3
        stuck = max_phys_offset(slave)
        assert 0 < stuck <= c.REPLICA_SKIP_CHUNK_AT_PHYS_OFFSET + 4096 < master_end
        cluster.kill("broker-a-0")
        cluster.restart("broker-a-0")
        wait_for(lambda: slave.describe()["details"]["ha_client"]["connects"] > connects + 2, 30,
                 "the slave to reconnect to the restarted master, again and again")
        assert max_phys_offset(slave) == stuck


def test_a_record_damaged_on_the_master_before_the_slave_copied_it_becomes_the_same_hole_on_both(
        tmp_path, time_scale):
    """A record corrupted on the master before its slave copied it: the master checks that a valid
    record follows (a hole, not a torn end) and passes it on flagged as damaged; the slave keeps
    the same hole and catches up; each side reports the record once, however often it is read."""
    small = {"commitlog_segment_bytes": 128 * 1024, "message_body_bytes_max": 16 * 1024}
    spec = ClusterSpec.default(time_scale=time_scale)
    spec = spec.with_node_options("broker-a-0", store=small).with_node_options("broker-a-1", store=small)
    with LocalCluster(spec, run_dir=tmp_path / "run") as cluster:
        cluster.stop("broker-a-1")
        with Producer(cluster.namesrv_addr) as producer:
            _send(producer, 400, "sealed")  # > 3 segments of 128 KiB
        damage = corrupt_sealed_record(Path(cluster.node("broker-a-0").run_dir) / "store", random.Random(3))
        assert damage is not None
        cluster.restart("broker-a-1")
        end = _assert_identical(cluster)  # the same bytes, the damaged ones included
        assert end > damage["phys_offset"]
        time.sleep(4 * c.HA_HEARTBEAT_MS / 1000 * time_scale)  # a few more rounds of reading
        for node in ("broker-a-0", "broker-a-1"):
            bad = [e for e in _events(cluster, node) if e.get("event") == "store-error" and e.get("kind") == "bad-record"]
            assert [e["phys_offset"] for e in bad] == [damage["phys_offset"]], node


def test_async_master_holds_writes_after_a_power_loss_until_the_slave_gave_its_tail_back(tmp_path, time_scale):
    """ASYNC_MASTER, sends running on through the power loss and the restart: the restarted master
    takes no write before its slave (ahead of it) has given the lost tail back, so nothing is cut
    from the slave and every message acknowledged before the loss is still readable."""
    with LocalCluster(_spec(time_scale), run_dir=tmp_path / "run") as cluster:
        assert cluster.node("broker-a-0").describe()["details"].get("broker_role", "ASYNC_MASTER") == "ASYNC_MASTER"
        with Producer(cluster.namesrv_addr) as producer:
            acked = _send(producer, 300, "before")
        slave_end = wait_slave_caught_up(cluster)
        stop = threading.Event()
        during: list = []

        def send_on() -> None:  # a producer that never stops sending: the first write may race the slave
            with Producer(cluster.namesrv_addr) as p:
                i = 0
                while not stop.is_set():
                    with contextlib.suppress(Exception):
                        r = p.send(Message(TOPIC, f"during-{i}".encode() * 20))
                        if r.status is SendStatus.SEND_OK:
                            during.append(r)
                    i += 1
                    time.sleep(0.01)

        kept = _lose_tail(cluster, lost_bytes=16 * 1024)
        assert kept < slave_end
        sender = threading.Thread(target=send_on, daemon=True)
        sender.start()
        try:
            cluster.restart("broker-a-0")
            recovered = _recovered_end(cluster)
            wait_for(lambda: max_phys_offset(cluster.node("broker-a-0")) > slave_end, 30,
                     "the master to take writes again after the restore")
            wait_for(lambda: len(during) >= 20, 30, "sends acknowledged after the restart")
        finally:
            stop.set()
            sender.join(30)
        _assert_identical(cluster)
        _assert_readable(cluster, acked + during)
        restored = [e for e in _events(cluster, "broker-a-0") if e.get("event") == "ha-restored"]
        assert restored and restored[0]["from_phys_offset"] == recovered
        assert restored[0]["bytes"] == slave_end - recovered
        refused = [e for node in ("broker-a-0", "broker-a-1") for e in _events(cluster, node)
                   if e.get("event") == "store-error" and e.get("kind") == "replica-refused"]
        assert refused == []  # nothing cut
        assert cluster.node("broker-a-1").describe()["details"]["ha_client"].get("truncated_bytes", 0) == 0
