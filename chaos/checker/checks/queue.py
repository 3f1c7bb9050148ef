"""Jepsen total-queue categories over sends and deliveries: lost, unexpected, duplicates."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from chaos.checker.checks._common import collect_n, collect_parts, count_by, examples_of, queue_refs, rel_s
from chaos.checker.checks._common import rows as rows_of
from chaos.checker.config import CheckerConfig
from chaos.checker.faults import broker_identity
from chaos.checker.loader import GQ, History
from chaos.checker.pop import in_flight_at_end
from chaos.checker.schemas import ACKED_STATUSES
from chaos.checker.storage import allowed_loss
from chaos.checker.verdict import CheckResult, unknown

LOST = (
    f"Every acknowledged send ({', '.join(ACKED_STATUSES)}: all stored) is consumed successfully at least "
    "once by every consumer group that consumes its topic. Lost messages are split by their queue offset "
    "against the offsets the group consumed on that queue: prefix (before the first), middle, postfix "
    "(after the last: possibly only slow), and whether the listener ever saw them. A loss the run's storage "
    "faults allow under its durability mode (see durability) is counted as allowed, not failed (those "
    "acknowledged after a power loss at a queue offset it cut and handed out again also as reused offsets). Sends whose "
    "outcome was unknown (info) or failed that were consumed anyway are reported as recovered, never as failures. "
    "A message a broker's POP events show handed out, never acked, revived or dead-lettered, and invisible past "
    "the run's end (a receive answer the client never got, kept invisible by auto-renew while the client lives) "
    "is in flight, not lost: counted as in_flight_at_end.")

UNEXPECTED = ("No delivery carries a message id that no producer ever attempted to send (among topics the "
              "producers wrote). Deliveries of other topics are counted as untracked.")

DUPLICATES = (
    "A duplicate is a second or later successful delivery of one message to one group. Each is explained only "
    "by what makes RocketMQ redeliver, between its previous successful delivery and itself (± slack): a retry "
    "(a failed delivery of it in between, or a retry-queue delivery), another client (the queue changed "
    "owner), or for the same client: a fault or unexpected exit of that client's process, its rebalance that "
    "changed that queue, its lock on that queue lost, expired or released (its process queue dropped), a fault "
    "or unexpected exit of a broker of the queue's group, an OFFSET_ILLEGAL pull or an offset reset or load on "
    "that queue, a client's commit that moved the queue's stored offset back (an offset rollback or resync), "
    "or a real client's own log saying it resumed a dropped pull request of that queue with its old cache "
    "(queue-resumed, also a client finding). The same client getting a message twice within one "
    "uninterrupted ownership is unexplained. Unexplained duplicates fail, and so does a total above the duplicate "
    "budget (the suite's, or derived per docs/chaos.md: per fault rate x B + one batch per queue, "
    "B = P_c for consumer faults and P_c + max(F_b, S_s) for broker faults, plus one batch per owner change).")


def check_lost(h: History, cfg: CheckerConfig) -> CheckResult:
    if not h.has("sends"):
        return unknown("lost", LOST, "no sends history (sends.jsonl) in the run")
    if not h.has("deliveries"):
        return unknown("lost", LOST, "no deliveries history (deliveries.jsonl) in the run")
    o, d = h.outcomes, h.deliv
    pm = h.per_msg
    consumed_ids = pm.filter(F.col("n_success") > 0).select("msg_id").distinct().withColumn("consumed", F.lit(True))
    seen_ids = pm.select("msg_id").distinct().withColumn("seen_any", F.lit(True))
    summary = (o.join(consumed_ids, "msg_id", "left").join(seen_ids, "msg_id", "left")
               .groupBy("attempted", "acked", "outcome", F.coalesce("consumed", F.lit(False)).alias("consumed"),
                        F.coalesce("seen_any", F.lit(False)).alias("seen"))
               .agg(F.count(F.lit(1)).alias("n")))
    group_topics = d.filter(F.col("group").isNotNull()).select("group", "topic").distinct()
    expected = o.filter("acked").join(group_topics, "topic", "left")  # a topic nobody consumed: group = null
    consumed = pm.filter(F.col("n_success") > 0).select("group", "msg_id")
    seen = pm.select("group", "msg_id").withColumn("seen", F.lit(True))
    ranges = (d.filter(F.col("success") & F.col("in_queue") & F.col("queue_offset").isNotNull())
              .groupBy(*GQ).agg(F.min("queue_offset").alias("lo"), F.max("queue_offset").alias("hi")))
    where = (F.when(F.col("group").isNull(), "no-consumer").when(F.col("queue_offset").isNull(), "unknown-offset")
             .when(F.col("lo").isNull(), "queue-never-consumed").when(F.col("queue_offset") < F.col("lo"), "prefix")
             .when(F.col("queue_offset") > F.col("hi"), "postfix").otherwise("middle"))
    allowed = allowed_loss(h, cfg).select("msg_id", "allowed_by", "reused")
    in_flight = in_flight_at_end(h).select("group", "msg_id", F.col("client_id").alias("in_flight_to"),
                                           "renewals", "deadline_s_after_end")
    lost = (expected.join(consumed, ["group", "msg_id"], "left_anti").join(seen, ["group", "msg_id"], "left")
            .join(ranges, GQ, "left").join(allowed, "msg_id", "left")
            .select("group", "msg_id", "topic", "broker_name", "queue_id", "queue_offset", "sharding_key", "seq",
                    where.alias("where"), F.coalesce("seen", F.lit(False)).alias("seen"), "producer",
                    rel_s(h, "ack_ms").alias("acked_at_s"), "allowed_by", "reused"))
    held = lost.join(in_flight, ["group", "msg_id"])
    lost = lost.join(in_flight, ["group", "msg_id"], "left_anti")
    got, n = collect_parts({"summary": summary, "lost": lost, "held": held})
    rows_ = got["summary"]
    acked_n = sum(r["n"] for r in rows_ if r["acked"])
    if acked_n == 0:
        return unknown("lost", LOST, "no send was acknowledged, so nothing could be lost")
    recovered = _tally_n((r["outcome"], r["n"]) for r in rows_ if not r["acked"] and r["consumed"])
    never_seen = _tally_n((r["outcome"], r["n"]) for r in rows_
                          if not r["acked"] and not r["seen"] and r["outcome"] in ("info", "pending"))
    found, lost_n = got["lost"], n["lost"]
    if lost_n == len(found):
        by_where = _tally_n((r["where"], 1) for r in found)
        seen_n = sum(1 for r in found if r["seen"])
        allowed_n = sum(1 for r in found if r["allowed_by"])
        reused_n = sum(1 for r in found if r["allowed_by"] and r["reused"])
    else:
        by_where = count_by(lost, "where")
        seen_n = lost.filter("seen").count()
        allowed_n = lost.filter(F.col("allowed_by").isNotNull()).count()
        reused_n = lost.filter(F.col("allowed_by").isNotNull() & F.col("reused")).count()
    unallowed_n = lost_n - allowed_n
    counts = {"attempted": sum(r["n"] for r in rows_ if r["attempted"]), "acknowledged": acked_n, "lost": lost_n,
              "lost_allowed": allowed_n, "lost_unallowed": unallowed_n,
              "lost_reused_offsets": reused_n,
              "lost_by_position": by_where, "lost_seen_by_listener": seen_n, "recovered": recovered,
              "unknown_outcome_never_seen": never_seen, "in_flight_at_end": n["held"]}
    valid = unallowed_n == 0
    reason = None if valid else f"{unallowed_n} acknowledged send(s) never consumed"
    if allowed_n and not valid:
        reason += f" ({allowed_n} more lost as the durability mode allows)"
    if n["held"]:
        note = (f"{n['held']} acknowledged send(s) still handed out by POP at the end (invisible, renewed for a "
                "live client that never journalled them): in flight, not lost")
        reason = note if reason is None else f"{reason}; {note}"
    real = [r for r in found if not r["allowed_by"]]
    examples = examples_of(real, cfg.max_examples, "acked_at_s") or examples_of(found, cfg.max_examples, "acked_at_s") \
        or examples_of(got["held"], cfg.max_examples, "acked_at_s")
    return CheckResult("lost", valid, LOST, counts=counts, examples=examples, reason=reason)


def _tally_n(pairs: Iterable[tuple[Any, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for key, n in pairs:
        out[str(key)] = out.get(str(key), 0) + n
    return dict(sorted(out.items()))


def check_unexpected(h: History, cfg: CheckerConfig) -> CheckResult:
    if not h.has("sends"):
        return unknown("unexpected", UNEXPECTED, "no sends history, so no delivery can be matched to a send")
    if not h.has("deliveries"):
        return unknown("unexpected", UNEXPECTED, "no deliveries history in the run")
    o, d = h.outcomes, h.deliv
    known = o.filter("attempted").select("msg_id", F.lit(True).alias("known"))
    topics = o.filter(F.col("topic").isNotNull()).select("topic").distinct().withColumn("tracked", F.lit(True))
    x = d.join(F.broadcast(topics), "topic", "left").join(known, "msg_id", "left")
    summary = x.groupBy(F.coalesce("tracked", F.lit(False)).alias("tracked"),
                        F.coalesce("known", F.lit(False)).alias("known")).agg(
        F.count(F.lit(1)).alias("n"), F.countDistinct("msg_id").alias("ids"))
    bad = x.filter(F.col("tracked") & F.col("known").isNull()).select(
        "group", "client_id", "msg_id", "topic", "broker_name", "queue_id", "queue_offset", "result",
        rel_s(h, "t").alias("t_s"))
    got, _ = collect_parts({"summary": summary, "bad": bad}, cap=cfg.max_examples)
    row = next((r for r in got["summary"] if r["tracked"] and not r["known"]), None)
    n = row["n"] if row else 0
    counts = {"unexpected_deliveries": n, "unexpected_msg_ids": row["ids"] if row else 0,
              "untracked_topic_deliveries": sum(r["n"] for r in got["summary"] if not r["tracked"])}
    return CheckResult("unexpected", n == 0, UNEXPECTED, counts=counts,
                       examples=examples_of(got["bad"], cfg.max_examples, "t_s"),
                       reason=None if n == 0 else f"{n} deliveries of ids never sent")


def _causes(h: History) -> DataFrame:
    """Windows that can make RocketMQ redeliver a message, each scoped to whom it concerns:
    (node: the first delivery's consumer process, client, group, broker_name, queue_id: null for
    any; kind, start, end). A fault or unexpected exit of the first client's process drops its
    process queues; a rebalance of that client that changed the queue, or its lock lost, expired or
    released, drops the queue's; a fault or exit of a broker of the queue's group can roll the
    queue's offset back (a slave's older offset, a returning master); an offset reset or an
    OFFSET_ILLEGAL pull resyncs it; a real client's resumed pull request replays its old cache."""
    rows: list[tuple[Any, ...]] = []
    for w in h.faults:
        for node in w.targets or ("*",):
            ident = broker_identity(node) if h.is_broker(node) else None
            if ident:
                rows.append((None, None, None, ident[0], None, f"fault:{w.op}", w.start_ms, w.end_ms))
            else:
                rows.append((None if node == "*" else node, None, None, None, None, f"fault:{w.op}",
                             w.start_ms, w.end_ms))
    for e in h.exits:
        if e.expected:
            continue
        ident = broker_identity(e.node) if h.is_broker(e.node) else None
        rows.append((None, None, None, ident[0], None, "exit", e.t_ms, e.t_ms) if ident
                    else (e.node, None, None, None, None, "exit", e.t_ms, e.t_ms))
    for r in rows_of(h.rebalances.filter(F.col("before").isNotNull() | F.col("after").isNotNull()
                                         | F.col("removed").isNotNull())):
        before, after, removed = queue_refs(r["before"]), queue_refs(r["after"]), queue_refs(r["removed"])
        for broker, qid in (before ^ after) | removed:
            rows.append((None, r["client_id"], r["group"], broker, qid, "rebalance", r["t"], r["t"]))
        if r["reason"] == "lock-regained":
            for broker, qid in after:
                rows.append((None, r["client_id"], r["group"], broker, qid, "rebalance", r["t"], r["t"]))
    schema = ("node STRING, client STRING, group STRING, broker_name STRING, queue_id INT, kind STRING, "
              "start LONG, end LONG")
    out = h.spark.createDataFrame(rows, schema)
    locks = h.locks.filter(F.col("action").isin("lost", "expired", "released")).select(
        F.lit(None).cast("string").alias("node"), F.col("client_id").alias("client"), "group", "broker_name",
        "queue_id", F.concat(F.lit("lock-"), "action").alias("kind"), F.col("t").alias("start"),
        F.col("t").alias("end"))
    resync = h.pulls.filter(F.col("status") == "OFFSET_ILLEGAL").select(
        F.lit(None).cast("string").alias("node"), F.col("client_id").alias("client"), "group", "broker_name",
        "queue_id", F.lit("offset-illegal").alias("kind"), F.col("t").alias("start"), F.col("t").alias("end"))
    reset = h.broker_offsets.filter(F.col("source").isin("reset", "load")).select(
        F.lit(None).cast("string").alias("node"), F.lit(None).cast("string").alias("client"), "group",
        "broker_name", "queue_id", F.concat(F.lit("offset-"), "source").alias("kind"), F.col("t").alias("start"),
        F.col("t").alias("end"))
    # the stored offset moved back by a client's commit (in a concurrent group, an old owner committing
    # after the new one; offset-resync judges whether that decrease itself is allowed): whoever
    # reads the queue from it next reads those messages again
    w = Window.partitionBy("node", *GQ).orderBy("t")
    rollback = (h.broker_offsets.filter(F.col("source") == "client")
                .withColumn("p_offset", F.lag("offset").over(w)).filter(F.col("offset") < F.col("p_offset"))
                .select(F.lit(None).cast("string").alias("node"), F.lit(None).cast("string").alias("client"), "group",
                        "broker_name", "queue_id", F.lit("offset-rollback").alias("kind"), F.col("t").alias("start"),
                        F.col("t").alias("end")))
    # a client that resumed a dropped pull request consumes what it had cached before the drop again
    # (a client finding too: findings.py)
    resumed = h.queue_resumes.select(
        F.lit(None).cast("string").alias("node"), F.col("client_id").alias("client"), "group", "broker_name",
        "queue_id", F.lit("client-resumed-cache").alias("kind"), F.col("t").alias("start"), F.col("t").alias("end"))
    return (out.unionByName(locks).unionByName(resync).unionByName(reset).unionByName(rollback)
            .unionByName(resumed))


