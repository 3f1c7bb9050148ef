"""`mqlab bench pull --clients py5` end to end on a tiny bench: real nodes, Apache's RocketMQ 5
Python client in its own venv and worker processes over the brokers' gRPC MessagingService;
every py5 row counted, its CPU and the master's read, nothing survives it."""

from __future__ import annotations

import pytest
from support.processes import children_running

from harness.bench.results import report_json
from harness.bench.runner import BenchConfig, Hooks, run_bench

# ~40 s on two shared cores: a cluster, the mqlab rows a run always has, then three py5 rows
pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(300)]

PY5_ROWS = ["py5 simple master b32", "py5 send sync b1", "py5 send async b1"]


def test_tiny_bench_with_the_5x_python_client_adds_its_rows_and_leaves_nothing_behind(tmp_path):
    messages = 3_000  # more than a SimpleConsumer acking one message per call gets through in 0.6 s
    config = BenchConfig(messages=messages, body_bytes=1024, queues=2, batches=(8,), consumers=(1,),
                         sources=("master",), seconds=0.3, windows=2, send_batches=(10,), send_window=16,
                         pull=False, push=False, send=False, clients=("py5",), time_scale=0.05,
                         run_dir=tmp_path / "run")
    stages: list[str] = []
    report = run_bench(config, Hooks(stage=stages.append))
    assert not report.problems, report.problems
    labels = [case.label for case in report.results]
    assert labels == PY5_ROWS
    rows = {case.label: case for case in report.results}
    for case in rows.values():
        assert case.measured.spread[1] > 0 and case.measured.errors == 0, case
        assert case.cpu_us_per_msg.get("clients", 0) > 0 and case.cpu_us_per_msg.get("master", 0) > 0, case
    assert rows["py5 send async b1"].window == 16
    # judged against the references of mqlab's rows of the same kind, measured in the same run
    assert report.ratios(rows["py5 simple master b32"])["plain-stream"] > 0
    assert report.ratios(rows["py5 send sync b1"])["plain-unary"] > 0
    json_rows = report_json(report)["results"]
    assert [(r["client"], r["library"], r["mode"]) for r in json_rows] == [
        ("py5-simple", "py5", "simple"), ("py5-send", "py5", "sync"), ("py5-send", "py5", "async")]
    assert any(stage.startswith("py5: SimpleConsumer") for stage in stages)
    assert not children_running("harness.bench", "py5_worker")
