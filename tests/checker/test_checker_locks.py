"""lock-exclusivity and takeover: overlapping owners, stale owners, lease discipline, takeover times."""

import pytest
from checker.builders import B, G, Run, T, config

from chaos.checker.checks import check_lock_exclusivity, check_takeover


def test_locks_clean(clean_output):
    r = clean_output.verdict.checks["lock-exclusivity"]
    assert r.valid is True, r.examples
    assert all(v is True for v in r.parts.values()), r.parts


def _two_owners(c1_dur):
    run = Run().sends_for(0, 4)
    run.deliver("q0-m0", 200, offset=0, orderly=True, dur=c1_dur, key="k0", seq=0)
    run.deliver("q0-m1", 600, offset=1, orderly=True, client="c2", dur=5, key="k0", seq=1)
    return run


def test_overlapping_owners_are_a_bug(spark):
    r = check_lock_exclusivity(_two_owners(c1_dur=500).history(spark), config())
    assert r.valid is False
    assert r.counts["overlaps"] == {"bug": 1, "expected-by-design": 0}
    assert r.examples[0]["older_client"] == "c1" and r.examples[0]["client"] == "c2"


def test_overlap_of_a_holder_paused_past_the_lease_is_expected(spark):
    run = _two_owners(c1_dur=500).fault("pause", ["consumer-1"], 250, 650)  # 400 ms > L_b - L_c = 300
    r = check_lock_exclusivity(run.history(spark), config())
    assert r.valid is True
    assert r.counts["overlaps"] == {"bug": 0, "expected-by-design": 1}


def _handover_with_locks():
    run = Run().sends_for(0, 6)
    run.lock(150, "granted", side="broker", lease=750).lock(151, "granted", lease=451)
    run.consume(0, range(3), t0=200)
    run.lock(290, "released", side="broker").lock(291, "released")
    run.lock(300, "granted", client="c2", side="broker", lease=900).lock(301, "granted", client="c2", lease=601)
    run.consume(0, range(3, 6), t0=320, client="c2")
    return run


@pytest.mark.slow
def test_handover_with_clean_lease_discipline(spark):
    run = _handover_with_locks().commit(280, 3).commit(400, 6, client="c2")
    r = check_lock_exclusivity(run.history(spark), config())
    assert r.valid is True, r.examples


@pytest.mark.slow
def test_stale_owner_commit(spark):
    run = _handover_with_locks().commit(280, 3).commit(450, 2)  # c1 commits after c2 was granted the queue
    r = check_lock_exclusivity(run.history(spark), config())
    assert r.valid is False and r.parts["stale-commit"] is False
    assert r.counts["stale_owner_commits"] == 1
    stale = next(e for e in r.examples if e["anomaly"] == "commit by a former owner")
    assert (stale["client_id"], stale["holder"]) == ("c1", "c2")


@pytest.mark.slow
def test_a_commit_decided_before_the_hand_over_and_logged_after_it_is_not_stale(spark):
    # c1 decided (lock checked) and sent its commit at 280, was paused, and logged the answer at 450,
    # after c2 was granted the queue at 300: timed by its line, the old rule called it a former owner's
    run = _handover_with_locks().commit(450, 3, decided=280).commit(460, 6, client="c2")
    r = check_lock_exclusivity(run.history(spark), config())
    assert r.valid is True and r.parts["stale-commit"] is True, r.examples
    assert r.counts["stale_owner_commits"] == 0
    # decided after the grant, the same commit is a former owner's however it is logged
    late = _handover_with_locks().commit(450, 3, decided=330).commit(460, 6, client="c2")
    r = check_lock_exclusivity(late.history(spark), config())
    assert r.parts["stale-commit"] is False and r.counts["stale_owner_commits"] == 1


def test_consume_after_the_client_lost_its_lock(spark):
    run = _handover_with_locks().lock(325, "lost", client="c2")  # c2's batches at 330 and 340 follow
    r = check_lock_exclusivity(run.history(spark), config())
    assert r.valid is False and r.parts["lease-client"] is False
    assert r.counts["batches_without_valid_lock"] == 2


