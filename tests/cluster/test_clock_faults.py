"""Clock faults on real node processes (harness.clockfault).

A broker with clock control whose clock runs at rate 2 lets a lock lease lapse in half the real
time; a consumer at rate 2 renews its locks twice as often; a broker whose wall clock jumps by an
hour (the harness's preloaded shift) keeps serving sends and pulls, stamps messages an hour ahead, and keeps
its (monotonic) leases unchanged. Evidence: lock answers, the nodes' events.jsonl (`lock` and
`clock` events, their `mono_ms` on the real CLOCK_MONOTONIC) and the stored messages.
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from harness import LocalCluster, NodeSpec
from harness.clockfault import ClockState, find_wall_shift_library
from harness.errors import HarnessError
from harness.spec import ClusterSpec
from nodes.client import Message, MessageQueue, Producer, PullConsumer, PullStatus
from nodes.common import wire
from proto import consumer_pb2, consumer_pb2_grpc

pytestmark = pytest.mark.cluster

MASTER = "broker-a-0"
TOPIC = "ClockTopic"
GROUP = "clock_group"
HOUR_MS = 3_600_000


def _has_wall_shift() -> bool:
    try:
        find_wall_shift_library()
    except HarnessError:
        return False
    return True


# a node with wall-clock control is always started with the shift library preloaded
needs_wall_shift = pytest.mark.requires(_has_wall_shift(),
                                        "the wall-clock shift library (harness/_wall_shift.c) is not built: "
                                        "install gcc and run ./scripts/bootstrap.sh again")


def one_master(time_scale: float, *clock_nodes: str, wall: bool = False) -> ClusterSpec:
    spec = ClusterSpec(nodes=(NodeSpec("namesrv-0", "namesrv"),
                              NodeSpec(MASTER, "broker", broker_name="broker-a", broker_id=0)),
                       time_scale=time_scale)
    return spec.with_clock_control(*clock_nodes, wall=wall)


def read_events(run_dir: Path, node_id: str) -> list[dict[str, Any]]:
    path = run_dir / node_id / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def lock(stub: consumer_pb2_grpc.ConsumerManagerStub, client_id: str, queue_id: int) -> bool:
    answer = stub.LockBatchMQ(consumer_pb2.LockBatchRequest(
        consumer_group=GROUP, client_id=client_id,
        queues=[wire.mq_to_pb(MessageQueue(TOPIC, "broker-a", queue_id))]), timeout=5)
    return len(answer.locked) == 1


def takeover(stub: consumer_pb2_grpc.ConsumerManagerStub, queue_id: int, budget_ms: int) -> None:
    """A locks the queue, B asks every 20 ms until the broker lets it take the queue over."""
    assert lock(stub, "A", queue_id)
    deadline = time.monotonic() + budget_ms / 1000
    while not lock(stub, "B", queue_id):
        assert time.monotonic() < deadline, f"B never took queue {queue_id} over within {budget_ms} ms"
        time.sleep(0.02)


def held_real_ms(events: list[dict[str, Any]], queue_id: int) -> int:
    """Real ms between A's grant and B's takeover of `queue_id`, from the broker's own events."""
    locks = [e for e in events if e["event"] == "lock" and e["queue_id"] == queue_id and e["action"] == "granted"]
    granted_a = next(e for e in locks if e["client_id"] == "A")
    granted_b = next(e for e in locks if e["client_id"] == "B")
    return granted_b["mono_ms"] - granted_a["mono_ms"]


