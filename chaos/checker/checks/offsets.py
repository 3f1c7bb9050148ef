"""Consumer offsets after failures (docs/chaos.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from chaos.checker.checks._common import collect_parts, examples_of, overlapping, queue_name, rel_s, s, tally
from chaos.checker.config import CheckerConfig
from chaos.checker.loader import GQ, History
from chaos.checker.verdict import CheckResult, combine_parts, unknown

RESYNC = (
    "Per group and queue: (1) ahead - no client commits an offset above 1 + the highest offset the group was "
    "delivered on that queue before the commit, or an operator's reset set before it (a crash would then lose "
    "messages); (2) monotonic - the "
    "group's committed offset (a client's commits in the order it decided them) never decreases, except when a broker fault (restart, or a returning master "
    "overwriting the slave's newer offsets, RocketMQ #1094/#2513) lies between the two commits, when the "
    "decrease is a hand-over between clients of a concurrent group (also when the same client commits lower "
    "after another client committed that lower value in between, as the broker applied them), or when an "
    "operator reset the queue's offset (a broker's `offset-commit` with source `reset`) between the two commits, or at most P_c "
    "before the higher one (a commit the client sent before it applied the reset), and the lower value is not below the reset one; "
    "the same for each broker's stored offsets, where a slave-sync overwrite is the master-return case and the reset itself "
    "is an operator's deliberate rewind; "
    "(3) resume - the first offset consumed after a consumer restart or a broker fault is >= the last commit "
    "C_last (a deeper rewind is explained only by a broker fault in between and must stay within the "
    "redelivery budget rate x (P_c + max(F_b, S_s)) + one batch) and never the queue start 0 while C_last > 0; "
    "(4) convergence - at the end, each slave's stored offset equals the master's unless the master changed "
    "it less than S_s + P_c (+ slack) before the end of the history.")


def check_offset_resync(h: History, cfg: CheckerConfig) -> CheckResult:
    if not h.has("events"):
        return unknown("offset-resync", RESYNC, "no events history (offset-commit events) in the run")
    if not h.stats["event_kinds"].get("offset-commit"):
        return unknown("offset-resync", RESYNC, "no offset-commit events in the run")
    parts: dict[str, DataFrame] = {
        "sides": h.ev.filter(F.col("event") == "offset-commit").groupBy("side").agg(F.count(F.lit(1)).alias("n")),
        "ahead": _ahead(h),
        "client_dec": _client_decrease_candidates(h, cfg.clock_slack_ms),
        "broker_dec": _broker_decrease_candidates(h),
        "last_stored": h.broker_offsets.groupBy("node", "broker_id", *GQ).agg(
            F.max_by("offset", "t").alias("offset"), F.max("t").alias("t")),
        "resets": h.broker_offsets.filter(F.col("source") == "reset").select(*GQ, "offset", "t"),
    }
    if h.faults or h.exits:
        parts["resume"] = h.epochs.filter(F.col("c_last").isNotNull()).select(
            *GQ, "client_id", "node", "start", "orderly", "first_offset", "min_offset", "prev_max", "c_last", "c_last_t")
        parts["rates"] = h.queue_deliveries.groupBy(*GQ).agg(F.count(F.lit(1)).alias("n"))
    if h.broker_fault_windows:
        # how far each queue had been consumed over time, in steps of one client persist period
        step = max(1, cfg.bounds.P_c)
        parts["progress"] = h.queue_deliveries.filter(F.col("queue_offset").isNotNull()).groupBy(
            *GQ, (F.floor(F.col("t") / step) * step + step).alias("by")).agg(F.max("queue_offset").alias("hi"))
    got, counted = collect_parts(parts, cap=50_000)
    sides = {r["side"]: r["n"] for r in got["sides"]}
    n_commits, n_broker = sides.get("client", 0), sides.get("broker", 0)
    result: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    counts: dict[str, Any] = {"client_commits": n_commits, "broker_offset_events": n_broker}
    examples: list[dict[str, Any]] = []
    n = cfg.max_examples
    has_deliveries = h.stats["rows"]["deliveries"] > 0

    # (1) committed never ahead of processed
    if not n_commits or not has_deliveries:
        result["ahead"] = None
        skipped["ahead"] = "needs client commits and deliveries"
    else:
        counts["commits_ahead"] = counted["ahead"]
        result["ahead"] = counted["ahead"] == 0
        examples += examples_of(got["ahead"], n, anomaly="commit ahead of processing")

    # (2) monotonic commits (the group's view and each broker's stored value)
    resets = _Resets(got["resets"], cfg.bounds.P_c + cfg.clock_slack_ms, cfg.clock_slack_ms)
    decreases = _classify_client_decreases(h, cfg, got["client_dec"], resets) + \
        _classify_broker_decreases(h, cfg, got["broker_dec"], resets)
    bad = [x for x in decreases if not x.get("explained_by")]
    counts["decreases"] = {"unexplained": len(bad), "explained": len(decreases) - len(bad)}
    result["monotonic"] = not bad
    examples += [{"anomaly": "committed offset decreased", **x} for x in bad[:n]]

    # (3) resume after restarts and broker faults
    if not n_commits or not has_deliveries:
        result["resume"] = None
        skipped["resume"] = "needs client commits and deliveries"
    else:
        resumes = _resumes(h, cfg, got.get("resume", []), got.get("rates", []), got.get("progress", []))
        failing = [r for r in resumes if r["verdict"] != "ok" and not r["verdict"].endswith("(explained)")]
        counts["resumes"] = len(resumes)
        counts["resume_anomalies"] = tally(r["verdict"] for r in resumes if r["verdict"] != "ok")
        counts["max_rewind"] = max((r["rewind"] for r in resumes), default=0)
        result["resume"] = not failing
        examples += [{"anomaly": r["verdict"], **r} for r in failing[:n]]

    # (4) convergence of master and slave offsets
    if not n_broker:
        result["convergence"] = None
        skipped["convergence"] = "no broker-side offset events (master and slave stored values)"
    else:
        conv, unsettled = _convergence(h, cfg, got["last_stored"])
        counts["not_converged"] = len(conv)
        counts["not_yet_settled"] = len(unsettled)
        result["convergence"] = False if conv else (None if unsettled else True)
        if result["convergence"] is None:
            skipped["convergence"] = "the master changed offsets too close to the end of the history to judge"
        examples += [{"anomaly": "slave offset differs from master", **x} for x in conv[:n]]
    for e in examples:
        e.pop("t", None)
    failed = [k for k, v in result.items() if v is False]
    return CheckResult("offset-resync", combine_parts(result), RESYNC, counts=counts, examples=examples[:n],
                       parts=result, skipped=skipped, reason=", ".join(failed) or None)


def _ahead(h: History) -> DataFrame:
    d = h.queue_deliveries.select(*GQ, "t", F.col("queue_offset").alias("d_off"), F.lit(0).alias("kind"))
    # an operator's reset forward skips what lies before its offset on purpose: from then on a
    # commit up to it is not ahead of what the group processed
    skipped = h.broker_offsets.filter(F.col("source") == "reset").select(
        *GQ, "t", (F.col("offset") - 1).alias("d_off"), F.lit(0).alias("kind"))
    d = d.unionByName(skipped)
    c = h.commits.filter(~F.col("topic").startswith("%RETRY%")).select(
        *GQ, "t", "offset", "client_id", F.lit(1).alias("kind"))
    u = d.unionByName(c, allowMissingColumns=True)
    w = Window.partitionBy(*GQ).orderBy("t", "kind").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    return (u.withColumn("delivered_max", F.max("d_off").over(w))
            .filter((F.col("kind") == 1) & F.col("delivered_max").isNotNull()
                    & (F.col("offset") > F.col("delivered_max") + 1))
            .select(*GQ, "client_id", "offset", "delivered_max", "t", rel_s(h, "t").alias("t_s")))


def _client_decrease_candidates(h: History, slack_ms: int) -> DataFrame:
    c = h.commits.filter(~F.col("topic").startswith("%RETRY%"))
    # in the order the commits were decided: two of one client in flight at once (one on a pull,
    # one on its own) may be answered the other way round, which lowers nothing the client decided
    w = Window.partitionBy(*GQ).orderBy("decided_t", "t")
    lagged = c.withColumns({"p_offset": F.lag("offset").over(w), "p_t": F.lag("t").over(w),
                            "p_client": F.lag("client_id").over(w)})
    orderly = h.deliv.filter("orderly").select("group").distinct().withColumn("orderly", F.lit(True))
    cands = (lagged.filter(F.col("offset") < F.col("p_offset")).join(orderly, "group", "left")
             .select(*GQ, "client_id", "offset", "t", "p_offset", "p_t", "p_client", "orderly"))
    # Commits are ordered by when each client saw its answer, not by when the broker applied them:
    # another client's commit of the lower value answered just before (or between) the pair may
    # have been applied after the higher one, and the same client, handed the queue back, then
    # starts from it. Such a decrease is that other client's hand-over. The other client's lower
    # value may also reach the broker only with its pulls (FLAG_COMMIT_OFFSET), which its journal
    # does not log as a commit: what a broker applied for another client counts the same.
    applied = h.broker_offsets.filter((F.col("source") == "client") & F.col("client_id").isNotNull())
    others = (c.select(*GQ, "client_id", "offset", "t").unionByName(applied.select(*GQ, "client_id", "offset", "t"))
              .select(*GQ, F.col("client_id").alias("o_client"), F.col("offset").alias("o_offset"),
                      F.col("t").alias("o_t")))
    interleaved = (cands.join(others, GQ).filter(
        (F.col("o_client") != F.col("client_id")) & (F.col("o_offset") <= F.col("offset"))
        & (F.col("o_t") >= F.col("p_t") - slack_ms) & (F.col("o_t") <= F.col("t")))
        .select(*GQ, "client_id", "t", F.col("o_client").alias("lowered_by")).dropDuplicates([*GQ, "client_id", "t"]))
    return cands.join(interleaved, [*GQ, "client_id", "t"], "left")


def _broker_decrease_candidates(h: History) -> DataFrame:
    w = Window.partitionBy("node", *GQ).orderBy("t")
    bo = h.broker_offsets.withColumns({"p_offset": F.lag("offset").over(w), "p_t": F.lag("t").over(w),
                                       "p_client": F.lag("client_id").over(w)})
    orderly = h.deliv.filter("orderly").select("group").distinct().withColumn("orderly", F.lit(True))
    return (bo.filter(F.col("offset") < F.col("p_offset")).join(orderly, "group", "left")
            .select("node", *GQ, "offset", "source", "t", "p_offset", "p_t", "client_id", "p_client", "orderly"))


def _explain_decrease(h: History, cfg: CheckerConfig, t0: int, t1: int, broker_name: str | None) -> str | None:
    """A broker fault of the queue's own group between the two offsets (another group's faults
    leave this queue's offsets alone)."""
    if not cfg.allow_master_return_regression:
        return None
    hit = overlapping(h.group_fault_windows(broker_name), t0, t1, slack=cfg.clock_slack_ms)
    return f"broker fault: {hit[0].label}" if hit else None


