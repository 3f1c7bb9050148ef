"""Push consumers as real processes: three share eight queues; adding, stopping or killing one
makes the others rebalance promptly; every acknowledged message is consumed at least once."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from support.timing import within_ms

from harness import HarnessError, LocalCluster, NodeProcess, NodeSpec
from harness.spec import ClusterSpec
from nodes.client import Message, Producer
from nodes.consumer.journal import read_journal

pytestmark = pytest.mark.cluster

TOPIC = "PushTopic"
GROUP = "push_group"
QUEUES = 8


@pytest.fixture
def cluster(tmp_path, time_scale):
    with LocalCluster(ClusterSpec.default(time_scale=time_scale), run_dir=tmp_path / "run") as cl:
        with Producer(cl.namesrv_addr, timing=cl.timing, default_topic_queue_nums=QUEUES) as producer:
            producer.send(Message(TOPIC, b"create the topic"))
        cl.wait_until_routable(TOPIC)
        yield cl
        assert not cl.unexpected_exits, f"nodes died unexpectedly: {cl.unexpected_exits}"


def add_consumers(cl: LocalCluster, *indexes: int, **options: object) -> list[NodeProcess]:
    options = {"group": GROUP, "subscriptions": {TOPIC: "*"}, "consume_thread_min": 4, **options}
    procs = [cl.add_node(NodeSpec(f"consumer-{i}", "consumer", options=options), start=False) for i in indexes]
    for proc in procs:
        proc.spawn()
    for proc in procs:
        proc.wait_ready()
    return procs


def owned(proc: NodeProcess) -> list[int] | None:
    try:
        queues = proc.describe()["details"].get("consumer", {}).get("queues", [])
    except HarnessError:
        return None
    return sorted(q["queue_id"] for q in queues if q["topic"] == TOPIC)


def wait_balanced(procs: list[NodeProcess], budget_ms: int) -> tuple[float, dict[str, list[int]]]:
    """Wait until the live consumers own every queue exactly once, in shares that differ by at most one.

    Returns the seconds it took and the assignment."""
    start = time.monotonic()
    assignment: dict[str, list[int] | None] = {}
    while True:
        assignment = {p.node_id: owned(p) for p in procs}
        shares = [q for q in assignment.values() if q is not None]
        if len(shares) == len(procs):
            flat = sorted(q for share in shares for q in share)
            sizes = [len(s) for s in shares]
            if flat == list(range(QUEUES)) and max(sizes) - min(sizes) <= 1:
                return time.monotonic() - start, assignment  # type: ignore[return-value]
        if (time.monotonic() - start) * 1000 > budget_ms:
            raise AssertionError(f"not balanced within {budget_ms} ms: {assignment}")
        time.sleep(0.05)


class SteadyProducer:
    """Sends a unique message every few ms on a thread until stopped; keeps the acknowledged ids."""

    def __init__(self, cl: LocalCluster) -> None:
        self._producer = Producer(cl.namesrv_addr, timing=cl.timing)
        self.acked: set[str] = set()
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="steady-producer", daemon=True)

    def __enter__(self) -> SteadyProducer:
        self._producer.start()
        self._thread.start()
        return self

    def _run(self) -> None:
        seq = 0
        while not self._stop.wait(0.004):
            try:
                result = self._producer.send(Message(TOPIC, f"m{seq}".encode(), keys=f"k{seq}"))
                self.acked.add(result.msg_id)
            except Exception:
                self.failed += 1
            seq += 1

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._producer.shutdown()


def consumed(run_dir: Path) -> Counter[str]:
    """msg_id -> successful deliveries, over every consumer's journal (killed ones included)."""
    return Counter(r["msg_id"] for path in run_dir.glob("consumer-*/deliveries.jsonl")
                   for r in read_journal(path) if r["result"] == "CONSUME_SUCCESS")


