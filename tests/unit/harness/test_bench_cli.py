"""`mqlab bench pull`: help, option checks and a missing matplotlib, without starting a cluster."""

from __future__ import annotations

import pytest
from rich.console import Console
from typer.testing import CliRunner

from harness import cli, terminal
from harness.bench import report as bench_report
from harness.bench.runner import BenchConfig

OPTIONS = ["--messages", "--body-bytes", "--queues", "--batches", "--consumers", "--quick", "--json", "--plot",
           "--time-scale", "--seconds", "--windows", "--rounds", "--window", "--tune-malloc", "--send-batch", "--send-window", "--peers", "--check",
           "--keep-store"]


@pytest.fixture
def runner(monkeypatch):
    monkeypatch.setattr(terminal, "console", Console(width=250, highlight=False))
    monkeypatch.setattr(terminal, "err_console", Console(width=250, highlight=False, stderr=True))
    return CliRunner()


def test_bench_pull_help_lists_the_options(runner):
    result = runner.invoke(cli.app, ["bench", "pull", "--help"], terminal_width=250)
    assert result.exit_code == 0, result.output
    for option in OPTIONS:
        assert option in result.output
    top = runner.invoke(cli.app, ["--help"])
    assert top.exit_code == 0 and "bench" in top.output


@pytest.mark.parametrize(("args", "message"), [
    (["--consumers", "9", "--queues", "8"], "consumer counts must be in 1..8"),
    (["--batches", "32,2048"], "batch 2048 is outside 1..1024"),
    (["--messages", "3", "--queues", "8"], "--messages 3 is fewer than --queues 8"),
])
def test_bad_matrices_exit_2_before_starting_anything(runner, args, message):
    result = runner.invoke(cli.app, ["bench", "pull", *args])
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_bad_batch_list_is_a_usage_error(runner):
    result = runner.invoke(cli.app, ["bench", "pull", "--batches", "32,x"])
    assert result.exit_code == 2 and "positive integers" in result.output


def test_missing_matplotlib_says_what_to_install(runner, monkeypatch):
    def missing():
        raise ImportError(bench_report.MATPLOTLIB_MISSING)

    monkeypatch.setattr(bench_report, "require_matplotlib", missing)
    result = runner.invoke(cli.app, ["bench", "pull", "--quick"])
    assert result.exit_code == 2
    assert "needs matplotlib" in result.output and "[dev]" in result.output


def test_quick_is_the_documented_matrix():
    quick = BenchConfig.quick()
    assert (quick.body_bytes, quick.batches, quick.sources, quick.consumers) == (1024, (32, 1024),
                                                                                ("master", "slave"), (1,))
    assert quick.measuring_seconds <= 3.0


def test_send_async_is_compared_with_the_batches_it_coalesces_into():
    from harness.bench.stages import async_batch
    from nodes.common import constants as c

    assert async_batch(1024, 1024) == c.SEND_ASYNC_BATCH_BYTES_MAX // 1024
    assert async_batch(64 * 1024, 1024) == c.SEND_ASYNC_BATCH_BYTES_MAX // (64 * 1024)
    assert async_batch(1024, 16) == 16


def test_unknown_peer_and_missing_redis_server_exit_2_saying_how_to_install(runner, monkeypatch):
    result = runner.invoke(cli.app, ["bench", "pull", "--peers", "kafka"])
    assert result.exit_code == 2 and "--peers takes redis" in result.output
    import shutil

    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "redis-server" else real_which(name))
    result = runner.invoke(cli.app, ["bench", "pull", "--peers", "redis"])
    assert result.exit_code == 2
    assert "redis-server" in result.output and "apt-get install -y redis-server" in result.output


def test_send_batch_takes_a_list():
    assert BenchConfig().send_batches == (32, 1024)
    result = CliRunner().invoke(cli.app, ["bench", "pull", "--send-batch", "0"])
    assert result.exit_code == 2 and "positive integers" in result.output


def test_check_exits_1_naming_each_target_missed_and_without_it_the_run_exits_0(runner, monkeypatch, tmp_path):
    from harness.bench import cli as bench_cli
    from harness.bench.results import BenchReport, CaseResult, Measured, Reference

    def fake_run(config, hooks):
        report = BenchReport(run={"run_dir": str(tmp_path)}, machine={"cpus": 2})
        report.results.append(CaseResult("pull", "master", 32, 1024, 1, Measured(1_000, 0, 1.0)))
        report.add_reference(Reference("redis-ack", 32, 1, Measured(50_000, 0, 1.0)))
        return report

    monkeypatch.setattr(bench_cli, "run_bench", fake_run)
    checked = runner.invoke(cli.app, ["bench", "pull", "--check", "--batches", "32"])
    assert checked.exit_code == 1, checked.output
    assert "target missed: pull master b32 x1 >= 1.0x redis-ack b32: 0.02x" in checked.output
    assert "target not judged: pull master b32 x1 >= 0.5x plain-stream b32" in checked.output
    assert (tmp_path / "bench-pull.json").exists() and (tmp_path / "bench-pull.png").exists()
    unchecked = runner.invoke(cli.app, ["bench", "pull", "--batches", "32"])
    assert unchecked.exit_code == 0, unchecked.output


def test_a_run_leaves_its_results_logs_and_configs_but_not_the_brokers_stores(tmp_path):
    from harness.bench.runner import _delete_stores

    for node in ("broker-a-0", "broker-a-1", "namesrv-0"):
        (tmp_path / node / "store" / "commitlog").mkdir(parents=True)
        (tmp_path / node / "store" / "commitlog" / "00000000000000000000").write_bytes(b"x" * 100)
        (tmp_path / node / "node.log").write_text("log")
    (tmp_path / "bench-pull.json").write_text("{}")
    _delete_stores(tmp_path)
    assert not list(tmp_path.glob("*/store"))
    assert len(list(tmp_path.glob("*/node.log"))) == 3 and (tmp_path / "bench-pull.json").exists()


def test_check_judges_three_rounds_unless_told_otherwise(runner, monkeypatch, tmp_path):
    from harness.bench import cli as bench_cli
    from harness.bench.results import BenchReport

    seen: list[int] = []

    def fake_run(config, hooks):
        seen.append(config.rounds)
        return BenchReport(run={"run_dir": str(tmp_path)}, machine={"cpus": 2})

    monkeypatch.setattr(bench_cli, "run_bench", fake_run)
    runner.invoke(cli.app, ["bench", "pull", "--check"])
    runner.invoke(cli.app, ["bench", "pull", "--check", "--rounds", "1"])
    runner.invoke(cli.app, ["bench", "pull"])
    runner.invoke(cli.app, ["bench", "pull", "--rounds", "5"])
    assert seen == [3, 1, 1, 5]
    refused = runner.invoke(cli.app, ["bench", "pull", "--rounds", "10"])
    assert refused.exit_code == 2 and not seen[4:]
