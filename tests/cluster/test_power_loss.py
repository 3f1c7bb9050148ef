"""A real broker loses power: SIGKILL, then everything no fsync covered is dropped and the tails
are torn (`faults.power_loss`). After the restart every message below the flushed position is
pullable byte-identical at its acknowledged offset, nothing after it is served, and the broker's
events say what recovery cut. SYNC_FLUSH loses no acknowledged message; its ack-early switch
does. A record corrupted under the running broker is never served and is reported once."""

import json
import random
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from harness import LocalCluster
from harness.spec import DEFAULT_NODES, ClusterSpec
from nodes.client import Producer, PullConsumer
from nodes.common import constants as c
from nodes.common.errors import TransportError
from nodes.common.types import Message
from nodes.store import faults
from nodes.store.record import parse_offset_msg_id
from tests.support.timing import within_s

pytestmark = pytest.mark.cluster

BROKER = "broker-a-0"
TOPIC = "PowerLoss"
NO_PERIODIC_FLUSH_MS = 600_000  # only the group commit (or the open) flushes in these runs


@pytest.fixture
def start_cluster(tmp_path, time_scale) -> Iterator[Callable[..., LocalCluster]]:
    """start_cluster(timing=None, **broker_options): the name server and one master (no slave) as
    processes, the master with these options; closed at teardown, checked for unexpected deaths
    (the power losses' kills are expected)."""
    with ExitStack() as stack:
        started: list[LocalCluster] = []

        def start(timing: dict | None = None, **broker_options) -> LocalCluster:
            spec = ClusterSpec(nodes=DEFAULT_NODES[:2], time_scale=time_scale, timing=timing or {})
            spec = spec.with_node_options(BROKER, **broker_options)
            cluster = stack.enter_context(LocalCluster(spec, time_scale=time_scale, run_dir=tmp_path / "run"))
            started.append(cluster)
            return cluster

        yield start
        for cluster in started:
            assert not cluster.unexpected_exits, f"nodes died unexpectedly: {cluster.unexpected_exits}"


def _send(cluster, count: int, tag: str, *, body_bytes: int = 0,
          sharding_key: str | None = None) -> list[tuple[object, bytes]]:
    """Send `count` distinct bodies (padded to `body_bytes` when given, else of varied lengths),
    to one queue when `sharding_key` is given; returns (SendResult, body) per message."""
    sent = []
    with Producer(cluster.namesrv_addr) as producer:
        for i in range(count):
            body = f"{tag}-{i}-".encode().ljust(body_bytes, b".") if body_bytes else f"{tag}-{i}-".encode() * (1 + i % 5)
            msg = Message(TOPIC, body)
            result = producer.send(msg) if sharding_key is None else producer.send_orderly(msg, sharding_key)
            assert result.status.name == "SEND_OK"
            sent.append((result, body))
    return sent


def _power_loss(cluster, seed: int) -> dict:
    cluster.kill(BROKER)
    done = faults.power_loss(_store_dir(cluster), random.Random(seed))
    cluster.restart(BROKER)
    cluster.wait_until_routable()
    return done


def _store_dir(cluster) -> Path:
    return Path(cluster.node(BROKER).run_dir) / "store"