def test_a_broker_at_rate_two_lets_a_lock_lease_lapse_in_half_the_real_time(tmp_path, time_scale):
    with LocalCluster(one_master(time_scale, MASTER), run_dir=tmp_path / "run") as cluster:
        lease_ms = cluster.timing.broker_lock_lease_ms
        state = cluster.clock_skew(MASTER, 2.0)
        assert state == ClockState(MASTER, 0, 2.0, 0)
        with grpc.insecure_channel(cluster.node(MASTER).addr) as channel:
            stub = consumer_pb2_grpc.ConsumerManagerStub(channel)
            takeover(stub, 0, lease_ms * 2)
            assert cluster.clock_reset(MASTER) == ClockState(MASTER)
            takeover(stub, 1, lease_ms * 2)
        with pytest.raises(HarnessError, match="wall=True"):
            cluster.clock_jump(MASTER, 1_000)  # started with rate control only
        events = read_events(cluster.run_dir, MASTER)
        assert not cluster.unexpected_exits
    skewed, normal = held_real_ms(events, 0), held_real_ms(events, 1)
    print(f"lease {lease_ms} ms: held {skewed} real ms at rate 2, {normal} real ms at rate 1")
    assert lease_ms / 2 - 30 <= skewed <= lease_ms / 2 + 400  # the skewed lease: lease / rate
    assert lease_ms - 30 <= normal <= lease_ms + 400
    # the clock events let the checker map the broker's lease clock onto the real timeline
    clock_events = [e for e in events if e["event"] == "clock"]
    assert [(e["cause"], e["rate"]) for e in clock_events] == [("start", 1.0), ("control", 2.0), ("control", 1.0)]
    assert all(abs(e["wall_ms"] - e["clock_wall_ms"]) < 5 * lease_ms for e in clock_events)
    # the lease end A was granted is on the skewed clock: lease ms of it after the grant
    granted_a = next(e for e in events if e["event"] == "lock" and e["action"] == "granted" and e["client_id"] == "A")
    skew_start = clock_events[1]
    # ... and recorded on the real timeline: the lease ends lease / rate real ms after the grant
    assert granted_a["lease_end_mono_ms"] - granted_a["mono_ms"] == pytest.approx(lease_ms / 2, abs=20)
    assert skew_start["clock_mono_ms"] >= skew_start["mono_ms"] - 5
    assert (cluster.run_dir / "clock-faults.jsonl").read_text().count('"op"') == 2


def pull_all(consumer: PullConsumer, mqs: list[MessageQueue]) -> list[Any]:
    found = []
    for mq in mqs:
        result = consumer.pull(mq, 0, 32)
        if result.status is PullStatus.FOUND:
            found.extend(result.messages)
    return found


