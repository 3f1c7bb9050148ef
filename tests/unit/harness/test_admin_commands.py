"""`mqlab admin` without a cluster: the command tree, and the errors when it cannot reach one."""

from __future__ import annotations

import socket

import pytest
from rich.console import Console
from typer.testing import CliRunner

from harness import cli, terminal
from harness.cluster_admin import real_client_margins
from nodes.common import constants as c


@pytest.fixture
def runner(monkeypatch):
    monkeypatch.setattr(terminal, "console", Console(width=250, highlight=False))
    monkeypatch.setattr(terminal, "err_console", Console(width=250, highlight=False, stderr=True))
    return CliRunner()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_admin_lists_its_commands(runner):
    top = runner.invoke(cli.app, ["admin", "--help"])
    assert top.exit_code == 0
    for name in ("cluster", "topic", "group", "consumer"):
        assert name in top.output
    topic = runner.invoke(cli.app, ["admin", "topic", "--help"])
    for name in ("create", "delete", "list", "route", "status"):
        assert name in topic.output
    consumer = runner.invoke(cli.app, ["admin", "consumer", "--help"])
    assert "progress" in consumer.output and "connections" in consumer.output


def test_a_name_server_that_does_not_answer_says_what_to_check(runner):
    addr = f"127.0.0.1:{_closed_port()}"
    result = runner.invoke(cli.app, ["admin", "topic", "list", "--namesrv", addr])
    assert result.exit_code == 2
    assert f"name server {addr} did not answer GetTopicList" in result.output and "mqlab status" in result.output


def test_either_a_run_dir_or_a_name_server(runner, tmp_path):
    both = runner.invoke(cli.app, ["admin", "cluster", "--namesrv", "127.0.0.1:1", "--run-dir", str(tmp_path)])
    assert both.exit_code == 2 and "either --namesrv or --run-dir" in both.output
    empty = runner.invoke(cli.app, ["admin", "cluster", "--run-dir", str(tmp_path)])
    assert empty.exit_code == 2 and "no cluster.json in" in empty.output


def test_a_broker_timer_shorter_than_a_rocketmq_clients_period_is_named():
    assert real_client_margins(c.BROKER_LOCK_LEASE_MS, c.CONSUMER_CHANNEL_EXPIRY_MS) == []
    lock, expiry = real_client_margins(3_000, 6_000)
    assert "lease orderly locks for 3 s" in lock and "renews them every 20 s" in lock
    assert "broker_lock_lease_ms = 60000" in lock
    assert "silent for 6 s" in expiry and "heartbeats every 30 s" in expiry
    assert real_client_margins(c.BROKER_LOCK_LEASE_MS, 6_000) == [expiry]
