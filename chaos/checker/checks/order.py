"""Order per sharding key (orderly groups) and offset discipline per queue (docs/chaos.md)."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from chaos.checker.checks._common import collect_parts, examples_of, overlapping, queue_refs, rel_s, s
from chaos.checker.config import CheckerConfig
from chaos.checker.loader import GQ, History
from chaos.checker.verdict import CheckResult, combine_parts, unknown

ORDER = (
    "Per sharding key, in orderly groups: the first delivery of each seq comes after the first deliveries of "
    "all smaller seqs stored on the same queue (redelivery of an already delivered seq is allowed; it is a "
    "duplicate; a smaller seq on another queue, after the publish list changed and the key's hash moved, is "
    "reported as explained). Per queue, in "
    "offset order of consumption: (1) with dense queues, the offsets ever delivered have no gap between the "
    "first and the last (skip); (2) in orderly groups, within one ownership epoch (a run of deliveries by "
    "one client) each offset is at most the previous + 1 (skip), and never at or below the previous one after "
    "a successful batch (rewind); (3) a new epoch starts at an offset o with o <= max delivered + 1 (else "
    "skip) and, in orderly groups, o >= C_last, the last committed offset before it began (else a rewind "
    "past the committed offset; explained, and reported only, when a broker fault lies between that commit "
    "and the new epoch while allow_master_return_regression is set).")


def _first_deliveries(h: History) -> DataFrame:
    """Orderly groups: the first delivery of each (group, sharding key, seq), with the highest seq before it."""
    od = h.deliv.filter(F.col("orderly") & F.col("group").isNotNull())
    if h.has("sends"):  # keys and seqs the consumer did not record come from the send
        keys = h.outcomes.select("msg_id", F.col("sharding_key").alias("sk_sent"), F.col("seq").alias("seq_sent"))
        od = od.join(keys, "msg_id", "left").withColumns(
            {"sharding_key": F.coalesce("sharding_key", "sk_sent"), "seq": F.coalesce("seq", "seq_sent")})
    od = od.filter(F.col("sharding_key").isNotNull() & F.col("seq").isNotNull())
    first = od.groupBy("group", "sharding_key", "seq").agg(
        F.min("t").alias("t"), F.min_by("client_id", "t").alias("client_id"), F.min_by("msg_id", "t").alias("msg_id"),
        F.min_by(F.concat_ws("/", "topic", "broker_name", "queue_id"), "t").alias("queue"))
    w = Window.partitionBy("group", "sharding_key").orderBy("t", "seq").rowsBetween(Window.unboundedPreceding, -1)
    # RocketMQ orders a key only within the queue it hashes to; when the producer's publish list
    # changes (a broker group leaves or rejoins it) the hash moves the key to another queue, whose
    # first messages may be consumed before the old queue's backlog
    wq = Window.partitionBy("group", "sharding_key", "queue").orderBy("t", "seq").rowsBetween(
        Window.unboundedPreceding, -1)
    return first.withColumns({"prev_max_seq": F.max("seq").over(w), "prev_max_seq_in_queue": F.max("seq").over(wq)})


def check_order(h: History, cfg: CheckerConfig) -> CheckResult:
    if not h.has("deliveries"):
        return unknown("order", ORDER, "no deliveries history in the run")
    n = cfg.max_examples
    first = _first_deliveries(h)
    qd = h.queue_deliveries
    parts: dict[str, DataFrame] = {
        "keyed": first.agg(F.count(F.lit(1)).alias("n")),
        "reordered": first.filter(F.col("seq") < F.col("prev_max_seq_in_queue")).select(
            F.lit("reordered").alias("anomaly"), "group", "sharding_key", "seq", "prev_max_seq", "msg_id",
            "client_id", "queue", "t", rel_s(h, "t").alias("t_s")),
        "reordered_across": first.filter((F.col("seq") < F.col("prev_max_seq"))
                                         & ~(F.col("seq") < F.coalesce("prev_max_seq_in_queue", F.lit(-1)))).select(
            F.lit("reordered across queues (explained)").alias("anomaly"), "group", "sharding_key", "seq",
            "prev_max_seq", "msg_id", "client_id", "queue", "t", rel_s(h, "t").alias("t_s"),
            F.lit("a larger seq of the key was stored on another queue: the publish list changed and the "
                  "key's hash moved (RocketMQ orders a key within one queue)").alias("explained_by")),
        "epochs": h.epochs.agg(F.count(F.lit(1)).alias("epochs"), F.sum("n").alias("n")),
    }
    if cfg.dense_queues:
        wq = Window.partitionBy(*GQ).orderBy("queue_offset")
        parts["gaps"] = (qd.select(*GQ, "queue_offset").distinct()
                         .withColumn("next", F.lead("queue_offset").over(wq))
                         .filter(F.col("next") > F.col("queue_offset") + 1)
                         .select(F.lit("skip (gap)").alias("anomaly"), *GQ,
                                 (F.col("queue_offset") + 1).alias("first_missing"),
                                 (F.col("next") - 1).alias("last_missing"),
                                 (F.col("next") - F.col("queue_offset") - 1).alias("missing")))
    skip_in = (F.col("queue_offset") > F.col("prev_offset") + 1) if cfg.dense_queues else F.lit(False)
    rewind_in = (F.col("queue_offset") <= F.col("prev_offset")) & F.col("prev_success")
    anomaly = F.when(skip_in, "skip (in epoch)").when(rewind_in, "rewind (in epoch)")
    parts["inner"] = (qd.filter(F.col("orderly") & (F.col("new_epoch") == 0))
                      .select(anomaly.alias("anomaly"), *GQ, "client_id", "prev_offset", "queue_offset", "t",
                              "prev_t", rel_s(h, "t").alias("t_s"))
                      .filter(F.col("anomaly").isNotNull()))
    parts["changes"] = _epoch_change_candidates(h, cfg)
    got, counted = collect_parts(parts)

    result_parts: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    counts: dict[str, Any] = {}
    found: list[dict[str, Any]] = []
    keyed = got["keyed"][0]["n"] if got["keyed"] else 0
    if not keyed:
        result_parts["per-key"] = None
        skipped["per-key"] = "no orderly deliveries with a sharding key and seq"
    else:
        counts["keyed_seqs"] = keyed
        counts["reordered"] = counted["reordered"]
        counts["reordered_across_queues"] = counted["reordered_across"]
        result_parts["per-key"] = counted["reordered"] == 0
        found += got["reordered"] + got["reordered_across"]
    ep = got["epochs"][0]
    total = int(ep["n"] or 0)
    if not total:
        result_parts["per-queue"] = None
        skipped["per-queue"] = "no deliveries with a queue offset"
    else:
        bad: dict[str, int] = {}
        if cfg.dense_queues:
            bad["gap"] = counted["gaps"]
            counts["never_delivered_offsets"] = sum(r["missing"] for r in got["gaps"])
            found += got["gaps"]
        rewinds = [r for r in got["inner"] if r["anomaly"] == "rewind (in epoch)"]
        releases = _lock_releases(h, rewinds) if rewinds else []
        grants = _broker_grants(h, rewinds) if rewinds and cfg.real_client_findings else []
        for r in got["inner"]:
            # The owner re-opened the queue between the two deliveries, so it started again at the
            # offset the master had: after a broker fault (its commit may not have reached the master),
            # after it released the queue's lock and took it again, or after its rebalance gave the
            # queue up (a batch ending after the drop commits nothing, as in RocketMQ) and took it
            # back. Reported only.
            if r["anomaly"] == "rewind (in epoch)":
                hit = overlapping(h.group_fault_windows(r.get("broker_name")), r["prev_t"], r["t"],
                                  slack=cfg.clock_slack_ms)
                why = hit[0].label if hit else next(
                    (f"{a} by {c} at {s(h, t)} s" for c, g, tp, b, q, a, t in releases
                     if (c, g, tp, b, q) == (r["client_id"], r["group"], r["topic"], r["broker_name"], r["queue_id"])
                     and r["prev_t"] <= t <= r["t"]), None)
                if why is None and cfg.real_client_findings:
                    why = _consumed_after_unlock(h, r, releases, grants)
                if why:
                    r["anomaly"], r["explained_by"] = "rewind in epoch (explained)", why
            bad[r["anomaly"]] = bad.get(r["anomaly"], 0) + 1
        found += got["inner"]
        for r in _classify_changes(h, cfg, got["changes"]):
            bad[r["anomaly"]] = bad.get(r["anomaly"], 0) + 1
            found.append(r)
        counts["queue_deliveries"] = total
        counts["epochs"] = int(ep["epochs"] or 0)
        counts["anomalies"] = bad
        result_parts["per-queue"] = not any(v for k, v in bad.items() if not k.endswith("(explained)"))
    failing = [r for r in found if not str(r.get("anomaly", "")).endswith("(explained)")]
    explained = [r for r in found if str(r.get("anomaly", "")).endswith("(explained)")]
    examples = examples_of(failing, n) + examples_of(explained, n)
    for e in examples:
        e.pop("t", None)
    problems = sorted({r["anomaly"] for r in failing})
    return CheckResult("order", combine_parts(result_parts), ORDER, counts=counts, examples=examples[:n],
                       parts=result_parts, skipped=skipped, reason=", ".join(problems) or None)


def _epoch_change_candidates(h: History, cfg: CheckerConfig) -> DataFrame:
    start_offset = F.when(F.col("orderly"), F.col("first_offset")).otherwise(F.col("min_offset"))
    skip = (start_offset > F.col("prev_max") + 1) if cfg.dense_queues else F.lit(False)
    rewind = F.col("orderly") & F.col("c_last").isNotNull() & (start_offset < F.col("c_last"))
    return h.epochs.filter(F.col("prev_client").isNotNull() & (skip | rewind)).select(
        *GQ, "client_id", "prev_client", "start", start_offset.alias("start_offset"), "prev_max", "c_last", "c_last_t",
        skip.alias("is_skip"))


def _classify_changes(h: History, cfg: CheckerConfig, cands: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Epoch starts that skip or rewind; a rewind is explained by a broker fault since the last commit."""
    out: list[dict[str, Any]] = []
    for r in cands:
        base = {k: r[k] for k in (*GQ, "client_id", "prev_client", "start_offset", "prev_max", "c_last")}
        base.update(t=r["start"], t_s=s(h, r["start"]))
        if r["is_skip"]:
            out.append({"anomaly": "skip (owner change)", **base})
            continue
        depth = r["c_last"] - r["start_offset"]
        cause = overlapping(h.group_fault_windows(r.get("broker_name")), r["c_last_t"] or r["start"], r["start"],
                            slack=cfg.clock_slack_ms)
        if cause and cfg.allow_master_return_regression:
            out.append({"anomaly": "rewind past committed (explained)", **base, "explained_by": cause[0].label,
                        "depth": depth})
        else:
            out.append({"anomaly": "rewind past committed", **base, "depth": depth})
    return out


