"""`mqlab bench pull` end to end on a tiny matrix: real nodes, workers, limits; nothing survives it."""

from __future__ import annotations

import json

import pytest
from support.processes import children_running

from harness.bench.report import write_plot
from harness.bench.results import report_json
from harness.bench.runner import BenchConfig, Hooks, run_bench

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(120)]  # benchmarks run apart



def test_tiny_bench_runs_every_kind_of_case_and_leaves_nothing_behind(tmp_path):
    config = BenchConfig(messages=400, body_bytes=100, queues=2, batches=(8,), consumers=(1, 2), seconds=0.3,
                         windows=2, send_batches=(10,), send_window=4, time_scale=0.05, run_dir=tmp_path / "run")
    stages: list[str] = []
    report = run_bench(config, Hooks(stage=stages.append))
    assert not report.problems, report.problems
    labels = [case.label for case in report.results]
    assert labels == ["pull master b8 x1 (first-read)", "pull slave b8 x1 (first-read)",
                      "pull master b8 x1", "pull master b8 x2", "pull slave b8 x1", "pull slave b8 x2",
                      "pull loop master b32", "push master b32", "send batch b10", "send sync b1", "send async b1"]
    # every case moved messages; with two windows the median is the slower one, which a loaded
    # machine can starve for a whole 0.3 s window, so the faster window is what must have some
    assert all(case.measured.spread[1] > 0 for case in report.results), \
        [(case.label, case.measured.spread) for case in report.results]
    first_reads = [c for c in report.results if c.mode == "first-read"]
    assert [c.measured.messages for c in first_reads] == [400, 400]  # one pass, every message once
    assert set(report.references) == {"mmap-scan", "mmap-append", "tcp", "plain-stream b8", "grpc-stream b8", "plain-stream b32",
                                      "grpc-stream b32", "plain-unary b10", "plain-unary b1", "plain-unary b4",
                                      "plain-stream-publish b10", "plain-stream-publish b1", "plain-stream-publish b4"}
    assert report.record_bytes > 100
    timed = report.find("pull", "master", 8)
    low, high = timed.measured.spread
    assert low <= timed.measured.msgs_per_s <= high  # the median window, inside its spread
    # Where the cost is paid: every case knows its clients' CPU per message, and a send case the
    # master's too (it stored every message).
    for case in report.results:
        assert case.cpu_us_per_msg.get("clients", 0) > 0, case
    sends = [c for c in report.results if c.client == "send"]
    assert all(c.cpu_us_per_msg.get("master", 0) > 0 for c in sends), sends
    data = json.loads(json.dumps(report_json(report)))
    assert set(data["results"][-1]["cpu_us_per_msg"]) >= {"clients", "master"}
    assert data["results"][2]["client"] == "pull" and data["results"][2]["ratios"]["plain-stream"] > 0
    assert write_plot(report, tmp_path / "plot.png").stat().st_size > 1000
    assert any("first read" in stage for stage in stages)
    assert not children_running("harness.bench")
    # the stores are gone (not kept by default); logs and configs stay
    run_dir = tmp_path / "run"
    assert not list(run_dir.glob("*/store")) and list(run_dir.glob("*/node.log"))
    # the brokers fixed their allocator's thresholds at start (nodes.common.allocator)
    for broker in ("broker-a-0", "broker-a-1"):
        assert "allocator: mmap threshold 32 MiB" in (run_dir / broker / "node.log").read_text(), broker


def test_a_send_only_bench_measures_no_consumer_row(tmp_path):
    config = BenchConfig(messages=200, body_bytes=100, queues=2, batches=(8,), consumers=(1,), seconds=0.3,
                         windows=2, send_batches=(10,), send_window=4, time_scale=0.05, pull=False, push=False,
                         run_dir=tmp_path / "run")
    stages: list[str] = []
    report = run_bench(config, Hooks(stage=stages.append))
    assert not report.problems, report.problems
    assert [case.label for case in report.results] == ["send batch b10", "send sync b1", "send async b1"]
    assert not any("pull" in stage or "first read" in stage for stage in stages), stages
    assert {"plain-unary b10", "plain-unary b1", "plain-stream-publish b10", "mmap-append"} <= set(report.references)
    assert report.references["mmap-append"].measured.messages > 0
    assert not list((tmp_path / "run" / "broker-a-0").glob("bench-append-*"))  # its file is gone
    assert not any(name.startswith(("plain-stream ", "grpc-stream")) for name in report.references)
    assert not children_running("harness.bench")


def test_every_round_measures_its_rows_again_and_the_push_consumer_reads_everything_each_time(tmp_path):
    # A push consumer starts from the first offset of a group with nothing committed: a later
    # round that reused the first round's group would find every offset committed and read nothing.
    config = BenchConfig(messages=200, body_bytes=100, queues=2, batches=(8,), consumers=(1,), seconds=0.3,
                         windows=1, pull=False, send=False, rounds=2, time_scale=0.05, run_dir=tmp_path / "run")
    stages: list[str] = []
    report = run_bench(config, Hooks(stage=stages.append))
    assert not report.problems, report.problems
    assert [s for s in stages if s.startswith("round ")] == ["round 1 of 2", "round 2 of 2"]
    assert len(report.rounds) == 2
    for number, one in enumerate(report.rounds, 1):
        assert [case.label for case in one.results] == ["push master b32"], number
        assert one.results[0].measured.messages == 200, number
        assert {"mmap-scan", "tcp", "plain-stream b32", "grpc-stream b32"} <= set(one.references), number
    assert [case.label for case in report.results] == ["push master b32"]
    data = report_json(report)
    assert len(data["rounds"]) == 2 and data["results"][0]["ratios"]["plain-stream"] > 0
    assert not children_running("harness.bench")
