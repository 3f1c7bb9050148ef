"""Nemeses: ops as data, lock-holder lookup from Admin.Describe details, and a real cluster faulted through
NemesisRunner (kill -> restart, pause -> resume, partitions -> heal, recover_all) with its nemesis.jsonl."""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import pytest
from support.timing import within_ms

from chaos.bounds import derive_bounds
from chaos.nemesis import ActiveFault, NemesisRunner
from chaos.nemesis_journal import nemesis_history_path, read_nemesis
from chaos.nemesis_ops import Heal, Kill, Partition, Pause, Stop, op_from_dict, op_to_dict
from chaos.nemesis_targets import consumer_locked_queues, locked_queues
from chaos.schedule import Entry, Schedule, play
from harness import LocalCluster, NodeState
from harness.spec import ClusterSpec
from nodes.client import Message, Producer
from nodes.common.clock import SYSTEM_CLOCK

TOPIC = "NemesisTopic"
GROUP = "nemesis_group"
MASTER, SLAVE = "broker-a-0", "broker-a-1"
TIME_SCALE = float(os.environ.get("MQLAB_TEST_TIME_SCALE", "0.05"))


# ---- pure ---------------------------------------------------------------------------------


@pytest.mark.parametrize("op", [
    Kill("lock-holder:3", restart_after_ms=1500), Stop("master", restart_after_ms=10, grace_ms=5),
    Pause("all-consumers", duration_ms=700), Partition("one-way", "consumer-0", peer="master", mode="REJECT"),
    Partition("halves", duration_ms=9), Heal()])
def test_ops_survive_their_dict_form(op):
    assert op_from_dict(op_to_dict(op)) == op


def test_bad_partitions_and_unknown_ops_are_refused():
    with pytest.raises(ValueError, match="kind"):
        Partition("ring")
    with pytest.raises(ValueError, match="mode"):
        Partition("isolate", mode="OPEN")
    with pytest.raises(ValueError, match="unknown nemesis op"):
        op_from_dict({"op": "explode", "target": "master"})


def test_lock_holders_come_from_live_leases_of_the_topic_only():
    details: dict[str, Any] = {"queue_locks": {
        "g1": [{"topic": "T", "broker_name": "broker-a", "queue_id": 0, "client_id": "c-0", "lease_left_ms": 900},
               {"topic": "T", "broker_name": "broker-a", "queue_id": 1, "client_id": "c-1", "lease_left_ms": -5},
               {"topic": "U", "broker_name": "broker-a", "queue_id": 2, "client_id": "c-1", "lease_left_ms": 900}],
        "g2": [{"topic": "T", "broker_name": "broker-a", "queue_id": 3, "client_id": "c-2", "lease_left_ms": 10}]}}
    assert locked_queues(details, "T") == {("broker-a", 0): "c-0", ("broker-a", 3): "c-2"}
    assert locked_queues(details, "T", group="g1") == {("broker-a", 0): "c-0"}
    assert locked_queues({"queue_locks": None}, "T") == {}
    consumer = {"consumer": {"queues": [
        {"topic": "T", "broker_name": "broker-a", "queue_id": 0, "locked": True, "dropped": False},
        {"topic": "T", "broker_name": "broker-a", "queue_id": 1, "locked": False, "dropped": False},
        {"topic": "T", "broker_name": "broker-a", "queue_id": 2, "locked": True, "dropped": True},
        {"topic": "%RETRY%g1", "broker_name": "broker-a", "queue_id": 0, "locked": True, "dropped": False}]}}
    assert consumer_locked_queues(consumer, "T") == {("broker-a", 0)}


def test_overlapping_partitions_keep_a_link_cut_until_the_last_heals():
    older = ActiveFault("f1", "partition", ("a", "b"), 10, "", {("a", "b"): ("DROP", "DROP"), ("b", "a"): ("DROP", "DROP")})
    newer = ActiveFault("f2", "partition", ("a", "m"), 20, "", {("a", "b"): ("REJECT", "OPEN")})
    merged = NemesisRunner._merged_links([newer, older])
    assert merged == {("a", "b"): ("REJECT", "DROP"), ("b", "a"): ("DROP", "DROP")}
    assert NemesisRunner._merged_links([newer]) == {("a", "b"): ("REJECT", "OPEN")}
    assert NemesisRunner._merged_links([]) == {}


# ---- a real cluster -------------------------------------------------------------------------


def wait_for(what: str, budget_ms: int, probe):
    deadline = time.monotonic() + budget_ms / 1000
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {budget_ms} ms waiting for {what}")
        time.sleep(0.05)


