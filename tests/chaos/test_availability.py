"""The availability check's pure parts: which fault windows are single broker-group outages, the
producer's most sends in flight, and one window judged against its bounds (failures per thread
and isolation period, the longest stretch without an acknowledged send)."""

from __future__ import annotations

from chaos.checker.checks.availability import judge_window, max_in_flight, outage_group, windows_to_judge
from chaos.checker.faults import FaultWindow


def _w(op: str, targets: tuple[str, ...], detail: str = "", start: int = 1_000, end: int = 9_000) -> FaultWindow:
    return FaultWindow(op=op, targets=targets, start_ms=start, end_ms=end, recovered=True, detail=detail)


def test_outages_are_faults_that_take_one_group_from_the_producer():
    assert outage_group(_w("kill", ("broker-b-0", "broker-b-1"))) == "broker-b"
    assert outage_group(_w("pause", ("broker-a-0",))) == "broker-a"
    assert outage_group(_w("partition", ("broker-a-0",), "isolate broker-a-0 DROP: 9 links")) == "broker-a"
    cut = "cut producer-0 from broker-b-0 broker-b-1 DROP: 2 links"
    assert outage_group(_w("partition", ("producer-0", "broker-b-0", "broker-b-1"), cut)) == "broker-b"
    # not outages: a slave, a name server, the group cut from the name servers, master from slave
    assert outage_group(_w("kill", ("broker-a-1",))) is None
    assert outage_group(_w("kill", ("namesrv-0",))) is None
    ns = "cut broker-a-0 broker-a-1 from the name servers DROP: 4 links"
    assert outage_group(_w("partition", ("broker-a-0", "broker-a-1", "namesrv-0", "namesrv-1"), ns)) is None
    ms = "cut broker-a-0<->broker-a-1 DROP: 2 links"
    assert outage_group(_w("partition", ("broker-a-0", "broker-a-1"), ms)) is None
    assert outage_group(_w("kill", ("broker-a-0", "broker-b-0"))) is None  # two groups at once


def test_in_flight_counts_sends_open_at_once():
    events = [(0, "invoke", "a"), (1, "invoke", "b"), (2, "ok", "a"), (2, "invoke", "c"), (3, "info", "b"),
              (5, "fail", "c"), (6, "invoke", "d"), (7, "ok", "d")]
    assert max_in_flight(events) == 2
    assert max_in_flight([]) == 0
    # a send answered within the ms it was invoked in is open for that instant, then closed: one
    # thread sending back to back never counts as more than one in flight
    quick = [(t, kind, f"op{t}") for t in range(100) for kind in ("invoke", "ok")]
    assert max_in_flight(quick) == 1
    assert max_in_flight(list(reversed(quick))) == 1


def _sends(spec: list[tuple[int, str, int | None]]) -> list[dict]:
    return [{"invoke_ms": t, "outcome": outcome, "ok_ms": ok} for t, outcome, ok in spec]


def test_one_failure_per_thread_and_short_gaps_pass():
    w = _w("pause", ("broker-b-0",), start=0, end=8_000)
    sends = _sends([(10, "info", None), (20, "info", None)]
                   + [(t, "ok", t + 5) for t in range(3_000, 8_000, 100)])
    m = judge_window(w, "broker-b", sends, in_flight=2, not_available_max_ms=30_000, gap_limit_ms=3_450)
    assert (m["failed"], m["failed_max"], m["ok"]) == (2, 2, True)
    assert m["longest_gap_ms"] == 3_005  # the window's start to the first acknowledged send


def test_failures_past_the_isolation_bound_or_a_long_gap_fail():
    w = _w("partition", ("producer-0", "broker-b-0"), start=0, end=12_000)
    # every other send fails, as when the producer keeps choosing the silent group
    spec = []
    for i, t in enumerate(range(0, 12_000, 1_500)):
        spec.append((t, "info", None) if i % 2 == 0 else (t, "ok", t + 10))
    m = judge_window(w, "broker-b", _sends(spec), in_flight=2, not_available_max_ms=30_000, gap_limit_ms=3_450)
    assert m["failed"] == 4 and m["failed_max"] == 2 and not m["ok"]
    assert m["failed_fraction"] == 0.5
    # an outage longer than the isolation period allows one more failure per thread
    m = judge_window(w, "broker-b", _sends(spec), in_flight=2, not_available_max_ms=5_000, gap_limit_ms=3_450)
    assert m["failed_max"] == 2 * (1 + 12_000 // 5_000)
    quiet = judge_window(_w("kill", ("broker-b-0",), start=0, end=10_000), "broker-b",
                         _sends([(0, "ok", 10), (9_000, "ok", 9_010)]), 2, 30_000, 3_450)
    assert quiet["failed"] == 0 and quiet["longest_gap_ms"] == 9_000 and not quiet["ok"]



def test_an_outage_while_the_producer_may_still_avoid_the_other_group_is_not_judged():
    """After group a's outage the producer may avoid a for I_p (from a failed attempt up to T_s after
    the outage's end); an outage of b inside that stretch leaves both avoided, and pickOneAtLeast may
    then name b: such a window is skipped. Once a is surely back in selection, b's outage is judged."""
    t_s, i_p = 3_000, 30_000
    a = _w("pause", ("broker-a-0",), start=10_000, end=18_000)
    b_inside = _w("partition", ("producer-0", "broker-b-0", "broker-b-1"),
                  "cut producer-0 from broker-b-0 broker-b-1 DROP: 2 links", start=19_700, end=27_700)
    b_after = _w("kill", ("broker-b-0", "broker-b-1"), start=18_000 + t_s + i_p + 1, end=60_000)
    b_before = _w("kill", ("broker-b-0", "broker-b-1"), start=1_000, end=9_000)
    judged = windows_to_judge([(b_before, "broker-b"), (a, "broker-a"), (b_inside, "broker-b"),
                               (b_after, "broker-b")], t_s + i_p)
    why = {w.start_ms: reason for w, _, reason in judged}
    assert why[b_inside.start_ms] is not None and "33000 ms" in why[b_inside.start_ms]
    assert why[b_after.start_ms] is None
    # a starts inside the stretch after b's first outage (9 s + T_s + I_p): skipped too; that first
    # outage of b came before anything else and is judged
    assert why[a.start_ms] is not None and why[b_before.start_ms] is None
    alone = windows_to_judge([(b_after, "broker-b")], t_s + i_p)
    assert alone == [(b_after, "broker-b", None)]
