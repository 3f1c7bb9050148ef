"""Client findings: misbehaviour of the consumers (any client, mqlab's or a real one), with evidence.

A finding never touches the broker verdict: the checks judge the cluster, findings report what a
client did that a well-behaved RocketMQ client would not, so a run against a client we did not
write can be valid while its client's bugs stay visible. Kinds (docs/real-clients-chaos.md):

    lock-storm                 a client re-sends LOCK_BATCH_MQ for a queue at once after every
                               refusal: at least LOCK_STORM_REFUSALS_PER_S refusals in one second
                               (a client that waits its pull retry after a refusal sends a few)
    unlock-missing-at-shutdown a client stopped gracefully (its consumer-stop event) while the broker
                               still held a live lease of it on a queue it never unlocked
    unlock-during-consume      the broker released a client's lock on a queue while a batch of that
                               client from that queue was between its consume start and end
    consume-after-unlock       a client started a batch from a queue after the broker released its
                               lock there, with no new grant in between
    shared-queue               two clients of a concurrent group consumed one queue at once: its
                               deliveries went A, B, A with A back within SHARED_RETURN_MS, again
                               and again (a client that ignores the broker's consumer-ids-changed
                               notice keeps a reassigned queue until its own next rebalance)
    resumed-stale-cache        the client's own log says a queue given back to it resumed the pull
                               request it had dropped, with the messages that request had cached before
                               the drop: it consumes them again (Apache's C++ client 1.2.3)

All times are CLOCK_MONOTONIC. A broker event is stamped when the broker handles the request, so
the client sent it earlier: "released inside a batch" and "batch after the release" need no slack.
Evidence comes from histories that exist for every client (broker lock events, the client's
journalled deliveries, and its consumer-start / consumer-stop events), and for `resumed-stale-cache`
from the client's own log (its `queue-resumed` events).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from chaos.checker.checks._common import rel_s, rows
from chaos.checker.config import CheckerConfig
from chaos.checker.loader import GQ, History
from chaos.checker.schemas import LOCK_HELD_ACTIONS

LOCK_STORM_REFUSALS_PER_S = 50
# a queue handed back to a client within this long of its last delivery, this often, was never
# given up: a client that rebalances on NOTIFY_CONSUMER_IDS_CHANGED lets a queue go in milliseconds
SHARED_RETURN_MS = 1_000
SHARED_MIN_HANDBACKS = 3
EXAMPLES_PER_KIND = 10
KINDS: dict[str, str] = {
    "lock-storm": f"at least {LOCK_STORM_REFUSALS_PER_S} refused LOCK_BATCH_MQ of one client for one queue in a second",
    "unlock-missing-at-shutdown": "a client stopped gracefully while the broker still held its live lease on a queue",
    "unlock-during-consume": "the broker released a client's queue lock while that client consumed a batch from it",
    "consume-after-unlock": "a client started a batch from a queue after releasing its lock, with no grant since",
    "shared-queue": f"two clients of a concurrent group took turns on one queue at least {SHARED_MIN_HANDBACKS} "
                    f"times, each back within {SHARED_RETURN_MS} ms: both consumed it at once",
    "resumed-stale-cache": "a queue given back to a client resumed its dropped pull request with the messages "
                           "cached before the drop, which the client consumes again",
}
SILENCING_OPS = ("pause", "partition")  # a client that cannot reach the broker cannot unlock either


def _broker_locks(h: History) -> DataFrame:
    return h.locks.filter((F.col("side") == "broker") & F.col("client_id").isNotNull())


def lock_storms(h: History) -> DataFrame:
    """Per (group, queue, client): the seconds with at least LOCK_STORM_REFUSALS_PER_S refusals."""
    denied = _broker_locks(h).filter(F.col("action") == "denied").withColumn("second", F.floor(F.col("t") / 1000))
    per_s = denied.groupBy(*GQ, "client_id", "second").agg(
        F.count(F.lit(1)).alias("n"), F.min("t").alias("lo"), F.max("t").alias("hi"))
    storm = per_s.filter(F.col("n") >= LOCK_STORM_REFUSALS_PER_S)
    return storm.groupBy(*GQ, "client_id").agg(
        F.min("lo").alias("first_t"), F.max("hi").alias("last_t"), F.sum("n").alias("refusals"),
        F.max("n").alias("peak_per_s"), F.count(F.lit(1)).alias("storm_seconds"))


def _stops(h: History) -> DataFrame:
    return (h.ev.filter((F.col("event") == "consumer-stop") & F.col("client_id").isNotNull())
            .select("node", "group", "client_id", F.col("mono_ms").alias("stop_t")))


def unlocks_missing(h: History, slack_ms: int) -> DataFrame:
    """Queues whose last broker lock event for a stopping client (up to its stop) is a live grant."""
    stops = _stops(h)
    locks = _broker_locks(h).select(*GQ, "client_id", "action", "lease_end_mono_ms", "t")
    joined = locks.join(stops, ["group", "client_id"]).filter(F.col("t") <= F.col("stop_t") + slack_ms)
    w = Window.partitionBy(*GQ, "client_id", "stop_t").orderBy(F.col("t").desc(), F.col("action"))
    last = joined.withColumn("rank", F.row_number().over(w)).filter(F.col("rank") == 1)
    return last.filter(F.col("action").isin(*LOCK_HELD_ACTIONS) & (F.col("lease_end_mono_ms") > F.col("stop_t"))
                       ).select("node", *GQ, "client_id", "stop_t", F.col("t").alias("held_since_t"),
                                "lease_end_mono_ms")


def _releases(h: History) -> DataFrame:
    return _broker_locks(h).filter(F.col("action") == "released").select(
        *GQ, "client_id", F.col("t").alias("release_t"))


def _batches(h: History) -> DataFrame:
    d = h.deliv.filter(F.col("orderly") & F.col("consume_start_mono_ms").isNotNull() & F.col("queue_id").isNotNull())
    return d.groupBy(*GQ, "client_id", "node", F.col("t").alias("start")).agg(
        F.max("t_end").alias("end"), F.min("queue_offset").alias("first_offset"), F.count(F.lit(1)).alias("msgs"))


def unlocks_during_consume(h: History) -> DataFrame:
    b, r = _batches(h), _releases(h)
    return b.join(r, [*GQ, "client_id"]).filter((F.col("release_t") > F.col("start")) & (F.col("release_t") < F.col("end")))


def consumes_after_unlock(h: History) -> DataFrame:
    """Batches after the client's latest release of the queue, with no grant to it in between."""
    b, r = _batches(h), _releases(h)
    grants = _broker_locks(h).filter(F.col("action") == "granted").select(*GQ, "client_id", F.col("t").alias("grant_t"))
    after = b.join(r, [*GQ, "client_id"]).filter(F.col("release_t") < F.col("start"))
    w = Window.partitionBy(*GQ, "client_id", "start").orderBy(F.col("release_t").desc())
    latest = after.withColumn("rank", F.row_number().over(w)).filter(F.col("rank") == 1).drop("rank")
    regranted = latest.join(grants, [*GQ, "client_id"]).filter(
        (F.col("grant_t") > F.col("release_t")) & (F.col("grant_t") <= F.col("start"))).select(
        *GQ, "client_id", "start").distinct()
    return latest.join(regranted, [*GQ, "client_id", "start"], "left_anti")


