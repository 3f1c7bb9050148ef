"""The mqlab CLI: help for every command, one-line errors, status/down on stand-ins, client commands on fakes."""

from __future__ import annotations

import contextlib
import errno
import inspect
import json
import os
import signal

import pytest
from rich.console import Console
from typer.testing import CliRunner

import nodes.client
from harness import cli, client_commands, cluster_commands, terminal
from harness.cluster import LocalCluster
from harness.pids import pid_alive

COMMANDS = ["up", "status", "down", "produce", "consume", "demo"]


@pytest.fixture
def runner(monkeypatch):
    # Wide consoles, so table cells are never wrapped whatever the terminal (or xdist) says.
    monkeypatch.setattr(terminal, "console", Console(width=250, highlight=False))
    monkeypatch.setattr(terminal, "err_console", Console(width=250, highlight=False, stderr=True))
    return CliRunner()


@pytest.fixture
def fake_clients(fake_mq, monkeypatch):
    """The client commands build in-memory clients bound to `fake_mq`'s broker. Each construction
    is bound to the real class's signature first (an option the client lacks fails) and recorded
    in `fake_mq.built` as (class name, args, kwargs)."""
    fake_mq.built = []

    def checked(name):
        fake, signature = getattr(fake_mq, name), inspect.signature(getattr(nodes.client, name))

        def build(*args, **kwargs):
            signature.bind(*args, **kwargs)
            fake_mq.built.append((name, args, kwargs))
            return fake(*args, **kwargs)
        return build

    for name in ("Producer", "PullConsumer", "PushConsumer"):
        monkeypatch.setattr(client_commands, name, checked(name))
    return fake_mq


def test_fake_clients_refuse_an_option_the_real_client_lacks(fake_clients):
    with pytest.raises(TypeError):
        client_commands.Producer("127.0.0.1:1", group="g", no_such_option=1)


def test_top_level_help_lists_every_command(runner):
    result = runner.invoke(cli.app, ["--help"])
    assert result.exit_code == 0
    for command in COMMANDS:
        assert command in result.output


@pytest.mark.parametrize(("command", "options"), [
    ("up", ["--spec", "--run-dir", "--time-scale", "--detach", "--topology"]),
    ("status", ["--run-dir"]),
    ("down", ["--run-dir"]),
    ("produce", ["--namesrv", "--run-dir", "--topic", "--count", "--body-bytes", "--tags", "--batch"]),
    ("consume", ["--namesrv", "--run-dir", "--topic", "--group", "--count", "--from-offset", "--batch", "--timeout"]),
    ("demo", ["--messages", "--body-bytes", "--time-scale", "--run-dir"]),
])
def test_every_command_has_help(runner, command, options):
    result = runner.invoke(cli.app, [command, "--help"])
    assert result.exit_code == 0, result.output
    for option in options:
        assert option in result.output


def test_status_without_a_cluster_says_how_to_start_one(runner, tmp_path):
    result = runner.invoke(cli.app, ["status", "--run-dir", str(tmp_path / "nothing")])
    assert result.exit_code == 2
    assert "no cluster.json in" in result.output and "mqlab up --detach" in result.output
    assert "Traceback" not in result.output


def test_down_and_produce_without_a_cluster_exit_2(runner, tmp_path):
    for args in (["down", "--run-dir", str(tmp_path)], ["produce", "--topic", "T", "--run-dir", str(tmp_path)]):
        result = runner.invoke(cli.app, args)
        assert result.exit_code == 2 and "no cluster.json" in result.output


def test_namesrv_and_run_dir_together_are_refused(runner, tmp_path):
    result = runner.invoke(cli.app, ["produce", "--topic", "T", "--namesrv", "127.0.0.1:1", "--run-dir", str(tmp_path)])
    assert result.exit_code == 2 and "either --namesrv or --run-dir" in result.output


