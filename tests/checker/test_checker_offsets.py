"""offset-resync: commits ahead, decreasing, resume after restart, master/slave convergence."""

import pytest
from checker.builders import G, Run, T, clean_orderly_run, config

from chaos.checker.checks import check_offset_resync


def test_offsets_clean(clean_output):
    r = clean_output.verdict.checks["offset-resync"]
    assert r.valid is True, r.examples
    assert r.parts["ahead"] is True and r.parts["monotonic"] is True


def test_commit_ahead_of_processing(spark):
    run = Run().sends_for(0, 10).consume(0, range(5), t0=200).commit(260, 9)
    r = check_offset_resync(run.history(spark), config())
    assert r.valid is False and r.counts["commits_ahead"] == 1
    assert r.examples[0]["delivered_max"] == 4


def _decrease():
    return Run().sends_for(0, 10).consume(0, range(10), t0=200).commit(300, 10).commit(400, 5)


def test_committed_offset_decreases(spark):
    r = check_offset_resync(_decrease().history(spark), config())
    assert r.valid is False and r.counts["decreases"] == {"unexplained": 1, "explained": 0}


@pytest.mark.slow
def test_two_commits_in_flight_answered_the_other_way_round_lower_nothing(spark):
    # c1 decides 13, then 16; the answer to 16 comes first: what c1 decided never went down
    def run_with(first_decided: int) -> Run:
        run = Run().sends_for(0, 20).consume(0, range(20), t0=200, orderly=True)
        return run.commit(1_084, 16, decided=983).commit(1_096, 13, decided=first_decided)

    crossed = check_offset_resync(run_with(905).history(spark), config())
    assert crossed.parts["monotonic"] is True and crossed.counts["decreases"]["unexplained"] == 0, crossed.examples
    # decided after 16, 13 is a decrease however it was answered
    lowered = check_offset_resync(run_with(1_000).history(spark), config())
    assert lowered.parts["monotonic"] is False and lowered.counts["decreases"]["unexplained"] == 1


def test_decrease_across_a_master_return_is_explained(spark):
    run = _decrease().fault("kill", ["broker-a-0"], 320, 380)
    r = check_offset_resync(run.history(spark), config())
    assert r.parts["monotonic"] is True and r.counts["decreases"] == {"unexplained": 0, "explained": 1}


def _broker_decrease(second_client):
    run = Run().sends_for(0, 10).consume(0, range(10), t0=200, orderly=False)
    for t, offset, client in ((300, 10, "c1"), (400, 7, second_client)):
        run.event("offset-commit", t, "broker-a-0", side="broker", group=G, topic=T, queue_id=0, offset=offset,
                  source="client", client_id=client)
    return run


@pytest.mark.slow
def test_a_stored_decrease_at_a_concurrent_hand_over_is_explained(spark):
    # a concurrent queue moved from c1 to c2 may be consumed by both for a moment (no locks): RocketMQ
    # stores c2's lower commit; the duplicates it costs count against the budget
    r = check_offset_resync(_broker_decrease("c2").history(spark), config())
    assert r.parts["monotonic"] is True and r.counts["decreases"] == {"unexplained": 0, "explained": 1}
    same = check_offset_resync(_broker_decrease("c1").history(spark), config())
    assert same.parts["monotonic"] is False and same.counts["decreases"] == {"unexplained": 1, "explained": 0}


def _same_client_lower_after_a_hand_over(lowered_by_other: bool):
    """c1 commits 10; c2's commit answered 2 ms before it (applied after it on the broker); c1, handed
    the queue back, starts from the broker's offset and commits the lower value (a concurrent group)."""
    run = Run().sends_for(0, 12).consume(0, range(12), t0=200, orderly=False)
    run.commit(298, 7 if lowered_by_other else 11, client="c2").commit(300, 10).commit(400, 7)
    return run


@pytest.mark.slow
def test_a_same_client_decrease_after_another_clients_lower_commit_is_a_hand_over(spark):
    r = check_offset_resync(_same_client_lower_after_a_hand_over(True).history(spark), config())
    assert r.parts["monotonic"] is True and r.counts["decreases"] == {"unexplained": 0, "explained": 1}
    # the other client's commit was higher: nothing explains c1 going from 10 to 7
    alone = check_offset_resync(_same_client_lower_after_a_hand_over(False).history(spark), config())
    assert alone.parts["monotonic"] is False and alone.counts["decreases"]["unexplained"] >= 1


def _same_client_lower_after_another_clients_pulls(lowering_client: str):
    """c1 commits 10; the broker then stores 7 from a pull of `lowering_client` (the commit flag of a
    pull, which no client journal logs as a commit); c1, handed the queue back, resumes there."""
    run = Run().sends_for(0, 12).consume(0, range(12), t0=200, orderly=False)
    run.commit(300, 10).event("offset-commit", 300, "broker-a-0", side="broker", group=G, topic=T, queue_id=0,
                              offset=10, source="client", client_id="c1")
    run.event("offset-commit", 320, "broker-a-0", side="broker", group=G, topic=T, queue_id=0, offset=7,
              source="client", client_id=lowering_client)
    return run.commit(400, 8)


@pytest.mark.slow
def test_a_same_client_decrease_after_a_lower_offset_another_client_pulled_with_is_a_hand_over(spark):
    r = check_offset_resync(_same_client_lower_after_another_clients_pulls("c2").history(spark), config())
    assert r.parts["monotonic"] is True, r.examples
    assert r.counts["decreases"]["unexplained"] == 0
    client_view = [e for e in r.examples if e.get("view") == "client commits"]
    assert client_view == []
    # the broker stored c1's own lower value: nothing explains c1 going from 10 to 8
    own = check_offset_resync(_same_client_lower_after_another_clients_pulls("c1").history(spark), config())
    assert own.parts["monotonic"] is False
    assert any(e.get("view") == "client commits" and e["from"] == 10 and e["to"] == 8 for e in own.examples)


