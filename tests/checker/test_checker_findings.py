"""Client findings: each kind produced by a history that shows it, and none by its clean twin.

Findings never change the verdict; the pipeline test checks they sit beside it in verdict.json.
"""

import json

import pytest
from checker.builders import B, G, Run, T, config

from chaos.checker.findings import LOCK_STORM_REFUSALS_PER_S, client_findings


def _held_then_stop(*, unlock: bool):
    run = Run().sends_for(0, 3)
    run.event("consumer-start", 100, "consumer-1", side="client", group=G, client_id="c1")
    run.lock(150, "granted", side="broker", lease=750)
    run.consume(0, range(3), t0=200)
    if unlock:
        run.lock(295, "released", side="broker")
    return run.event("consumer-stop", 300, "consumer-1", side="client", group=G, client_id="c1")


def _kinds(found):
    return {k: n for k, n in found["by_kind"].items() if n}


@pytest.mark.slow
def test_clean_orderly_run_has_no_findings(spark):
    found = client_findings(_held_then_stop(unlock=True).history(spark), config())
    assert found["count"] == 0, found


def test_unlock_missing_at_shutdown(spark):
    found = client_findings(_held_then_stop(unlock=False).history(spark), config())
    assert _kinds(found) == {"unlock-missing-at-shutdown": 1}
    f = found["findings"][0]
    assert (f["client_id"], f["queue"]) == ("c1", "Orders/broker-a/0")
    assert "no UNLOCK" in f["evidence"]


@pytest.mark.slow
def test_no_unlock_finding_when_the_client_was_partitioned_at_its_stop(spark):
    run = _held_then_stop(unlock=False).fault("partition", ["consumer-1"], 250, 400)
    assert client_findings(run.history(spark), config())["count"] == 0


@pytest.mark.slow
def test_a_lease_that_ran_out_before_the_stop_needs_no_unlock(spark):
    run = Run()
    run.lock(100, "granted", side="broker", lease=200)
    run.event("consumer-stop", 300, "consumer-1", side="client", group=G, client_id="c1")
    assert client_findings(run.history(spark), config())["count"] == 0


def test_lock_storm_after_a_refusal(spark):
    run = Run().lock(100, "granted", client="c2", side="broker", lease=700)
    for i in range(LOCK_STORM_REFUSALS_PER_S * 2):  # two seconds' worth in under one second
        run.lock(1000 + i * 4, "denied", side="broker")
    found = client_findings(run.history(spark), config())
    assert _kinds(found) == {"lock-storm": 1}
    assert f"{LOCK_STORM_REFUSALS_PER_S * 2} LOCK_BATCH_MQ refusals" in found["findings"][0]["evidence"]


@pytest.mark.slow
def test_refusals_at_a_backed_off_rate_are_no_storm(spark):
    run = Run().lock(100, "granted", client="c2", side="broker", lease=70_000)
    for i in range(30):
        run.lock(1000 + i * 1000, "denied", side="broker")  # one a second: a client that waits
    assert client_findings(run.history(spark), config())["count"] == 0


@pytest.mark.slow
def test_unlock_during_consume(spark):
    run = Run().sends_for(0, 1)
    run.lock(150, "granted", side="broker", lease=750)
    run.deliver("q0-m0", 200, offset=0, orderly=True, dur=50, key="k0", seq=0)  # batch [200, 250]
    run.lock(220, "released", side="broker")
    found = client_findings(run.history(spark), config())
    assert _kinds(found) == {"unlock-during-consume": 1}
    assert "inside the client's batch" in found["findings"][0]["evidence"]


@pytest.mark.slow
def test_consume_after_unlock_and_a_regrant_clears_it(spark):
    run = Run().sends_for(0, 3)
    run.lock(150, "granted", side="broker", lease=750)
    run.lock(190, "released", side="broker")
    run.deliver("q0-m0", 200, offset=0, orderly=True, dur=4, key="k0", seq=0)
    found = client_findings(run.history(spark), config())
    assert _kinds(found) == {"consume-after-unlock": 1}
    run.lock(300, "granted", side="broker", lease=900).deliver("q0-m1", 310, offset=1, orderly=True, key="k0", seq=1)
    assert _kinds(client_findings(run.history(spark), config())) == {"consume-after-unlock": 1}  # only the first


@pytest.mark.slow
def test_findings_sit_beside_a_valid_verdict(spark, tmp_path):
    from chaos.checker.pipeline import check_run

    run_dir = _held_then_stop(unlock=False).write(tmp_path / "run")
    out = check_run(run_dir, spark=spark, report=True, names=["lock-exclusivity"])
    data = json.loads(out.verdict_path.read_text())
    assert data["valid"] is True
    assert data["client_findings"]["by_kind"]["unlock-missing-at-shutdown"] == 1
    assert "client findings: 1" in out.report_path.read_text()


def _stop_without_unlock():
    run = Run().sends_for(0, 6)
    run.lock(150, "granted", side="broker", lease=750)
    run.consume(0, range(3), t0=200)
    run.fault("stop", ["consumer-1"], 250, 600)  # no release: the next holder waits out the lease
    run.lock(760, "granted", client="c2", side="broker", lease=1360)
    return run.consume(0, range(3, 6), t0=770, client="c2")


@pytest.mark.slow
def test_a_real_clients_missing_unlock_is_its_finding_not_a_slow_takeover(spark):
    from chaos.checker.checks import check_takeover

    h = _stop_without_unlock().history(spark)
    strict = check_takeover(h, config())
    assert strict.valid is False and strict.counts["slow"] == 1  # mqlab's own consumer must unlock
    excused = check_takeover(h, config(real_client_findings=True))
    assert excused.valid is True, excused.examples
    assert excused.counts["by_cause"] == {"stop-without-unlock": 1}


@pytest.mark.slow
def test_two_clients_taking_turns_on_one_queue_share_it(spark):
    run = Run().sends_for(0, 12)
    for i in range(12):  # c1 and c2 alternate on queue 0, each back within a few ms
        run.deliver(f"q0-m{i}", 200 + i * 10, offset=i, client="c1" if i % 2 == 0 else "c2", key="k0", seq=i)
    found = client_findings(run.history(spark), config())
    assert _kinds(found) == {"shared-queue": 1}
    assert found["findings"][0]["client_id"] == "c1 + c2"
    handover = Run().sends_for(0, 12).consume(0, range(6), t0=200, orderly=False)
    handover.consume(0, range(6, 12), t0=300, client="c2", orderly=False)  # one clean hand-over
    assert client_findings(handover.history(spark), config())["count"] == 0


@pytest.mark.slow
def test_a_resumed_pull_request_in_the_clients_log_is_its_finding(spark):
    run = Run().sends_for(0, 3).consume(0, range(3), t0=200)
    assert client_findings(run.history(spark), config())["by_kind"]["resumed-stale-cache"] == 0
    run.event("queue-resumed", 400, "consumer-1", side="client", group=G, client_id="c1", topic=T, broker_name=B,
              queue_id=0, queue_offset=2)
    found = client_findings(run.history(spark), config())
    assert _kinds(found) == {"resumed-stale-cache": 1}
    [finding] = found["findings"]
    assert finding["client_id"] == "c1" and finding["queue"] == f"{T}/{B}/0" and "offset 2" in finding["evidence"]
