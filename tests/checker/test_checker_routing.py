"""read-routing: pull targets against rules R1-R6, failover and switch-back times."""

import pytest
from checker.builders import B, G, Run, T, config

from chaos.checker.checks import check_read_routing


def test_routing_clean(clean_output):
    r = clean_output.verdict.checks["read-routing"]
    assert r.valid is True, r.examples
    assert r.counts["pulls_by_answering_broker_id"] == {"0": 4}


def test_pull_from_the_slave_while_the_master_is_up(spark):
    run = Run().pull(100, offset=0).pull(200, offset=1, answered=1)
    r = check_read_routing(run.history(spark), config())
    assert r.valid is False and r.parts["wrong target"] is False
    assert r.examples[0]["rule"] == "wrong target" and r.examples[0]["answered_by"] == 1


def _failover(commit=False, back_at=1000):
    run = Run().pull(100, offset=0).pull(250, offset=1)
    run.fault("kill", ["broker-a-0"], 300, 900)
    run.pull(330, offset=2, answered=1, commit=commit).pull(360, offset=3, answered=1)
    return run.pull(back_at, offset=4).pull(back_at + 100, offset=5)


def test_failover_to_the_slave_and_back(spark):
    r = check_read_routing(_failover().history(spark), config())
    assert r.valid is True, r.examples
    assert r.counts["wrong target"] == {"violations": 0, "excused": 2}
    what = {m["what"]: m for m in r.measurements}
    assert what["failover"]["measured_ms"] == 30 and what["switch back"]["measured_ms"] == 100


def test_commit_flag_sent_to_a_slave(spark):
    r = check_read_routing(_failover(commit=True).history(spark), config())
    assert r.valid is False and r.parts["commit flag to slave"] is False


def test_stuck_on_the_slave_after_the_master_returned(spark):
    run = _failover(back_at=1000)
    run.pull(1700, offset=6, answered=1).pull(1800, offset=7, answered=1)  # past 900 + N_r + G_r + W_p + slack
    r = check_read_routing(run.history(spark), config())
    assert r.valid is False and r.counts["wrong target"]["violations"] == 2


def test_ignored_suggestion(spark):
    run = Run().pull(100, offset=0, suggest=1).pull(200, offset=1)
    r = check_read_routing(run.history(spark), config())
    assert r.valid is False and r.parts["ignored suggestion"] is False


def test_broker_suggests_the_slave_for_hot_data(spark):
    run = Run().event("pull-suggestion", 100, "broker-a-0", group="G", topic="Orders", queue_id=0,
                      suggest_which_broker_id=1, backlog_bytes=10, memory_budget_bytes=100)
    run.event("pull-suggestion", 200, "broker-a-0", group="G", topic="Orders", queue_id=1,
              suggest_which_broker_id=1, backlog_bytes=1000, memory_budget_bytes=100)
    r = check_read_routing(run.history(spark), config())
    assert r.valid is False and r.counts["hot suggestion away from master"] == 1
    assert r.examples[0]["queue_id"] == 0 and r.examples[0]["broker_name"] == "broker-a"


@pytest.mark.slow
def test_a_client_paused_across_the_switch_back_is_not_timed(spark):
    slow = check_read_routing(_failover(back_at=1700).history(spark), config())
    assert slow.valid is False and slow.examples[0]["rule"] == "slow switch back"
    paused = _failover(back_at=1700).fault("pause", ["consumer-1"], 950, 1650)
    r = check_read_routing(paused.history(spark), config())
    assert r.valid is True, r.examples


@pytest.mark.slow
def test_a_client_that_was_not_pulling_the_queue_at_the_fault_owes_no_failover(spark):
    # c2 pulled queue 0 long before the kill and again long after it: it did not own it meanwhile
    run = Run().pull(50, offset=0, client="c2").pull(500, offset=0).pull(650, offset=1)
    run.fault("kill", ["broker-a-0"], 700, 1300)
    run.pull(730, offset=2, answered=1).pull(1400, offset=3).pull(2000, offset=6, client="c2")
    r = check_read_routing(run.history(spark), config())
    assert r.valid is True, r.examples