def check_duplicates(h: History, cfg: CheckerConfig) -> CheckResult:
    if not h.has("deliveries"):
        return unknown("duplicates", DUPLICATES, "no deliveries history in the run")
    d = h.deliv.filter(F.col("success") & F.col("group").isNotNull())
    per_msg = (h.per_msg.filter(F.col("group").isNotNull() & (F.col("n_success") > 0))
               .select("group", "msg_id", F.col("n_success").alias("n")))
    stats = per_msg.agg(F.sum("n").alias("deliveries"), F.count(F.lit(1)).alias("messages"),
                        F.sum(F.when(F.col("n") > 1, F.col("n") - 1).otherwise(0)).alias("dups"),
                        F.sum((F.col("n") > 1).cast("long")).alias("dup_msgs"))
    queues = h.queue_deliveries.agg(
        F.countDistinct(*GQ).alias("queues"),
        F.sum(((F.col("new_epoch") == 1) & F.col("prev_client").isNotNull()).cast("long")).alias("changes"))
    got, _ = collect_parts({"stats": stats, "queues": queues})
    stats_row, q = got["stats"][0], got["queues"][0]
    deliveries, dups = int(stats_row["deliveries"] or 0), int(stats_row["dups"] or 0)
    budget, formula = _budget(h, cfg, deliveries, int(q["queues"] or 0) or 1, int(q["changes"] or 0))
    counts = {"successful_deliveries": deliveries, "messages": int(stats_row["messages"] or 0),
              "duplicates": dups, "duplicated_messages": int(stats_row["dup_msgs"] or 0),
              "duplicate_rate": round(dups / deliveries, 6) if deliveries else 0.0,
              "budget": budget, "budget_formula": formula, "explain_slack_ms": cfg.explain_slack_ms()}
    if dups == 0:
        return CheckResult("duplicates", True, DUPLICATES, counts={**counts, "explained": 0, "unexplained": 0})
    dup_ids = per_msg.filter(F.col("n") > 1).select("group", "msg_id")
    w = Window.partitionBy("group", "msg_id").orderBy("t", "client_id")
    again = (d.join(dup_ids, ["group", "msg_id"], "left_semi")
             .select("group", "msg_id", "client_id", "node", "topic", "broker_name", "queue_id", "queue_offset", "t",
                     "reconsume_times", F.row_number().over(w).alias("k"), F.lag("t").over(w).alias("prev_t"),
                     F.lag("client_id").over(w).alias("prev_client"), F.lag("node").over(w).alias("prev_node"))
             .filter(F.col("k") >= 2))
    slack = cfg.explain_slack_ms()
    x = again.alias("x")
    # another client, or a retry (a failed delivery in between, or a retry-queue delivery): a
    # redelivery RocketMQ makes by design
    failed = h.deliv.filter(~F.col("success") & F.col("group").isNotNull()).select(
        "group", "msg_id", F.col("t").alias("f_t")).alias("f")
    retried = x.join(failed, (F.col("f.group") == F.col("x.group")) & (F.col("f.msg_id") == F.col("x.msg_id"))
                     & (F.col("f.f_t") >= F.col("x.prev_t")) & (F.col("f.f_t") <= F.col("x.t")), "left_semi")
    # the same client again: only something that drops its process queue or rolls the offset back
    causes = F.broadcast(_causes(h).alias("c"))

    def scoped(c: str, xc: str) -> Column:
        return F.col(f"c.{c}").isNull() | (F.col(f"c.{c}") == F.col(f"x.{xc}"))

    cond = (scoped("node", "prev_node") & scoped("client", "prev_client") & scoped("group", "group")
            & scoped("broker_name", "broker_name") & scoped("queue_id", "queue_id")
            & (F.col("c.start") <= F.col("x.t") + slack) & (F.col("c.end") >= F.col("x.prev_t") - slack))
    by_cause = x.join(causes, cond, "left_semi")
    by_design = x.filter((F.col("client_id") != F.col("prev_client")) | (F.coalesce("reconsume_times", F.lit(0)) > 0))
    explained = by_design.unionByName(retried).unionByName(by_cause).select(
        "group", "msg_id", "k").distinct().withColumn("explained", F.lit(True))
    labelled = x.join(explained, ["group", "msg_id", "k"], "left").select(
        "group", "msg_id", "client_id", "prev_client", "topic", "broker_name", "queue_id", "queue_offset",
        rel_s(h, "prev_t").alias("first_s"), rel_s(h, "t").alias("again_s"),
        F.coalesce("explained", F.lit(False)).alias("explained"))
    found, n_found = collect_n(labelled, cap=50_000)  # duplicates are few unless something is badly wrong
    if n_found == len(found):
        explained_n = sum(1 for r in found if r["explained"])
    else:
        explained_n = labelled.filter("explained").count()
    unexplained_n = dups - explained_n
    shown = [r for r in found if not r["explained"]] or found
    examples = examples_of(shown, cfg.max_examples, "again_s")
    counts.update(explained=explained_n, unexplained=unexplained_n)
    over = budget is not None and dups > budget
    valid = unexplained_n == 0 and not over
    reasons = []
    if unexplained_n:
        reasons.append(f"{unexplained_n} duplicate(s) with no cause of a redelivery in between")
    if over:
        reasons.append(f"{dups} duplicates exceed the budget of {budget}")
    return CheckResult("duplicates", valid, DUPLICATES, counts=counts, examples=examples,
                       reason="; ".join(reasons) or None)