def test_broker_grants_a_queue_whose_lease_is_live(spark):
    run = Run().sends_for(0, 2)
    run.lock(150, "granted", side="broker", lease=750).lock(400, "granted", client="c2", side="broker", lease=1000)
    r = check_lock_exclusivity(run.history(spark), config())
    assert r.valid is False and r.parts["lease-broker"] is False
    assert r.examples[0]["holder"] == "c1" and r.examples[0]["granted_to"] == "c2"


@pytest.mark.slow
def test_a_grant_under_a_live_lease_is_caught_whatever_lies_between(spark):
    # the broker declares c1's lease expired (carrying its end, still in the future) and then
    # grants the queue to c2: compared with the previous event only, the double grant was hidden
    run = Run().sends_for(0, 2)
    run.lock(150, "granted", side="broker", lease=750).lock(350, "renewed", side="broker", lease=950)
    run.lock(390, "expired", side="broker", lease=950).lock(400, "granted", client="c2", side="broker", lease=1000)
    r = check_lock_exclusivity(run.history(spark), config())
    assert r.valid is False and r.counts["double_grants"] == 1
    e = r.examples[0]
    assert (e["holder"], e["granted_to"], e["holder_lease_end_s"]) == ("c1", "c2", 0.85)
    # a third client's event in between hides nothing either
    run = Run().sends_for(0, 2)
    run.lock(150, "granted", side="broker", lease=750).lock(300, "denied", client="c3", side="broker")
    run.lock(400, "granted", client="c2", side="broker", lease=1000)
    assert check_lock_exclusivity(run.history(spark), config()).counts["double_grants"] == 1


@pytest.mark.slow
def test_a_released_or_ended_lease_may_be_granted_again(spark):
    run = Run().sends_for(0, 2)
    run.lock(150, "granted", side="broker", lease=750).lock(300, "released", side="broker")
    run.lock(400, "granted", client="c2", side="broker", lease=1000)
    run.lock(1100, "granted", client="c3", side="broker", lease=1700)  # c2's lease ended at 1000
    r = check_lock_exclusivity(run.history(spark), config())
    assert r.parts["lease-broker"] is True and r.counts["double_grants"] == 0


# ---- takeover: c1 holds q0 (last renewal t_L = 350), is killed at 400; c2 takes over ------------

def _killed_holder(c2_start):
    run = Run().sends_for(0, 10)
    run.lock(150, "granted", side="broker", lease=750).lock(151, "granted", lease=451)
    run.lock(350, "renewed", side="broker", lease=950).lock(351, "renewed", lease=651)
    run.consume(0, range(5), t0=200).commit(260, 5)
    run.fault("kill", ["consumer-1"], 400)
    if c2_start is not None:
        run.consume(0, range(5, 10), t0=c2_start, client="c2")
    return run


def test_takeover_within_the_bound(spark):
    r = check_takeover(_killed_holder(1000).history(spark), config())
    assert r.valid is True, r.examples
    m = r.measurements[0]
    # from t_L = 350: bound L_b + max(R_b, R_l) + W_p = 600 + 200 + 10
    assert (m["cause"], m["measured_ms"], m["bound_ms"], m["verdict"]) == ("kill", 650, 810, "ok")


def test_slow_takeover(spark):
    r = check_takeover(_killed_holder(1400).history(spark), config())
    assert r.valid is False and r.counts["slow"] == 1
    assert r.examples[0]["measured_ms"] == 1050


@pytest.mark.slow
def test_a_master_starved_of_cpu_during_the_takeover_has_its_starved_time_left_out(spark):
    # slow by 240 ms over the bound and its slack (test_slow_takeover); the master starved from 500
    # to past the takeover still answers, slowly: those 900 ms of [350, 1400] do not count
    run = _killed_holder(1400).fault("starve", ["broker-a-0"], 500, 2000)
    r = check_takeover(run.history(spark), config())
    assert r.valid is True, r.examples
    m = r.measurements[0]
    assert (m["cause"], m["measured_ms"], m["bound_ms"]) == ("kill", 1050, 810 + 900)
    assert "starved of CPU for 900 ms" in m["cause_label"]
    # a starved slave is no reason for the master's answers to be late
    other = _killed_holder(1400).fault("starve", ["broker-a-1"], 500, 2000)
    assert check_takeover(other.history(spark), config()).counts["slow"] == 1