def shared_queues(h: History) -> DataFrame:
    """Per (group, queue, client pair) of a concurrent group: ownership epochs A, B, A with A back
    within SHARED_RETURN_MS, at least SHARED_MIN_HANDBACKS times."""
    d = h.queue_deliveries.filter(~F.col("orderly"))
    ep = d.groupBy(*GQ, "epoch").agg(F.first("client_id").alias("client_id"), F.min("t").alias("start"),
                                     F.max("t").alias("last_t"))
    w = Window.partitionBy(*GQ).orderBy("epoch")
    ep = ep.withColumns({"p_client": F.lag("client_id").over(w), "pp_client": F.lag("client_id", 2).over(w),
                         "pp_last": F.lag("last_t", 2).over(w)})
    back = ep.filter((F.col("pp_client") == F.col("client_id"))
                     & (F.col("start") - F.col("pp_last") <= SHARED_RETURN_MS))
    return (back.groupBy(*GQ, F.array_sort(F.array("client_id", "p_client")).alias("clients"))
            .agg(F.count(F.lit(1)).alias("handbacks"), F.min("pp_last").alias("first_t"), F.max("start").alias("last_t"))
            .filter(F.col("handbacks") >= SHARED_MIN_HANDBACKS))


def _silenced(h: History, node: str | None, t: float) -> bool:
    """The client or a broker was paused, partitioned or down at `t`: an unlock could not get through."""
    windows = [*h.node_faults(node, SILENCING_OPS), *h.broker_fault_windows]
    return any(w.start_ms <= t <= w.end_ms for w in windows)


