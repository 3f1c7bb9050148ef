"""Suites on the 2x2 topology: each fault pinned to one broker group by the seed (replayably,
partition peers in the same group), the single topology drawn exactly as before, the matrix's
topology dimension and the CLI's refusal of unknown topologies."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from chaos.cli import app
from chaos.matrix import plan_cells, with_topologies
from chaos.nemesis_ops import Kill, Partition, PowerLoss
from chaos.runner import RunOptions, plan
from chaos.schedule import Entry, Schedule
from chaos.suites import SUITES
from chaos.topology import pin_op, place_schedule

GROUPS = ["broker-a", "broker-b"]


def test_pinning_names_the_group_and_keeps_a_partition_peer_in_it():
    assert pin_op(Kill("master"), "broker-b") == Kill("master:broker-b")
    assert pin_op(PowerLoss("slave"), "broker-b") == PowerLoss("slave:broker-b")
    assert pin_op(Kill("lock-holder"), "broker-b") == Kill("lock-holder:broker-b:")
    assert pin_op(Kill("random-consumer"), "broker-b") == Kill("random-consumer")
    assert pin_op(Kill("master:broker-a"), "broker-b") == Kill("master:broker-a")
    ms = pin_op(Partition("master-slave", "master"), "broker-b")
    assert (ms.target, ms.peer) == ("master:broker-b", "slave:broker-b")
    cm = pin_op(Partition("consumer-master", "random-consumer"), "broker-b")
    assert (cm.target, cm.peer) == ("random-consumer", "master:broker-b")
    iso = pin_op(Partition("isolate", "master"), "broker-a")
    assert (iso.target, iso.peer) == ("master:broker-a", None)


def test_broker_loss_pins_groups_and_name_servers():
    seen = set()
    for seed in range(1, 8):
        schedule, _ = plan(RunOptions(SUITES["broker-loss"], seed=seed, topology="2x2"))
        for e in schedule.entries:
            name, _, arg = e.op.target.partition(":")
            if name == "namesrv":
                assert arg in ("0", "1"), e
            elif name in ("group", "master"):
                assert arg in GROUPS, e
            else:
                assert e.op.target == "producer-0" and e.op.peer.partition(":")[2] in GROUPS, e
            seen.add((e.op.op, name))
    assert {("kill", "group"), ("pause", "master"), ("kill", "namesrv"), ("partition", "producer-0")} <= seen


def test_one_group_leaves_the_schedule_as_drawn():
    schedule = Schedule(entries=(Entry(10, Kill("master")),), fault_phase_ms=100, recovery_phase_ms=10, seed=1)
    assert place_schedule(schedule, ["broker-a"], 1) is schedule


def test_the_single_topology_draws_exactly_as_without_one():
    for name in (n for n, s in SUITES.items() if "single" in s.topologies):
        default, _ = plan(RunOptions(SUITES[name], seed=1))
        single, _ = plan(RunOptions(SUITES[name], seed=1, topology="single"))
        assert single.to_json() == default.to_json()


def test_two_by_two_pins_every_group_target_and_a_seed_replays_the_same_groups():
    for name in ("lock-takeover", "failover", "offset-resync", "durability"):
        first, _ = plan(RunOptions(SUITES[name], seed=3, topology="2x2"))
        again, _ = plan(RunOptions(SUITES[name], seed=3, topology="2x2"))
        assert first.to_json() == again.to_json()
        single, _ = plan(RunOptions(SUITES[name], seed=3))
        # the same faults at the same times: only the targets are pinned
        assert [(e.at_ms, e.op.op) for e in first.entries] == [(e.at_ms, e.op.op) for e in single.entries]
        for e in first.entries:
            name_, _, arg = e.op.target.partition(":")
            if name_ in ("master", "slave", "lock-holder"):
                assert arg.rstrip(":") in GROUPS, e
        assert Schedule.from_json(first.to_json()).to_json() == first.to_json()
    # over a few seeds both groups get faults
    hit = set()
    for seed in range(1, 6):
        schedule, _ = plan(RunOptions(SUITES["failover"], seed=seed, topology="2x2"))
        hit |= {e.op.target.partition(":")[2] for e in schedule.entries}
    assert set(GROUPS) <= hit


def test_a_suite_is_refused_on_a_topology_it_does_not_run_on():
    with pytest.raises(ValueError, match="broker-loss runs on 2x2 only"):
        plan(RunOptions(SUITES["broker-loss"], seed=1))
    result = CliRunner().invoke(app, ["run", "broker-loss", "--dry-run"])
    assert result.exit_code == 2 and "runs on 2x2 only" in result.output
    cells = with_topologies(plan_cells(["broker-loss", "failover"], [1], [0.05]), ["single", "2x2"])
    assert [(c.suite, c.topology) for c in cells] == [("broker-loss", "2x2"), ("failover", "single"),
                                                      ("failover", "2x2")]


def test_an_unknown_producer_switch_is_refused_before_anything_starts(tmp_path):
    from chaos.runner import ChaosRun

    run = ChaosRun(RunOptions(SUITES["broker-loss"], topology="2x2", out_dir=tmp_path / "run",
                              fault_switches={"producer": ("no-such-switch",)}))
    with pytest.raises(ValueError, match="unknown producer fault switches"):
        run.execute()
    assert not (tmp_path / "run" / "cluster.json").exists()


def test_the_matrix_runs_a_cell_per_topology_and_names_them_apart():
    cells = with_topologies(plan_cells(["failover"], [1], [0.05]), ["single", "2x2"])
    assert [c.topology for c in cells] == ["single", "2x2"]
    assert len({c.name for c in cells}) == 2


def test_unknown_topologies_are_refused_with_the_choices():
    result = CliRunner().invoke(app, ["run", "failover", "--topology", "3x3", "--dry-run"])
    assert result.exit_code == 2 and "topologies are single, 2x2" in result.output
    result = CliRunner().invoke(app, ["matrix", "--suites", "failover", "--seeds", "1", "--topologies", "4x4"])
    assert result.exit_code == 2 and "topologies are single, 2x2" in result.output


def test_the_two_by_two_faults_resolve_to_whole_groups_and_name_servers(tmp_path):
    import random

    from chaos.nemesis import NemesisRunner
    from chaos.suites import PRODUCER_NODE
    from harness import LocalCluster
    from nodes.common.clock import SYSTEM_CLOCK

    cluster = LocalCluster(SUITES["broker-loss"].spec(0.05, topology="2x2"), run_dir=tmp_path, links=True,
                           start=False)  # ports, configs and link proxies; no process
    try:
        cluster.client_dial_overrides(PRODUCER_NODE)
        nemesis = NemesisRunner(cluster, tmp_path / "n.jsonl", random.Random(1), SYSTEM_CLOCK, topic="T", group="g")
        assert nemesis.resolver.resolve("group:broker-b") == ["broker-b-0", "broker-b-1"]
        assert nemesis.resolver.resolve("namesrv:1") == ["namesrv-1"]
        assert nemesis.resolver.resolve(PRODUCER_NODE) == [PRODUCER_NODE]
        links, _, _ = nemesis._plan_partition(Partition("from-group", PRODUCER_NODE, peer="group:broker-a"),
                                              PRODUCER_NODE)
        assert set(links) == {(PRODUCER_NODE, "broker-a-0"), (PRODUCER_NODE, "broker-a-1")}
        links, _, _ = nemesis._plan_partition(Partition("from-namesrv", "group:broker-b"), "broker-b-0")
        assert set(links) == {(b, n) for b in ("broker-b-0", "broker-b-1") for n in ("namesrv-0", "namesrv-1")}
        nemesis.close()
    finally:
        cluster.close(graceful=False)


def test_the_ownership_plot_takes_queues_from_every_broker_group_in_turn():
    from chaos.checker.plots import busiest_per_broker

    rows = ([{"broker_name": "broker-a", "queue_id": q, "n": 100 - q} for q in range(8)]
            + [{"broker_name": "broker-b", "queue_id": q, "n": 10 - q} for q in range(4)])
    picked = busiest_per_broker(rows, 6)
    assert [(r["broker_name"], r["queue_id"]) for r in picked] == [
        ("broker-a", 0), ("broker-b", 0), ("broker-a", 1), ("broker-b", 1), ("broker-a", 2), ("broker-b", 2)]
    assert len(busiest_per_broker(rows, 50)) == 12