@pytest.mark.slow
def test_takeover_waits_for_a_master_that_was_down(spark):
    # the master is killed at 500 and back at 1500: no lock can be granted in between, and the
    # returned master's lock and consumer tables are empty, so c2 is due a route poll, a heartbeat
    # and a lock round (N_r + H + R_b + R_l + W_p) after 1500
    run = _killed_holder(1800).fault("kill", ["broker-a-0"], 500, 1500)
    r = check_takeover(run.history(spark), config())
    assert r.valid is True, r.examples
    m = r.measurements[0]
    assert (m["cause"], m["measured_ms"], m["bound_ms"]) == ("master-return", 300, 1010)
    late = _killed_holder(3000).fault("kill", ["broker-a-0"], 500, 1500)
    assert check_takeover(late.history(spark), config()).counts["slow"] == 1


@pytest.mark.slow
def test_a_later_fault_of_the_holder_does_not_reset_the_clock(spark):
    # c1 is killed at 400 (due by 350 + 810); its restarted process is cut off at 700 and stopped
    # at 1100, before that deadline: the queue has waited since the kill, so neither extends it
    run = _killed_holder(2250).fault("partition", ["consumer-1", "broker-a-0"], 700, 2000)
    r = check_takeover(run.history(spark), config())
    assert r.valid is False and r.counts["slow"] == 1
    m = r.measurements[0]
    assert (m["cause"], m["measured_ms"], m["bound_ms"]) == ("kill", 1900, 810)
    stopped = _killed_holder(1300).fault("stop", ["consumer-1"], 1100, 1150)
    m = check_takeover(stopped.history(spark), config()).measurements[0]
    assert (m["cause"], m["measured_ms"], m["verdict"]) == ("kill", 950, "slow")
    # another consumer of the group cut off in time still holds the queue (the allocation may hand
    # it the queue, which it cannot lock until its channel expires)
    other = _killed_holder(2250).fault("partition", ["consumer-3", "broker-a-0"], 700, 2000)
    m = check_takeover(other.history(spark), config()).measurements[0]
    assert (m["cause_label"], m["verdict"]) == ("partition consumer-3,broker-a-0, after kill consumer-1", "ok")


@pytest.mark.slow
def test_the_holders_node_restarted_as_a_new_client_and_cut_off_is_another_silent_consumer(spark):
    # c1 is killed at 400; its node starts c3 at 500, which the allocation may hand c1's queue but
    # which cannot lock it (c1's lease) before it is cut off at 700: nobody may lock the queue until
    # c3's channel expires, so c2's takeover at 2250 is due from the partition, as for any consumer
    run = (_killed_holder(2250).event("consumer-start", 500, "consumer-1", group=G, client_id="c3")
           .fault("partition", ["consumer-1", "broker-a-0"], 700, 2000))
    r = check_takeover(run.history(spark), config())
    assert r.valid is True, r.examples
    m = r.measurements[0]
    assert (m["cause"], m["cause_label"], m["verdict"]) == (
        "partition", "partition consumer-1,broker-a-0, after kill consumer-1", "ok")
    # without a new client on the node the partition is the dead holder's own later fault: no excuse
    alone = _killed_holder(2250).fault("partition", ["consumer-1", "broker-a-0"], 700, 2000)
    assert check_takeover(alone.history(spark), config()).counts["slow"] == 1


@pytest.mark.slow
def test_a_takeover_is_never_measured_from_after_it(spark):
    # a master down from 500 to 2000 would put the reference after c2's start at 1400 (-600 ms):
    # a wrong attribution, so the kill's reference stands
    run = _killed_holder(1400).fault("kill", ["broker-a-0"], 500, 2000)
    r = check_takeover(run.history(spark), config())
    m = r.measurements[0]
    assert (m["cause"], m["measured_ms"], m["verdict"]) == ("kill", 1050, "slow")
    assert all(x["measured_ms"] >= 0 for x in r.measurements)


@pytest.mark.slow
def test_takeover_before_the_lease_ran_out(spark):
    r = check_takeover(_killed_holder(700).history(spark), config())
    assert r.valid is False and r.counts["early"] == 1