class _Resets:
    """Operators' offset resets (broker `offset-commit` events with source `reset`), per queue."""

    def __init__(self, rows: list[dict[str, Any]], before_ms: int, slack_ms: int) -> None:
        self._by_queue: dict[tuple[Any, ...], list[tuple[int, int]]] = {}
        for r in rows:
            self._by_queue.setdefault((r["group"], r["topic"], r["broker_name"], r["queue_id"]), []).append(
                (r["t"], r["offset"]))
        self._before_ms = before_ms
        self._slack_ms = slack_ms

    def explain(self, r: dict[str, Any]) -> str | None:
        """A reset of r's queue between its two offsets (or up to `before_ms` before the higher one: a
        commit sent before the client applied the reset) that the lower offset does not undercut."""
        key = (r["group"], r["topic"], r["broker_name"], r["queue_id"])
        for t, offset in self._by_queue.get(key, ()):
            if r["p_t"] - self._before_ms <= t <= r["t"] + self._slack_ms and r["offset"] >= offset:
                return f"offset reset to {offset} by an operator"
        return None


def _classify_client_decreases(h: History, cfg: CheckerConfig, cands: list[dict[str, Any]],
                               resets: _Resets) -> list[dict[str, Any]]:
    out = []
    for r in sorted(cands, key=lambda r: r["t"]):
        why = resets.explain(r) or _explain_decrease(h, cfg, r["p_t"], r["t"], r.get("broker_name"))
        if why is None and r["p_client"] != r["client_id"] and not r["orderly"]:
            why = "hand-over between clients of a concurrent group"
        if why is None and r["lowered_by"] and not r["orderly"]:
            why = f"hand-over between clients of a concurrent group ({r['lowered_by']} committed the lower offset)"
        out.append({"view": "client commits", "queue": queue_name(r), "group": r["group"], "from": r["p_offset"],
                    "to": r["offset"], "by": r["client_id"], "previous_by": r["p_client"], "t_s": s(h, r["t"]),
                    "explained_by": why})
    return out