def _restarted_consumer(resume_at):
    """c1 (concurrent) consumes 0..5, commits 6, is killed; its restart (client c3 on the same node) resumes."""
    run = Run().sends_for(0, 10).consume(0, range(6), t0=200, orderly=False).commit(270, 6)
    run.exit("consumer-1", 300)
    return run.consume(0, range(resume_at, 10), t0=400, client="c3", node="consumer-1", orderly=False)


@pytest.mark.slow
def test_resume_at_the_last_commit(spark):
    r = check_offset_resync(_restarted_consumer(6).history(spark), config())
    assert r.valid is True, r.examples
    assert r.counts["resumes"] == 1


def test_resume_rewinds_past_the_last_commit(spark):
    r = check_offset_resync(_restarted_consumer(3).history(spark), config())
    assert r.valid is False and r.parts["resume"] is False
    assert r.examples[0]["rewind"] == 3 and r.examples[0]["after"] == "consumer restart"


def _master_return_after_a_backlog(resume_at):
    """c1 (concurrent) consumes q0 0..99 by 200 and commits 90; the master is down 300-640 while c1
    drains 100..299 fast and commits 300 to the slave; c2 then resumes from the returned master's table."""
    run = Run().sends_for(0, 300, t0=0).consume(0, range(100), t0=100, step=1, orderly=False).commit(200, 90)
    run.fault("kill", ["broker-a-0"], 300, 640)
    run.consume(0, range(100, 300), t0=310, step=1, orderly=False).commit(520, 300, target=1)
    run.consume(0, range(resume_at, 300), t0=650, step=1, client="c2", orderly=False)
    return run.send("late", 5000, offset=0, queue=1)  # a long history: the queue's average rate is low


@pytest.mark.slow
def test_a_master_return_rewind_within_what_was_consumed_before_the_outage(spark):
    # the returned master's table (90) is behind the slave's 300 (RocketMQ #2513); the rewind of 210
    # exceeds the time budget at the queue's average rate, but c2 resumes above what the group had
    # consumed a redelivery window before the outage (50 at 150), less a batch: explained
    r = check_offset_resync(_master_return_after_a_backlog(90).history(spark), config())
    assert r.parts["resume"] is True, r.examples
    assert r.counts["resume_anomalies"] == {"rewind past committed (explained)": 1}
    # below that position nothing the master could have held explains it
    deep = check_offset_resync(_master_return_after_a_backlog(10).history(spark), config())
    assert deep.parts["resume"] is False
    bad = next(e for e in deep.examples if e["anomaly"] == "rewind beyond budget")
    assert (bad["rewind"], bad["consumed_before_outage"]) == (290, 50) and bad["budget"] < 290


def _stored(slave_final):
    run = clean_orderly_run().stored(300, 10).stored(310, slave_final, broker_id=1, source="slave-sync")
    return run.send("late", 2000, offset=10, queue=1)  # the history ends long after the last change


def test_master_and_slave_offsets_converge(spark):
    r = check_offset_resync(_stored(10).history(spark), config())
    assert r.parts["convergence"] is True


def test_slave_offset_never_converges(spark):
    r = check_offset_resync(_stored(8).history(spark), config())
    assert r.valid is False and r.counts["not_converged"] == 1


def _reset(lowest_after: int):
    """c1 consumed 0..11 and committed 12; an operator reset the queue to 6 (the broker journals it,
    source `reset`); a commit of 12 the client sent before it applied the reset lands after it; then
    the client consumes from 6 again and commits `lowest_after`, then 12."""
    run = Run().sends_for(0, 12).consume(0, range(12), t0=200).commit(330, 12).stored(330, 12)
    run.stored(350, 6, source="reset").commit(360, 12).stored(360, 12)
    # the consumer's own line of the reset it applied (loaded, not judged)
    run.event("offset-reset", 370, "consumer-1", side="client", group=G, client_id="c1", topic=T,
              reset_timestamp_ms=1_700_000_000_340, queues=[["broker-a", 0, 12, 6]])  # as the client writes it
    run.consume(0, range(6, 12), t0=400).commit(500, lowest_after).stored(500, lowest_after)
    return run.commit(600, 12).stored(600, 12)


def test_an_operator_reset_explains_the_rewinds_it_causes_and_nothing_below_it(spark):
    r = check_offset_resync(_reset(9).history(spark), config())
    # the client's 12 -> 9, the broker's 12 -> 6 (the reset) and 12 -> 9
    assert r.parts["monotonic"] is True and r.counts["decreases"] == {"unexplained": 0, "explained": 3}, r.examples
    below = check_offset_resync(_reset(4).history(spark), config())
    assert below.parts["monotonic"] is False and below.counts["decreases"] == {"unexplained": 2, "explained": 1}


@pytest.mark.slow
def test_a_commit_up_to_a_forward_reset_is_not_ahead(spark):
    # c1 consumed 0..4; an operator reset the queue forward to 10 (skipping 5..9); c1 commits 10
    run = Run().sends_for(0, 12).consume(0, range(5), t0=200).commit(260, 5).stored(260, 5)
    run.stored(300, 10, source="reset").commit(400, 10).stored(400, 10)
    r = check_offset_resync(run.history(spark), config())
    assert r.parts["ahead"] is True and r.counts["commits_ahead"] == 0, r.examples
    beyond = check_offset_resync(run.commit(500, 11).history(spark), config())
    assert beyond.parts["ahead"] is False and beyond.counts["commits_ahead"] == 1
