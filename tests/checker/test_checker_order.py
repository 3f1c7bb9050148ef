"""order: per sharding key and per queue, each anomaly and its clean twin."""

import pytest
from checker.builders import B, G, Run, T, config

from chaos.checker.checks import check_order


def test_order_clean(clean_output):
    r = clean_output.verdict.checks["order"]
    assert r.valid is True, r.examples
    assert r.counts["keyed_seqs"] == 20 and r.counts["epochs"] == 2
    assert r.parts == {"per-key": True, "per-queue": True}


def test_reordered_key(spark):
    run = Run().sends_for(0, 3).consume(0, [0, 2, 1], t0=200)
    r = check_order(run.history(spark), config())
    assert r.valid is False
    assert r.counts["reordered"] == 1
    reordered = [e for e in r.examples if e["anomaly"] == "reordered"]
    assert reordered[0]["seq"] == 1 and reordered[0]["prev_max_seq"] == 2


@pytest.mark.slow
def test_a_key_moved_to_another_queue_is_ordered_per_queue(spark):
    # k's seqs 0-1 were stored on q0; the publish list changed and seqs 2-3 went to q1, consumed
    # before q0's backlog (RocketMQ orders a key within its queue): explained, not a failure
    stored = [("a0", 0, 0, 0), ("a1", 0, 1, 1), ("b2", 1, 0, 2), ("b3", 1, 1, 3)]  # msg, queue, offset, seq
    consumed = [("b2", 200), ("b3", 210), ("a0", 300), ("a1", 310)]

    def run_of(stored: list, consumed: list) -> Run:
        run = Run()
        where = {m: (q, o, seq) for m, q, o, seq in stored}
        for i, (m, q, o, seq) in enumerate(stored):
            run.send(m, 100 + i, offset=o, queue=q, key="k", seq=seq)
        for m, t in consumed:
            q, o, seq = where[m]
            run.deliver(m, t, offset=o, queue=q, client=f"c{q + 1}", orderly=True, key="k", seq=seq)
        return run

    r = check_order(run_of(stored, consumed).history(spark), config())
    assert r.valid is True, r.examples
    assert (r.counts["reordered"], r.counts["reordered_across_queues"]) == (0, 2)
    # the same key reordered inside one queue stays a failure
    stored += [("b4", 1, 2, 4), ("b5", 1, 3, 5)]
    bad = check_order(run_of(stored, [*consumed, ("b5", 400), ("b4", 410)]).history(spark), config())
    assert bad.valid is False and bad.counts["reordered"] == 1


def test_skipped_offsets(spark):
    run = Run().sends_for(0, 10).consume(0, [0, 1, 2, 3, 6, 7, 8, 9], t0=200)
    r = check_order(run.history(spark), config())
    assert r.valid is False
    assert r.counts["anomalies"]["gap"] == 1 and r.counts["never_delivered_offsets"] == 2
    assert r.counts["anomalies"]["skip (in epoch)"] == 1
    gap = next(e for e in r.examples if e["anomaly"] == "skip (gap)")
    assert (gap["first_missing"], gap["last_missing"]) == (4, 5)


def _handover(start_at):
    """c1 consumes 0..5 and commits 6; c2 takes over at t=400 starting at `start_at`."""
    run = Run().sends_for(0, 10).consume(0, range(6), t0=200).commit(270, 6)
    return run.consume(0, range(start_at, 10), t0=400, client="c2")


def test_handover_at_the_committed_offset(spark):
    r = check_order(_handover(6).history(spark), config())
    assert r.valid is True, r.examples


def test_rewound_past_the_committed_offset(spark):
    r = check_order(_handover(2).history(spark), config())
    assert r.valid is False
    rewind = next(e for e in r.examples if e["anomaly"] == "rewind past committed")
    assert (rewind["c_last"], rewind["start_offset"], rewind["depth"]) == (6, 2, 4)


def test_rewind_after_a_broker_restart_is_explained(spark):
    run = _handover(2).fault("kill", ["broker-a-0"], 300, 350)
    r = check_order(run.history(spark), config())
    assert r.valid is True
    assert r.counts["anomalies"]["rewind past committed (explained)"] == 1