@pytest.mark.slow
def test_an_unlock_that_reached_the_broker_after_the_kill_frees_the_queue(spark):
    # c1's unlock, sent just before its kill at 400, is processed by the broker at 405: the queue was
    # released, so c2 taking it at 700 is no breach of the lease
    run = _killed_holder(700).lock(405, "released", side="broker")
    r = check_takeover(run.history(spark), config())
    assert r.counts["early"] == 0, r.examples


@pytest.mark.slow
def test_partitioned_holder_consuming_its_cache_is_timed_from_the_partition(spark):
    # c1 is cut from the master at 360 but consumes what it cached until its client lease ends (651):
    # the broker frees the queue only after the channel expiry, so the bound is the partition's
    # (max(L_b, X_c + K_c) + R_b + W_p = 1510 from 360), not the 410 of a lost lock
    run = Run().sends_for(0, 10)
    run.lock(150, "granted", side="broker", lease=750).lock(151, "granted", lease=451)
    run.lock(350, "renewed", side="broker", lease=950).lock(351, "renewed", lease=651)
    run.consume(0, range(3), t0=200).fault("partition", ["consumer-1", "broker-a-0"], 360, 2000)
    run.consume(0, range(3, 5), t0=400).lock(651, "expired")
    run.consume(0, range(5, 10), t0=1700, client="c2")
    r = check_takeover(run.history(spark), config())
    assert r.valid is True, r.examples
    m = r.measurements[0]
    assert (m["cause"], m["measured_ms"], m["verdict"]) == ("partition", 1340, "ok")


@pytest.mark.slow
def test_a_rebalance_that_gave_the_holder_its_queue_is_no_cause_of_losing_it(spark):
    # c1's rebalance took q0 just before the partition: an earlier event than the partition, but it
    # freed nothing, so the partition's bound applies (a rebalance that gave q0 up would be timed)
    def run_with(before: list, after: list, *, cut: bool = True) -> Run:
        run = Run().sends_for(0, 10)
        run.event("rebalance", 340 if cut else 355, "consumer-1", group=G, client_id="c1", topic=T, before=before, after=after,
                  removed=None, reason="cids-changed")
        run.lock(150, "granted", side="broker", lease=750).lock(151, "granted", lease=451)
        run.lock(350, "renewed", side="broker", lease=950).lock(351, "renewed", lease=651)
        run.consume(0, range(3), t0=200)
        if cut:  # c1 goes on with its cache until its client lease ends
            run.fault("partition", ["consumer-1", "broker-a-0"], 360, 2000).lock(651, "expired")
        run.consume(0, range(3, 5), t0=400)
        return run.consume(0, range(5, 10), t0=1700, client="c2")

    took = check_takeover(run_with([], [[B, 0]]).history(spark), config())
    assert took.valid is True and took.measurements[0]["cause"] == "partition", took.examples
    gave_up = check_takeover(run_with([[B, 0]], [], cut=False).history(spark), config())
    assert gave_up.measurements[0]["cause"] == "rebalance" and gave_up.counts["slow"] == 1


@pytest.mark.slow
def test_a_regained_lock_is_no_cause_of_losing_it(spark):
    # c1's lock comes back at 350 (the broker's grant is t_L) and its client re-opens q0: a
    # `lock-regained` rebalance lists q0 in `removed` *and* in `after`, and frees nothing. c1 is
    # killed at 400, before any unlock, so its lease runs out: the kill bound from t_L applies
    # (650 ms < 810), not the 410 ms of a queue the holder gave up
    run = _killed_holder(1000).event("rebalance", 355, "consumer-1", group=G, client_id="c1", topic=T,
                                     before=[[B, 0]], after=[[B, 0]], removed=[[B, 0]], reason="lock-regained")
    r = check_takeover(run.history(spark), config())
    assert r.valid is True, r.examples
    m = r.measurements[0]
    assert (m["cause"], m["measured_ms"], m["bound_ms"]) == ("kill", 650, 810)


