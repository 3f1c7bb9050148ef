"""Damaged files on a real broker: clear handling, the node keeps serving, nothing else is lost."""

import shutil
from pathlib import Path

import pytest

from harness import LocalCluster, NodeStartError
from harness.spec import ClusterSpec
from nodes.client import Producer, PullConsumer
from nodes.common.types import Message, PullStatus
from nodes.store.record import parse_offset_msg_id

pytestmark = pytest.mark.cluster

SEGMENT_BYTES = 1024 * 1024


@pytest.fixture
def small_segment_cluster(tmp_path, time_scale):
    spec = ClusterSpec.default(time_scale=time_scale).with_node_options(
        "broker-a-0", store={"commitlog_segment_bytes": SEGMENT_BYTES, "message_body_bytes_max": 256 * 1024})
    with LocalCluster(spec, time_scale=time_scale, run_dir=tmp_path / "run") as cluster:
        yield cluster


def _commitlog_file(cluster, phys_offset: int) -> tuple[Path, int]:
    commitlog = Path(cluster.node("broker-a-0").run_dir) / "store" / "commitlog"
    start = phys_offset - phys_offset % SEGMENT_BYTES
    return commitlog / f"{start:020d}", phys_offset - start


def _send(cluster, count):
    with Producer(cluster.namesrv_addr) as producer:
        return [producer.send_orderly(Message("Damage", f"body-{i}-".encode() * 20), "one-queue")
                for i in range(count)]


def _pullable(cluster, results):
    with PullConsumer(cluster.namesrv_addr, "reader") as consumer:
        return {r.queue_offset: consumer.pull(r.message_queue, r.queue_offset, 1) for r in results}


def test_corrupt_record_in_the_middle_is_skipped_and_later_records_survive(small_segment_cluster):
    cluster = small_segment_cluster
    sent = _send(cluster, 50)
    victim = sent[20]
    cluster.stop("broker-a-0")
    path, pos = _commitlog_file(cluster, parse_offset_msg_id(victim.offset_msg_id)[2])
    with path.open("r+b") as f:  # flip bytes inside the body: the CRC no longer matches
        f.seek(pos + 100)
        f.write(b"\xff\xfe\xfd\xfc")
    cluster.restart("broker-a-0")
    cluster.wait_until_routable()
    pulled = _pullable(cluster, sent)
    for result in sent:
        messages = pulled[result.queue_offset].messages
        if result is victim:
            assert all(m.msg_id != victim.msg_id for m in messages)
        else:
            assert messages and messages[0].msg_id == result.msg_id, f"lost queue offset {result.queue_offset}"
    store = cluster.node("broker-a-0").describe()["details"]["store"]
    assert store, "broker describes its store"


def test_truncated_last_record_is_cut_and_everything_before_it_survives(small_segment_cluster):
    cluster = small_segment_cluster
    sent = _send(cluster, 30)
    last = sent[-1]
    # a master alone: with its slave up, a master that lost its tail takes it back from the slave
    # before it writes again (tests/cluster/test_replica_convergence.py)
    cluster.stop("broker-a-1")
    cluster.kill("broker-a-0")
    path, pos = _commitlog_file(cluster, parse_offset_msg_id(last.offset_msg_id)[2])
    with path.open("r+b") as f:  # a torn write: the last record's second half never reached the file
        f.seek(pos + 60)
        f.write(b"\x00" * 400)
    cluster.restart("broker-a-0")
    cluster.wait_until_routable()
    pulled = _pullable(cluster, sent)
    for result in sent[:-1]:
        assert pulled[result.queue_offset].messages[0].msg_id == result.msg_id
    assert pulled[last.queue_offset].status is PullStatus.NO_NEW_MSG
    with Producer(cluster.namesrv_addr) as producer:  # the queue continues where the log now ends
        again = producer.send_orderly(Message("Damage", b"after"), "one-queue")
    assert again.queue_offset == last.queue_offset


def test_data_dir_that_is_a_file_fails_start_with_a_clear_message(tmp_path, time_scale):
    spec = ClusterSpec.default(time_scale=time_scale)
    cluster = LocalCluster(spec, time_scale=time_scale, run_dir=tmp_path / "run", start=False)
    broker_dir = tmp_path / "run" / "broker-a-0"
    store_dir = broker_dir / "store"
    if store_dir.is_dir():
        shutil.rmtree(store_dir)  # the harness lays out run dirs up front
    broker_dir.mkdir(parents=True, exist_ok=True)
    store_dir.write_text("not a directory")
    with pytest.raises(NodeStartError) as failure:
        cluster.start()
    cluster.close()
    text = str(failure.value)
    assert "78" in text or "config" in text.lower()
    assert "store" in text
