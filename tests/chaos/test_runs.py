"""Whole chaos runs: every suite fails (exit 1, its check named) with its rule switched off, a
correct build passes, and no run leaves a process or a port behind — not after a pass, a failure,
an error mid-run, or Ctrl-C.

The suites run here with a short fault phase; `mqlab chaos run SUITE` runs them at full length.
Each run is judged by Spark in a process of its own: the correct build's in one started for it, as
`mqlab chaos run` does; the switched runs in one kept for all of them, as `mqlab chaos selftest` does.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from chaos import runner as chaos_runner
from chaos.cli import app
from chaos.runner import EXIT_INTERRUPTED, EXIT_INVALID, EXIT_UNKNOWN, EXIT_VALID, ChaosRun, RunOptions, plan
from chaos.selftest import case_phase_s, seed_for
from chaos.selftest_cases import NEEDED_FAULT, SELFTEST_CASES
from chaos.suites import SUITES
from nodes.common import constants as c

SHORT_FAULT_PHASE_S = 12.0
REPO = Path(__file__).resolve().parents[2]


def _leftovers(run_dir: Path) -> list[str]:
    """Processes started for this run dir that are still alive, and its node ports still taken."""
    out = []
    marker = str(run_dir)
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(proc.info.get("cmdline") or [])
        if marker in cmdline and proc.pid != os.getpid():
            out.append(f"pid {proc.pid}: {cmdline[:120]}")
    cluster = json.loads((run_dir / "cluster.json").read_text())
    for node in cluster.get("nodes", []):
        port = int(node["addr"].rsplit(":", 1)[1]) if node.get("addr") else None
        if port and _listening(port):
            out.append(f"port {port} of {node.get('id')} still listening")
    return out


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


# ---- suites as data (no processes) ----------------------------------------------------------

def test_every_suite_names_known_checks_and_a_known_switch_its_checks_cover():
    from chaos.checker.checks import CHECKS
    from chaos.real_clients import checks_added

    known = {"broker": c.BROKER_FAULT_SWITCHES, "consumer": c.CONSUMER_FAULT_SWITCHES,
             "producer": c.PRODUCER_FAULT_SWITCHES}
    assert set(SUITES) == {"lock-takeover", "offset-resync", "read-routing", "failover", "mixed", "durability",
                           "broker-loss", "gray", "disk-full"}
    for s in SUITES.values():
        assert set(s.checks) <= set(CHECKS), s.name
        b = s.breaking_switch
        assert b.switch in known[b.role], (s.name, b.switch)
        assert b.check in s.checks, s.name
        if b.role == "producer":
            continue  # the runner's in-harness producer, not a node of the spec
        spec = s.spec(0.05, s.switch_map())
        switched = [n.id for n in spec.nodes if b.switch in spec.effective_options(n).get("fault_switches", ())]
        assert switched, s.name
        if b.masters_only:
            assert all(spec.node(n).is_master for n in switched)
    for case in SELFTEST_CASES:  # every switch, the suite that must catch it, a check that suite runs
        s = SUITES[case.suite]
        checks = (*s.checks, *checks_added(case.client, s.orderly))  # a POP client's checks too
        assert case.switch in known[case.role] and case.check in checks, case
        if case.role == "producer":
            continue
        spec = s.spec(0.05, case.switch_map())
        assert any(case.switch in spec.effective_options(n).get("fault_switches", ()) for n in spec.nodes), case
    covered = {(case.suite, case.switch) for case in SELFTEST_CASES}
    assert {(s.name, s.breaking_switch.switch) for s in SUITES.values()} <= covered
    assert set(known["broker"]) | set(known["consumer"]) | set(known["producer"]) == {
        case.switch for case in SELFTEST_CASES}


def test_dry_run_prints_the_same_schedule_for_the_same_seed():
    cli = CliRunner()
    first = cli.invoke(app, ["run", "mixed", "--seed", "7", "--dry-run"])
    again = cli.invoke(app, ["run", "mixed", "--seed", "7", "--dry-run"])
    other = cli.invoke(app, ["run", "mixed", "--seed", "8", "--dry-run"])
    assert first.exit_code == 0, first.output
    assert "takeover_after_kill_ms" in first.output and "recover all" in first.output
    assert first.output == again.output
    assert first.output != other.output


def test_list_shows_every_suite_with_its_switch(monkeypatch):
    from rich.console import Console

    from chaos import cli

    monkeypatch.setattr(cli, "console", Console(width=250, highlight=False))  # no wrapping inside names
    result = CliRunner().invoke(app, ["list"])
    assert result.exit_code == 0
    for s in SUITES.values():
        assert s.name in result.output and s.breaking_switch.switch in result.output


def test_unknown_suite_exits_2_and_names_the_suites():
    result = CliRunner().invoke(app, ["run", "no-such-suite"])
    assert result.exit_code == EXIT_UNKNOWN
    assert "lock-takeover" in result.output


# ---- runs that never reach the checker (real processes, no Spark) ---------------------------

@pytest.mark.cluster
def test_an_error_mid_run_stops_everything_and_exits_2(tmp_path, monkeypatch):
    def topic_creation_fails(*_args, **_kwargs):
        raise RuntimeError("topic creation refused (test)")

    monkeypatch.setattr(chaos_runner, "create_topic", topic_creation_fails)
    run_dir = tmp_path / "run"
    outcome = ChaosRun(RunOptions(SUITES["failover"], seed=1, duration_s=5, out_dir=run_dir, check=False)).execute()
    assert outcome.exit_code == EXIT_UNKNOWN
    assert "topic creation refused" in (outcome.error or "")
    assert json.loads((run_dir / "run.json").read_text())["error"]
    assert _leftovers(run_dir) == []


@pytest.mark.cluster
def test_ctrl_c_undoes_the_faults_and_stops_every_process(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "chaos", "run", "lock-takeover", "--duration", "60", "--no-check",
         "--out", str(run_dir)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        nemesis = run_dir / "nemesis" / "nemesis.jsonl"
        deadline = time.monotonic() + 120
        while not (nemesis.exists() and nemesis.read_text().count("\n") >= 1):  # a fault is active
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "the run never started a fault"
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == EXIT_INTERRUPTED, out
    lines = [json.loads(line) for line in nemesis.read_text().splitlines()]
    assert any(line["op"] in ("restart", "resume", "heal") for line in lines), lines  # the fault was undone
    assert _leftovers(run_dir) == []


def _no_java(monkeypatch) -> None:
    """The checker process cannot start Java: no JAVA_HOME runtime and no `java` on PATH."""
    monkeypatch.setenv("JAVA_HOME", "/nowhere")
    monkeypatch.setenv("PATH", "/nonexistent")


def test_a_checker_that_cannot_start_gives_one_line_and_no_verdict(tmp_path, monkeypatch):
    from chaos.judge import judge

    run_dir = tmp_path / "run"
    (run_dir / "consumer-0").mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"suite": "failover", "seed": 1}))
    (run_dir / "consumer-0" / "journal.jsonl").write_text("")
    _no_java(monkeypatch)
    judged = judge(run_dir, names=["lost"])
    assert judged.output is None
    assert "java" in (judged.error or "").lower() and "\n" not in (judged.error or "")
    assert not (run_dir / "verdict.json").exists()
    assert (run_dir / "run.json").is_file() and (run_dir / "consumer-0" / "journal.jsonl").is_file()


def test_a_serving_checker_answers_bad_requests_and_keeps_serving(tmp_path):
    """Requests it cannot use are answered one line each, without starting Spark, and the next is read."""
    import io

    from chaos.checker.__main__ import serve

    gone = json.dumps({"run_dir": str(tmp_path / "gone")})
    requests = io.StringIO(f'not json\n{{"checks": ["lost"]}}\n\n{gone}\n')
    answers = io.StringIO()
    assert serve(requests, answers) == 0
    got = [json.loads(line) for line in answers.getvalue().splitlines()]
    assert [a["exit"] for a in got] == [EXIT_UNKNOWN] * 3  # the blank line is no request
    assert "unreadable request" in got[0]["error"] and "run_dir" in got[1]["error"]
    assert "not a directory" in got[2]["error"]


def test_a_verdict_written_by_the_checker_process_reads_back_whole():
    from chaos.checker.verdict import CheckResult, Verdict
    from chaos.judge import verdict_from_json

    written = Verdict.of([CheckResult("lost", False, "def", counts={"lost": 2}, reason="2 lost",
                                      measurements=[{"bound_ms": 10}]),
                          CheckResult("order", "unknown", "def", reason="no deliveries")],
                         suite="failover", seed=3, info={"time_scale": 0.05})
    back = verdict_from_json(json.loads(json.dumps(written.to_json())))
    assert (back.valid, back.exit_code, back.suite, back.seed) == (False, EXIT_INVALID, "failover", 3)
    assert back.checks["lost"].reason == "2 lost" and back.checks["lost"].counts == {"lost": 2}
    assert back.checks["lost"].measurements == [{"bound_ms": 10}] and back.checks["order"].valid == "unknown"
    assert back.info["time_scale"] == 0.05


@pytest.mark.slow
@pytest.mark.cluster
def test_a_run_whose_checker_cannot_start_exits_2_and_keeps_the_run_dir(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    _no_java(monkeypatch)
    outcome = ChaosRun(RunOptions(SUITES["failover"], seed=1, duration_s=2, out_dir=run_dir)).execute()
    assert outcome.exit_code == EXIT_UNKNOWN
    assert outcome.check is None
    assert f"mqlab chaos check {run_dir}" in (outcome.error or "")
    run = json.loads((run_dir / "run.json").read_text())
    assert run["exit_code"] == EXIT_UNKNOWN and "java" in run["error"].lower()
    assert run["counts"]["acked"] > 0
    assert (run_dir / "schedule.json").is_file() and (run_dir / "producer-0").is_dir()
    assert _leftovers(run_dir) == []


# ---- whole runs with the checker (Spark) ---------------------------------------------------

def _seed_drawing(suite_name: str, op: str, target: str) -> int:
    """The first seed whose short schedule draws `op` on `target` (schedules are deterministic)."""
    for seed in range(50):
        schedule, _ = plan(RunOptions(SUITES[suite_name], seed=seed, duration_s=SHORT_FAULT_PHASE_S))
        if any(e.op.op == op and getattr(e.op, "target", None) == target for e in schedule.entries):
            return seed
    raise AssertionError(f"no seed below 50 draws {op} {target} for {suite_name}")


# Every whole run here is `slow` (`./scripts/test --full`, or `mqlab chaos selftest` for the switched
# ones): each costs a cluster's life plus a Spark judgement, minutes of CPU on a two-core machine. The
# mechanisms behind them have their own cluster tests (tests/cluster/) and the checks their
# synthetic histories (tests/checker/), which the default run keeps.
@pytest.fixture(scope="module")
def kept_checker():
    """One checker process per test process for the switched runs, as `mqlab chaos selftest` keeps
    one for its cases (the runs spread over the xdist workers: one worker judging them all in turn
    was the longest path through the default test run)."""
    from chaos.judge import CheckerProcess

    with CheckerProcess() as checker:
        yield checker


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.parametrize("case", SELFTEST_CASES, ids=[case.name for case in SELFTEST_CASES])
def test_every_switch_makes_its_check_fail(case, tmp_path, kept_checker):
    """The selftest's table, run here: each switch on, a short run, exit 1 with the case's check failing.

    Only that check is judged (the correct-build run below and `mqlab chaos selftest` judge them all)."""
    s = SUITES[case.suite]
    run_dir = tmp_path / "run"
    seed = seed_for(case, 0.05, SHORT_FAULT_PHASE_S)
    outcome = ChaosRun(RunOptions(s, seed=seed, duration_s=case_phase_s(case, SHORT_FAULT_PHASE_S), out_dir=run_dir,
                                  report=False, fault_switches=case.switch_map(), mode=case.mode,
                                  checks=(case.check,), topology=s.topologies[0], checker=kept_checker)).execute()
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert set(verdict["checks"]) == {case.check}
    failed = sorted(k for k, v in verdict["checks"].items() if v["valid"] is False)
    assert outcome.exit_code == EXIT_INVALID, (outcome.error, failed)
    assert verdict["valid"] is False
    assert case.check in failed, failed
    assert _leftovers(run_dir) == []


@pytest.mark.slow
def test_a_kept_checker_judges_run_after_run_and_is_replaced_when_it_dies(tmp_path, kept_checker):
    from checker.builders import Run

    # the worker's kept checker (warm if a run came first); closed at the end, the next judgement
    # on this worker starts another
    checker = kept_checker
    clean = Run().sends_for(0, 3).consume(0, range(3), t0=200).write(tmp_path / "clean")
    lossy = Run().sends_for(0, 3).consume(0, range(2), t0=200).write(tmp_path / "lossy")
    first = checker.judge(clean, names=["lost"], report=False)
    assert first.output is not None, first.error
    assert first.output.verdict.valid is True
    started, pid = checker.started, checker.pid
    second = checker.judge(lossy, names=["lost"], report=False)
    assert second.output is not None, second.error
    assert second.output.verdict.valid is False and second.output.verdict.checks["lost"].counts["lost"] == 1
    missing = checker.judge(tmp_path / "no-such-run", names=["lost"])
    assert missing.output is None and "not a directory" in (missing.error or "")
    assert (checker.started, checker.pid) == (started, pid)  # one process judged all three
    # each run dir holds what the checker logged while judging it, not the other runs' lines
    assert "no-such-run" not in (clean / "checker.log").read_text()

    def kill_it() -> None:
        os.kill(pid, signal.SIGKILL)

    died = checker.judge(clean, names=["lost"], report=False, on_wait=kill_it)
    assert died.output is None and "without a verdict" in (died.error or ""), died
    assert not (clean / "verdict.json").exists()
    # the next run starts a new checker (a run dir that is not there needs no Spark to answer)
    again = checker.judge(tmp_path / "no-such-run", names=["lost"])
    assert "not a directory" in (again.error or "")
    assert checker.started == started + 1 and checker.pid not in (None, pid)
    replacement = checker.pid
    checker.close()
    assert checker.pid is None and not psutil.pid_exists(replacement)


@pytest.mark.cluster
@pytest.mark.slow
def test_a_correct_build_passes_and_writes_the_report(tmp_path, kept_checker):
    run_dir = tmp_path / "run"
    seed = _seed_drawing("lock-takeover", *NEEDED_FAULT["lock-takeover"])
    outcome = ChaosRun(RunOptions(SUITES["lock-takeover"], seed=seed, duration_s=SHORT_FAULT_PHASE_S, out_dir=run_dir,
                                  checker=kept_checker)).execute()
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert outcome.exit_code == EXIT_VALID, {k: (v["valid"], v.get("reason")) for k, v in verdict["checks"].items()
                                             if v["valid"] is not True}
    assert set(verdict["checks"]) == set(SUITES["lock-takeover"].checks)
    assert (run_dir / "report.html").stat().st_size > 10_000
    for name in ("run.json", "timing.json", "bounds.json", "schedule.json", "cluster.json"):
        assert (run_dir / name).is_file(), name
    counts = json.loads((run_dir / "run.json").read_text())["counts"]
    assert counts["acked"] > 0 and counts["acked_not_delivered"] == 0
    assert _leftovers(run_dir) == []


def test_in_harness_clients_log_into_the_run_dir_not_the_console(tmp_path, caplog):
    log = logging.getLogger("nodes.client.producer")
    with chaos_runner._client_log(tmp_path / chaos_runner.CLIENT_LOG_NAME):
        log.warning("send attempt 1 failed")
    log.warning("after the run")
    assert "send attempt 1 failed" in (tmp_path / chaos_runner.CLIENT_LOG_NAME).read_text()
    # the root logger's handlers (the console's, here pytest's) saw only what came after the run
    assert [r.getMessage() for r in caplog.records] == ["after the run"]
