"""Message contents: integrity (every delivered body is the one sent) and replication (every replica
caught up and holds every acknowledged message still stored, byte-identical)."""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from chaos.checker.checks._common import collect_parts, examples_of, rel_s, tally
from chaos.checker.config import CheckerConfig
from chaos.checker.faults import broker_identity
from chaos.checker.loader import History
from chaos.checker.storage import allowed_loss
from chaos.checker.verdict import CheckResult, Valid, combine_parts, unknown

INTEGRITY = (
    "Every delivery's body_crc32 (zlib.crc32 of the body the consumer was handed) equals the body_crc32 the "
    "producer recorded when it sent that msg_id (also carried as the BODY_CRC32 property). Deliveries or sends "
    "without a digest are counted, not judged.")

REPLICATION = (
    "From the end-of-run read-back (after the faults were recovered and the consumers drained): every replica "
    "of every broker group reached its master's commitlog end (caught_up), and every acknowledged message "
    "still stored - read back from at least one replica at its queue offset - reads back from each replica of "
    "its group at that queue offset with the same msg_id and the body_crc32 it was sent with - except below the "
    "first offset a replica still reads back on that queue when its own retention deleted files (each replica "
    "cleans its own disk).")


def check_integrity(h: History, cfg: CheckerConfig) -> CheckResult:
    if not h.has("sends") or not h.has("deliveries"):
        return unknown("integrity", INTEGRITY, "needs the sends and deliveries histories")
    sent = (h.sends.filter(F.col("msg_id").isNotNull() & F.col("body_crc32").isNotNull())
            .groupBy("msg_id").agg(F.first("body_crc32").alias("sent_crc32")))
    d = h.deliv.select("group", "client_id", "msg_id", "topic", "broker_name", "queue_id", "queue_offset",
                       "reconsume_times", F.col("body_crc32").alias("got_crc32"), "t")
    x = d.join(sent, "msg_id", "left")
    judged = F.col("sent_crc32").isNotNull() & F.col("got_crc32").isNotNull()
    got, counted = collect_parts({
        "summary": x.agg(F.count(F.lit(1)).alias("deliveries"),
                         F.sum(judged.cast("long")).alias("judged"),
                         F.sum(F.col("got_crc32").isNull().cast("long")).alias("no_digest"),
                         F.sum((F.col("got_crc32").isNotNull() & F.col("sent_crc32").isNull()).cast("long"))
                         .alias("no_sent_digest")),
        "bad": x.filter(judged & (F.col("sent_crc32") != F.col("got_crc32"))).select(
            "group", "client_id", "msg_id", "topic", "broker_name", "queue_id", "queue_offset", "reconsume_times",
            "sent_crc32", "got_crc32", "t", rel_s(h, "t").alias("t_s")),
    })
    summary = got["summary"][0]
    if not summary["judged"]:
        return unknown("integrity", INTEGRITY, "no delivery could be matched to a sent body digest (body_crc32)")
    bad_n = counted["bad"]
    counts = {"deliveries": summary["deliveries"], "judged": summary["judged"], "mismatched": bad_n,
              "deliveries_without_digest": summary["no_digest"], "without_sent_digest": summary["no_sent_digest"],
              "mismatched_by_broker_queue": _tally(f"{r['broker_name']}/{r['queue_id']}" for r in got["bad"])}
    examples = examples_of(got["bad"], cfg.max_examples)
    for e in examples:
        e.pop("t", None)
    return CheckResult("integrity", bad_n == 0, INTEGRITY, counts=counts, examples=examples,
                       reason=None if bad_n == 0 else f"{bad_n} deliveries whose body differs from the one sent")


EXCUSED = "excused by a storage fault"


RETAINED_AWAY = "deleted by the replica's retention"


def _retention_replicas(h: History) -> list[str]:
    """`broker_name/broker_id` of every broker node that recorded a retention deletion."""
    if not h.stats["event_kinds"].get("retention-delete"):
        return []
    nodes = [r["node"] for r in h.ev.filter(F.col("event") == "retention-delete").select("node").distinct().collect()]
    return [f"{ident[0]}/{ident[1]}" for node in nodes if (ident := broker_identity(node)) is not None]


