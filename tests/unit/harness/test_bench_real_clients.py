"""`mqlab bench pull --clients cpp,ons`: the option, the install checks, the rows' labels, ratios
and JSON, and the workers' line protocol on bad input; no cluster."""

from __future__ import annotations

import json
import subprocess
import types

import pytest
from rich.console import Console
from typer.testing import CliRunner

from harness import cli, terminal
from harness.bench import real_client_install, real_clients
from harness.bench.results import (
    BenchReport,
    CaseResult,
    Measured,
    Reference,
    client_kind,
    evaluate_targets,
    report_json,
)

WORKER_EXIT_BUDGET_S = 60.0  # a loaded machine imports the client libraries slowly


@pytest.fixture
def runner(monkeypatch):
    monkeypatch.setattr(terminal, "console", Console(width=250, highlight=False))
    monkeypatch.setattr(terminal, "err_console", Console(width=250, highlight=False, stderr=True))
    return CliRunner()


def row(client: str, mode: str = "", batch: int = 1, msgs: int = 1_000) -> CaseResult:
    return CaseResult(client, "master", batch, 1024, 1, Measured(msgs, msgs * 1024, 1.0), mode=mode, window=1,
                      cpu_us_per_msg={"clients": 20.0, "master": 30.0})


# ---- the option and the install checks ------------------------------------------------------

def test_help_lists_clients_with_what_each_is(runner):
    result = runner.invoke(cli.app, ["bench", "pull", "--help"], terminal_width=250)
    assert result.exit_code == 0
    assert "--clients" in result.output and "rocketmq 0.4.4" in result.output and "ali-ons 3.12.0" in result.output


def test_an_unknown_client_exits_2_naming_the_known_ones(runner):
    result = runner.invoke(cli.app, ["bench", "pull", "--clients", "cpp,java"])
    assert result.exit_code == 2, result.output
    assert "unknown client 'java'" in result.output and "--clients takes cpp, ons" in result.output


def test_a_missing_cpp_client_fails_the_run_with_the_install_hint(runner, monkeypatch):
    real_find_spec = real_client_install.importlib.util.find_spec
    monkeypatch.setattr(real_client_install.importlib.util, "find_spec",
                        lambda name, *a: None if name == "rocketmq" else real_find_spec(name, *a))
    result = runner.invoke(cli.app, ["bench", "pull", "--clients", "cpp"])
    assert result.exit_code == 2, result.output
    assert "./scripts/bootstrap.sh" in result.output and "pip install rocketmq==0.4.4" in result.output


def test_a_wrong_cpp_version_is_refused(monkeypatch):
    monkeypatch.setattr(real_client_install.importlib.metadata, "version", lambda name: "2.0.0")
    missing = real_client_install.client_missing("cpp")
    assert missing is not None and "rocketmq 2.0.0 is installed" in missing and "pins 0.4.4" in missing


def test_missing_node_or_ali_ons_fails_the_run_with_the_install_hint(runner, monkeypatch, tmp_path):
    real_which = real_client_install.shutil.which
    monkeypatch.setattr(real_client_install.shutil, "which", lambda name, *a, **k: None if name == "node"
                        else real_which(name, *a, **k))
    result = runner.invoke(cli.app, ["bench", "pull", "--clients", "ons"])
    assert result.exit_code == 2, result.output
    assert "needs node on PATH" in result.output and "./scripts/bootstrap.sh" in result.output
    monkeypatch.setattr(real_client_install.shutil, "which", real_which)
    monkeypatch.setattr(real_client_install, "ONS_MODULES", tmp_path / "js" / "node_modules")
    missing = real_client_install.client_missing("ons")
    assert missing is not None and "ali-ons 3.12.0" in missing and "npm ci" in missing


def test_both_pinned_clients_are_installed_here():
    """The bootstrap installs both; a machine without them fails here (never skips)."""
    assert real_client_install.client_missing("cpp") is None
    assert real_client_install.client_missing("ons") is None


def test_each_client_runs_in_its_own_worker_process():
    cpp = real_clients.worker_argv({"client": "cpp", "role": "send"})
    assert cpp[1:3] == ["-m", "harness.bench.cpp_worker"] and json.loads(cpp[3])["role"] == "send"
    ons = real_clients.worker_argv({"client": "ons", "role": "push"})
    assert ons[1] == str(real_clients.ONS_WORKER)
    assert json.loads(ons[2])["modules"] == str(real_clients.ONS_MODULES)


