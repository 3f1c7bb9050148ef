"""Orderly-consumption locks: mutual exclusion, lease discipline, stale owners (takeover time: takeover.py).

The rules are in docs/chaos.md. Intervals and leases are compared on CLOCK_MONOTONIC (`mono_ms`).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from chaos.checker.checks._common import collect_parts, examples_of, queue_name, rel_s, s
from chaos.checker.config import CheckerConfig
from chaos.checker.faults import SILENT_OPS
from chaos.checker.loader import GQ, History
from chaos.checker.schemas import LOCK_GONE_ACTIONS, LOCK_HELD_ACTIONS
from chaos.checker.verdict import CheckResult, combine_parts, unknown
from chaos.skew import safe_ratio, window_ratio

LOCK = (
    "Per orderly group and queue: (1) mutual exclusion - no two clients have overlapping consume intervals "
    "[consume_start, consume_end]; an overlap is expected-by-design (reported, not failed) when the older "
    "holder was paused or partitioned for longer than L_b - L_c inside that batch (RocketMQ does not fence "
    "in-flight batches), expected-by-skew when an injected clock rate took r_c / r_b below (L_c + slack) / L_b "
    "during its lease (the run names it before it starts), otherwise a bug; (2) lease discipline - the broker never grants a queue to B while "
    "A's lease is unexpired and A has not released it (unless the broker restarted, which empties its lock "
    "table), a client never starts a batch unless its last lock event is granted/renewed with a believed "
    "deadline not yet passed, and a client's believed deadline never exceeds the broker's lease; (3) no "
    "offset commit for a queue, decided (its lock checked) after the queue's lock was granted to another client, "
    "from a client other than the one most recently granted it; a commit is timed by when it was decided "
    "(decided_mono_ms), not by when its answer was logged; (4) lease expiry - a broker never declares a lease "
    "expired before the end it recorded at that client's last grant or renewal (a lease measured on the wall "
    "clock does, at a forward step); (5) lease renewal - a client's lease lapses only when a fault on it, on a "
    "broker or on one of its links falls within the lease before the lapse (a holder renews every R_l, L_c - R_l "
    "before its lease ends); a lapse is the client's `expired`, or a lease whose end passed before the client "
    "next asked for the queue (or released it at shutdown) when it had nothing to consume to notice it.")

def _batches(h: History) -> DataFrame:
    d = h.deliv.filter(F.col("orderly") & F.col("consume_start_mono_ms").isNotNull() & F.col("group").isNotNull()
                       & F.col("queue_id").isNotNull())
    return d.groupBy(*GQ, "client_id", "node", F.col("consume_start_mono_ms").alias("start")).agg(
        F.max("t_end").alias("end"), F.min("queue_offset").alias("first_offset"),
        F.max("queue_offset").alias("last_offset"), F.count(F.lit(1)).alias("msgs"))


def check_lock_exclusivity(h: History, cfg: CheckerConfig) -> CheckResult:
    slack = cfg.clock_slack_ms
    if not h.has("deliveries") and not h.has("events"):
        return unknown("lock-exclusivity", LOCK, "no deliveries and no events in the run")
    batches = h.persist(_batches(h))
    parts: dict[str, DataFrame] = {
        "sides": h.locks.groupBy("side").agg(F.count(F.lit(1)).alias("n")),
        "batches": batches.agg(F.count(F.lit(1)).alias("n")),
        "overlaps": _overlap_candidates(batches, slack),
        "double": _double_grant_candidates(h, slack),
        "late": _consume_without_lock(h, batches, slack).select(
            *GQ, "client_id", "t", rel_s(h, "t").alias("t_s"), "last_action",
            rel_s(h, "last_lease_end").alias("lease_end_s")),
        "deadline": _client_deadline_past_broker(h, slack).select(
            *GQ, "client_id", "t", rel_s(h, "t").alias("t_s"), rel_s(h, "lease_end_mono_ms").alias("client_deadline_s"),
            rel_s(h, "b_lease").alias("broker_lease_s")),
    }
    parts["early"] = _early_expiries(h, slack)
    parts["lapses"] = h.locks.filter((F.col("side") == "client") & (F.col("action") == "expired")).select(
        *GQ, "client_id", "node", "t", "lease_end_mono_ms").unionByName(_unrenewed_leases(h, cfg.bounds.slack(
            cfg.bounds.L_c)))
    parts["stops"] = h.ev.filter(F.col("event").isin("consumer-stopping", "consumer-stop")).select(
        "node", F.col("mono_ms").alias("t"))
    has_commits = bool(h.stats["event_kinds"].get("offset-commit"))
    if has_commits:
        for side in ("broker", "client"):
            parts[f"stale_{side}"] = _stale_commits(h, slack, side).select(
                *GQ, F.col("c_client").alias("client_id"), "holder", "offset", "t",
                rel_s(h, "holder_t").alias("holder_granted_s"), rel_s(h, "t").alias("t_s"))
    got, counted = collect_parts(parts)
    lock_sides = {r["side"]: r["n"] for r in got["sides"]}
    n_batches = got["batches"][0]["n"]
    if not n_batches and not lock_sides:
        return unknown("lock-exclusivity", LOCK, "no orderly consumption and no lock events in the run")
    result: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    counts: dict[str, Any] = {"orderly_batches": n_batches, "lock_events": lock_sides}
    examples: list[dict[str, Any]] = []
    n = cfg.max_examples

    # (1) mutual exclusion
    if not n_batches:
        result["mutual-exclusion"] = None
        skipped["mutual-exclusion"] = "no orderly deliveries with consume intervals"
    else:
        overlaps = _classify_overlaps(h, cfg, got["overlaps"])
        bugs = [o for o in overlaps if o["class"] == "bug"]
        expected = [o for o in overlaps if o["class"] in ("expected-by-design", "expected-by-skew")]
        counts["overlaps"] = {"bug": len(bugs), "expected-by-design": sum(o["class"] == "expected-by-design"
                                                                          for o in overlaps)}
        if any(o["class"] == "expected-by-skew" for o in overlaps):
            counts["overlaps"]["expected-by-skew"] = sum(o["class"] == "expected-by-skew" for o in overlaps)
        failing = bugs + (expected if cfg.fail_expected_overlaps else [])
        result["mutual-exclusion"] = not failing
        examples += [{"anomaly": f"overlap ({o['class']})", **o} for o in (bugs + expected)[:n]]

    # (2) lease discipline
    if not lock_sides.get("broker"):
        result["lease-broker"] = None
        skipped["lease-broker"] = "no broker-side lock events"
    else:
        double = _classify_double_grants(h, got["double"])
        real = [v for v in double if not v.get("excused_by")]
        counts["double_grants"] = len(real)
        counts["double_grants_after_broker_restart"] = len(double) - len(real)
        result["lease-broker"] = not real
        examples += [{"anomaly": "grant while another lease is live", **v} for v in real[:n]]
    if lock_sides.get("client") and n_batches:
        counts["batches_without_valid_lock"] = counted["late"]
        counts["client_deadline_after_broker_lease"] = counted["deadline"]
        result["lease-client"] = counted["late"] == 0 and counted["deadline"] == 0
        examples += examples_of(got["late"], n, anomaly="consume without a valid lock")
        examples += examples_of(got["deadline"], n, anomaly="client deadline beyond broker lease")
    else:
        result["lease-client"] = None
        skipped["lease-client"] = "needs client lock events and orderly consume intervals"

    if lock_sides.get("broker"):
        # a broker must never end a lease before its own recorded end: a lease on the wall clock
        # (RocketMQ's) does, at a forward step of the broker's wall clock
        early = got["early"]
        counts["leases_expired_early"] = len(early)
        result["lease-expiry"] = not early
        examples += [{"anomaly": "lease declared expired before its end", "queue": queue_name(r), "group": r["group"],
                      "client_id": r["client_id"], "expired_s": s(h, r["t"]), "lease_end_s": s(h, r["p_lease"]),
                      "early_ms": r["p_lease"] - r["t"]} for r in early[:n]]
    else:
        result["lease-expiry"] = None
        skipped["lease-expiry"] = "no broker-side lock events"
    if lock_sides.get("client"):
        # a holder renews every R_l, so its lease (L_c) lapses only when something kept a renewal
        # from the broker for L_c - R_l: a fault on the holder, on a broker, or on one of its links
        # (the renewal walks the brokers one after another, so a slow one delays the others')
        unexplained = _unexplained_lapses(h, cfg, got["lapses"], [r["t"] for r in got["stops"]])
        counts["client_leases_lapsed"] = len(got["lapses"])
        counts["client_leases_lapsed_without_fault"] = len(unexplained)
        result["lease-renewal"] = not unexplained
        examples += unexplained[:n]
    else:
        result["lease-renewal"] = None
        skipped["lease-renewal"] = "no client-side lock events"

    # (3) no stale-owner commits
    if not has_commits or not lock_sides:
        result["stale-commit"] = None
        skipped["stale-commit"] = "needs offset commits and lock events"
    else:
        side = "broker" if lock_sides.get("broker") else "client"
        counts["stale_owner_commits"] = counted[f"stale_{side}"]
        result["stale-commit"] = counted[f"stale_{side}"] == 0
        examples += examples_of(got[f"stale_{side}"], n, anomaly="commit by a former owner")
    for e in examples:
        e.pop("t", None)
    failed = [k for k, v in result.items() if v is False]
    return CheckResult("lock-exclusivity", combine_parts(result), LOCK, counts=counts, examples=examples[:n],
                       parts=result, skipped=skipped, reason=", ".join(failed) or None)


def _early_expiries(h: History, slack: int) -> DataFrame:
    """Broker `expired` events before the lease end the same broker recorded at that client's last
    grant or renewal of the queue (all on the real monotonic timeline)."""
    bl = h.locks.filter(F.col("side") == "broker")
    keys = ["node", *GQ, "client_id"]
    expired = bl.filter(F.col("action") == "expired").select(*keys, "t")
    held = bl.filter(F.col("action").isin(*LOCK_HELD_ACTIONS) & F.col("lease_end_mono_ms").isNotNull()).select(
        *keys, F.col("t").alias("p_t"), F.col("lease_end_mono_ms").alias("p_lease"))
    joined = expired.join(held, keys).filter(F.col("p_t") <= F.col("t"))
    w = Window.partitionBy(*keys, "t").orderBy(F.col("p_t").desc())
    last = joined.withColumn("rank", F.row_number().over(w)).filter(F.col("rank") == 1)
    return last.filter(F.col("p_lease") > F.col("t") + slack).select(*keys, "t", "p_t", "p_lease")


def _unrenewed_leases(h: History, slack: int) -> DataFrame:
    """Client leases that ran out with no renewal even tried: a grant or renewal whose lease end
    passed (plus `slack`) before the client's next request for the queue (or its release at
    shutdown). A client notices a lapse only when it next consumes the queue (an `expired` event,
    counted as it is), so one that stopped renewing and had nothing left to consume would hide it.
    Not these: a renewal sent in time but answered late (only a fault delays it), and a queue the
    client gave away (no renewal until its delayed release, by design)."""
    keys = ["node", *GQ, "client_id"]
    w = Window.partitionBy(*keys).orderBy("t")
    nxt = (h.locks.filter(F.col("side") == "client")
           .withColumn("next_t", F.lead("t").over(w)).withColumn("next_action", F.lead("action").over(w))
           .withColumn("next_reason", F.lead("reason").over(w)))
    came_back = F.col("next_action").isin("requested", *LOCK_HELD_ACTIONS) | (
        (F.col("next_action") == "released") & (F.col("next_reason") == "shutdown"))
    return nxt.filter(F.col("action").isin(*LOCK_HELD_ACTIONS) & F.col("lease_end_mono_ms").isNotNull()
                      & (F.col("next_t") > F.col("lease_end_mono_ms") + slack) & came_back).select(
        *GQ, "client_id", "node", F.col("lease_end_mono_ms").alias("t"), "lease_end_mono_ms")


def _unexplained_lapses(h: History, cfg: CheckerConfig, lapses: list[dict[str, Any]],
                        stops: list[int]) -> list[dict[str, Any]]:
    """Client lease lapses (`expired` on the client side, or a lease nobody tried to renew) with no
    fault on the holder's node, on a broker, or on a link of the holder within the lease before the
    lapse; a consumer stopping then (a stop fault, the end of the run) explains it too: the group
    rebalances and the brokers stop one by one."""
    b = cfg.bounds
    out = []
    for r in lapses:
        end = r["lease_end_mono_ms"] if r["lease_end_mono_ms"] is not None else r["t"]
        lo, hi = end - b.L_c - b.slack(b.L_c), max(end, r["t"]) + cfg.clock_slack_ms
        faults = [w for w in h.faults if w.start_ms <= hi and w.end_ms >= lo
                  and (not w.targets or r["node"] in w.targets or any(h.is_broker(t) for t in w.targets))]
        exits = [e for e in h.exits if lo <= e.t_ms <= hi and (e.node == r["node"] or h.is_broker(e.node))]
        if not faults and not exits and not any(lo - b.L_b <= t <= hi for t in stops):
            out.append({"anomaly": "client lease lapsed with no fault to explain it", "queue": queue_name(r),
                        "group": r["group"], "client_id": r["client_id"], "lease_end_s": s(h, end),
                        "renewal_margin_ms": b.L_c - b.R_l})
    return out


def _overlap_candidates(batches: DataFrame, slack: int) -> DataFrame:
    """Batches that start before another client's earlier batch ended (running max, and the previous batch)."""
    w = Window.partitionBy(*GQ).orderBy("start", "client_id")
    before = w.rowsBetween(Window.unboundedPreceding, -1)
    b = batches.withColumns({
        "o_end": F.max("end").over(before), "o_client": F.max_by("client_id", "end").over(before),
        "o_node": F.max_by("node", "end").over(before), "o_start": F.max_by("start", "end").over(before),
        "p_end": F.lag("end").over(w), "p_client": F.lag("client_id").over(w), "p_node": F.lag("node").over(w),
        "p_start": F.lag("start").over(w)})
    by_max = (F.col("o_end") > F.col("start") + slack) & (F.col("o_client") != F.col("client_id"))
    by_lag = (F.col("p_end") > F.col("start") + slack) & (F.col("p_client") != F.col("client_id"))

    def pick(name: str) -> Any:
        return F.when(by_max, F.col(f"o_{name}")).otherwise(F.col(f"p_{name}")).alias(f"older_{name}")

    return b.filter(by_max | by_lag).select(*GQ, "client_id", "node", "start", "end", pick("client"), pick("node"),
                                            pick("start"), pick("end"))


