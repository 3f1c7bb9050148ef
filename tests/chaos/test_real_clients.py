"""`mqlab chaos run SUITE --client cpp|ons`: real RocketMQ clients as the consumers of a chaos run.

The plan and the CLI's refusals are fast; a real client behind the link proxies (consuming, cut
off by a partition, back after the heal) and a whole lock-takeover run with the C++ client are
slow: real clients run at real scale.
"""

from __future__ import annotations

import importlib.util
import io
import json
import re
import time

import pytest
from rich.console import Console
from typer.testing import CliRunner

from chaos import cli
from chaos.bounds import REAL_CLIENT_TIMERS_MS, real_client_fault_phase_ms
from chaos.checker.config import CheckerConfig
from chaos.checker.pipeline import CheckOutput
from chaos.checker.verdict import CheckResult, Verdict
from chaos.cli import app
from chaos.real_clients import CLIENTS, RealClientError, real_client, wire
from chaos.runner import EXIT_UNKNOWN, EXIT_VALID, ChaosRun, RunOptions, plan
from chaos.suites import GROUP, SUITES, TOPIC
from harness import LocalCluster
from harness.spec import ClusterSpec
from tests.support import journals
from tests.support.real_client_runs import start_with_workload

# the C++ client polls routes every 30 s and rebalances every 10 s: its first delivery may take
# a route poll, a rebalance and a lock round after the topic exists
FIRST_DELIVERY_BUDGET_S = 90.0
PARTITION_QUIET_S = 5.0  # a cut consumer may still consume what it had cached; after this, nothing new
REAL_RUN_TIMEOUT_S = 1500  # a real-scale run (at most 10 min) plus the checker


def _wide_console(monkeypatch):
    monkeypatch.setattr(cli, "console", Console(width=250, highlight=False))
    monkeypatch.setattr(cli, "err_console", Console(width=250, highlight=False, stderr=True))


def test_a_real_client_run_is_planned_at_real_scale_with_the_clients_timers():
    schedule, bounds = plan(RunOptions(SUITES["lock-takeover"], seed=1, time_scale=1.0, client="cpp"))
    assert bounds.W_p == REAL_CLIENT_TIMERS_MS["cpp"]["pull_delay_when_exception_ms"]
    assert (bounds.L_c, bounds.R_l, bounds.L_b, bounds.X_c) == (30_000, 20_000, 60_000, 120_000)
    assert schedule.fault_phase_ms == real_client_fault_phase_ms(bounds) == 2 * bounds.L_b
    assert len(schedule.entries) >= 2  # faults spaced a rebalance apart, not a route poll


