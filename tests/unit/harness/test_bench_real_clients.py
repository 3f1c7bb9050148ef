"""`mqlab bench pull --clients cpp,ons,py5`: the option, the install checks, the rows' labels,
ratios and JSON, the workers' line protocol on bad input, the py5 worker's window and receive
loop; no cluster."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
import types
from concurrent.futures import Future

import pytest
from rich.console import Console
from typer.testing import CliRunner

from harness import cli, terminal
from harness.bench import py5_worker, real_client_install, real_clients
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
    # the help table wraps its cells at the console's width: read its words in order, box drawing aside
    text = " ".join(re.sub("[│╭╮╰╯─]", " ", result.output).split())
    assert "--clients" in text and "rocketmq 0.4.4" in text and "ali-ons 3.12.0" in text
    assert "rocketmq-python-client" in text and "5.1.2 in .venv-py5" in text


def test_an_unknown_client_exits_2_naming_the_known_ones(runner):
    result = runner.invoke(cli.app, ["bench", "pull", "--clients", "cpp,java"])
    assert result.exit_code == 2, result.output
    assert "unknown client 'java'" in result.output and "--clients takes cpp, ons, py5" in result.output


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


def test_a_missing_or_wrong_py5_venv_fails_the_run_naming_the_bootstrap(runner, monkeypatch, tmp_path):
    monkeypatch.setattr(real_client_install, "PY5_VENV", tmp_path / ".venv-py5")
    result = runner.invoke(cli.app, ["bench", "pull", "--clients", "py5"])
    assert result.exit_code == 2, result.output
    assert "does not exist" in result.output and "./scripts/bootstrap.sh" in result.output
    with pytest.raises(real_clients.BenchError, match=r"bootstrap\.sh"):
        real_clients.worker_argv({"client": "py5", "role": "send"})
    site = tmp_path / ".venv-py5" / "lib" / "python3.11" / "site-packages"
    (tmp_path / ".venv-py5" / "bin").mkdir(parents=True)
    (tmp_path / ".venv-py5" / "bin" / "python").touch()
    site.mkdir(parents=True)
    assert "rocketmq-python-client is not installed" in real_client_install.client_missing("py5")
    dist = site / "rocketmq_python_client-5.0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: rocketmq-python-client\nVersion: 5.0.0\n")
    missing = real_client_install.client_missing("py5")
    assert "5.0.0 is installed" in missing and "pins 5.1.2" in missing


def test_every_pinned_client_is_installed_here():
    """The bootstrap installs them all; a machine without one fails here (never skips)."""
    assert real_client_install.client_missing("cpp") is None
    assert real_client_install.client_missing("ons") is None
    assert real_client_install.client_missing("py5") is None


def test_each_client_runs_in_its_own_worker_process():
    cpp = real_clients.worker_argv({"client": "cpp", "role": "send"})
    assert cpp[1:3] == ["-m", "harness.bench.cpp_worker"] and json.loads(cpp[3])["role"] == "send"
    ons = real_clients.worker_argv({"client": "ons", "role": "push"})
    assert ons[1] == str(real_clients.ONS_WORKER)
    assert json.loads(ons[2])["modules"] == str(real_clients.ONS_MODULES)
    py5 = real_clients.worker_argv({"client": "py5", "role": "simple"})
    assert py5[0] == str(real_client_install.PY5_VENV / "bin" / "python") and py5[1] == str(real_clients.PY5_WORKER)


@pytest.mark.parametrize("client", ["cpp", "ons", "py5"])
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
              row("cpp-pull-loop", batch=32).label, row("py5-simple", batch=32).label, row("py5-send", "sync").label,
              row("py5-send", "async").label]
    assert labels == ["cpp send sync b1", "cpp send batch b32", "cpp send oneway b1", "ons send sync b1",
                      "cpp push master b32", "ons push master b32", "cpp pull loop master b32",
                      "py5 simple master b32", "py5 send sync b1", "py5 send async b1"]
    assert client_kind("py5-simple") == ("py5", "simple")


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
    # the 5.x SimpleConsumer (receive 32, ack each) against the references of mqlab's pull rows of 32
    simple = report.ratios(row("py5-simple", batch=32, msgs=25_000))
    assert simple["plain-stream"] == pytest.approx(0.25) and set(simple) == {
        "plain-stream", "redis-ack", "redis-noack", "tcp", "mmap-scan"}
    assert report.ratios(row("py5-send", "async", msgs=2_000))["plain-unary"] == pytest.approx(0.5)


def test_real_clients_rows_have_no_targets_and_leave_mqlabs_targets_alone():
    mqlab_only = BenchReport(results=[row("send", "batch", 32), row("push", batch=32)])
    both = BenchReport(results=[row("cpp-push", batch=32, msgs=99_999), row("cpp-send", "batch", 32),
                                row("send", "batch", 32), row("push", batch=32), row("ons-send", "sync"),
                                row("py5-simple", batch=32), row("py5-send", "async")])
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


# ---- the py5 worker's own logic (it runs under .venv-py5; its pure parts import here too) ----

def _done(exc: BaseException | None = None) -> Future:
    future: Future = Future()
    if exc is None:
        future.set_result("receipt")
    else:
        future.set_exception(exc)
    return future


def test_the_async_window_holds_at_most_its_size_in_flight_and_counts_answers_and_failures():
    windows = py5_worker.Windows(time.monotonic(), 60.0, 1)
    window = py5_worker.Window(2, windows)
    window.acquire()
    window.acquire()
    third = threading.Thread(target=window.acquire, daemon=True)
    third.start()
    third.join(0.2)
    assert third.is_alive(), "a third send waits while two are unanswered"
    window.done(_done())
    third.join(5)
    assert not third.is_alive()
    window.done(_done(TimeoutError("deadline")))
    window.done(_done())
    window.drain()  # every send answered: returns at once
    assert windows.messages == [2] and window.errors == 1 and window.samples == ["TimeoutError: deadline"]


def test_the_simple_consumer_loop_acks_each_message_it_reads_and_counts_what_fails():
    windows = py5_worker.Windows(time.monotonic(), 60.0, 1)
    message = types.SimpleNamespace(body=b"x" * 10, topic="BenchPull", message_id="id", properties={},
                                    delivery_attempt=1)
    batches = [[message] * 3, [message] * 2]
    acked: list[object] = []

    def receive():
        if batches:
            return batches.pop(0)
        windows.end = 0.0  # the windows are over
        return []

    def ack(msg):
        acked.append(msg)
        if len(acked) == 4:
            raise RuntimeError("INVALID_RECEIPT_HANDLE")

    received, errors, samples = py5_worker.consume(receive, ack, windows, expected=100)
    assert (received, errors, len(acked), windows.messages) == (5, 1, 5, [4])
    assert samples == ["ack: RuntimeError: INVALID_RECEIPT_HANDLE"]


def test_a_group_that_ran_out_of_preloaded_messages_fails_the_row_saying_what_to_change():
    windows = py5_worker.Windows(time.monotonic(), 60.0, 1)
    with pytest.raises(RuntimeError, match="--messages"):
        py5_worker.consume(lambda: [], lambda msg: None, windows, expected=0)