@pytest.mark.slow
def test_retry_queues_get_a_heartbeat_more_to_come_back_to_the_master(spark):
    # master down 300..900; a retry queue still read via the slave at 900 + N_r + G_r + W_p + slack + 200
    # (within one heartbeat H = 300 more) is excused; the same on the normal topic is not
    def run(topic):
        r = Run().pull(100, offset=0).fault("kill", ["broker-a-0"], 300, 900)
        return r.event("pull-route", 1800, "consumer-1", group="G", client_id="c1", topic=topic, broker_name="broker-a",
                       queue_id=0, queue_offset=0, requested_broker_id=0, broker_id=1, suggest_which_broker_id=0,
                       status="FOUND", next_begin_offset=1, commit_flag=False)
    assert check_read_routing(run("%RETRY%G").history(spark), config()).counts["wrong target"]["violations"] == 0
    assert check_read_routing(run("Orders").history(spark), config()).counts["wrong target"]["violations"] == 1


def _switch_back_rewound(reopened_at: int | None, *, sent_at: int = 830) -> Run:
    # c1 reads 2..3 from the slave while the master is down, its last slave pull (sent at
    # `sent_at`) answers at 850; back on the master it pulls from 2 again instead of 4
    run = Run().pull(100, offset=0).pull(250, offset=1)
    run.fault("kill", ["broker-a-0"], 300, 900)
    run.pull(330, offset=2, answered=1)
    run.event("pull-route", 850, "consumer-1", group=G, client_id="c1", topic=T, broker_name=B, queue_id=0,
              queue_offset=3, requested_broker_id=1, broker_id=1, suggest_which_broker_id=0, status="FOUND",
              next_begin_offset=4, commit_flag=False, sent_mono_ms=sent_at)
    if reopened_at is not None:  # the client's lock came back: the queue starts afresh from the master's offset
        run.event("rebalance", reopened_at, "consumer-1", group=G, client_id="c1", topic=T, before=[[B, 0]],
                  after=[[B, 0]], removed=[[B, 0]], reason="lock-regained")
    return run.pull(1000, offset=2).pull(1100, offset=3)


def test_a_read_that_goes_back_after_a_switch_is_non_monotonic(spark):
    r = check_read_routing(_switch_back_rewound(None).history(spark), config())
    assert r.valid is False and r.counts["non-monotonic read"] == {"violations": 1, "excused": 0}
    bad = next(e for e in r.examples if e["rule"] == "non-monotonic read")
    assert (bad["expected_offset"], bad["pulled_offset"]) == (4, 2)


@pytest.mark.slow
def test_a_queue_reopened_while_its_last_pull_was_out_may_read_again(spark):
    # the re-open (840) comes after that pull was sent (830), though before its answer (850)
    r = check_read_routing(_switch_back_rewound(840).history(spark), config())
    assert r.counts["non-monotonic read"] == {"violations": 0, "excused": 1}, r.examples
    # a re-open before the pull was even sent does not explain why its answer was not followed
    late = check_read_routing(_switch_back_rewound(820, sent_at=830).history(spark), config())
    assert late.counts["non-monotonic read"]["violations"] == 1


@pytest.mark.slow
def test_the_late_answer_of_a_pull_sent_before_the_queue_reopened_is_not_followed(spark):
    # c1's queue re-opens at 990 while a long poll to the slave (sent at 700) is out; the new
    # ProcessQueue reads 2.. from the master, then the old poll's answer for 3 arrives at 1010
    run = Run().pull(100, offset=0).pull(250, offset=1)
    run.fault("kill", ["broker-a-0"], 300, 900)
    run.pull(330, offset=2, answered=1)
    run.event("rebalance", 990, "consumer-1", group=G, client_id="c1", topic=T, before=[[B, 0]], after=[[B, 0]],
              removed=[[B, 0]], reason="lock-regained")
    run.pull(1000, offset=2, next_offset=5)
    run.event("pull-route", 1010, "consumer-1", group=G, client_id="c1", topic=T, broker_name=B, queue_id=0,
              queue_offset=3, requested_broker_id=1, broker_id=1, suggest_which_broker_id=0, status="FOUND",
              next_begin_offset=5, commit_flag=False, sent_mono_ms=700)
    r = check_read_routing(run.pull(1100, offset=5).history(spark), config())
    assert r.counts["non-monotonic read"]["violations"] == 0, r.examples