@pytest.mark.slow
def test_a_holder_killed_before_its_delayed_unlock_leaves_its_lease_to_run_out(spark):
    # c1 gives q0 up in a rebalance at 360 with messages still cached, so it would unlock U_d later;
    # it is killed at 400, before that: the broker's lease (from t_L = 350) must run out, so the
    # kill bound from t_L applies (650 ms < 810), not the 410 ms of a queue the holder gave up
    def run_with(released: bool) -> Run:
        run = _killed_holder(1000).event("rebalance", 360, "consumer-1", group=G, client_id="c1", topic=T,
                                         before=[[B, 0]], after=[], removed=[[B, 0]], reason="consumers-changed")
        return run.lock(380, "released", side="broker").lock(381, "released") if released else run

    r = check_takeover(run_with(released=False).history(spark), config())
    assert r.valid is True, r.examples
    m = r.measurements[0]
    assert (m["cause"], m["measured_ms"], m["bound_ms"]) == ("kill", 650, 810)
    # unlocked before the kill: the queue was free at 380, so the rebalance's bound stands
    late = check_takeover(run_with(released=True).history(spark), config())
    assert late.counts["slow"] == 1 and late.measurements[0]["cause"] == "rebalance"


@pytest.mark.slow
def test_a_holder_paused_before_its_delayed_unlock_leaves_its_lease_to_run_out(spark):
    # as above, but c1 is paused at 400 (until 1100) instead of killed: its delayed unlock goes out
    # only after SIGCONT, so the queue is free when the broker's lease from t_L = 350 runs out
    run = Run().sends_for(0, 10)
    run.lock(150, "granted", side="broker", lease=750).lock(151, "granted", lease=451)
    run.lock(350, "renewed", side="broker", lease=950).lock(351, "renewed", lease=651)
    run.consume(0, range(5), t0=200).commit(260, 5)
    run.event("rebalance", 360, "consumer-1", group=G, client_id="c1", topic=T, before=[[B, 0]], after=[],
              removed=[[B, 0]], reason="consumers-changed")
    run.fault("pause", ["consumer-1"], 400, 1100).lock(1110, "released", side="broker")
    run.consume(0, range(5, 10), t0=1000, client="c2")
    r = check_takeover(run.history(spark), config())
    assert r.valid is True, r.examples
    m = r.measurements[0]
    assert (m["cause"], m["measured_ms"], m["bound_ms"]) == ("pause", 650, 810)
    # taken over later than the lease path allows: still slow
    late = Run(sends=run.sends, events=run.events, nemesis=run.nemesis,
               deliveries=[d for d in run.deliveries if d["client_id"] == "c1"])
    late.consume(0, range(5, 10), t0=1400, client="c2")
    assert check_takeover(late.history(spark), config()).counts["slow"] == 1


def test_queue_never_taken_over(spark):
    run = _killed_holder(None).send("late", 2000, offset=10)  # the history goes on well past the bound
    r = check_takeover(run.history(spark), config())
    assert r.valid is False and r.counts["stuck"] == 1


def test_takeover_unknown_without_orderly_consumption(spark):
    run = Run().sends_for(0, 3).consume(0, range(3), t0=200, orderly=False)
    assert check_takeover(run.history(spark), config()).valid == "unknown"


@pytest.mark.slow
def test_member_lists_still_naming_a_silent_holder_each_cost_the_taker_a_rebalance(spark):
    # c1 is cut from the master at 360 (bound max(L_b, X_c + K_c) + R_b + W_p = 1510, limit 1681).
    # c2 takes q0 at 2300: too late, unless the brokers c2 asked at its rebalances after the expiry
    # (360 + 1300 = 1660) still named c1, as one that still hears c1's heartbeats does. Each such
    # answer costs one rebalance (R_b 200); one given before the expiry costs nothing.
    def run_with(answers: list[tuple[int, list[str]]]) -> Run:
        run = Run().sends_for(0, 10)
        run.lock(150, "granted", side="broker", lease=750).lock(151, "granted", lease=451)
        run.consume(0, range(3), t0=200).fault("partition", ["consumer-1", "broker-a-0"], 360, 2500)
        for t, cids in answers:
            run.event("consumer-ids", t, "consumer-2", group=G, client_id="c2", topic=T, cids=cids)
        return run.consume(0, range(3, 10), t0=2300, client="c2")

    alone = check_takeover(run_with([(1500, ["c1", "c2"]), (2100, ["c2"])]).history(spark), config())
    assert alone.counts["slow"] == 1, alone.measurements
    stale = check_takeover(run_with([(1500, ["c1", "c2"]), (1700, ["c1", "c2"]), (1900, ["c1", "c2"]),
                                     (2100, ["c2"])]).history(spark), config())
    assert stale.valid is True, stale.examples
    m = stale.measurements[0]
    assert (m["cause"], m["measured_ms"], m["bound_ms"]) == ("partition", 1940, 1910)
    assert "2 member list(s)" in m["cause_label"]