def lock_holders(cluster: LocalCluster) -> dict[int, str]:
    """queue id -> client id holding it, per the master."""
    details = cluster.node(MASTER).describe()["details"]
    return {q: cid for (_, q), cid in locked_queues(details, TOPIC, GROUP).items()}


def links_not_open(cluster: LocalCluster) -> dict[str, tuple[str, str]]:
    return {name: (s["forward"], s["backward"]) for name, s in cluster.link_stats().items()
            if (s["forward"], s["backward"]) != ("OPEN", "OPEN")}


@pytest.fixture
def cluster(tmp_path):
    spec = ClusterSpec.default(time_scale=TIME_SCALE).with_consumers(
        2, group=GROUP, subscriptions={TOPIC: "*"}, orderly=True, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    with LocalCluster(spec, run_dir=tmp_path / "run", links=True) as cl:
        yield cl
        assert not cl.unexpected_exits, f"nodes died unexpectedly: {cl.unexpected_exits}"


@pytest.fixture
def topic_cluster(tmp_path):
    base = ClusterSpec.default(time_scale=TIME_SCALE)
    with LocalCluster(base, run_dir=tmp_path / "run", links=True) as cl:
        with Producer(cl.namesrv_addr, timing=cl.timing, default_topic_queue_nums=4) as producer:
            producer.send(Message(TOPIC, b"create the topic"))
        cl.wait_until_routable(TOPIC)
        for n in base.with_consumers(2, group=GROUP, subscriptions={TOPIC: "*"}, orderly=True).consumer_nodes():
            cl.add_node(n)
        yield cl
        assert not cl.unexpected_exits, f"nodes died unexpectedly: {cl.unexpected_exits}"


def check_history(path: Path) -> list[dict[str, Any]]:
    """Every action is a start line then an end line with the same op, targets and fault_id."""
    rows = read_nemesis(path)
    assert rows and all(r["event"] == "nemesis" and r["node"] == "nemesis" for r in rows)
    assert all(isinstance(r["mono_ms"], int) and isinstance(r["wall_ms"], int) for r in rows)
    assert [r["mono_ms"] for r in rows] == sorted(r["mono_ms"] for r in rows)
    for start, end in zip(rows[::2], rows[1::2], strict=True):
        assert (start["phase"], end["phase"]) == ("start", "end"), (start, end)
        assert (start["op"], start["targets"], start["fault_id"]) == (end["op"], end["targets"], end["fault_id"])
    return rows


@pytest.mark.cluster
def test_kill_pause_partition_and_their_recoveries_on_real_processes(topic_cluster):
    cl = topic_cluster
    bounds = derive_bounds(cl.timing)
    holders = wait_for("a lock on queue 0", within_ms(bounds.warmup_ms + bounds.takeover_after_kill_ms),
                       lambda: lock_holders(cl).get(0))
    by_client = {p.describe()["details"]["client_id"]: p.node_id for p in cl.nodes("consumer")}
    path = nemesis_history_path(cl.run_dir)
    with NemesisRunner(cl, path, random.Random(5), SYSTEM_CLOCK, topic=TOPIC, group=GROUP) as nemesis:
        # kill -> restart: the lock holder of queue 0, found through the master's lock table
        holder = by_client[holders]
        old_pid = cl.node(holder).pid
        kill = nemesis.start(Kill("lock-holder:0"))
        assert kill.ok and kill.targets == (holder,)
        assert cl.node(holder).state is NodeState.STOPPED and cl.node(holder).live_pids() == []
        assert [f.split(" ")[0] for f in nemesis.active_faults()] == ["kill"]
        restart = nemesis.recover(kill.fault_id)
        assert restart is not None and restart.ok and restart.op == "restart"
        assert cl.node(holder).state is NodeState.RUNNING and cl.node(holder).pid != old_pid
        assert nemesis.recover(kill.fault_id) is None  # undone once only

        # pause -> resume: the kernel reports the slave stopped, then running again
        pause = nemesis.start(Pause("slave", duration_ms=1))
        slave_pid = cl.node(SLAVE).pid
        assert pause.targets == (SLAVE,) and psutil.Process(slave_pid).status() == psutil.STATUS_STOPPED
        assert nemesis.recover(pause.fault_id).ok
        assert psutil.Process(slave_pid).status() != psutil.STATUS_STOPPED
        assert cl.node(SLAVE).state is NodeState.RUNNING

        # partition -> heal: every link of the master cut both ways, then open again
        iso = nemesis.start(Partition("isolate", "master", mode="DROP"))
        cut = links_not_open(cl)
        assert iso.ok and cut and all(MASTER in name.split("->") for name in cut)
        assert set(cut.values()) == {("DROP", "DROP")}
        assert nemesis.recover(iso.fault_id).ok and links_not_open(cl) == {}

        # overlapping partitions: healing one keeps the other's links cut
        other = next(p.node_id for p in cl.nodes("consumer") if p.node_id != holder)
        ms = nemesis.start(Partition("master-slave", "master", mode="REJECT"))
        one_way = nemesis.start(Partition("one-way", other, peer="master", mode="DROP"))
        assert one_way.targets == (other, MASTER) and "one way" in one_way.detail
        assert links_not_open(cl) == {f"{MASTER}->{SLAVE}": ("REJECT", "REJECT"),
                                      f"{SLAVE}->{MASTER}": ("REJECT", "REJECT"),
                                      f"{other}->{MASTER}": ("DROP", "OPEN")}
        assert nemesis.recover(ms.fault_id).ok
        assert links_not_open(cl) == {f"{other}->{MASTER}": ("DROP", "OPEN")}

        # leave a kill, a stop and a pause standing too: recover_all undoes all of them
        nemesis.start(Kill(holder))
        nemesis.start(Stop(MASTER, grace_ms=cl.timing.rpc_timeout_ms))
        nemesis.start(Pause(other))
        assert len(nemesis.faults()) == 4
        recovered = nemesis.recover_all()
        assert all(o.ok for o in recovered), recovered
        assert Counter(o.op for o in recovered) == {"resume": 1, "heal": 1, "restart": 2}
        assert nemesis.faults() == []
    assert links_not_open(cl) == {}
    assert {p.node_id: p.state for p in cl.nodes()} == dict.fromkeys((p.node_id for p in cl.nodes()),
                                                                     NodeState.RUNNING)
    cl.wait_until_routable(TOPIC)

    rows = check_history(path)
    starts = [r for r in rows if r["phase"] == "start"]
    assert [r["op"] for r in starts] == ["kill", "restart", "pause", "resume", "partition", "heal", "partition",
                                         "partition", "heal", "kill", "stop", "pause",
                                         "resume", "heal", "restart", "restart"]
    assert starts[0]["targets"] == [holder] and starts[0]["symbol"] == "lock-holder:0"
    assert f"SIGKILL pid {old_pid} ({holder})" in starts[0]["detail"]
    assert "master's lock table" in starts[0]["detail"]
    assert starts[1]["fault_id"] == starts[0]["fault_id"]
    assert f"SIGSTOP pid {slave_pid}" in starts[2]["detail"] and starts[3]["fault_id"] == starts[2]["fault_id"]
    assert "isolate broker-a-0 DROP" in starts[4]["detail"]
    assert starts[8]["detail"] == "open 2 links"  # master<->slave; the one-way cut shares no link with it
    assert not any("error" in r for r in rows)


@pytest.mark.slow
@pytest.mark.cluster
def test_play_fires_a_schedule_and_leaves_everything_running(cluster, tmp_path):
    cl = cluster
    path = tmp_path / "nemesis.jsonl"
    short_ms = cl.timing.rebalance_interval_ms
    schedule = Schedule(entries=(
        Entry(0, Kill("random-consumer", restart_after_ms=short_ms)),
        Entry(short_ms * 2, Partition("isolate", "slave", mode="REJECT", duration_ms=short_ms)),
        Entry(short_ms * 4, Pause("master", duration_ms=short_ms * 10)),  # outlives the phase: recover_all
    ), fault_phase_ms=short_ms * 5, recovery_phase_ms=0, seed=1)
    progress = []
    with NemesisRunner(cl, path, random.Random(1), SYSTEM_CLOCK, topic=TOPIC, group=GROUP) as nemesis:
        t0 = time.monotonic()
        result = play(schedule, nemesis, SYSTEM_CLOCK, threading.Event(), on_progress=progress.append)
        took_ms = (time.monotonic() - t0) * 1000
    assert short_ms * 5 - 1 <= took_ms  # the phase is timed on a clock of whole milliseconds
    assert not result.stopped_early and all(o.ok for o in result.outcomes + result.recovered)
    assert [o.op for o in result.outcomes] == ["kill", "restart", "partition", "heal", "pause"]
    assert [o.op for o in result.recovered] == ["resume"]
    assert progress[-1].phase == "done" and progress[-1].active == []
    assert links_not_open(cl) == {}
    assert all(p.state is NodeState.RUNNING for p in cl.nodes())
    rows = check_history(path)
    starts = {r["fault_id"]: r["mono_ms"] for r in rows if r["phase"] == "start" and r["op"] in ("kill", "partition")}
    recoveries = {r["fault_id"]: r["mono_ms"] for r in rows if r["phase"] == "start" and r["op"] in ("restart", "heal")}
    for fid, started in starts.items():  # each recovery at its own time, not before
        assert recoveries[fid] - started >= short_ms - 5