@pytest.mark.slow
def test_a_rewind_within_one_owner_across_a_master_restart_is_explained(spark):
    # c1 consumes 0..4, the master restarts (its offset table older than c1's last commit), c1
    # re-opens the queue at 3: reported, explained by the broker fault; without it, a failure
    def run(with_fault):
        r = Run().sends_for(0, 8, key=None).consume(0, range(5), t0=200).consume(0, range(3, 8), t0=400)
        return r.fault("kill", ["broker-a-0"], 300, 350) if with_fault else r
    explained = check_order(run(True).history(spark), config())
    assert explained.valid is True, explained.examples
    assert explained.counts["anomalies"]["rewind in epoch (explained)"] == 1
    bare = check_order(run(False).history(spark), config())
    assert bare.valid is False and bare.counts["anomalies"]["rewind (in epoch)"] == 1


@pytest.mark.slow
def test_a_rewind_after_the_owner_released_and_retook_the_queue_is_explained(spark):
    run = Run().sends_for(0, 8, key=None).consume(0, range(5), t0=200).lock(300, "released")
    run.consume(0, range(3, 8), t0=400)
    r = check_order(run.history(spark), config())
    assert r.valid is True, r.examples
    assert r.counts["anomalies"]["rewind in epoch (explained)"] == 1


@pytest.mark.slow
def test_a_rewind_after_a_rebalance_gave_the_queue_up_and_back_is_explained(spark):
    # c1's rebalance drops q0 while its last batch (4) is still in the listener, so that batch commits
    # nothing; the next rebalance gives q0 back and c1 starts again at the stored 4
    def run(dropped: bool) -> Run:
        r = Run().sends_for(0, 8, key=None).consume(0, range(5), t0=200)
        r.event("rebalance", 245, "consumer-1", group=G, client_id="c1", topic=T, before=[[B, 0]],
                after=[] if dropped else [[B, 0]], removed=[[B, 0]] if dropped else [], reason="consumers-changed")
        return r.consume(0, range(4, 8), t0=400)
    r = check_order(run(True).history(spark), config())
    assert r.valid is True, r.examples
    assert r.counts["anomalies"]["rewind in epoch (explained)"] == 1
    assert "queue dropped (consumers-changed) by c1" in r.examples[0]["explained_by"]
    assert check_order(run(False).history(spark), config()).valid is False  # a rebalance that kept q0


@pytest.mark.slow
def test_a_fault_on_another_broker_group_explains_no_rewind(spark):
    # with two groups, only a fault of the queue's own group (broker-a) can roll its offsets back
    run = _handover(2).fault("kill", ["broker-b-0"], 300, 350)
    r = check_order(run.history(spark), config())
    assert r.valid is False
    assert r.counts["anomalies"]["rewind past committed"] == 1


@pytest.mark.slow
def test_a_rewind_after_the_broker_recorded_the_owners_unlock_is_explained(spark):
    # a real client journals no lock events: the broker's record of its unlock is the evidence
    run = Run().sends_for(0, 8, key=None).consume(0, range(5), t0=200).lock(300, "released", side="broker")
    run.consume(0, range(3, 8), t0=400)
    r = check_order(run.history(spark), config())
    assert r.valid is True, r.examples
    assert r.counts["anomalies"]["rewind in epoch (explained)"] == 1
    renewed = Run().sends_for(0, 8, key=None).consume(0, range(5), t0=200).lock(300, "renewed", side="broker")
    assert check_order(renewed.consume(0, range(3, 8), t0=400).history(spark), config()).valid is False


@pytest.mark.slow
def test_a_real_clients_rewind_after_consuming_past_its_unlock_is_its_finding(spark):
    # the broker records c1's unlock at 230, c1 consumes 3 and 4 from its cache anyway, then re-opens
    # the queue at the committed 3: with a real client that is explained (its finding), with mqlab's not
    run = Run().sends_for(0, 8, key=None).consume(0, range(5), t0=200).lock(225, "released", side="broker")
    run.consume(0, range(3, 8), t0=400)
    assert check_order(run.history(spark), config()).valid is False
    r = check_order(run.history(spark), config(real_client_findings=True))
    assert r.valid is True, r.examples
    assert "consume-after-unlock" in r.examples[0]["explained_by"]
