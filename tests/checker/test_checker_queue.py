"""lost, unexpected, duplicates on hand-written histories: each anomaly and its clean twin."""

import pytest
from checker.builders import B, G, Run, T, config

from chaos.checker.checks import check_duplicates, check_lost, check_unexpected


def _consumed(n=5):
    return Run().sends_for(0, n).consume(0, range(n), t0=200, orderly=False)


def test_lost_clean(clean_output):
    r = clean_output.verdict.checks["lost"]
    assert r.valid is True
    assert r.counts["acknowledged"] == 20 and r.counts["lost"] == 0


def test_lost_acknowledged_send_never_consumed(spark):
    run = Run().sends_for(0, 5).consume(0, [0, 1, 3, 4], t0=200, orderly=False)
    r = check_lost(run.history(spark), config())
    assert r.valid is False
    assert r.counts["lost"] == 1 and r.counts["lost_by_position"] == {"middle": 1}
    assert r.examples[0]["msg_id"] == "q0-m2" and r.examples[0]["seen"] is False
    assert "definition" not in r.examples[0] and r.definition.startswith("Every acknowledged send")


def test_lost_reports_recovered_unknown_outcomes_without_failing(spark):
    run = _consumed().send("maybe", 150, offset=5, outcome="info").deliver("maybe", 260, offset=5)
    run.send("never", 151, offset=6, outcome="info")
    r = check_lost(run.history(spark), config())
    assert r.valid is True
    assert r.counts["recovered"] == {"info": 1}
    assert r.counts["unknown_outcome_never_seen"] == {"info": 1}


def test_lost_is_unknown_without_deliveries(spark):
    r = check_lost(_consumed().history(spark, absent=("deliveries",)), config())
    assert r.valid == "unknown" and "deliveries" in r.reason


def test_unexpected_clean(clean_output):
    r = clean_output.verdict.checks["unexpected"]
    assert r.valid is True and r.counts["unexpected_deliveries"] == 0


def test_unexpected_delivery_of_an_id_never_sent(spark):
    run = _consumed().deliver("ghost", 300, offset=5)
    r = check_unexpected(run.history(spark), config())
    assert r.valid is False
    assert r.counts["unexpected_msg_ids"] == 1 and r.examples[0]["msg_id"] == "ghost"


def test_duplicates_clean(clean_output):
    r = clean_output.verdict.checks["duplicates"]
    assert r.valid is True and r.counts["duplicates"] == 0


def test_duplicate_without_a_cause_fails(spark):
    run = _consumed().deliver("q0-m1", 900, offset=1)
    r = check_duplicates(run.history(spark), config(duplicate_explain_slack_ms=50))
    assert r.valid is False
    assert (r.counts["duplicates"], r.counts["unexplained"]) == (1, 1)
    assert r.examples[0]["msg_id"] == "q0-m1" and r.examples[0]["explained"] is False


def test_duplicate_inside_a_fault_window_is_explained(spark):
    run = _consumed().deliver("q0-m1", 900, offset=1).fault("kill", ["consumer-1"], 500, 600)
    r = check_duplicates(run.history(spark), config(duplicate_explain_slack_ms=50))
    assert r.valid is True
    assert (r.counts["explained"], r.counts["unexplained"]) == (1, 0)
    assert r.counts["budget"] >= 1


def test_duplicates_over_the_suite_budget_fail(spark):
    run = _consumed().deliver("q0-m1", 900, offset=1).fault("kill", ["consumer-1"], 500, 600)
    r = check_duplicates(run.history(spark), config(duplicate_explain_slack_ms=50, duplicate_budget=0))
    assert r.valid is False and "budget" in r.reason


@pytest.mark.slow
def test_a_duplicate_to_the_same_client_needs_a_cause_of_a_redelivery(spark):
    # c1 gets q0-m1 again within one uninterrupted ownership: another consumer's kill, another
    # broker group's kill or a lock event of another queue nearby explain nothing
    run = _consumed().deliver("q0-m1", 900, offset=1).fault("kill", ["consumer-2"], 500, 600)
    run.fault("kill", ["broker-b-0"], 700, 800).lock(850, "lost", queue=1)
    r = check_duplicates(run.history(spark), config(duplicate_explain_slack_ms=50))
    assert r.valid is False and (r.counts["explained"], r.counts["unexplained"]) == (0, 1), r.examples
    # what can make RocketMQ redeliver does: the queue's lock lost, a fault of its broker group,
    # a failed delivery in between (a retry), or another client taking the queue
    for cause in (lambda x: x.lock(850, "lost"), lambda x: x.fault("kill", ["broker-a-1"], 700, 800),
                  lambda x: x.deliver("q0-m1", 880, offset=1, result="RECONSUME_LATER")):
        run = cause(_consumed().deliver("q0-m1", 900, offset=1))
        r = check_duplicates(run.history(spark), config(duplicate_explain_slack_ms=50))
        assert (r.counts["explained"], r.counts["unexplained"]) == (1, 0), r.examples
    run = _consumed().deliver("q0-m1", 900, offset=1, client="c2")
    assert check_duplicates(run.history(spark), config(duplicate_explain_slack_ms=50)).counts["unexplained"] == 0


@pytest.mark.slow
def test_a_duplicate_after_a_client_moved_the_stored_offset_back_is_explained(spark):
    # another client of the concurrent group committed a lower offset after c1's: whoever reads
    # the queue from the stored offset next reads those messages again
    run = _consumed().deliver("q0-m1", 900, offset=1).stored(500, 3).stored(600, 1)
    r = check_duplicates(run.history(spark), config(duplicate_explain_slack_ms=50))
    assert (r.counts["explained"], r.counts["unexplained"]) == (1, 0), r.examples  # (no fault: budget 0)
    forward = _consumed().deliver("q0-m1", 900, offset=1).stored(500, 1).stored(600, 3)
    r = check_duplicates(forward.history(spark), config(duplicate_explain_slack_ms=50))
    assert r.counts["unexplained"] == 1  # a stored offset moving forward explains nothing


@pytest.mark.slow
def test_a_duplicate_after_a_real_clients_resumed_pull_request_is_explained(spark):
    # the C++ client's own log says queue 0 came back to it and its dropped pull request resumed
    # with its old cache: what it consumes again from that cache is the client's doing
    resumed = _consumed().deliver("q0-m1", 900, offset=1).event(
        "queue-resumed", 850, "consumer-1", side="client", group=G, client_id="c1", topic=T,
        broker_name=B, queue_id=0, queue_offset=1)
    r = check_duplicates(resumed.history(spark), config(duplicate_explain_slack_ms=50))
    assert (r.counts["explained"], r.counts["unexplained"]) == (1, 0), r.examples
    other_queue = _consumed().deliver("q0-m1", 900, offset=1).event(
        "queue-resumed", 850, "consumer-1", side="client", group=G, client_id="c1", topic=T,
        broker_name=B, queue_id=1, queue_offset=1)
    assert check_duplicates(other_queue.history(spark), config(duplicate_explain_slack_ms=50)).counts[
        "unexplained"] == 1