def _kill_then_pause(pause_end: int) -> Run:
    # master down 300..900, then the client is SIGSTOPped 905..pause_end (longer than the route
    # refresh N_r + G_r + W_p + slack = 691): the pulls it sends the moment it resumes use the
    # route it had before the pause, which lacks the master, so they fall back to the slave
    run = Run().pull(100, offset=0).fault("kill", ["broker-a-0"], 300, 900)
    run.pull(330, offset=1, answered=1, next_offset=2)
    run.fault("pause", ["consumer-1"], 905, pause_end)
    run.pull(pause_end + 4, offset=2, answered=1, sent=pause_end + 2, next_offset=3)
    return run.pull(pause_end + 100, offset=3)


@pytest.mark.slow
def test_pulls_a_paused_client_sends_as_it_resumes_may_still_use_its_old_route(spark):
    r = check_read_routing(_kill_then_pause(2_000).history(spark), config())
    assert r.counts["wrong target"] == {"violations": 0, "excused": 2}, r.examples
    assert r.parts["wrong target"] is True
    # the same pull with no pause of its own is a real misroute: the route was refreshed long ago
    run = Run().pull(100, offset=0).fault("kill", ["broker-a-0"], 300, 900)
    run.pull(330, offset=1, answered=1, next_offset=2).pull(2_004, offset=2, answered=1, sent=2_002)
    assert check_read_routing(run.history(spark), config()).counts["wrong target"]["violations"] == 1


@pytest.mark.slow
def test_a_client_resumed_longer_ago_than_the_route_refresh_is_not_excused(spark):
    run = _kill_then_pause(2_000).pull(2_800, offset=4, answered=1, sent=2_790)
    assert check_read_routing(run.history(spark), config()).counts["wrong target"]["violations"] == 1


@pytest.mark.slow
def test_failover_is_timed_from_the_pull_sent_to_the_slave_not_its_long_poll_answer(spark):
    run = Run().pull(100, offset=0).pull(250, offset=1)
    run.fault("kill", ["broker-a-0"], 300, 2_000)
    run.pull(800, offset=2, answered=1, sent=330, status="NO_NEW_MSG", next_offset=2)  # held 470 ms
    r = check_read_routing(run.history(spark), config())
    fo = next(m for m in r.measurements if m["what"] == "failover")
    assert (fo["measured_ms"], fo["bound_ms"], fo["slack_ms"], fo["verdict"]) == (30, 310, 51, "ok")
    assert fo["judged"] == "failover 30 ms <= bound 310 ms + slack 51 ms"
    late = Run().pull(100, offset=0).pull(250, offset=1).fault("kill", ["broker-a-0"], 300, 2_000)
    late.pull(800, offset=2, answered=1, sent=700, status="NO_NEW_MSG", next_offset=2)
    r = check_read_routing(late.history(spark), config())
    assert r.parts["failover"] is False and r.examples[0]["judged"] == "failover 400 ms > bound 310 ms + slack 51 ms"


@pytest.mark.slow
def test_a_switch_back_cut_short_by_the_masters_next_kill_is_not_stuck(spark):
    # the master is back at 900 and killed again 2 ms later: the client rightly stays on the slave
    def run(second_kill: bool) -> Run:
        r = Run().pull(100, offset=0).pull(250, offset=1).fault("kill", ["broker-a-0"], 300, 900)
        if second_kill:
            r.fault("kill", ["broker-a-0"], 902, 2_500)
        for i, t in enumerate(range(330, 2_400, 100)):
            r.pull(t, offset=2 + i, answered=1, requested=0)
        return r
    stuck = check_read_routing(run(False).history(spark), config())
    assert stuck.parts["switch back"] is False and any(e["rule"] == "stuck on slave" for e in stuck.examples)
    r = check_read_routing(run(True).history(spark), config())
    assert r.parts["switch back"] is not False and r.parts["wrong target"] is True, r.examples


@pytest.mark.slow
def test_a_long_poll_sent_while_the_master_was_down_is_judged_when_sent(spark):
    # sent to the slave at 850 (master down 300..900) and held there until 2001 (a client paused
    # meanwhile gets it as it resumes): by its answer time it would look like a misroute long
    # after the route refresh (900 + 691)
    run = Run().pull(100, offset=0).fault("kill", ["broker-a-0"], 300, 900)
    run.pull(330, offset=1, answered=1, next_offset=2)
    run.pull(2_001, offset=2, answered=1, sent=850, status="NO_NEW_MSG", next_offset=2)
    r = check_read_routing(run.history(spark), config())
    assert r.counts["wrong target"] == {"violations": 0, "excused": 2}, r.examples
