"""`mqlab bench pull`: help, option checks and a missing matplotlib, without starting a cluster."""

from __future__ import annotations

import pytest
from rich.console import Console
from typer.testing import CliRunner

from harness import cli, terminal
from harness.bench import report as bench_report
from harness.bench.runner import BenchConfig

OPTIONS = ["--messages", "--body-bytes", "--queues", "--batches", "--consumers", "--quick", "--json", "--plot",
           "--time-scale", "--seconds", "--windows", "--window", "--tune-malloc", "--send-batch", "--send-window"]


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


def test_send_async_is_measured_against_the_batches_it_coalesces_into():
    from harness.bench.runner import _send_shape, _unary_limit_shape
    from nodes.common import constants as c

    config = BenchConfig(send_batch=50, send_window=1024)
    assert _send_shape(config, "async") == (1, 1024)  # one message per send_async call, 1024 in the window
    assert _unary_limit_shape(config, "async") == (c.SEND_ASYNC_BATCH_BYTES_MAX // 1024, c.SEND_ASYNC_BATCHES_IN_FLIGHT_MAX)
    big = BenchConfig(body_bytes=64 * 1024, send_batch=10, send_window=1024)
    assert _unary_limit_shape(big, "async") == (c.SEND_ASYNC_BATCH_BYTES_MAX // (64 * 1024), c.SEND_ASYNC_BATCHES_IN_FLIGHT_MAX)
    assert _unary_limit_shape(BenchConfig(send_window=16), "async") == (16, c.SEND_ASYNC_BATCHES_IN_FLIGHT_MAX)
    assert _unary_limit_shape(config, "batch") == (50, 1) and _unary_limit_shape(config, "sync") == (1, 1)