def _classify_overlaps(h: History, cfg: CheckerConfig, cands: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Expected-by-design when the older holder was paused or partitioned past L_b - L_c inside its batch;
    expected-by-skew when a clock fault took r_c / r_b below the safe ratio (chaos.skew) during the older
    holder's lease (on its node or on a broker)."""
    b = cfg.bounds
    margin = b.L_b - b.L_c
    floor = safe_ratio(b.L_c, b.L_b)
    out = []
    for r in sorted(cands, key=lambda r: r["start"]):
        paused = [w for w in h.node_faults(r["older_node"], SILENT_OPS)
                  if min(w.end_ms, r["older_end"]) - max(w.start_ms, r["older_start"]) >= margin - cfg.clock_slack_ms]
        skewed = [w for w in h.faults if w.op == "clock" and w.start_ms <= r["end"]
                  and w.end_ms >= r["older_start"] - b.L_b
                  and (r["older_node"] in w.targets or any(h.is_broker(t) for t in w.targets))
                  and (ratio := window_ratio(w.detail, w.targets)) is not None and ratio < floor]
        cls = "expected-by-design" if paused else "expected-by-skew" if skewed else "bug"
        out.append({"queue": queue_name(r), "group": r["group"], "older_client": r["older_client"],
                    "older_batch_s": [s(h, r["older_start"]), s(h, r["older_end"])], "client": r["client_id"],
                    "batch_s": [s(h, r["start"]), s(h, r["end"])],
                    "overlap_ms": min(r["older_end"], r["end"]) - r["start"],
                    "class": cls, "older_paused": paused[0].label if paused else None,
                    "skew": skewed[0].label if skewed else None})
    return out


def _double_grant_candidates(h: History, slack: int) -> DataFrame:
    """Broker grants made while another client's lease on the queue was live, whatever lies between.

    A lease is live from a grant or renewal until its lease end, unless its holder released the
    queue in between. An `expired` event ends nothing by itself (a broker that declares a lease
    expired before its end is the bug this looks for), and neither does a third client's event."""
    bl = h.locks.filter(F.col("side") == "broker")
    keys = ["node", *GQ]
    grants = bl.filter(F.col("action") == "granted").select(*keys, "client_id", "t")
    held = bl.filter(F.col("action").isin(*LOCK_HELD_ACTIONS) & F.col("lease_end_mono_ms").isNotNull()).select(
        *keys, F.col("client_id").alias("p_client"), F.col("t").alias("p_t"), F.col("lease_end_mono_ms").alias("p_lease"))
    released = bl.filter(F.col("action") == "released").select(
        *keys, F.col("client_id").alias("p_client"), F.col("t").alias("r_t"))
    live = grants.join(held, keys).filter((F.col("p_client") != F.col("client_id")) & (F.col("p_t") < F.col("t"))
                                          & (F.col("p_lease") > F.col("t") + slack))
    freed = live.join(released, [*keys, "p_client"]).filter(
        (F.col("r_t") >= F.col("p_t")) & (F.col("r_t") <= F.col("t") + slack)).select(*keys, "client_id", "t", "p_client", "p_t")
    live = live.join(freed, [*keys, "client_id", "t", "p_client", "p_t"], "left_anti")
    return live.groupBy(*keys, "client_id", "t").agg(
        F.max_by("p_client", "p_lease").alias("p_client"), F.max("p_lease").alias("p_lease"),
        F.max_by("p_t", "p_lease").alias("p_t"))


def _classify_double_grants(h: History, cands: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A restart of the broker in between empties its lock table: RocketMQ's behaviour, excused."""
    out = []
    for r in sorted(cands, key=lambda r: r["t"]):
        restarts = [w for w in h.broker_fault_windows if w.hits(r["node"]) and w.op in ("kill", "stop")
                    and w.start_ms <= r["t"] and w.end_ms >= r["p_t"]]
        out.append({"broker": r["node"], "queue": queue_name(r), "group": r["group"], "holder": r["p_client"],
                    "holder_lease_end_s": s(h, r["p_lease"]), "granted_to": r["client_id"], "t_s": s(h, r["t"]),
                    "excused_by": restarts[0].label if restarts else None})
    return out


def _consume_without_lock(h: History, batches: DataFrame, slack: int) -> DataFrame:
    cl = h.locks.filter((F.col("side") == "client") & (F.col("action") != "requested"))
    with_locks = cl.select("group", "client_id").distinct()
    ev = cl.select(*GQ, "client_id", "t", "action", "lease_end_mono_ms", F.lit(0).alias("kind"))
    bt = batches.join(with_locks, ["group", "client_id"], "left_semi").select(
        *GQ, "client_id", F.col("start").alias("t"), F.lit(1).alias("kind"))
    u = ev.unionByName(bt, allowMissingColumns=True)
    w = Window.partitionBy(*GQ, "client_id").orderBy("t", "kind").rowsBetween(Window.unboundedPreceding,
                                                                            Window.currentRow)
    held = F.col("action").isin(*LOCK_HELD_ACTIONS)
    u = u.withColumns({"last_action": F.last("action", ignorenulls=True).over(w),
                       "last_lease_end": F.last(F.when(held, F.col("lease_end_mono_ms")), ignorenulls=True).over(w)})
    return u.filter((F.col("kind") == 1) & (
        F.col("last_action").isNull() | F.col("last_action").isin(*LOCK_GONE_ACTIONS)
        | (F.col("last_lease_end").isNotNull() & (F.col("last_lease_end") < F.col("t") - slack))))


def _client_deadline_past_broker(h: History, slack: int) -> DataFrame:
    held = h.locks.filter(F.col("action").isin(*LOCK_HELD_ACTIONS) & F.col("lease_end_mono_ms").isNotNull())
    u = held.select(*GQ, "client_id", "t", "lease_end_mono_ms",
                    F.when(F.col("side") == "broker", 0).otherwise(1).alias("kind"))
    w = Window.partitionBy(*GQ, "client_id").orderBy("t", "kind").rowsBetween(Window.unboundedPreceding,
                                                                            Window.currentRow)
    u = u.withColumn("b_lease", F.last(F.when(F.col("kind") == 0, F.col("lease_end_mono_ms")), ignorenulls=True)
                     .over(w))
    return u.filter((F.col("kind") == 1) & F.col("b_lease").isNotNull()
                    & (F.col("lease_end_mono_ms") > F.col("b_lease") + slack))


def _stale_commits(h: History, slack: int, side: str) -> DataFrame:
    """Commits by a client other than the one most recently granted the queue (by `side`'s grants) when
    the commit was decided: a commit decided just before a SIGSTOP is logged when its answer comes, after
    SIGCONT, maybe past a grant to another client that it did not follow."""
    grants = h.locks.filter((F.col("side") == side) & (F.col("action") == "granted"))
    groups = grants.select("group").distinct()
    g = grants.select(*GQ, "t", F.col("client_id").alias("holder"), F.lit(0).alias("kind"))
    c = h.commits.join(groups, "group", "left_semi").select(
        *GQ, F.col("decided_t").alias("t"), "offset", F.col("client_id").alias("c_client"), F.lit(1).alias("kind"))
    u = g.unionByName(c, allowMissingColumns=True)
    w = Window.partitionBy(*GQ).orderBy("t", "kind").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    u = u.withColumns({"holder": F.last("holder", ignorenulls=True).over(w),
                       "holder_t": F.last(F.when(F.col("kind") == 0, F.col("t")), ignorenulls=True).over(w)})
    return u.filter((F.col("kind") == 1) & F.col("holder").isNotNull() & (F.col("c_client") != F.col("holder"))
                    & (F.col("t") > F.col("holder_t") + slack))