def check_all_consumed(cl: LocalCluster, acked: set[str], label: str) -> Counter[str]:
    deadline = time.monotonic() + 20
    while True:
        seen = consumed(cl.run_dir)
        missing = acked - set(seen)
        if not missing:
            break
        if time.monotonic() > deadline:
            raise AssertionError(f"{label}: {len(missing)} of {len(acked)} acknowledged messages never consumed")
        time.sleep(0.1)
    duplicates = sum(n - 1 for msg_id, n in seen.items() if msg_id in acked)
    print(f"\n{label}: {len(acked)} messages, each consumed at least once; {duplicates} duplicate deliveries")
    return seen


@pytest.mark.slow
def test_three_consumers_share_eight_queues(cluster):
    procs = add_consumers(cluster, 0, 1, 2)
    _, assignment = wait_balanced(procs, within_ms(cluster.timing.rebalance_interval_ms * 2))
    assert sorted(len(q) for q in assignment.values()) == [2, 3, 3]
    with SteadyProducer(cluster) as producer:
        time.sleep(1.5)
    assert producer.acked and not producer.failed
    check_all_consumed(cluster, producer.acked, "three consumers")
    per_node = Counter(r["node"] for path in cluster.run_dir.glob("consumer-*/deliveries.jsonl")
                       for r in read_journal(path))
    assert set(per_node) == {"consumer-0", "consumer-1", "consumer-2"}


def test_adding_a_consumer_rebalances_within_one_interval(cluster):
    procs = add_consumers(cluster, 0, 1, 2)
    wait_balanced(procs, within_ms(cluster.timing.rebalance_interval_ms * 2))
    with SteadyProducer(cluster) as producer:
        time.sleep(0.5)
        procs += add_consumers(cluster, 3)
        took_s, assignment = wait_balanced(procs, within_ms(cluster.timing.rebalance_interval_ms))
        time.sleep(0.5)
    print(f"\nadd: balanced over 4 in {took_s * 1000:.0f} ms: {assignment}")
    assert sorted(len(q) for q in assignment.values()) == [2, 2, 2, 2]
    check_all_consumed(cluster, producer.acked, "add one")


@pytest.mark.slow
def test_stopping_a_consumer_rebalances_within_one_interval(cluster):
    procs = add_consumers(cluster, 0, 1, 2)
    wait_balanced(procs, within_ms(cluster.timing.rebalance_interval_ms * 2))
    with SteadyProducer(cluster) as producer:
        time.sleep(0.5)
        assert cluster.stop("consumer-1") == 0  # graceful: offsets persisted, unregistered
        live = [p for p in procs if p.node_id != "consumer-1"]
        took_s, assignment = wait_balanced(live, within_ms(cluster.timing.rebalance_interval_ms))
        time.sleep(0.5)
    print(f"\nstop: balanced over 2 in {took_s * 1000:.0f} ms: {assignment}")
    assert sorted(len(q) for q in assignment.values()) == [4, 4]
    check_all_consumed(cluster, producer.acked, "stop one")


def test_killing_a_consumer_rebalances_within_one_interval_plus_expiry(cluster):
    procs = add_consumers(cluster, 0, 1, 2, sleep_ms=20)  # slow listeners: messages are in flight at the kill
    wait_balanced(procs, within_ms(cluster.timing.rebalance_interval_ms * 2))
    with SteadyProducer(cluster) as producer:
        time.sleep(0.5)
        cluster.kill("consumer-1")  # no unregister, no offset persist: its notification streams just end
        live = [p for p in procs if p.node_id != "consumer-1"]
        budget_ms = within_ms(cluster.timing.rebalance_interval_ms + cluster.timing.consumer_channel_expiry_ms
                              + cluster.timing.client_housekeeping_ms)
        took_s, assignment = wait_balanced(live, budget_ms)
        time.sleep(0.5)
    print(f"\nkill: balanced over 2 in {took_s * 1000:.0f} ms: {assignment}")
    assert sorted(len(q) for q in assignment.values()) == [4, 4]
    check_all_consumed(cluster, producer.acked, "kill one")