def _classify_broker_decreases(h: History, cfg: CheckerConfig, cands: list[dict[str, Any]],
                               resets: _Resets) -> list[dict[str, Any]]:
    out = []
    for r in sorted(cands, key=lambda r: r["t"]):
        if r["source"] == "reset":
            why: str | None = "offset reset by an operator"
        elif reset := resets.explain(r):
            why = reset
        elif r["source"] == "slave-sync" and cfg.allow_master_return_regression:
            why = "slave sync from the master (master-return overwrite)"
        else:
            why = _explain_decrease(h, cfg, r["p_t"], r["t"], r.get("broker_name"))
            if why is None and r["client_id"] and r["p_client"] and r["p_client"] != r["client_id"] \
                    and not r["orderly"]:
                why = "hand-over between clients of a concurrent group"
        out.append({"view": f"stored on {r['node']}", "queue": queue_name(r), "group": r["group"],
                    "from": r["p_offset"], "to": r["offset"], "source": r["source"], "t_s": s(h, r["t"]),
                    "explained_by": why})
    return out


def _resumes(h: History, cfg: CheckerConfig, epochs: list[dict[str, Any]], rate_rows: list[dict[str, Any]],
             progress_rows: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """Epoch starts after a restart of the consuming node or a broker fault, against C_last."""
    if not epochs:
        return []
    b = cfg.bounds
    span = max(1, h.t_end - h.t0)
    rates = {(r["group"], r["topic"], r["broker_name"], r["queue_id"]): r["n"] / span for r in rate_rows}
    progress: dict[tuple[Any, ...], list[tuple[int, int]]] = {}
    for p in progress_rows:
        progress.setdefault((p["group"], p["topic"], p["broker_name"], p["queue_id"]), []).append((p["by"], p["hi"]))
    restarts = [(w.start_ms, t) for w in h.faults if w.op in ("kill", "stop") for t in w.targets]
    restarts += [(e.t_ms, e.node) for e in h.exits]
    out = []
    for r in sorted(epochs, key=lambda r: r["start"]):
        node_restarted = any(node == r["node"] and (r["c_last_t"] or 0) - b.P_c <= t <= r["start"]
                             for t, node in restarts)
        broker = overlapping(h.group_fault_windows(r.get("broker_name")), r["c_last_t"] or r["start"], r["start"],
                             slack=cfg.clock_slack_ms)
        if not node_restarted and not broker:
            continue
        start_offset = r["first_offset"] if r["orderly"] else r["min_offset"]
        rewind = max(0, r["c_last"] - start_offset)
        key = (r["group"], r["topic"], r["broker_name"], r["queue_id"])
        # During a master outage commits land on the slave, and the returning master's table wins
        # (RocketMQ #2513): what was consumed while it was away may come again, so the outage counts.
        outage_ms = sum(w.end_ms - w.start_ms for w in broker)
        budget = int(rates.get(key, 0) * (b.redelivery_window("broker") + outage_ms) + cfg.pull_batch_size)
        # The same allowance by position: the returning master's table holds at least what was
        # committed to it a redelivery window before the outage began, so the group never resumes
        # below what it had consumed by then (less one batch). A queue draining a backlog after
        # the outage consumes faster than its average rate, which the time budget alone misses.
        floor = None
        if broker:
            before = min(w.start_ms for w in broker) - b.redelivery_window("broker")
            floor = max((hi + 1 for by, hi in progress.get(key, ()) if by <= before), default=None)
        within = rewind <= budget or (floor is not None and start_offset >= floor - cfg.pull_batch_size)
        if start_offset == 0 and r["c_last"] > 0:
            verdict = "reset to queue start"
        elif r["prev_max"] is not None and cfg.dense_queues and start_offset > r["prev_max"] + 1:
            verdict = "skip past delivered"
        elif rewind == 0:
            verdict = "ok"
        elif broker and cfg.allow_master_return_regression and within:
            verdict = "rewind past committed (explained)"
        elif broker and cfg.allow_master_return_regression:
            verdict = "rewind beyond budget"
        else:
            verdict = "rewind past committed"
        out.append({"queue": queue_name(r), "group": r["group"], "client": r["client_id"], "t_s": s(h, r["start"]),
                    "after": "consumer restart" if node_restarted else f"broker fault {broker[0].label}",
                    "c_last": r["c_last"], "resumed_at": start_offset, "rewind": rewind, "budget": budget,
                    "consumed_before_outage": floor, "verdict": verdict})
    return out


def _convergence(h: History, cfg: CheckerConfig, last: list[dict[str, Any]]
                 ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    b = cfg.bounds
    bound = b.convergence()
    limit = b.limit(bound)
    table: dict[tuple[Any, ...], dict[int, dict[str, Any]]] = {}
    for r in last:
        if r["broker_id"] is None:
            continue
        key = (r["group"], r["topic"], r["broker_name"], r["queue_id"])
        table.setdefault(key, {})[r["broker_id"]] = r
    bad, unsettled = [], []
    for key, by_id in table.items():
        master = by_id.get(0)
        if master is None:
            continue
        for broker_id, slave in by_id.items():
            if broker_id == 0 or slave["offset"] == master["offset"]:
                continue
            item = {"queue": "/".join(map(str, key[1:])), "group": key[0], "master": master["offset"],
                    "slave": slave["offset"], "slave_id": broker_id, "master_changed_s": s(h, master["t"]),
                    "bound_ms": bound, "slack_ms": b.slack(bound)}
            (bad if h.t_end - master["t"] > limit else unsettled).append(item)
    return bad, unsettled
