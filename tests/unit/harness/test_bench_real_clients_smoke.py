"""`mqlab bench pull --clients cpp,ons` end to end on a tiny bench: real nodes, Apache's C++ client
and ali-ons in their own worker processes; every real-client row counted, nothing survives it."""

from __future__ import annotations

import pytest
from support.processes import children_running

from harness.bench.results import report_json
from harness.bench.runner import BenchConfig, Hooks, run_bench

# ~60 s on two shared cores: a cluster, the mqlab rows a run always has, then seven real-client rows
pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(300)]

REAL_ROWS = ["cpp push master b32", "cpp pull loop master b32", "cpp send sync b1", "cpp send batch b10",
             "cpp send oneway b1", "ons push master b32", "ons send sync b1"]



def test_tiny_bench_with_both_real_clients_adds_their_rows_and_leaves_nothing_behind(tmp_path):
    messages = 300
    config = BenchConfig(messages=messages, body_bytes=1024, queues=2, batches=(8,), consumers=(1,),
                         sources=("master",), seconds=0.3, windows=2, send_batches=(10,), push=False, send=False,
                         clients=("cpp", "ons"), time_scale=0.05, run_dir=tmp_path / "run")
    stages: list[str] = []
    report = run_bench(config, Hooks(stage=stages.append))
    assert not report.problems, report.problems  # the oneway sends were all stored, every push got them all
    labels = [case.label for case in report.results]
    assert labels[-len(REAL_ROWS):] == REAL_ROWS
    real = {case.label: case for case in report.results if case.label in REAL_ROWS}
    for case in real.values():
        assert case.measured.messages > 0 and case.measured.errors == 0, case
        assert case.cpu_us_per_msg.get("clients", 0) > 0 and "master" in case.cpu_us_per_msg, case
    for label in ("cpp push master b32", "ons push master b32"):
        assert real[label].measured.messages == messages, "a new group reads the preloaded topic from offset 0"
    for label in ("cpp send sync b1", "cpp send batch b10", "ons send sync b1"):
        assert real[label].cpu_us_per_msg["master"] > 0, "the master stored what the client sent"
    # beside mqlab's own rows: the same references, so the ratios are filled in
    assert report.ratios(real["cpp send sync b1"])["plain-unary"] > 0
    assert report.ratios(real["ons push master b32"])["plain-stream"] > 0
    libraries = {r["library"] for r in report_json(report)["results"]}
    assert libraries == {"mqlab", "cpp", "ons"}
    assert any(stage.startswith("ons: push consumer") for stage in stages)
    assert not children_running("harness.bench", "ons_worker")
