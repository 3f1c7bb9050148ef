"""rebalance: ownership replayed from the consumers' route and rebalance events settles within its
bound after each change (a group's queues leave and return, a consumer dies, pauses or joins).

Bounds with the builders' timing: route N_r + H + R_b = 800, join H + R_b = 500, silent
X_c + K_c + R_b = 1500 (ms), each plus 20 ms + 10 %.
"""

from __future__ import annotations

from checker.builders import Run, config

from chaos.checker.checks.rebalance import check_rebalance

A0, A1, B0, B1 = ("broker-a", 0), ("broker-a", 1), ("broker-b", 0), ("broker-b", 1)
ALL = [A0, A1, B0, B1]


def _two_consumers() -> Run:
    """c1 and c2 start at 100 and split the four queues of two broker groups."""
    r = Run()
    for client in ("c1", "c2"):
        r.event("consumer-start", 100, f"consumer-{client[1:]}", group="G", client_id=client)
        r.route(100, ALL, client=client)
    return r.owns(150, [A0, A1], client="c1").owns(160, [B0, B1], client="c2")


def _group_b_lost_and_back(*, c2_takes_it_back: bool = True) -> Run:
    """broker-b killed at 1000 (back at 3000): its queues leave the routes at 1500/1700 and return at
    3500/3600; the consumers rebalance after each."""
    r = _two_consumers().fault("kill", ["broker-b-0", "broker-b-1"], 1000, 3000)
    r.route(1500, [A0, A1], client="c1").owns(1600, [A0], client="c1")
    r.route(1700, [A0, A1], client="c2").owns(1800, [A1], client="c2")
    r.route(3500, ALL, client="c1").owns(3700, [A0, A1], client="c1")
    r.route(3600, ALL, client="c2")
    if c2_takes_it_back:
        r.owns(3800, [B0, B1], client="c2")
    return r.event("consumer-stop", 5000, "consumer-1", group="G").event("consumer-stop", 5000, "consumer-2", group="G")


def test_a_group_lost_and_returned_settles_within_the_route_bound(spark):
    result = check_rebalance(_group_b_lost_and_back().history(spark), config())
    assert result.valid is True, (result.reason, result.examples)
    by_change = {m["change"]: m for m in result.measurements}
    gone = next(m for c, m in by_change.items() if c.startswith("route seen by consumer-1: -broker-b/0"))
    back = next(m for c, m in by_change.items() if c.startswith("route seen by consumer-1: +broker-b/0"))
    # settled when c2 rebalanced, 300 ms after c1 saw each route; the limit is the route bound plus slack
    assert (gone["settle_ms"], gone["limit_ms"], gone["verdict"]) == (300, 900, "ok")
    assert (back["settle_ms"], back["verdict"]) == (300, "ok")
    assert result.counts["bounds_ms"] == {"route": 800, "join": 500, "silent": 1500}


def test_a_returned_group_never_taken_back_fails(spark):
    result = check_rebalance(_group_b_lost_and_back(c2_takes_it_back=False).history(spark), config())
    assert result.valid is False
    late = result.examples[0]
    assert late["change"].startswith("route seen by consumer-1: +broker-b/0")
    assert "broker-b/0 owned by 0" in late["why"] and late["limit_ms"] == 900


def test_queues_kept_after_their_group_left_the_route_fail(spark):
    r = _two_consumers().fault("kill", ["broker-b-0", "broker-b-1"], 1000)
    r.route(1500, [A0, A1], client="c1").owns(1600, [A0], client="c1").route(1700, [A0, A1], client="c2")
    r.event("consumer-start", 4000, "consumer-9", group="G")  # the history runs on to 4000
    result = check_rebalance(r.history(spark), config())
    assert result.valid is False
    assert "consumer-2 owns broker-b/0, broker-b/1 outside its route" in result.examples[0]["why"]


