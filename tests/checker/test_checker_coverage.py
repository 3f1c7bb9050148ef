"""Coverage: hand-written histories that reach every path count it exactly; near misses count zero;
a suite's claimed path counted zero shows in verdict.json and report.html without touching the verdict."""

from __future__ import annotations

import json

import pytest
from checker.builders import B, G, Run, T, config

from chaos.checker.coverage import coverage_counts, coverage_info, lock_paths, moved_queues
from chaos.checker.coverage_paths import PATH_NAMES


def _send_line(t: int, type_: str, **fields: object) -> dict[str, object]:
    return {"node": "producer-0", "event": "send", "mono_ms": t, "msg_id": f"m{t}", "op_id": f"op-{t}", "topic": T,
            "type": type_, **fields}


def _nemesis(op: str, t: int, targets: list[str]) -> list[dict[str, object]]:
    return [{"node": "harness", "event": "nemesis", "mono_ms": t, "op": op, "phase": phase, "targets": targets}
            for phase in ("start", "end")]


def _reaching() -> Run:
    """One history that takes every path (counts in the comments)."""
    r = Run()
    # storage: a recovery cut a torn tail (1) and a consume-queue unit (1); a master refused its slave
    # (store-error on the master, ha-refused on the slave: one refusal seen from both sides, 1) and
    # the slave cut its log back (1); a master restored its tail (1); a bad record (1)
    r.store_recovered(1000, truncated=26).store_error(1000, "torn-tail", n=26).store_error(1000, "cq-truncated", n=20)
    r.store_error(1100, "replica-refused", n=0).store_error(1100, "replica-refused", node=f"{B}-1", n=500)
    r.event("ha-refused", 1100, f"{B}-1", master="127.0.0.1:1", refusal="SLAVE_DIVERGED")
    r.event("ha-restored", 1200, f"{B}-0", bytes=300)
    r.store_error(1300, "bad-record")
    # broker locks: q0 expired for c1, then granted to c2 (an expiry, a move); q1 released by c1 and
    # granted to c2 (a move); q2 expired and re-granted to c1 itself (neither)
    r.lock(100, "granted", side="broker").lock(500, "renewed", side="broker")
    r.lock(900, "expired", side="broker").lock(900, "granted", client="c2", side="broker")
    r.lock(100, "granted", queue=1, side="broker").lock(400, "released", queue=1, side="broker")
    r.lock(450, "granted", client="c2", queue=1, side="broker")
    r.lock(100, "granted", queue=2, side="broker").lock(1000, "expired", queue=2, side="broker")
    r.lock(1000, "granted", queue=2, side="broker")
    r.lock(950, "expired").lock(960, "lost", queue=1)  # the client's own lease: 2
    r.event("pull-suggestion", 1400, f"{B}-0", group=G, topic=T, queue_id=0, suggest_which_broker_id=1)
    # pulls: a slave answers c1 while the master is killed (1) and c2 while it is cut off (1);
    # a slave read long after the kill, and the master's answer inside it, are no fall-back;
    # c2's first pull on q0 starts at 5, the offset the broker stored (1)
    r.fault("kill", [f"{B}-0"], 2000, 3000).fault("partition", ["consumer-2"], 5000, 6000)
    r.pull(100, offset=0).pull(2500, offset=10, requested=1, answered=1)
    r.pull(10_000, offset=20, requested=1, answered=1).pull(2600, offset=21)
    r.pull(200, offset=0, client="c2", queue=1).pull(5500, offset=7, requested=1, answered=1, client="c2", queue=1)
    r.pull(7000, offset=5, client="c2")
    r.event("consumer-leave", 1500, f"{B}-0", group=G, client_id="c1", reason="expired")
    r.event("consumer-leave", 1500, f"{B}-0", group=G, client_id="c3", reason="channel-closed")
    # rebalances: q1 goes c1 -> c2 (1) and back to c1 (1); c1 keeping q0 moves nothing
    r.owns(100, [(B, 0), (B, 1)]).owns(200, [(B, 1)], client="c2").owns(210, [(B, 0)]).owns(300, [(B, 0), (B, 1)])
    r.sends += [_send_line(10, "ok", status="SEND_OK", attempts=2), _send_line(20, "ok", status="SEND_OK", attempts=1),
                _send_line(30, "fail", status="MQBrokerError: CODE: 14 DESC: SERVICE_NOT_AVAILABLE"),
                _send_line(40, "fail", status="RemoteError: the broker's disk is full"),
                _send_line(50, "info", status="timeout")]
    r.event("disk-guard", 1600, f"{B}-0", state="on").event("disk-guard", 1700, f"{B}-0", state="off")
    r.event("retention-delete", 1800, f"{B}-0", file="commitlog/0")
    r.event("clock", 1900, f"{B}-1", rate=1.25).event("clock", 1950, f"{B}-1", rate=1.0)
    r.nemesis += _nemesis("link-toxic", 8000, ["consumer-1"]) + _nemesis("starve", 8500, [f"{B}-0"])
    return r


EXPECTED = {
    "torn-tail-cut": 1, "cq-rebuilt": 1, "replica-refused": 1, "replica-cut-back": 1, "master-tail-restored": 1,
    "bad-record-skipped": 1, "lock-lease-expired": 1, "lock-taken-over": 2, "client-lease-lapsed": 2,
    "slave-fallback": 2, "slave-suggested": 1, "offset-resynced": 1, "consumer-channel-expired": 1,
    "rebalance-moved": 2, "producer-retry": 1, "disk-guard-on": 1, "disk-guard-off": 1, "retention-delete": 1,
    "send-refused-disk-full": 2, "clock-skewed": 1, "link-toxic": 1, "cpu-starved": 1,
}