@pytest.mark.slow
def test_failing_keys_come_back_through_the_retry_topic(cluster):
    fail_keys = [f"k{i}" for i in range(0, 100, 10)]
    procs = add_consumers(cluster, 0, 1, 2, workload="fail_keys", fail_keys=fail_keys, fail_times=2)
    wait_balanced(procs, within_ms(cluster.timing.rebalance_interval_ms * 2))
    with SteadyProducer(cluster) as producer:
        while len(producer.acked) < 100:
            time.sleep(0.05)
    check_all_consumed(cluster, producer.acked, "failing keys")
    records = [r for path in cluster.run_dir.glob("consumer-*/deliveries.jsonl") for r in read_journal(path)]
    for key in fail_keys:
        mine = sorted((r["reconsume_times"], r["result"]) for r in records if r["keys"] == key)
        failures = [t for t, result in mine if result == "RECONSUME_LATER"]
        successes = [t for t, result in mine if result == "CONSUME_SUCCESS"]
        # each consumer fails a key twice, and a retry may land on another consumer
        assert len(failures) >= 2 and successes and min(successes) >= 2, (key, mine)
        assert all(r["queue_topic"] == f"%RETRY%{GROUP}" and r["topic"] == TOPIC
                   for r in records if r["keys"] == key and r["reconsume_times"] > 0)
        # each retry waits its delay level (3 + reconsume times: 10 s, then 30 s, scaled)
        by_times = {}
        for r in sorted((r for r in records if r["keys"] == key), key=lambda r: r["wall_ms"]):
            by_times.setdefault(r["reconsume_times"], r["wall_ms"])
        unit_ms = cluster.timing.delay_level_unit_ms
        for times, level_delay_s in ((1, 10), (2, 30)):
            waited_ms = by_times[times] - by_times[times - 1]
            assert waited_ms >= level_delay_s * unit_ms * 0.9, (key, times, waited_ms)


@pytest.mark.slow
def test_broadcasting_consumers_declared_in_the_spec_each_get_everything(tmp_path, time_scale):
    spec = ClusterSpec.default(time_scale=time_scale).with_consumers(
        2, group="broadcast_group", subscriptions={"Broadcast": "*"}, message_model="BROADCASTING",
        consume_from_where="CONSUME_FROM_FIRST_OFFSET", consume_thread_min=2)
    with LocalCluster(spec, run_dir=tmp_path / "run") as cl:  # consumers start after the brokers
        assert [n.node_id for n in cl.nodes()][-2:] == ["consumer-0", "consumer-1"]
        with Producer(cl.namesrv_addr, timing=cl.timing) as producer:
            sent = {producer.send(Message("Broadcast", f"b{i}".encode())).msg_id for i in range(60)}
        deadline = time.monotonic() + 20
        per_node: dict[str, set[str]] = {}
        while time.monotonic() < deadline:
            per_node = {p.name: {r["msg_id"] for r in read_journal(p / "deliveries.jsonl")}
                        for p in cl.run_dir.glob("consumer-*")}
            if len(per_node) == 2 and all(ids >= sent for ids in per_node.values()):
                break
            time.sleep(0.1)
        assert len(per_node) == 2 and all(ids >= sent for ids in per_node.values()), per_node.keys()
        assert not cl.unexpected_exits
        # a restarted broadcasting consumer resumes from its local offsets file, not from the start
        cl.restart("consumer-0")
        journal = cl.run_dir / "consumer-0" / "deliveries.jsonl"
        before_restart = len(read_journal(journal))
        with Producer(cl.namesrv_addr, timing=cl.timing) as producer:
            fresh = {producer.send(Message("Broadcast", f"after-{i}".encode())).msg_id for i in range(20)}
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            new_ids = [r["msg_id"] for r in read_journal(journal)[before_restart:]]
            if set(new_ids) >= fresh:
                break
            time.sleep(0.1)
        assert set(new_ids) >= fresh
        replayed = set(new_ids) & sent  # a graceful stop persisted the offsets: nothing comes twice
        assert not replayed, f"{len(replayed)} old messages replayed after a restart"
    # each kept its own offsets in a local file under its run dir
    files = sorted(cl.run_dir.glob("consumer-*/offsets/*/broadcast_group/offsets.json"))
    assert len(files) == 2