def test_a_dead_consumers_queues_taken_within_the_join_bound_pass_and_never_taken_fail(spark):
    def run(taken_at: int | None) -> Run:
        r = _two_consumers().fault("kill", ["consumer-2"], 1000)
        if taken_at is not None:
            r.owns(taken_at, ALL, client="c1")
        return r.owns(3000, ALL if taken_at is not None else [A0, A1], client="c1", reason="retry")

    ok = check_rebalance(run(1300).history(spark), config())
    assert ok.valid is True, (ok.reason, ok.examples)
    killed = next(m for m in ok.measurements if m["change"] == "consumer-2 killed")
    assert (killed["settle_ms"], killed["limit_ms"]) == (300, 570)
    bad = check_rebalance(run(None).history(spark), config())
    assert bad.valid is False and "broker-b/0 owned by 0" in bad.examples[0]["why"]
    assert bad.examples[0]["change"] == "consumer-2 killed"


def test_double_ownership_after_a_join_fails_past_the_bound_only(spark):
    def run(c1_drops_at: int) -> Run:
        # c3 joins at 1000 and takes a1 and b0 at once; c2 gives b0 up at 1150, c1 gives a1 up later
        r = _two_consumers()
        r.event("consumer-start", 1000, "consumer-3", group="G", client_id="c3").route(1000, ALL, client="c3")
        r.owns(1100, [A1, B0], client="c3").owns(1150, [B1], client="c2")
        return r.owns(c1_drops_at, [A0], client="c1").owns(3000, [A0], client="c1", reason="retry")

    ok = check_rebalance(run(1400).history(spark), config())
    assert ok.valid is True, (ok.reason, ok.examples)
    assert next(m for m in ok.measurements if m["change"] == "consumer-3 started")["settle_ms"] == 400
    doubled = check_rebalance(run(2000).history(spark), config())
    assert doubled.valid is False
    assert doubled.examples[0]["why"] == "broker-a/1 owned by 2 (consumer-1, consumer-3)"
    assert doubled.examples[0]["limit_ms"] == 570


def test_a_pause_shorter_than_the_silent_bound_passes_and_a_longer_one_unhandled_fails(spark):
    def run(pause_ms: int) -> Run:
        r = _two_consumers().fault("pause", ["consumer-2"], 1000, 1000 + pause_ms)
        return r.owns(1000 + pause_ms + 2000, [A0, A1], client="c1", reason="retry")

    short = check_rebalance(run(1200).history(spark), config())
    assert short.valid is True, (short.reason, short.examples)
    paused = next(m for m in short.measurements if m["change"] == "consumer-2 paused")
    assert paused["verdict"] == "superseded"  # resumed before its queues had to move
    long = check_rebalance(run(2500).history(spark), config())
    assert long.valid is False and long.examples[0]["change"] == "consumer-2 paused"
    assert long.examples[0]["limit_ms"] == 1500 + 20 + 150


def test_a_routed_group_down_is_not_judged_and_a_run_without_routes_is_unknown(spark):
    # broker-b's master paused: its queues stay routed (and unowned by c2, say) until the pause ends
    r = _two_consumers().fault("pause", ["broker-b-0"], 1000, 2500).owns(1100, [], client="c2")
    r.owns(2600, [B0, B1], client="c2").owns(4000, [A0, A1], client="c1", reason="retry")
    assert check_rebalance(r.history(spark), config()).valid is True
    old = Run().owns(150, [A0], client="c1")
    result = check_rebalance(old.history(spark), config())
    assert result.valid == "unknown" and "no route events" in result.reason


def test_a_returned_master_is_given_the_route_bound(spark):
    # broker-b's master back at 2500: its member list fills only once every client has seen the
    # route again (N_r) and heartbeated it (H), so a rebalance on its short list may drop queues
    # until N_r + H + R_b after the return (800 + 80 slack here), longer than a join's 500 + 70
    def taken_back_at(t_ms: int) -> Run:
        r = _two_consumers().fault("pause", ["broker-b-0"], 1000, 2500)
        r.owns(2600, [], client="c2").owns(t_ms, [B0, B1], client="c2")
        return r.event("consumer-stop", 5000, "consumer-1", group="G").event("consumer-stop", 5000, "consumer-2",
                                                                             group="G")

    result = check_rebalance(taken_back_at(3350).history(spark), config())
    assert result.valid is True, (result.reason, result.examples)
    back = next(m for m in result.measurements if m["change"] == "broker-b master back")
    assert (back["kind"], back["settle_ms"], back["limit_ms"]) == ("route", 850, 900)
    assert check_rebalance(taken_back_at(3450).history(spark), config()).valid is False