@pytest.mark.parametrize("client", ["cpp", "ons"])
def test_a_worker_given_an_unknown_role_says_error_and_exits_1(client, tmp_path):
    job = {"client": client, "role": "dance", "home": str(tmp_path / "home")}
    done = subprocess.run(real_clients.worker_argv(job), capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=WORKER_EXIT_BUDGET_S)
    assert done.returncode == 1, done
    assert done.stdout.startswith("ERROR ") and "dance" in done.stdout


# ---- the rows -------------------------------------------------------------------------------

def test_a_real_clients_row_is_told_apart_from_mqlabs_own():
    assert client_kind("cpp-send") == ("cpp", "send")
    assert client_kind("ons-push") == ("ons", "push")
    assert client_kind("cpp-pull-loop") == ("cpp", "pull-loop")
    assert client_kind("pull-loop") == ("mqlab", "pull-loop")
    assert client_kind("send") == ("mqlab", "send")
    labels = [row("cpp-send", "sync").label, row("cpp-send", "batch", 32).label, row("cpp-send", "oneway").label,
              row("ons-send", "sync").label, row("cpp-push", batch=32).label, row("ons-push", batch=32).label,
              row("cpp-pull-loop", batch=32).label]
    assert labels == ["cpp send sync b1", "cpp send batch b32", "cpp send oneway b1", "ons send sync b1",
                      "cpp push master b32", "ons push master b32", "cpp pull loop master b32"]


def test_a_real_clients_row_is_a_ratio_of_the_references_of_mqlabs_row_of_its_kind():
    report = BenchReport()
    for ref in (Reference("plain-unary", 1, 1, Measured(4_000, 0, 1.0)),
                Reference("plain-unary", 32, 1, Measured(40_000, 0, 1.0)),
                Reference("plain-stream", 32, 8, Measured(100_000, 0, 1.0)),
                Reference("tcp", 0, 1, Measured(1_000_000, 0, 1.0))):
        report.add_reference(ref)
    assert report.ratios(row("cpp-send", "sync"))["plain-unary"] == pytest.approx(0.25)
    assert report.ratios(row("cpp-send", "batch", 32, msgs=20_000))["plain-unary"] == pytest.approx(0.5)
    push = report.ratios(row("ons-push", batch=32, msgs=50_000))
    assert push["plain-stream"] == pytest.approx(0.5) and push["tcp"] == pytest.approx(0.05)
    assert push["redis-ack"] is None  # not measured in this run


def test_real_clients_rows_have_no_targets_and_leave_mqlabs_targets_alone():
    mqlab_only = BenchReport(results=[row("send", "batch", 32), row("push", batch=32)])
    both = BenchReport(results=[row("cpp-push", batch=32, msgs=99_999), row("cpp-send", "batch", 32),
                                row("send", "batch", 32), row("push", batch=32), row("ons-send", "sync")])
    assert [v.name for v in evaluate_targets(both)] == [v.name for v in evaluate_targets(mqlab_only)]
    assert both.find("push", "master") is both.results[3]


def test_the_json_names_each_rows_library():
    report = BenchReport(results=[row("send", "sync"), row("cpp-send", "oneway"), row("ons-push", batch=32)])
    results = report_json(report)["results"]
    assert [(r["client"], r["library"], r["mode"]) for r in results] == [
        ("send", "mqlab", "sync"), ("cpp-send", "cpp", "oneway"), ("ons-push", "ons", "push")]
    assert results[1]["cpu_us_per_msg"] == {"clients": 20.0, "master": 30.0}


def test_oneway_sends_the_master_did_not_store_are_a_problem_of_the_run(monkeypatch):
    run = types.SimpleNamespace(report=BenchReport())
    stored = iter([1_000, 1_000])
    monkeypatch.setattr(real_clients, "_stored", lambda run, topic: next(stored))
    monkeypatch.setattr(real_clients, "ONEWAY_STORED_BUDGET_S", 0.0)
    real_clients._check_oneway_stored(run, "cpp", "BenchSend", 0, 1_200)
    assert run.report.problems == ["cpp send oneway: the master stored 1000 of 1200 oneway sends"]
    run.report.problems.clear()
    monkeypatch.setattr(real_clients, "_stored", lambda run, topic: 1_300)
    real_clients._check_oneway_stored(run, "cpp", "BenchSend", 100, 1_200)
    assert run.report.problems == []