def test_up_with_a_bad_spec_prints_one_line(runner, tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text("[broker-z-0]\nx = 1\n")
    result = runner.invoke(cli.app, ["up", "--spec", str(spec), "--run-dir", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert "table [broker-z-0] names no node" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_up_refuses_an_unknown_topology_and_a_topology_with_a_spec(runner, tmp_path):
    result = runner.invoke(cli.app, ["up", "--topology", "3x3", "--run-dir", str(tmp_path / "run")])
    assert result.exit_code == 2 and "topologies are single, 2x2" in result.output
    spec = tmp_path / "spec.toml"
    spec.write_text("")
    result = runner.invoke(cli.app, ["up", "--spec", str(spec), "--topology", "2x2", "--run-dir", str(tmp_path / "r")])
    assert result.exit_code == 2 and "pass one of them" in result.output


def test_unexpected_errors_never_show_a_traceback(runner, tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise ZeroDivisionError("oops")

    monkeypatch.setattr(cluster_commands, "read_cluster_json", boom)
    result = runner.invoke(cli.app, ["status", "--run-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "internal error: ZeroDivisionError: oops" in result.output and "MQLAB_DEBUG=1" in result.output


@pytest.fixture
def detached_standins(tmp_path, standin_cmd):
    """A stand-in cluster left running as `mqlab up --detach` leaves one; killed at teardown."""
    cluster = LocalCluster(run_dir=tmp_path / "run", detach=True, time_scale=0.05,
                           command=lambda n, cfg: standin_cmd("grpc", config=cfg))
    pids = [n.pid for n in cluster.nodes()]
    cluster.detach()
    yield cluster
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def test_status_then_down_on_a_detached_cluster(runner, detached_standins):
    run_dir = str(detached_standins.run_dir)
    status = runner.invoke(cli.app, ["status", "--run-dir", run_dir])
    assert status.exit_code == 0, status.output
    assert "broker-a-0 stand-in RUNNING" in status.output and "namesrv-0" in status.output
    assert "time scale 0.05" in status.output
    assert "remoting" in status.output
    for node in detached_standins.nodes():  # the remoting column
        assert node.remoting_addr and node.remoting_addr in status.output

    pids = [n["pid"] for n in json.loads((detached_standins.run_dir / "cluster.json").read_text())["nodes"]]
    down = runner.invoke(cli.app, ["down", "--run-dir", run_dir])
    assert down.exit_code == 0, down.output
    assert down.output.count("stopped") == 3
    assert not any(pid_alive(p) for p in pids)

    after = runner.invoke(cli.app, ["status", "--run-dir", run_dir])
    assert after.exit_code == 1 and "3 of 3 node(s) down" in after.output
    again = runner.invoke(cli.app, ["down", "--run-dir", run_dir])
    assert again.exit_code == 0 and again.output.count("not running") == 3


def test_down_on_a_full_disk_stops_every_node_and_says_the_record_was_not_rewritten(runner, detached_standins,
                                                                                       monkeypatch):
    def no_space(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    run_dir = str(detached_standins.run_dir)
    pids = [n["pid"] for n in json.loads((detached_standins.run_dir / "cluster.json").read_text())["nodes"]]
    monkeypatch.setattr(cluster_commands, "write_json_atomic", no_space)
    down = runner.invoke(cli.app, ["down", "--run-dir", run_dir])
    assert down.exit_code == 2, down.output
    assert down.output.count("stopped") >= 3 and "still names their old pids" in down.output
    assert not any(pid_alive(p) for p in pids)
    monkeypatch.undo()
    after = runner.invoke(cli.app, ["status", "--run-dir", run_dir])
    assert after.exit_code == 1 and "3 of 3 node(s) down" in after.output


def test_client_commands_with_a_run_dir_use_the_clusters_timing(runner, detached_standins, fake_clients):
    run_dir = str(detached_standins.run_dir)
    produced = runner.invoke(cli.app, ["produce", "--run-dir", run_dir, "--topic", "T", "--count", "3"])
    assert produced.exit_code == 0, produced.output
    consumed = runner.invoke(cli.app, ["consume", "--run-dir", run_dir, "--topic", "T", "--timeout", "0.3",
                                       "--batch", "7", "--threads", "3"])
    assert consumed.exit_code == 0, consumed.output
    (_, p_args, p_kwargs), (_, c_args, c_kwargs) = fake_clients.built
    assert p_args == (detached_standins.namesrv_addr,) and c_args == (detached_standins.namesrv_addr, "mqlab_cli_consumer")
    assert p_kwargs["timing"] == c_kwargs["timing"] == detached_standins.timing  # scaled by 0.05
    assert (c_kwargs["pull_batch_size"], c_kwargs["consume_thread_min"]) == (7, 3)


def test_up_refuses_a_run_dir_with_a_live_cluster(runner, detached_standins):
    result = runner.invoke(cli.app, ["up", "--run-dir", str(detached_standins.run_dir)])
    assert result.exit_code == 2 and "already running" in result.output and "mqlab down" in result.output


def test_status_marks_a_node_that_stopped_answering(runner, detached_standins):
    broker = detached_standins.node("broker-a-0")
    os.kill(broker.pid, signal.SIGSTOP)
    try:
        result = runner.invoke(cli.app, ["status", "--run-dir", str(detached_standins.run_dir)])
    finally:
        os.kill(broker.pid, signal.SIGCONT)
    assert result.exit_code == 1 and "UNREACHABLE" in result.output


def test_produce_and_consume_print_summaries(runner, fake_clients):
    produced = runner.invoke(cli.app, ["produce", "--namesrv", "127.0.0.1:1", "--topic", "T", "--count", "40",
                                       "--body-bytes", "100", "--tags", "a"])
    assert produced.exit_code == 0, produced.output
    assert "SEND_OK" in produced.output and "msgs/s" in produced.output and "MB/s" in produced.output

    consumed = runner.invoke(cli.app, ["consume", "--namesrv", "127.0.0.1:1", "--topic", "T", "--count", "30"])
    assert consumed.exit_code == 0, consumed.output
    assert "received" in consumed.output and "30" in consumed.output and "queues" in consumed.output
    rest = runner.invoke(cli.app, ["consume", "--namesrv", "127.0.0.1:1", "--topic", "T", "--timeout", "0.3"])
    assert rest.exit_code == 0 and "idle 0.3 s" in rest.output
    committed = sum(fake_clients.broker.committed.values())
    assert committed == 40


def test_produce_exits_1_when_sends_fail(runner, fake_clients):
    from nodes.common.errors import RequestTimeoutError

    fake_clients.broker.fail = {b"p": RequestTimeoutError("send: no answer")}
    result = runner.invoke(cli.app, ["produce", "--namesrv", "127.0.0.1:1", "--topic", "T", "--count", "5"])
    assert result.exit_code == 1 and "RequestTimeoutError" in result.output


def test_consume_of_an_unknown_topic_says_what_to_do(runner, fake_clients):
    result = runner.invoke(cli.app, ["consume", "--namesrv", "127.0.0.1:1", "--topic", "Nope"])
    assert result.exit_code == 2 and "mqlab produce --topic Nope" in result.output


@pytest.fixture
def demo_on_standins(tmp_path, standin_cmd, fake_clients, monkeypatch):
    """`mqlab demo` on a stand-in cluster with in-memory clients."""
    def cluster(**kwargs):
        kwargs["run_dir"] = tmp_path / "run"
        c = LocalCluster(command=lambda n, cfg: standin_cmd("grpc", config=cfg), **kwargs)
        c.wait_until_routable = lambda topic=None, budget_ms=None: None  # the stand-in has no routes
        return c

    monkeypatch.setattr(client_commands, "LocalCluster", cluster)
    return fake_clients


def test_demo_exits_0_when_every_acknowledged_message_returns(runner, demo_on_standins):
    result = runner.invoke(cli.app, ["demo", "--messages", "300", "--body-bytes", "64"])
    assert result.exit_code == 0, result.output
    for row in ("sent", "acked", "received", "lost", "duplicates", "send msgs/s", "pull msgs/s", "wall time"):
        assert row in result.output
    assert "every acknowledged message came back exactly as sent" in result.output


def test_demo_exits_1_when_messages_are_lost(runner, demo_on_standins):
    demo_on_standins.broker.drop_every = 50
    result = runner.invoke(cli.app, ["demo", "--messages", "300", "--body-bytes", "64"])
    assert result.exit_code == 1, result.output
    assert "lost seqs" in result.output
