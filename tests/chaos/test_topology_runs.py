"""Whole chaos runs on the 2x2 topology (real processes and the checker): an existing suite keeps
its verdict with every fault pinned to one of two broker groups, and broker-loss - a group lost,
silent or cut from the name servers, a name server down - passes with latency fault tolerance on.
The switched broker-loss run is `test_runs.test_every_switch_makes_its_check_fail`."""

from __future__ import annotations

import json

import pytest

from chaos.runner import EXIT_VALID, ChaosRun, RunOptions
from chaos.suites import SUITES

SHORT_FAULT_PHASE_S = 12.0


def _run(suite: str, seed: int, tmp_path, spark, duration_s: float | None) -> dict:
    run_dir = tmp_path / "run"
    outcome = ChaosRun(RunOptions(SUITES[suite], seed=seed, duration_s=duration_s, out_dir=run_dir, spark=spark,
                                  report=False, topology="2x2")).execute()
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert outcome.exit_code == EXIT_VALID, {k: (v["valid"], v.get("reason")) for k, v in verdict["checks"].items()}
    sends = [json.loads(line) for line in (run_dir / "producer-0" / "sends.jsonl").read_text().splitlines()]
    groups = {r["broker_name"] for r in sends if r.get("type") == "ok"}
    assert groups == {"broker-a", "broker-b"}  # the topic's queues live on both groups
    return verdict


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.cluster
def test_lock_takeover_on_two_groups_is_valid(tmp_path, spark):
    _run("lock-takeover", 1, tmp_path, spark, SHORT_FAULT_PHASE_S)


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.cluster
def test_broker_loss_keeps_sends_on_the_other_group(tmp_path, spark):
    verdict = _run("broker-loss", 1, tmp_path, spark, None)
    availability = verdict["checks"]["availability"]
    assert availability["valid"] is True and availability["counts"]["outages"] >= 1