@pytest.mark.slow
def test_a_broker_that_ends_a_lease_before_its_recorded_end_breaks_lease_expiry(spark):
    # the broker granted c1 until 750; declaring it expired at 400 is what a lease on the wall clock
    # does at a forward step; at 760 it is on time
    def run_with(expired_at: int) -> Run:
        run = Run().sends_for(0, 3).lock(150, "granted", side="broker", lease=750).lock(151, "granted", lease=451)
        return run.consume(0, range(3), t0=200).lock(expired_at, "expired", side="broker", lease=750)

    early = check_lock_exclusivity(run_with(400).history(spark), config())
    assert early.parts["lease-expiry"] is False and early.counts["leases_expired_early"] == 1
    ex = next(e for e in early.examples if e["anomaly"] == "lease declared expired before its end")
    assert ex["early_ms"] == 350
    on_time = check_lock_exclusivity(run_with(760).history(spark), config())
    assert on_time.parts["lease-expiry"] is True, on_time.examples


@pytest.mark.slow
def test_a_client_lease_lapsing_with_no_fault_breaks_lease_renewal(spark):
    # c1's lease (to 451) lapses: a renewal every R_l 200 keeps it unless a fault held one back
    def run_with(fault: bool) -> Run:
        run = Run().sends_for(0, 3).lock(150, "granted", side="broker", lease=750).lock(151, "granted", lease=451)
        run.consume(0, range(3), t0=200).lock(460, "expired", lease=451)
        return run.fault("link-toxic", ["consumer-1", "broker-a-0"], 250, 500) if fault else run

    bare = check_lock_exclusivity(run_with(False).history(spark), config())
    assert bare.parts["lease-renewal"] is False and bare.counts["client_leases_lapsed_without_fault"] == 1
    slow_link = check_lock_exclusivity(run_with(True).history(spark), config())
    assert slow_link.parts["lease-renewal"] is True, slow_link.examples


@pytest.mark.slow
def test_a_lease_nobody_tried_to_renew_lapses_even_unnoticed(spark):
    # c1 holds q0 to 451 and has nothing left to consume there, so it never notices a lapse (no
    # `expired`); what comes next on the queue says whether it kept renewing
    def run_with(*after: tuple[int, str, str | None]) -> Run:
        run = Run().sends_for(0, 3).lock(150, "granted", side="broker", lease=750).lock(151, "granted", lease=451)
        run.consume(0, range(3), t0=200)
        for t, action, reason in after:
            run.lock(t, action, reason=reason, lease=t + 300 if action in ("granted", "renewed") else None)
        return run

    renewed = run_with((350, "requested", "renew"), (352, "renewed", "renew"), (700, "released", "shutdown"))
    gave_up = run_with((1_000, "requested", "rebalance"), (1_002, "granted", "rebalance"))
    at_shutdown = run_with((1_000, "released", "shutdown"))
    given_away = run_with((1_000, "released", "drop-delayed"))
    for run, ok in ((renewed, True), (gave_up, False), (at_shutdown, False), (given_away, True)):
        r = check_lock_exclusivity(run.history(spark), config())
        assert r.parts["lease-renewal"] is ok, (ok, r.examples)
        assert r.counts["client_leases_lapsed_without_fault"] == (0 if ok else 1)
    # the stop of the consumer, or a fault on its link, within the lease explains the lapse
    stopped = run_with((1_000, "released", "shutdown")).event("consumer-stopping", 400, "consumer-1")
    assert check_lock_exclusivity(stopped.history(spark), config()).parts["lease-renewal"] is True
    cut = run_with((1_000, "requested", "rebalance")).fault("link-toxic", ["consumer-1", "broker-a-0"], 250, 500)
    assert check_lock_exclusivity(cut.history(spark), config()).parts["lease-renewal"] is True
