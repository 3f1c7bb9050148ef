"""pop-ack, pop-redelivery and pop-fifo on tiny hand-written POP histories: each rule shown
failing and holding."""

from __future__ import annotations

import pytest
from checker.builders import MASTER, Run, T, config

from chaos.checker.checks import check_pop_ack, check_pop_fifo, check_pop_redelivery

pytestmark = pytest.mark.spark
REVIVE_MS = 100


def _cfg():
    return config(pop_revive_interval_ms=REVIVE_MS)


def _failed(result, kind: str) -> bool:
    return result.valid is False and result.counts[kind.replace("-", "_")] >= 1


def test_a_clean_pop_history_passes_every_pop_check(spark):
    run = (Run().pop(100, 0, 1, 1_000).pop_ack(150, 0, 1)
           .pop(110, 1, 2, 300).pop_revive(320, 1, 2, 300)  # expired, revived in time
           .pop(120, 2, 3, 600).pop_change(200, 2, 3, 4, 2_000).pop_ack(250, 2, 4)  # renewed, acked with the new handle
           .ends_at(1_000))
    h = run.history(spark)
    for check in (check_pop_ack, check_pop_redelivery):
        r = check(h, _cfg())
        assert r.valid is True, (r.name, r.reason, r.examples)
    assert check_pop_ack(h, _cfg()).counts["acks_settled"] == 2
    assert check_pop_redelivery(h, _cfg()).counts["revives"] == 1


@pytest.mark.slow  # each check passes and fails in the default run; the other rules in --full
def test_an_acked_entry_revived_or_handed_out_again_fails_pop_ack(spark):
    h = Run().pop(100, 0, 1, 300).pop_ack(150, 0, 1).pop_revive(320, 0, 1, 300).pop(400, 0, 2, 900).ends_at(1_000).history(spark)
    r = check_pop_ack(h, _cfg())
    assert _failed(r, "revived-after-ack") and _failed(r, "handed-out-after-ack")


@pytest.mark.parametrize(("run", "what"), [
    # the handle of generation 1 was superseded at 200 by a change to generation 2
    (Run().pop(100, 0, 1, 5_000).pop_change(200, 0, 1, 2, 5_000).pop_ack(250, 0, 2, handle=1, handle_deadline=5_000),
     "superseded"),
    # the ack came after the handle's deadline
    pytest.param(Run().pop(100, 0, 1, 300).pop_ack(400, 0, 1, handle_deadline=300), "expired",
                 marks=pytest.mark.slow),
])
def test_an_ack_of_a_stale_handle_accepted_by_the_broker_fails_pop_ack(spark, run, what):
    r = check_pop_ack(run.ends_at(1_000).history(spark), _cfg())
    assert _failed(r, "stale-handle-acked") and what in r.examples[0]["what"]


def test_a_client_answered_ok_for_an_expired_handle_and_delivered_again_fails_pop_ack(spark):
    run = (Run().sends_for(0, 1).pop(100, 0, 1, 300)
           .deliver("q0-m0", 110, offset=0, client="c1")
           .client_ack(400, 405, 0, 1, 300))  # sent 100 ms past the deadline, answered ok
    run.deliveries[-1].update(msg_id="m0", queue_topic=T)
    run.deliver("m0", 600, offset=0, client="c2")
    run.deliveries[-1].update(queue_topic=T)
    r = check_pop_ack(run.ends_at(1_000).history(spark), _cfg())
    assert _failed(r, "stale-handle-acked") and _failed(r, "delivered-after-ack")
    # a refusal of the same late ack is what the broker owes: nothing to find
    fine = Run().pop(100, 0, 1, 300).client_ack(400, 405, 0, 1, 300, status="INVALID_RECEIPT_HANDLE")
    assert check_pop_ack(fine.pop_revive(320, 0, 1, 300).ends_at(1_000).history(spark), _cfg()).valid is True


@pytest.mark.parametrize(("run", "kind"), [
    (Run().pop(100, 0, 1, 300), "never-revived"),  # expired at 300, nothing by the end at 1000
    pytest.param(Run().pop(100, 0, 1, 300).pop_revive(250, 0, 1, 300), "revived-early", marks=pytest.mark.slow),
    pytest.param(Run().pop(100, 0, 1, 300).pop(200, 0, 2, 500), "handed-out-while-invisible", marks=pytest.mark.slow),
])
def test_pop_redelivery_failures(spark, run, kind):
    r = check_pop_redelivery(run.ends_at(1_000).history(spark), _cfg())
    assert _failed(r, kind), (r.reason, r.examples)


