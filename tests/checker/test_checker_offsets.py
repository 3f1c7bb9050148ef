"""offset-resync: commits ahead, decreasing, resume after restart, master/slave convergence."""

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


def test_a_same_client_decrease_after_another_clients_lower_commit_is_a_hand_over(spark):
    r = check_offset_resync(_same_client_lower_after_a_hand_over(True).history(spark), config())
    assert r.parts["monotonic"] is True and r.counts["decreases"] == {"unexplained": 0, "explained": 1}
    # the other client's commit was higher: nothing explains c1 going from 10 to 7
    alone = check_offset_resync(_same_client_lower_after_a_hand_over(False).history(spark), config())
    assert alone.parts["monotonic"] is False and alone.counts["decreases"]["unexplained"] >= 1


def _restarted_consumer(resume_at):
    """c1 (concurrent) consumes 0..5, commits 6, is killed; its restart (client c3 on the same node) resumes."""
    run = Run().sends_for(0, 10).consume(0, range(6), t0=200, orderly=False).commit(270, 6)
    run.exit("consumer-1", 300)
    return run.consume(0, range(resume_at, 10), t0=400, client="c3", node="consumer-1", orderly=False)


def test_resume_at_the_last_commit(spark):
    r = check_offset_resync(_restarted_consumer(6).history(spark), config())
    assert r.valid is True, r.examples
    assert r.counts["resumes"] == 1


def test_resume_rewinds_past_the_last_commit(spark):
    r = check_offset_resync(_restarted_consumer(3).history(spark), config())
    assert r.valid is False and r.parts["resume"] is False
    assert r.examples[0]["rewind"] == 3 and r.examples[0]["after"] == "consumer restart"


def _stored(slave_final):
    run = clean_orderly_run().stored(300, 10).stored(310, slave_final, broker_id=1, source="slave-sync")
    return run.send("late", 2000, offset=10, queue=1)  # the history ends long after the last change


def test_master_and_slave_offsets_converge(spark):
    r = check_offset_resync(_stored(10).history(spark), config())
    assert r.parts["convergence"] is True


def test_slave_offset_never_converges(spark):
    r = check_offset_resync(_stored(8).history(spark), config())
    assert r.valid is False and r.counts["not_converged"] == 1