def test_dry_run_says_how_long_a_real_client_run_takes(monkeypatch):
    _wide_console(monkeypatch)
    result = CliRunner().invoke(app, ["run", "lock-takeover", "--client", "cpp", "--seed", "1", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "every timer runs at real scale: this run takes about" in result.output
    assert "derived bounds at time scale 1" in result.output


@pytest.mark.parametrize(("argv", "message"), [
    (["run", "lock-takeover", "--client", "ons"], "has no orderly consumer"),
    (["run", "offset-resync", "--client", "cpp", "--time-scale", "0.05"], "cannot be scaled"),
    (["run", "offset-resync", "--client", "java"], "clients are mqlab, cpp, ons"),
])
def test_real_client_runs_that_cannot_work_exit_2_saying_why(monkeypatch, argv, message):
    _wide_console(monkeypatch)
    result = CliRunner().invoke(app, [*argv, "--dry-run"])
    assert result.exit_code == EXIT_UNKNOWN
    assert message in result.output


def test_a_missing_cpp_client_names_the_install_command(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "rocketmq" else real_find_spec(name, *a))
    with pytest.raises(RealClientError, match=r"not installed.*bootstrap\.sh.*rocketmq==0\.4\.4"):
        CLIENTS["cpp"].check_installed()


def test_the_pinned_real_clients_are_installed():
    assert real_client("mqlab") is None
    for client in CLIENTS.values():
        client.check_installed()  # raises with the install command when one is missing


def test_a_real_client_run_sets_aside_the_checks_its_journal_cannot_feed_and_says_why(tmp_path, monkeypatch):
    lock = SUITES["lock-takeover"]
    assert "rebalance" in lock.checks
    assert RunOptions(lock).checks_set_aside == {}
    assert RunOptions(lock).check_names == lock.checks
    for client in ("cpp", "cpp+mqlab"):  # a mixed group too: the replay would miss the real members
        options = RunOptions(lock, time_scale=1.0, client=client)
        assert set(options.checks_set_aside) == {"rebalance"}
        assert "lock grants" in options.checks_set_aside["rebalance"]
        assert options.check_names == tuple(n for n in lock.checks if n != "rebalance")
    # the checker reads what the run set aside from run.json; the verdict table shows it with its reason
    (tmp_path / "run.json").write_text(json.dumps({"suite": "lock-takeover", "checks": ["lost", "order"],
                                                   "checks_set_aside": {"rebalance": "no route events"}}))
    cfg = CheckerConfig.from_run_dir(tmp_path)
    assert cfg.checks == ("lost", "order") and cfg.checks_set_aside == {"rebalance": "no route events"}
    out = io.StringIO()
    monkeypatch.setattr(cli, "console", Console(file=out, width=250, highlight=False))
    verdict = Verdict.of([CheckResult("lost", True, "def")], info={"checks_set_aside": cfg.checks_set_aside})
    cli._print_verdict(CheckOutput(verdict, tmp_path / "verdict.json", None, {}), "lock-takeover seed 1")
    assert re.search(r"rebalance\s.*set aside\s.*no route events", out.getvalue())
    assert "overall: valid" in out.getvalue()


def test_a_mixed_group_keeps_every_other_consumer_mqlabs(tmp_path):
    assert real_client("cpp+mqlab") is CLIENTS["cpp"]
    cluster = LocalCluster(SUITES["lock-takeover"].spec(1.0), run_dir=tmp_path / "run", links=True, start=False)
    try:  # wiring starts nothing: it sets commands and points links at remoting listeners
        commands = wire(cluster, CLIENTS["cpp"], group=GROUP, topic=TOPIC, orderly=True, consumer_options={},
                        mixed=True)
        assert sorted(commands) == ["consumer-0", "consumer-2"]
        recorded = json.loads((cluster.run_dir / "real-clients.json").read_text())
        assert recorded["mixed"] is True and sorted(recorded["commands"]) == ["consumer-0", "consumer-2"]
        assert "--orderly" in commands["consumer-0"]
    finally:
        cluster.close()


# ---- real processes ----------------------------------------------------------------------------



@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.timeout(600)
def test_a_cpp_consumer_reaches_the_brokers_only_through_its_links(tmp_path):
    spec = ClusterSpec.default(time_scale=1.0).with_consumers(1, group=GROUP, subscriptions={TOPIC: "*"})
    cluster = LocalCluster(spec, run_dir=tmp_path / "run", links=True, start=False)
    producer = None
    try:
        commands = wire(cluster, CLIENTS["cpp"], group=GROUP, topic=TOPIC, orderly=True, consumer_options={})
        namesrv_link = f"127.0.0.1:{cluster.links.proxy.port_of('consumer-0', 'namesrv-0')}"
        assert commands["consumer-0"][commands["consumer-0"].index("--namesrv") + 1] == namesrv_link
        producer = start_with_workload(cluster, "lock-takeover", "cpp")
        run_dir = cluster.run_dir
        journals.wait_until("delivery by the C++ consumer", FIRST_DELIVERY_BUDGET_S, lambda: len(journals.deliveries(run_dir)) > 0)
        stats = cluster.link_stats()
        assert stats["consumer-0->broker-a-0"]["backward_bytes"] > 0  # its pulls crossed its own link
        ready = cluster.node("consumer-0").ready
        assert ready is not None and journals.deliveries(run_dir)[0]["client_id"] == ready.extra["client_id"]
        cluster.partition(["consumer-0"], ["broker-a-0", "broker-a-1"])
        time.sleep(PARTITION_QUIET_S)
        cut_at = len(journals.deliveries(run_dir))
        time.sleep(PARTITION_QUIET_S)
        assert len(journals.deliveries(run_dir)) == cut_at, "the partitioned real client went on consuming"
        cluster.heal()
        journals.wait_until("delivery after the heal", FIRST_DELIVERY_BUDGET_S, lambda: len(journals.deliveries(run_dir)) > cut_at)
    finally:
        if producer is not None:
            producer.stop()
        cluster.close()


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.timeout(600)
def test_a_cpp_consumers_remoting_requests_are_journalled_by_its_links(tmp_path):
    """The C++ client's UPDATE_CONSUMER_OFFSET (every 5 s), LOCK_BATCH_MQ and HEART_BEAT, read off its
    remoting stream by the link proxy, each with the broker's answer (links/requests.jsonl)."""
    from harness.request_journal import journal_path

    spec = ClusterSpec.default(time_scale=1.0).with_consumers(1, group=GROUP, subscriptions={TOPIC: "*"})
    cluster = LocalCluster(spec, run_dir=tmp_path / "run", links=True, start=False)
    producer = None
    path = journal_path(cluster.run_dir)

    def answered(kind: str) -> list[dict]:
        lines = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
        return [x for x in lines if x["event"] == "answer" and x["kind"] == kind]

    try:
        wire(cluster, CLIENTS["cpp"], group=GROUP, topic=TOPIC, orderly=True, consumer_options={})
        producer = start_with_workload(cluster, "lock-takeover", "cpp")
        journals.wait_until("a journalled UPDATE_CONSUMER_OFFSET of the C++ consumer", FIRST_DELIVERY_BUDGET_S,
              lambda: any(x["offset"] > 0 for x in answered("offset-commit")))
    finally:
        if producer is not None:
            producer.stop()
        cluster.close()
    commits = answered("offset-commit")
    assert all(x["protocol"] == "remoting" and x["code"] == 15 and x["group"] == GROUP for x in commits)
    assert any(x["ok"] and x["client_id"] for x in commits)  # the client id of the connection's heartbeat
    locks = answered("lock")
    assert locks and all(x["code"] == 41 for x in locks) and any(x["locked"] for x in locks)
    assert answered("heartbeat")


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.spark
@pytest.mark.timeout(REAL_RUN_TIMEOUT_S)
def test_lock_takeover_with_the_cpp_client_ends_with_a_broker_verdict_and_findings(tmp_path):
    outcome = ChaosRun(RunOptions(SUITES["lock-takeover"], seed=1, time_scale=1.0, client="cpp",
                                  out_dir=tmp_path / "run"), Console(width=160)).execute()
    assert outcome.exit_code == EXIT_VALID, outcome.error
    verdict = json.loads((outcome.run_dir / "verdict.json").read_text())
    found = verdict["client_findings"]
    assert set(found["by_kind"]) >= {"lock-storm", "unlock-missing-at-shutdown"} and "error" not in found
    assert "client findings:" in (outcome.run_dir / "report.html").read_text()
    run = json.loads((outcome.run_dir / "run.json").read_text())
    assert run["client"] == "cpp" and run["time_scale"] == 1.0
    # rebalance replays journals a real client does not write: set aside with its reason, not "unknown"
    assert "rebalance" not in verdict["checks"] and set(verdict["checks_set_aside"]) == {"rebalance"}
