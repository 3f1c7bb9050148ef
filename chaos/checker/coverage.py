"""Coverage by construction: how often a run took each recovery and safety path (`coverage_paths`).

    counts = coverage_counts(history, config)       # {path name: count}, every path present
    info = coverage_info(history, config)           # what verdict.json gets: coverage, claims, missing

Counts come from the loaded histories in a few small Spark jobs: one conditional aggregation
each over the events, the sends and the nemesis history, one pass over the pulls (the first pull
per client and queue, the slave answers inside master outages), and two collections that are
small by construction (the brokers' lock grants and expiries without renewals, the clients'
rebalances, written only when something changed) walked on the driver.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from chaos.checker.config import CheckerConfig
from chaos.checker.coverage_paths import DISK_FULL_MARKERS, FALLBACK_OPS, PATH_NAMES, REFUSALS, unknown_paths
from chaos.checker.faults import broker_identity
from chaos.checker.loader import GQ, History
from chaos.checker.verdict import jsonable

# the event kinds the aggregation reads (the numerous pull-route lines are read by their own jobs)
_COUNTED_EVENTS = ("store-error", "store-recovered", "ha-refused", "ha-restored", "lock", "pull-suggestion",
                   "consumer-leave", "disk-guard", "retention-delete", "clock")


def _n(cond: Column, name: str) -> Column:
    return F.sum(F.when(cond, 1).otherwise(0)).alias(name)


def _one_row(df: DataFrame, *aggs: Column) -> dict[str, int]:
    row = df.agg(*aggs).collect()[0].asDict()
    return {k: int(v or 0) for k, v in row.items()}


def _event_signals(h: History) -> dict[str, int]:
    e = h.ev.filter(F.col("event").isin(*_COUNTED_EVENTS))
    ev, kind, side = F.col("event"), F.col("kind"), F.col("side")
    is_master = F.coalesce(F.col("answering_broker_id"), F.lit(0)) == 0
    store_error = (ev == "store-error") & (side == "broker")
    recovered = ev == "store-recovered"
    return _one_row(
        e,
        _n(store_error & (kind == "torn-tail"), "torn_tail_errors"),
        _n(recovered & (F.coalesce("truncated_bytes", F.lit(0)) > 0), "recovered_truncated"),
        _n(store_error & (kind == "cq-truncated"), "cq_truncated_errors"),
        _n(recovered & (F.coalesce("cq_units_dropped", F.lit(0)) > 0), "recovered_cq_dropped"),
        _n(store_error & (kind == "replica-refused") & is_master, "master_refusals"),
        _n((ev == "ha-refused") & F.col("refusal").isin(*REFUSALS), "slave_refusals"),
        _n(store_error & (kind == "replica-refused") & ~is_master & (F.coalesce("bytes", F.lit(0)) > 0),
           "slave_cut_back"),
        _n(ev == "ha-restored", "ha_restored"),
        _n(store_error & (kind == "bad-record"), "bad_records"),
        _n((ev == "lock") & (side == "client") & F.col("action").isin("expired", "lost"), "client_lapsed"),
        _n((ev == "pull-suggestion") & (F.coalesce("suggest_which_broker_id", F.lit(0)) != 0), "slave_suggested"),
        _n((ev == "consumer-leave") & (F.col("reason") == "expired"), "channel_expired"),
        _n((ev == "disk-guard") & (F.lower("state") == "on"), "disk_guard_on"),
        _n((ev == "disk-guard") & (F.lower("state") == "off"), "disk_guard_off"),
        _n(ev == "retention-delete", "retention_delete"),
        _n((ev == "clock") & F.col("rate").isNotNull() & (F.col("rate") != 1.0), "clock_skewed"),
    )


def _send_signals(h: History) -> dict[str, int]:
    status = F.coalesce(F.col("status"), F.lit(""))
    full = F.lit(False)
    for marker in DISK_FULL_MARKERS:
        full = full | F.lower(status).contains(marker.lower())
    return _one_row(h.sends, _n((F.col("type") == "fail") & full, "disk_full_refusals"),
                    _n((F.col("type") == "ok") & (F.coalesce("attempts", F.lit(1)) > 1), "retried_sends"))


def _nemesis_signals(h: History) -> dict[str, int]:
    started = F.col("phase") == "start"
    return _one_row(h.nemesis, _n(started & (F.col("op") == "link-toxic"), "link_toxic"),
                    _n(started & (F.col("op") == "starve"), "starved"))


def lock_paths(grants: Iterable[dict[str, Any]]) -> tuple[int, int]:
    """(lease expiries followed by a grant to another client, lock moves to another client) from the
    brokers' `granted` and `expired` lock lines (group, topic, broker_name, queue_id, client_id,
    action, t), walked per queue in time order (an expiry before the grant of the same instant)."""
    by_queue: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in grants:
        by_queue.setdefault(tuple(r.get(k) for k in GQ), []).append(r)
    expired_then_other = moved = 0
    for lines in by_queue.values():
        lines.sort(key=lambda r: (r["t"], 0 if r["action"] == "expired" else 1))
        last_grant: str | None = None
        expired_of: str | None = None
        for r in lines:
            if r["action"] == "expired":
                expired_of = r["client_id"]
                continue
            if last_grant is not None and r["client_id"] != last_grant:
                moved += 1
            if expired_of is not None and r["client_id"] != expired_of:
                expired_then_other += 1
            expired_of, last_grant = None, r["client_id"]
    return expired_then_other, moved


def moved_queues(rebalances: Iterable[dict[str, Any]]) -> int:
    """Queues a rebalance gave a client (in its `after`, not its `before`) whose last owner, in an
    earlier rebalance of the group, was another client."""
    owner: dict[tuple[Any, ...], str] = {}
    moved = 0
    for r in sorted(rebalances, key=lambda r: r["t"]):
        client = r["client_id"]
        before = {tuple(q[:2]) for q in r.get("before") or () if q and len(q) >= 2}
        after = {tuple(q[:2]) for q in r.get("after") or () if q and len(q) >= 2}
        for q in after:
            key = (r.get("group"), r.get("topic"), *q)
            if q not in before and owner.get(key) not in (None, client):
                moved += 1
            owner[key] = client
    return moved


def _lock_lines(h: History) -> list[dict[str, Any]]:
    locks = h.locks.filter((F.col("side") == "broker") & F.col("action").isin("granted", "expired")
                           & F.col("client_id").isNotNull())
    return [r.asDict() for r in locks.select(*GQ, "client_id", "action", "t").collect()]


def _rebalance_lines(h: History) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in h.rebalances.select("group", "topic", "client_id", "before", "after", "t")
            .filter(F.col("t").isNotNull()).collect()]


def outage_windows(h: History, cfg: CheckerConfig) -> list[tuple[str | None, str | None, int, int]]:
    """(broker group, client node, from, to): when a group's master was down or unreachable (a fault
    on it), or a client was cut off (a partition of it), to N_r + W_p after (the client's route
    refresh and a pull retry: until then it may still read from the slave)."""
    b = cfg.bounds
    after = b.timers.get("N_r", 0) + b.timers.get("W_p", 0)
    out: list[tuple[str | None, str | None, int, int]] = []
    for w in h.faults:
        # a gray fault slows the master but leaves it reachable: a fall-back then is no outage's
        if w.op not in FALLBACK_OPS or w.gray is not None:
            continue
        for target in w.targets:
            ident = broker_identity(target) if h.is_broker(target) else None
            if ident is not None and ident[1] == 0:
                out.append((ident[0], None, w.start_ms, w.end_ms + after))
            elif ident is None and w.op == "partition":
                out.append((None, target, w.start_ms, w.end_ms + after))
    return out


def _pull_paths(h: History, cfg: CheckerConfig) -> tuple[int, int]:
    """(first pulls of a client on a queue above offset 0, slave answers inside an outage window) in
    one pass over the pulls: the windows are few, so each pull is tested against all of them in one
    expression instead of a join."""
    inside = F.lit(False)
    for broker, node, lo, hi in outage_windows(h, cfg):
        match = F.col("sent_t").between(lo, hi)
        if broker is not None:
            match = match & (F.col("broker_name") == broker)
        if node is not None:
            match = match & (F.col("node") == node)
        inside = inside | match
    fallback = (F.coalesce("broker_id", F.lit(0)) != 0) & inside
    per_queue = h.pulls.groupBy("client_id", *GQ).agg(
        F.min_by("queue_offset", F.struct("sent_t", "t")).alias("first_offset"),
        F.sum(F.when(fallback, 1).otherwise(0)).alias("fallbacks"))
    got = _one_row(per_queue, _n(F.col("first_offset") > 0, "resynced"), F.sum("fallbacks").alias("fallbacks"))
    return got["resynced"], got["fallbacks"]


def coverage_counts(h: History, cfg: CheckerConfig) -> dict[str, int]:
    """Every path of the table with its count in this history (0 when its events are absent)."""
    e = _event_signals(h)
    s = _send_signals(h)
    n = _nemesis_signals(h)
    lease_expired, taken_over = lock_paths(_lock_lines(h))
    resynced, fallbacks = _pull_paths(h, cfg)
    counts = {
        "torn-tail-cut": max(e["recovered_truncated"], e["torn_tail_errors"]),
        "cq-rebuilt": max(e["cq_truncated_errors"], e["recovered_cq_dropped"]),
        "replica-refused": max(e["master_refusals"], e["slave_refusals"]),
        "replica-cut-back": e["slave_cut_back"],
        "master-tail-restored": e["ha_restored"],
        "bad-record-skipped": e["bad_records"],
        "lock-lease-expired": lease_expired,
        "lock-taken-over": taken_over,
        "client-lease-lapsed": e["client_lapsed"],
        "slave-fallback": fallbacks,
        "slave-suggested": e["slave_suggested"],
        "offset-resynced": resynced,
        "consumer-channel-expired": e["channel_expired"],
        "rebalance-moved": moved_queues(_rebalance_lines(h)),
        "producer-retry": s["retried_sends"],
        "disk-guard-on": e["disk_guard_on"],
        "disk-guard-off": e["disk_guard_off"],
        "retention-delete": e["retention_delete"],
        "send-refused-disk-full": s["disk_full_refusals"],
        "clock-skewed": e["clock_skewed"],
        "link-toxic": n["link_toxic"],
        "cpu-starved": n["starved"],
    }
    assert tuple(counts) == PATH_NAMES, "every path of the table is counted, in table order"
    return counts


def claims_for(cfg: CheckerConfig) -> tuple[str, ...]:
    """The paths the run's suite claims to exercise: the config's own list, else the suite's
    (`chaos.suites`); none for a history of no known suite."""
    if cfg.claims is not None:
        return tuple(cfg.claims)
    if not cfg.suite:
        return ()
    try:
        from chaos.suites import SUITES
    except ImportError:  # the checker shipped alone (spark-submit of chaos.checker only)
        return ()
    found = SUITES.get(cfg.suite)
    return tuple(getattr(found, "claims", ())) if found is not None else ()


def coverage_info(h: History, cfg: CheckerConfig) -> dict[str, Any]:
    """verdict.json's coverage keys: `coverage` {path: count}, `coverage_claims` (the suite's),
    `coverage_missing` (claimed, counted 0); on a failure to count, `coverage` is None and
    `coverage_error` says why (advisory: it never costs the run its verdict)."""
    claims = claims_for(cfg)
    try:
        counts = coverage_counts(h, cfg)
    except Exception as exc:
        return {"coverage": None, "coverage_claims": list(claims), "coverage_missing": [],
                "coverage_error": f"coverage could not be counted: {type(exc).__name__}: {exc}"[:2000]}
    out: dict[str, Any] = {"coverage": counts, "coverage_claims": list(claims),
                           "coverage_missing": [c for c in claims if counts.get(c, 0) == 0]}
    unknown = unknown_paths(list(claims))
    if unknown:
        out["coverage_error"] = f"claimed paths that are not in the table: {', '.join(unknown)}"
    return jsonable(out)