@pytest.mark.slow
def test_a_history_that_takes_every_path_counts_each_one(spark):
    counts = coverage_counts(_reaching().history(spark), config())
    assert tuple(counts) == PATH_NAMES
    assert counts == EXPECTED


def test_near_misses_count_zero(spark):
    r = Run()
    r.store_recovered(1000, truncated=0)  # a recovery that cut nothing
    r.event("ha-refused", 1100, f"{B}-1", master="x", refusal="NOT_MASTER")  # not a divergence
    r.store_error(1100, "replica-refused", node=f"{B}-1", n=0)  # a slave that cut nothing
    r.lock(100, "granted", side="broker").lock(500, "renewed", side="broker").lock(600, "released", side="broker")
    r.lock(700, "granted", side="broker")  # the same client again: no move
    r.lock(100, "granted").lock(700, "released")  # a client releasing is no lapse
    r.event("pull-suggestion", 1400, f"{B}-0", group=G, topic=T, queue_id=0, suggest_which_broker_id=0)
    r.fault("kill", [f"{B}-0"], 2000, 3000)
    r.pull(100, offset=0).pull(2500, offset=3)  # the master's answers only, first at 0
    r.pull(9000, offset=9, requested=1, answered=1)  # a slave read (suggested) long after the kill
    r.event("consumer-leave", 1500, f"{B}-0", group=G, client_id="c1", reason="unregister")
    r.owns(100, [(B, 0)]).owns(200, [(B, 1)], client="c2").owns(300, [(B, 0)])  # each keeps its own
    r.sends += [_send_line(10, "ok", status="SEND_OK"), _send_line(30, "fail", status="timeout after 3000 ms")]
    r.event("clock", 1900, f"{B}-1", rate=1.0).event("disk-guard", 1950, f"{B}-0", state="unknown")
    r.nemesis += _nemesis("pause", 8000, ["consumer-1"])
    counts = coverage_counts(r.history(spark), config())
    assert tuple(counts) == PATH_NAMES
    assert {k: v for k, v in counts.items() if v} == {}


def test_lock_and_rebalance_walks_on_their_own():
    grants = [{"group": G, "topic": T, "broker_name": B, "queue_id": 0, "client_id": c, "action": a, "t": t}
              for c, a, t in (("c1", "granted", 1), ("c1", "expired", 5), ("c2", "granted", 5), ("c1", "granted", 9))]
    assert lock_paths(grants) == (1, 2)  # c1 -> c2 after the expiry, then c2 -> c1 (released or not: a move)
    rebalances = [{"group": G, "topic": T, "client_id": c, "before": b, "after": a, "t": t}
                  for c, b, a, t in (("c1", [], [[B, "0"]], 1), ("c2", [], [[B, "0"]], 2), ("c2", [[B, "0"]], [[B, "0"]], 3))]
    assert moved_queues(rebalances) == 1  # c2 keeping the queue it took moves nothing more


def test_every_check_run_writes_the_coverage_beside_the_verdict(clean_output):
    saved = json.loads(clean_output.verdict_path.read_text())
    assert list(saved["coverage"]) == list(PATH_NAMES)
    assert saved["coverage"]["lock-taken-over"] == 0 and saved["coverage_missing"] == []  # a suite of no claims
    assert "coverage" in saved["seconds"]
    report = clean_output.report_path.read_text()
    assert '<h2 id="coverage">coverage</h2>' in report and "the suite claims no path" in report


def test_claimed_paths_never_reached_are_marked_in_the_report_but_leave_the_verdict_alone():
    from chaos.checker.report import _coverage_line, _coverage_section
    from chaos.checker.verdict import CheckResult, Verdict

    counts = dict.fromkeys(PATH_NAMES, 0) | {"torn-tail-cut": 3}
    verdict = Verdict.of([CheckResult("lost", True, "d")], info={
        "coverage": counts, "coverage_claims": ["torn-tail-cut", "replica-cut-back"],
        "coverage_missing": ["replica-cut-back"]})
    assert verdict.valid is True and verdict.exit_code == 0
    section = _coverage_section(verdict)
    assert '<tr class="missing"><td>replica-cut-back</td>' in section and "NOT REACHED" in section
    assert '<tr class="zero"><td>lock-taken-over</td>' in section  # not claimed, zero: greyed
    assert '<tr class=""><td>torn-tail-cut</td>' in section
    assert "1 of 2 claimed paths reached; not reached: replica-cut-back" in _coverage_line(verdict)
    assert json.loads(json.dumps(verdict.to_json()))["coverage_missing"] == ["replica-cut-back"]
    failed = Verdict.of([], info={"coverage": None, "coverage_error": "coverage could not be counted: boom"})
    assert "boom" in _coverage_section(failed) and _coverage_line(failed) == ""


def test_run_json_claims_reach_the_config(tmp_path):
    from chaos.checker.config import CheckerConfig

    (tmp_path / "run.json").write_text(json.dumps({"suite": "durability", "claims": ["torn-tail-cut"]}))
    assert CheckerConfig.from_run_dir(tmp_path).claims == ("torn-tail-cut",)


@pytest.mark.slow
def test_a_suite_run_takes_its_claims_from_the_suite_and_unknown_claims_are_named(spark):
    from chaos.suites import SUITES

    h = Run().store_recovered(1000, truncated=26).history(spark)
    info = coverage_info(h, config(suite="durability"))
    assert info["coverage_claims"] == list(SUITES["durability"].claims)
    assert "torn-tail-cut" not in info["coverage_missing"] and "replica-refused" in info["coverage_missing"]
    odd = coverage_info(h, config(claims=("torn-tail-cut", "no-such-path")))
    assert odd["coverage_missing"] == ["no-such-path"] and "no-such-path" in odd["coverage_error"]