def _events(cluster) -> list[dict]:
    path = Path(cluster.node(BROKER).run_dir) / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _pulled(consumer, result) -> list:
    """The message at the send's offset. A pull that cannot reach the restarted broker is retried
    (a client would), for the slack a busy machine is allowed; what is served is still checked."""
    deadline = time.monotonic() + within_s()
    while True:
        try:
            return consumer.pull(result.message_queue, result.queue_offset, 1).messages
        except TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_power_loss_keeps_what_was_flushed_and_recovery_reports_the_torn_tail(start_cluster):
    cluster = start_cluster()
    early = _send(cluster, 200, "early")
    # wait for the flush service (500 ms) to cover the early messages, then send more at once
    end = max(parse_offset_msg_id(r.offset_msg_id)[2] for r, _ in early)
    store_dir = _store_dir(cluster)
    deadline = time.monotonic() + 30
    while faults.read_flushed(store_dir)["commitlog"] <= end:
        assert time.monotonic() < deadline, "the flush service never covered the early messages"
        time.sleep(0.05)
    late = _send(cluster, 200, "late")
    # the flush service may have covered the late ones too on a busy machine: a few more until
    # the last one is past the flushed position, right before the power loss
    for extra in range(20):
        if faults.read_flushed(store_dir)["commitlog"] <= max(parse_offset_msg_id(r.offset_msg_id)[2] for r, _ in late):
            break
        late += _send(cluster, 5, f"later-{extra}")
    done = _power_loss(cluster, seed=11)
    flushed = done["commitlog"]["flushed_phys_offset"]
    assert done["commitlog"]["written_phys_offset"] > flushed >= end  # the page cache held more

    kept = lost = 0
    with PullConsumer(cluster.namesrv_addr, "after-power-loss") as consumer:
        for result, body in early + late:
            messages = _pulled(consumer, result)
            if parse_offset_msg_id(result.offset_msg_id)[2] < flushed:
                assert messages, f"fsync'd queue offset {result.queue_offset} of {result.message_queue} is gone"
                kept += 1
            else:
                lost += 1
            for message in messages:  # whatever is served is exactly what was acknowledged there
                assert (message.msg_id, message.body, message.queue_offset) == (
                    result.msg_id, body, result.queue_offset)
    assert kept >= len(early)
    events = _events(cluster)
    [recovered] = [e for e in events if e["event"] == "store-recovered" and not e["clean"]]
    assert recovered["commitlog_max_phys_offset"] == flushed
    torn = [e for e in events if e["event"] == "store-error" and e["kind"] == "torn-tail"]
    assert [(e["phys_offset"], e["bytes"]) for e in torn] == [(flushed, done["commitlog"]["torn_bytes"])]
    assert not [e for e in events if e["event"] == "store-error" and e["kind"] == "bad-record"]
    with Producer(cluster.namesrv_addr) as producer:  # the broker takes sends again
        assert producer.send(Message(TOPIC, b"after")).status.name == "SEND_OK"


@pytest.mark.parametrize(("switches", "loses_acked"), [((), False), ((c.FAULT_SYNC_FLUSH_ACK_EARLY,), True)])
def test_sync_flush_loses_no_acknowledged_message_unless_it_acks_early(start_cluster, switches, loses_acked):
    options = {"store": {"flush_disk_type": "SYNC_FLUSH"}, "fault_switches": list(switches)}
    cluster = start_cluster({"flush_commitlog_ms": NO_PERIODIC_FLUSH_MS}, **options)
    sent = _send(cluster, 150, "sync")
    _power_loss(cluster, seed=5)
    with PullConsumer(cluster.namesrv_addr, "after-power-loss") as consumer:
        missing = [result for result, _body in sent if not _pulled(consumer, result)]
    if loses_acked:
        assert missing, "answering before the fsync should lose acknowledged messages to a power loss"
    else:
        assert not missing, f"{len(missing)} acknowledged SYNC_FLUSH messages lost"


def test_a_record_corrupted_under_a_running_broker_is_never_served_and_reported_once(start_cluster):
    cluster = start_cluster(store={"commitlog_segment_bytes": 1024 * 1024, "message_body_bytes_max": 256 * 1024})
    # about 1.6 MiB: the first segment is sealed
    sent = _send(cluster, 400, "sealed", body_bytes=4000, sharding_key="one-queue")
    done = faults.corrupt_sealed_record(_store_dir(cluster), random.Random(3))
    assert done is not None and done["phys_offset"] < 1024 * 1024
    with PullConsumer(cluster.namesrv_addr, "reader") as consumer:
        for _ in range(2):  # a second read is checked again
            for result, body in sent:
                messages = _pulled(consumer, result)
                if result.msg_id in done["msg_ids"]:
                    assert all(m.msg_id != result.msg_id for m in messages)
                else:
                    assert messages and messages[0].body == body
    bad = [e for e in _events(cluster) if e["event"] == "store-error" and e["kind"] == "bad-record"]
    assert [(e["phys_offset"], e["queue_offset"], e["file"]) for e in bad] == [
        (done["phys_offset"], done["queue_offset"], done["file"])]
    assert cluster.node(BROKER).describe()["details"]["store"]["store_errors"] == 1