def _budget(h: History, cfg: CheckerConfig, deliveries: int, queues: int, changes: int) -> tuple[int | None, str]:
    if cfg.duplicate_budget is not None:
        return cfg.duplicate_budget, "the suite's duplicate_budget"
    b = cfg.bounds
    span = max(1, h.t_end - h.t0)
    rate = deliveries / span  # messages per ms, all queues
    batch = cfg.pull_batch_size
    total = 0.0
    n_broker = n_other = 0
    for w in h.faults:
        broker = any(h.is_broker(t) for t in w.targets)
        n_broker += broker
        n_other += not broker
        total += rate * b.redelivery_window("broker" if broker else "consumer") + batch * queues
    exits = [e for e in h.exits if not e.expected]
    for e in exits:
        total += rate * b.redelivery_window("broker" if h.is_broker(e.node) else "consumer") + batch * queues
    total += changes * batch
    formula = (f"{n_broker} broker fault(s) x (rate x {b.redelivery_window('broker')} ms + {batch} x {queues} queues)"
               f" + {n_other} other fault(s) and {len(exits)} unexpected exit(s) x (rate x "
               f"{b.redelivery_window('consumer')} ms + {batch} x {queues}) + {changes} owner change(s) x {batch};"
               f" rate = {rate * 1000:.1f} msg/s")
    return int(total), formula