def _broker_grants(h: History, rewinds: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Broker lock grants to the clients of `rewinds`, as (client, group, topic, broker, queue id, t)."""
    clients = sorted({r["client_id"] for r in rewinds})
    rows = (h.locks.filter((F.col("side") == "broker") & (F.col("action") == "granted")
                           & F.col("client_id").isin(*clients)).select("client_id", *GQ, "t").collect())
    return [(r["client_id"], r["group"], r["topic"], r["broker_name"], r["queue_id"], r["t"]) for r in rows]


def _consumed_after_unlock(h: History, r: dict[str, Any], releases: list[tuple[Any, ...]],
                           grants: list[tuple[Any, ...]]) -> str | None:
    """A real client that unlocked the queue and consumed on from its cache without a new grant (the
    client finding consume-after-unlock) re-opens it at the committed offset: why it rewound."""
    key = (r["client_id"], r["group"], r["topic"], r["broker_name"], r["queue_id"])
    unlocks = [t for *k, what, t in releases if tuple(k) == key and what == "lock released" and t <= r["prev_t"]]
    if not unlocks:
        return None
    t_r = max(unlocks)
    if any(tuple(k) == key and t_r < t <= r["prev_t"] for *k, t in grants):
        return None
    return f"{r['client_id']} consumed on after its unlock at {s(h, t_r)} s (client finding consume-after-unlock)"


def _lock_releases(h: History, rewinds: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Client lock releases, losses and expiries, and rebalance drops, on the queues of `rewinds`
    (few rows), as (client, group, topic, broker, queue id, what, t). A broker's record of a client's
    unlock counts as that client's release: a real client journals no lock events of its own."""
    if not h.has("events"):
        return []
    clients = sorted({r["client_id"] for r in rewinds})
    client_side = (F.col("side") == "client") & F.col("action").isin("released", "lost", "expired")
    unlocked = (F.col("side") == "broker") & (F.col("action") == "released")
    rows = (h.locks.filter((client_side | unlocked) & F.col("client_id").isin(*clients))
            .select("client_id", *GQ, "action", "t").collect())
    out = [(r["client_id"], r["group"], r["topic"], r["broker_name"], r["queue_id"], f"lock {r['action']}", r["t"])
           for r in rows]
    drops = h.rebalances.filter(F.col("client_id").isin(*clients) & F.col("removed").isNotNull()
                                & (F.size("removed") > 0)).collect()
    for r in drops:
        for broker, queue_id in queue_refs(r["removed"]):
            out.append((r["client_id"], r["group"], r["topic"], broker, queue_id,
                        f"queue dropped ({r['reason'] or 'rebalance'})", r["t"]))
    return out