def client_findings(h: History, cfg: CheckerConfig) -> dict[str, Any]:
    """{"count": N, "by_kind": {kind: n}, "findings": [{kind, client_id, queue, t_s, evidence...}]}."""
    found: list[dict[str, Any]] = []
    if not h.has("events"):
        return {"count": 0, "by_kind": dict.fromkeys(KINDS, 0), "findings": [], "kinds": KINDS,
                "skipped": "no events in the run (broker lock events are the evidence)"}
    for r in rows(lock_storms(h).select("*", rel_s(h, "first_t").alias("t_s"), rel_s(h, "last_t").alias("until_s"))):
        found.append({"kind": "lock-storm", "client_id": r["client_id"], "queue": _queue(r), "t_s": r["t_s"],
                      "evidence": f"{r['refusals']} LOCK_BATCH_MQ refusals in {r['storm_seconds']} s "
                                  f"(peak {r['peak_per_s']}/s) from {r['t_s']} s to {r['until_s']} s"})
    missing = rows(unlocks_missing(h, cfg.clock_slack_ms).select(
        "*", rel_s(h, "stop_t").alias("t_s"), rel_s(h, "held_since_t").alias("held_s"),
        rel_s(h, "lease_end_mono_ms").alias("lease_end_s")))
    for r in missing:
        if _silenced(h, r["node"], r["stop_t"]):
            continue
        found.append({"kind": "unlock-missing-at-shutdown", "client_id": r["client_id"], "queue": _queue(r),
                      "t_s": r["t_s"], "evidence": f"stopped at {r['t_s']} s holding the broker lock granted or "
                                                   f"renewed at {r['held_s']} s (lease to {r['lease_end_s']} s); "
                                                   "no UNLOCK reached the broker"})
    for r in rows(unlocks_during_consume(h).select("*", rel_s(h, "release_t").alias("t_s"),
                                                   rel_s(h, "start").alias("start_s"), rel_s(h, "end").alias("end_s"))):
        found.append({"kind": "unlock-during-consume", "client_id": r["client_id"], "queue": _queue(r),
                      "t_s": r["t_s"], "evidence": f"broker released the lock at {r['t_s']} s inside the client's "
                                                   f"batch [{r['start_s']}, {r['end_s']}] s from queue offset "
                                                   f"{r['first_offset']} ({r['msgs']} messages)"})
    for r in rows(consumes_after_unlock(h).select("*", rel_s(h, "start").alias("t_s"),
                                                  rel_s(h, "release_t").alias("release_s"))):
        found.append({"kind": "consume-after-unlock", "client_id": r["client_id"], "queue": _queue(r),
                      "t_s": r["t_s"], "evidence": f"batch from queue offset {r['first_offset']} started at "
                                                   f"{r['t_s']} s; the broker released this client's lock at "
                                                   f"{r['release_s']} s and granted none since"})
    shared = [] if cfg.pop_consumers else rows(shared_queues(h).select(
        "*", rel_s(h, "first_t").alias("t_s"), rel_s(h, "last_t").alias("until_s")))
    for r in shared:
        found.append({"kind": "shared-queue", "client_id": " + ".join(r["clients"]), "queue": _queue(r),
                      "t_s": r["t_s"], "evidence": f"{r['handbacks']} hand-backs within {SHARED_RETURN_MS} ms "
                                                   f"between {r['t_s']} s and {r['until_s']} s"})
    for r in rows(h.queue_resumes.select("*", rel_s(h, "t").alias("t_s"))):
        found.append({"kind": "resumed-stale-cache", "client_id": r["client_id"], "queue": _queue(r),
                      "t_s": r["t_s"], "evidence": f"the client's log: the queue came back at {r['t_s']} s and its "
                                                   f"dropped pull request resumed at offset {r['queue_offset']}, "
                                                   "with what it had cached before the drop"})
    by_kind = {k: sum(1 for f in found if f["kind"] == k) for k in KINDS}
    found.sort(key=lambda f: f["t_s"] if f["t_s"] is not None else 0)
    shown: list[dict[str, Any]] = []
    for kind in KINDS:
        shown += [f for f in found if f["kind"] == kind][:EXAMPLES_PER_KIND]
    return {"count": len(found), "by_kind": by_kind, "findings": shown, "kinds": KINDS}


def _queue(r: dict[str, Any]) -> str:
    return f"{r.get('topic')}/{r.get('broker_name')}/{r.get('queue_id')}"
