"""lost and the broker's POP events: a hand-out still invisible at the run's end is in flight, not lost."""

import pytest
from checker.builders import B, G, Run, T, config

from chaos.checker.checks import check_lost
from chaos.checker.findings import client_findings

WALL0 = 1_700_000_000_000  # the builders' wall clock at mono 0
pytestmark = pytest.mark.spark


def _popped_never_journalled(deadline_t: int, *, renewals: int = 0, settle: str | None = None) -> Run:
    """q0-m2 handed out at 210 to c9, whose receive answer never arrived; q0-m0..4 else consumed."""
    run = Run().sends_for(0, 5).consume(0, [0, 1, 3, 4], t0=200, orderly=False)
    entry = {"group": G, "broker_name": B, "queue_topic": T, "queue_id": 0, "queue_offset": 2, "client_id": "c9"}
    first = deadline_t if not renewals else 260
    run.event("pop", 210, "broker-a-0", msg_id="q0-m2", topic=T, deadline_wall_ms=WALL0 + first, **entry)
    for i in range(renewals):  # auto-renew: each change pushes the deadline on
        last = i == renewals - 1
        run.event("pop-change-invisible", 250 + i * 10, "broker-a-0", reason="client",
                  deadline_wall_ms=WALL0 + (deadline_t if last else 270 + i * 10), **entry)
    if settle:
        run.event(settle, 280, "broker-a-0", status="ok", **entry)
    return run.event("consumer-stop", 400, "consumer-1", side="client", group=G, client_id="c1")  # the run's end


def test_a_hand_out_renewed_past_the_end_is_in_flight_not_lost(spark):
    r = check_lost(_popped_never_journalled(10_000, renewals=3).history(spark), config())
    assert r.valid is True
    assert r.counts["lost"] == 0 and r.counts["in_flight_at_end"] == 1
    assert "in flight, not lost" in r.reason and r.examples[0]["in_flight_to"] == "c9"
    assert r.examples[0]["renewals"] == 3


@pytest.mark.parametrize(("deadline_t", "settle"), [
    (300, None),  # its deadline passed inside the run and no revive followed: gone
    pytest.param(10_000, "pop-ack", marks=pytest.mark.slow),  # acked by a client that never journalled it
    pytest.param(10_000, "pop-revive", marks=pytest.mark.slow),  # revived: it should have been delivered again
])
def test_a_hand_out_that_ended_inside_the_run_stays_lost(spark, deadline_t, settle):
    r = check_lost(_popped_never_journalled(deadline_t, settle=settle).history(spark), config())
    assert r.valid is False
    assert r.counts["lost"] == 1 and r.counts["in_flight_at_end"] == 0


def test_pop_consumers_taking_turns_on_a_queue_is_no_shared_queue_finding(spark):
    run = Run().sends_for(0, 12)
    for i in range(12):  # two clients alternate on one queue, each back within a second
        run.deliver(f"q0-m{i}", 200 + i * 10, offset=i, client="c1" if i % 2 else "c2")
    h = run.history(spark)
    assert client_findings(h, config())["by_kind"]["shared-queue"] >= 1
    assert client_findings(h, config(pop_consumers=True))["by_kind"]["shared-queue"] == 0