@pytest.mark.slow  # each check passes and fails in the default run; the other rules in --full
def test_a_master_down_at_the_deadline_pushes_the_revive_bound_out(spark):
    # expired at 300 while its master was killed from 250 to 900: the revive may wait for the restart
    run = Run().pop(100, 0, 1, 300).fault("kill", [MASTER], 250, 900).ends_at(1_000)
    r = check_pop_redelivery(run.history(spark), _cfg())
    assert r.valid is True, r.examples
    assert check_pop_redelivery(Run().pop(100, 0, 1, 300).ends_at(1_000).history(spark), _cfg()).valid is False


def test_pop_fifo_one_batch_at_a_time_in_order(spark):
    clean = (Run().pop(100, 0, 1, 300, fifo=True).pop(100, 1, 2, 300, fifo=True)  # batch [0, 1]
             .pop_ack(150, 0, 1, fifo=True)  # 1 expires at 300 and comes back in place, first of the next batch
             .pop_revive(400, 1, 2, 300, in_place=True, fifo=True)
             .pop(400, 1, 3, 700, fifo=True, client="c2").pop(400, 2, 4, 700, fifo=True, client="c2")
             .pop_ack(450, 1, 3, fifo=True).pop_ack(460, 2, 4, fifo=True).ends_at(1_000))
    r = check_pop_fifo(clean.history(spark), _cfg())
    assert r.valid is True and r.counts["fifo_batches"] == 2, r.examples
    broken = (Run().pop(100, 0, 1, 900, fifo=True).pop(100, 1, 2, 900, fifo=True)
              .pop(200, 2, 3, 900, fifo=True, client="c2")  # a second batch while [0, 1] is invisible
              .ends_at(1_000))
    r = check_pop_fifo(broken.history(spark), _cfg())
    assert _failed(r, "two-batches-in-flight") and _failed(r, "out-of-order")


@pytest.mark.slow  # each check passes and fails in the default run; the other rules in --full
def test_pop_checks_have_nothing_to_judge_without_hand_outs(spark):
    h = Run().sends_for(0, 2).consume(0, range(2), t0=200).history(spark)
    for check in (check_pop_ack, check_pop_redelivery, check_pop_fifo):
        assert check(h, _cfg()).valid == "unknown"


def test_a_hand_out_a_killed_master_never_stored_may_be_handed_out_again(spark):
    # offset 0 journalled at 100 (generation 5) and the master killed 5 ms later, before it was on disk:
    # the restarted master draws generations from 3 again, and hands offset 0 out anew
    lost = (Run().pop(100, 0, 5, 900).fault("kill", [MASTER], 105, 300)
            .pop(310, 1, 3, 900).pop(320, 0, 4, 900).pop_ack(330, 0, 4).pop_ack(331, 1, 3).ends_at(1_000))
    r = check_pop_redelivery(lost.history(spark), _cfg())
    assert r.valid is True and r.counts["lost_in_restarts"] == 1, r.examples
    # the same hand-out again with a generation above it: the first one was stored, and is still invisible
    kept = (Run().pop(100, 0, 5, 900).fault("kill", [MASTER], 105, 300)
            .pop(310, 1, 6, 900).pop(320, 0, 7, 900).pop_ack(330, 0, 7).pop_ack(331, 1, 6).ends_at(1_000))
    assert _failed(check_pop_redelivery(kept.history(spark), _cfg()), "handed-out-while-invisible")


@pytest.mark.slow  # each check passes and fails in the default run; the other rules in --full
def test_an_ack_journalled_just_before_its_masters_kill_may_be_lost(spark):
    base = Run().pop(100, 0, 1, 300).pop_ack(150, 0, 1)
    killed = base.fault("kill", [MASTER], 160, 250).pop_revive(320, 0, 1, 300).ends_at(1_000)
    r = check_pop_ack(killed.history(spark), _cfg())
    assert r.valid is True and r.counts["acks_at_kill"] == 1, r.examples
    alive = Run().pop(100, 0, 1, 300).pop_ack(150, 0, 1).pop_revive(320, 0, 1, 300).ends_at(1_000)
    assert _failed(check_pop_ack(alive.history(spark), _cfg()), "revived-after-ack")