def check_replication(h: History, cfg: CheckerConfig) -> CheckResult:
    if not h.has("readback"):
        return unknown("replication", REPLICATION, "no end-of-run read-back (readback/readback.jsonl) in the run")
    rb = h.readback.filter(F.col("event").isNotNull())
    states = rb.filter(F.col("event") == "replica-state").select(
        "node", "broker_name", "replica_id", "max_phys_offset", "master_max_phys_offset", "caught_up")
    reads = rb.filter(F.col("event") == "readback").select(
        "broker_name", "replica_id", "topic", "queue_id", "queue_offset", F.col("msg_id").alias("read_msg_id"),
        F.col("body_crc32").alias("read_crc32"))
    parts: dict[str, DataFrame] = {"states": states}
    if h.has("sends"):
        sent_crc = (h.sends.filter(F.col("msg_id").isNotNull() & F.col("body_crc32").isNotNull())
                    .groupBy("msg_id").agg(F.first("body_crc32").alias("sent_crc32")))
        acked = (h.outcomes.filter(F.col("acked") & F.col("queue_offset").isNotNull())
                 .select("msg_id", "broker_name", "topic", "queue_id", "queue_offset").join(sent_crc, "msg_id", "left"))
        pos = ["broker_name", "topic", "queue_id", "queue_offset"]
        stored = acked.join(reads.select(*pos).distinct(), pos, "left_semi")
        replicas = states.select("broker_name", "replica_id").distinct()
        expect = stored.join(F.broadcast(replicas), "broker_name")
        x = expect.join(reads, [*pos, "replica_id"], "left")
        problem = (F.when(F.col("read_msg_id").isNull(), "missing on replica")
                   .when(F.col("read_msg_id") != F.col("msg_id"), "another message at its offset")
                   .when(F.col("sent_crc32").isNotNull() & (F.col("read_crc32") != F.col("sent_crc32")),
                         "body differs").otherwise(None))
        # a message the run's storage faults may lose (chaos.checker.storage: a corrupted record, a
        # power loss's unflushed window or reused offsets) is excused here as in `lost` and `durability`
        allowed = allowed_loss(h, cfg).select("msg_id", F.lit(True).alias("excused"))
        # (never a body that differs: a damaged record must be a hole, not served)
        x = (x.join(allowed, "msg_id", "left")
             .withColumn("problem", F.when(problem.isNotNull() & (problem != "body differs")
                                           & F.col("excused").isNotNull(),
                                           F.lit(EXCUSED)).otherwise(problem)))
        # a replica cleans its own disk: what its retention deleted lies below the first offset it
        # still reads back, and only there may it lack what another replica still holds
        retained = _retention_replicas(h)
        if retained:
            floors = reads.groupBy("broker_name", "replica_id", "topic", "queue_id").agg(
                F.min("queue_offset").alias("floor"))
            x = (x.join(floors, ["broker_name", "replica_id", "topic", "queue_id"], "left")
                 .withColumn("problem", F.when((F.col("problem") == "missing on replica")
                                               & F.concat_ws("/", "broker_name", F.col("replica_id").cast("string"))
                                               .isin(retained)
                                               & (F.col("floor").isNull() | (F.col("queue_offset") < F.col("floor"))),
                                               F.lit(RETAINED_AWAY)).otherwise(F.col("problem"))))
        parts["summary"] = x.groupBy("problem").agg(F.count(F.lit(1)).alias("n"),
                                                    F.countDistinct("msg_id").alias("msgs"))
        parts["bad"] = x.filter(F.col("problem").isNotNull() & ~F.col("problem").isin(EXCUSED, RETAINED_AWAY)).select(
            "problem", "broker_name", "replica_id", "topic", "queue_id", "queue_offset", "msg_id", "read_msg_id",
            "sent_crc32", "read_crc32")
        parts["acked"] = acked.agg(F.count(F.lit(1)).alias("n"))
    got, _ = collect_parts(parts)
    if not got["states"]:
        return unknown("replication", REPLICATION, "the read-back recorded no replica state")
    behind = [{"anomaly": "replica behind its master", **r} for r in got["states"] if not r["caught_up"]]
    result: dict[str, Valid | None] = {"caught up": not behind}
    counts: dict[str, object] = {"replicas": len(got["states"]), "behind": len(behind),
                                 "replica_states": {f"{r['broker_name']}/{r['replica_id']}": r["max_phys_offset"]
                                                    for r in got["states"]}}
    examples = behind[:cfg.max_examples]
    skipped: dict[str, str] = {}
    if "summary" in got:
        by_problem = {r["problem"] or "ok": r["n"] for r in got["summary"]}
        bad_n = sum(n for p, n in by_problem.items() if p not in ("ok", EXCUSED, RETAINED_AWAY))
        counts.update(acknowledged=got["acked"][0]["n"], replica_reads_checked=sum(by_problem.values()),
                      by_problem=by_problem)
        result["byte-identical"] = bad_n == 0
        examples += [{"anomaly": r["problem"], **r} for r in got["bad"][:cfg.max_examples]]
    else:
        result["byte-identical"] = None
        skipped["byte-identical"] = "no sends history to compare with"
    failed = [k for k, v in result.items() if v is False]
    return CheckResult("replication", combine_parts(result), REPLICATION, counts=counts, examples=examples[:cfg.max_examples],
                       parts=result, skipped=skipped, reason=", ".join(failed) or None)


def _tally(keys: Iterable[str]) -> dict[str, int]:
    return dict(sorted(tally(keys).items()))