# ---- the report's routes-and-ownership plot -------------------------------------------------------


def test_route_and_owner_intervals_follow_the_events_and_end_at_a_kill():
    from chaos.checker.faults import FaultWindow
    from chaos.checker.plot_routes import replay_intervals

    ev = [{"node": "consumer-1", "event": "route", "topic": "T", "t": 100, "namesrv": "ns0",
           "queues": [["broker-a", "0"], ["broker-b", "0"]]},
          {"node": "consumer-1", "event": "rebalance", "topic": "T", "t": 150, "after": [["broker-a", "0"], ["broker-b", "0"]]},
          {"node": "consumer-1", "event": "rebalance", "topic": "%RETRY%G", "t": 160, "after": [["broker-a", "0"]]},
          {"node": "consumer-1", "event": "route", "topic": "T", "t": 500, "namesrv": "ns1", "queues": [["broker-a", "0"]]},
          {"node": "consumer-1", "event": "rebalance", "topic": "T", "t": 600, "after": [["broker-a", "0"]]}]
    kill = FaultWindow("kill", ("consumer-1",), 900, 1500, True)
    routes, owners = replay_intervals(ev, [kill], [], 2000)
    assert sorted((r["broker_name"], r["namesrv"], r["start"], r["end"]) for r in routes) == [
        ("broker-a", "ns0", 100, 500), ("broker-a", "ns1", 500, 900), ("broker-b", "ns0", 100, 500)]
    assert sorted((o["broker_name"], o["queue_id"], o["start"], o["end"]) for o in owners) == [
        ("broker-a", 0, 150, 900), ("broker-b", 0, 150, 600)]


def test_the_report_shows_routes_and_ownership_per_broker_group(clean_output):
    html = clean_output.report_path.read_text()
    assert 'alt="routes and ownership per broker group"' in html


def test_the_routes_plot_draws_both_groups(spark):
    from chaos.checker.plot_routes import render_route_ownership, route_ownership_data

    h = _group_b_lost_and_back().history(spark)
    data = route_ownership_data(h)
    assert {r["broker_name"] for r in data["routes"]} == {"broker-a", "broker-b"}
    b_routes = sorted((r["node"], r["start"], r["end"]) for r in data["routes"] if r["broker_name"] == "broker-b")
    assert b_routes == [("consumer-1", 100, 1500), ("consumer-1", 3500, 5000),
                        ("consumer-2", 100, 1700), ("consumer-2", 3600, 5000)]
    png = render_route_ownership(h, data)
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


def test_what_a_stopping_consumer_writes_while_it_shuts_down_is_no_restart(spark):
    r = _two_consumers().event("consumer-stopping", 1000, "consumer-2", group="G", client_id="c2")
    r.owns(1050, [], client="c2")  # its shutdown's last rebalance, written after it began stopping
    r.owns(1200, ALL, client="c1").event("consumer-stop", 1300, "consumer-2", group="G", client_id="c2")
    r.owns(3000, ALL, client="c1", reason="retry")
    result = check_rebalance(r.history(spark), config())
    assert result.valid is True, (result.reason, result.examples)
    assert [m["change"] for m in result.measurements] == ["consumer-1 started; consumer-2 started",
                                                          "consumer-2 stopping"]
    assert result.measurements[1]["settle_ms"] == 200


def test_a_group_back_in_the_route_before_its_restart_ended_is_judged_from_the_route(spark):
    # broker-b killed at 1000; it registers (its queues return at 3500) before its restart ends at 6000
    r = _two_consumers().fault("kill", ["broker-b-0", "broker-b-1"], 1000, 6000)
    r.route(1500, [A0, A1], client="c1").owns(1600, [A0], client="c1")
    r.route(1700, [A0, A1], client="c2").owns(1800, [A1], client="c2")
    r.route(3500, ALL, client="c1").route(3600, ALL, client="c2").owns(3700, [A0, A1], client="c1")
    r.owns(5900, [A0, A1], client="c1", reason="retry")  # nobody took broker-b's queues back
    result = check_rebalance(r.history(spark), config())
    assert result.valid is False
    assert result.examples[0]["change"].startswith("route seen by consumer-1: +broker-b/0")