@needs_wall_shift
def test_a_broker_wall_clock_jump_moves_store_timestamps_and_not_leases(tmp_path, time_scale):
    with LocalCluster(one_master(time_scale, MASTER, wall=True), run_dir=tmp_path / "run") as cluster:
        lease_ms = cluster.timing.broker_lock_lease_ms
        pid = cluster.node(MASTER).pid
        assert "_wall_shift" in Path(f"/proc/{pid}/maps").read_text()
        with Producer(cluster.namesrv_addr, timing=cluster.timing, default_topic_queue_nums=4) as producer, \
                PullConsumer(cluster.namesrv_addr, GROUP, timing=cluster.timing) as consumer, \
                grpc.insecure_channel(cluster.node(MASTER).addr) as channel:
            stub = consumer_pb2_grpc.ConsumerManagerStub(channel)
            for i in range(4):
                producer.send(Message(TOPIC, f"before-{i}".encode()))
            cluster.wait_until_routable(TOPIC)
            locked_at = time.monotonic_ns() // 1_000_000
            assert lock(stub, "A", 0)
            jumped_at_ms = time.time_ns() // 1_000_000
            assert cluster.clock_jump(MASTER, HOUR_MS) == ClockState(MASTER, HOUR_MS, 1.0, 0)
            for i in range(4):
                producer.send(Message(TOPIC, f"after-{i}".encode()))
            assert not lock(stub, "B", 0)  # A's lease is on the monotonic clock: the hour changes nothing
            mqs = consumer.fetch_queues(TOPIC)
            found = pull_all(consumer, mqs)
            # the wall clock back to the real one (a step back by an hour): still serving
            assert cluster.clock_reset(MASTER) == ClockState(MASTER)
            producer.send(Message(TOPIC, b"healed"))
            found_again = pull_all(consumer, mqs)
            # and A's lease still ends when it was granted to, an hour's step back notwithstanding
            time.sleep(max(0, locked_at + lease_ms - time.monotonic_ns() // 1_000_000) / 1000)
            takeover_budget_ms = 3_000  # a loaded machine
            while not lock(stub, "B", 0):
                assert time.monotonic_ns() // 1_000_000 < locked_at + lease_ms + takeover_budget_ms
                time.sleep(0.05)
            described = cluster.node(MASTER).describe()
        events = read_events(cluster.run_dir, MASTER)
        node_log = (cluster.run_dir / MASTER / "node.log").read_text()
        assert not cluster.unexpected_exits
    stamps = {m.body.decode(): m.store_timestamp_ms - jumped_at_ms for m in found}
    assert sorted(stamps) == sorted([f"before-{i}" for i in range(4)] + [f"after-{i}" for i in range(4)])
    assert all(-60_000 < stamps[f"before-{i}"] <= 1_000 for i in range(4))
    assert all(HOUR_MS - 1_000 <= stamps[f"after-{i}"] < HOUR_MS + 60_000 for i in range(4))
    healed = [m for m in found_again if m.body == b"healed"]
    assert len(healed) == 1 and abs(healed[0].store_timestamp_ms - time.time_ns() // 1_000_000) < 60_000
    assert described["state"] == "RUNNING"
    # leases: B's denial names A's lease end exactly as A was granted it
    locks = [e for e in events if e["event"] == "lock" and e["queue_id"] == 0]
    granted = next(e for e in locks if e["action"] == "granted" and e["client_id"] == "A")
    denied = next(e for e in locks if e["action"] == "denied" and e["client_id"] == "B")
    assert denied["holder_lease_end_mono_ms"] == granted["lease_end_mono_ms"]
    assert denied["mono_ms"] < granted["lease_end_mono_ms"] <= granted["mono_ms"] + lease_ms
    # the events stay on the real wall clock while the node's is an hour ahead
    steps = [e for e in events if e["event"] == "clock" and e["cause"] == "wall-step"]
    assert [e["wall_offset_ms"] // 1000 for e in steps] == [HOUR_MS // 1000, 0]
    assert abs(steps[0]["wall_ms"] - jumped_at_ms) < 30_000
    assert abs(steps[0]["clock_wall_ms"] - steps[0]["wall_ms"] - HOUR_MS) < 1_000
    assert "Errno 22" not in node_log and "Invalid argument" not in node_log


@pytest.mark.slow  # the switch's logic is covered fast in tests/unit/common/test_clock_fault_switches.py
@needs_wall_shift
def test_lease_wall_clock_lets_a_backward_jump_keep_a_dead_holders_lock(tmp_path, time_scale):
    """The selftest switch with a real jump: leases on the wall clock (RocketMQ's way) outlive
    their lease by the step back (the correct build's do not: the jump test above)."""
    spec = one_master(time_scale, MASTER, wall=True).with_node_options(MASTER, fault_switches=["lease-wall-clock"])
    with LocalCluster(spec, run_dir=tmp_path / "run") as cluster:
        lease_ms = cluster.timing.broker_lock_lease_ms
        step_ms = 2 * lease_ms
        with grpc.insecure_channel(cluster.node(MASTER).addr) as channel:
            stub = consumer_pb2_grpc.ConsumerManagerStub(channel)
            assert lock(stub, "A", 0)  # A then falls silent: a dead holder
            cluster.clock_jump(MASTER, -step_ms)
            time.sleep((lease_ms + 500) / 1000)
            taken_after_lease = lock(stub, "B", 0)
        assert not cluster.unexpected_exits
    assert not taken_after_lease


@pytest.mark.slow
@needs_wall_shift
def test_a_minute_of_traffic_with_wall_jumps(tmp_path, time_scale):
    """A broker and a consumer node, both with shifted wall clocks, serve a minute of sends and pulls
    while their wall clocks jump back and forth: nothing crashes (no time.sleep EINVAL in any
    thread of theirs: grpc, lmdb, the store's flush threads, the listener pool) and every
    message sent is consumed."""
    from nodes.consumer.journal import read_journal

    spec = one_master(time_scale, MASTER, wall=True).with_consumers(
        1, group=GROUP, subscriptions={TOPIC: "*"}, sleep_ms=1, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        clock_control="wall+rate")
    sent: set[str] = set()
    with LocalCluster(spec, run_dir=tmp_path / "run") as cluster:
        with Producer(cluster.namesrv_addr, timing=cluster.timing, default_topic_queue_nums=4) as producer:
            jumps = [30_000, -60_000, 3_600_000, -3_600_000, 30_000]
            end = time.monotonic() + 60
            next_jump = time.monotonic() + 10
            i = 0
            while time.monotonic() < end:
                key = f"k{i}"
                producer.send(Message(TOPIC, key.encode(), keys=key))
                sent.add(key)
                i += 1
                if time.monotonic() >= next_jump and jumps:
                    delta = jumps.pop(0)
                    cluster.clock_jump(MASTER, delta)
                    cluster.clock_jump("consumer-0", -delta)
                    next_jump += 10
                time.sleep(0.01)
            cluster.clock_reset(MASTER)
            cluster.clock_reset("consumer-0")
        journal = cluster.run_dir / "consumer-0" / "deliveries.jsonl"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            consumed = {r["keys"] for r in read_journal(journal) if r.get("event") == "deliver"}
            if sent <= consumed:
                break
            time.sleep(0.5)
        logs = {n: (cluster.run_dir / n / "stderr.log").read_text() + (cluster.run_dir / n / "node.log").read_text()
                for n in (MASTER, "consumer-0")}
        assert not cluster.unexpected_exits
    print(f"sent {len(sent)} messages in 60 s under jumps; all consumed: {sent <= consumed}")
    assert sent <= consumed, f"{len(sent - consumed)} of {len(sent)} never consumed"
    for node, text in logs.items():
        assert "Errno 22" not in text and "Invalid argument" not in text, node


def test_a_consumer_at_rate_two_renews_its_locks_and_ends_its_leases_twice_as_fast(tmp_path, time_scale):
    spec = one_master(time_scale).with_consumers(
        1, group=GROUP, subscriptions={TOPIC: "*"}, orderly=True, clock_control="rate")
    consumer = "consumer-0"
    with LocalCluster(one_master(time_scale), run_dir=tmp_path / "run") as cluster:
        with Producer(cluster.namesrv_addr, timing=cluster.timing, default_topic_queue_nums=2) as producer:
            producer.send(Message(TOPIC, b"create the topic"))
        cluster.wait_until_routable(TOPIC)
        with pytest.raises(HarnessError, match="with_clock_control"):
            cluster.clock_skew(MASTER, 2.0)  # the master was started without clock control
        assert not (cluster.run_dir / MASTER / "wall_shift.rc").exists()
        assert "_wall_shift" not in Path(f"/proc/{cluster.node(MASTER).pid}/maps").read_text()
        cluster.add_node(spec.node(consumer))
        renew_ms, lease_ms = cluster.timing.lock_renew_interval_ms, cluster.timing.client_lock_lease_ms
        time.sleep(2 * renew_ms / 1000)  # rebalanced and locked at rate 1
        cluster.clock_skew(consumer, 2.0)
        skewed_at = time.monotonic_ns() // 1_000_000
        time.sleep(4 * renew_ms / 1000)
        events = read_events(cluster.run_dir, consumer)
        assert not cluster.unexpected_exits
    skew = next(e for e in events if e["event"] == "clock" and e["rate"] == 2.0)
    renewed_at = sorted(e["mono_ms"] for e in events if e["event"] == "lock" and e.get("reason") == "renew"
                        and e["action"] == "renewed" and e["mono_ms"] > skewed_at + renew_ms)
    renewals: list[int] = []  # one per lockAll: the events of its queues come within a few ms
    for t in renewed_at:
        if not renewals or t - renewals[-1] > 100:
            renewals.append(t)
    assert len(renewals) >= 4, renewals
    gaps = [b - a for a, b in itertools.pairwise(renewals)]
    print(f"renewal every {renew_ms} ms of the clock: real gaps at rate 2 {gaps}")
    # A renewal that waits for a core only comes late, so every gap is at least half the interval
    # and the shortest one shows the rate (at rate 1 none is below the whole interval); a busy
    # machine made single gaps 0.5-1.0 s longer than the rest.
    assert min(gaps) >= renew_ms / 2 - 50, gaps
    assert min(gaps) <= renew_ms / 2 + 250, gaps
    # the lease it believes ends lease / 2 real ms after the request was sent
    renewed = next(e for e in events if e["event"] == "lock" and e["action"] == "renewed" and e["mono_ms"] > skewed_at)

    # both on the real timeline: the skewed client converts what its clock read
    assert renewed["lease_end_mono_ms"] - renewed["sent_mono_ms"] == pytest.approx(lease_ms / 2, abs=2)
    assert renewed["sent_mono_ms"] <= renewed["mono_ms"] and skew["rate"] == 2.0
