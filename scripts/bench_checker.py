#!/usr/bin/env python
"""Benchmark the chaos checker end to end on a synthetic history of ~10 million events.

    .venv/bin/python scripts/bench_checker.py [--events 10000000] [--run-dir DIR] [--keep]

The history is generated with Spark itself (fast, parallel) as JSONL, laid out like a real run
(one directory per process; each history "file" is a directory of JSONL part files, which the
loader reads like a file): 4 producers sending to 8 queues, one orderly consumer group of 4
clients, pulls, offset commits every P_c, lock grants and renewals on both sides, and one
fault - consumer-1 is SIGKILLed at 40 % of the run, its queues are taken over after the broker
lease ran out, and the messages since its last commit are delivered again. One message in
3301 is never delivered (so `lost` and `order` have something to find).

Then `check_run` loads it, runs every check and writes verdict.json and report.html. Printed:
generation time, check time (load + checks + report, Spark already started), events/s.
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from chaos.checker.pipeline import check_run  # noqa: E402
from chaos.checker.session import make_spark  # noqa: E402

QUEUES = 8
CLIENTS = 4
PRODUCERS = 4
SPAN_MS = 600_000  # a 10-minute run
TOPIC, BROKER, GROUP = "BenchOrders", "broker-a", "G"
TIMING = {  # RocketMQ's timers x 0.1
    "broker_lock_lease_ms": 6_000, "client_lock_lease_ms": 3_000, "lock_renew_interval_ms": 2_000,
    "rebalance_interval_ms": 2_000, "pull_delay_when_exception_ms": 100, "consumer_offset_persist_ms": 500,
    "slave_sync_interval_ms": 1_000, "client_heartbeat_ms": 3_000, "consumer_channel_expiry_ms": 12_000,
    "client_housekeeping_ms": 1_000, "route_poll_ms": 3_000, "broker_expiry_ms": 12_000,
    "broker_expiry_scan_ms": 1_000, "register_interval_ms": 3_000, "unlock_delay_ms": 2_000,
}
KILLED = 1  # consumer-1 / client c1 owns queues 1 and 5
T_KILL = int(SPAN_MS * 0.4) + 317  # between two offset commits: some messages are consumed twice
RENEW = TIMING["lock_renew_interval_ms"]
T_LAST_RENEW = (T_KILL // RENEW) * RENEW
T_TAKE = T_LAST_RENEW + TIMING["broker_lock_lease_ms"] + 1_500  # lease out, then the next rebalance + lock
PERSIST = TIMING["consumer_offset_persist_ms"]
T_LAST_COMMIT = (T_KILL // PERSIST) * PERSIST


def _write(df: DataFrame, path: Path) -> None:
    df.write.mode("overwrite").option("compression", "none").json(str(path))


def generate(spark: SparkSession, run_dir: Path, events: int) -> int:
    """Write the synthetic run; returns the number of events written."""
    n = int((events - 20_000) / 3.03125)  # 2 send lines + 1 delivery + 1/32 pull per message, plus the rest
    per_ms = n / SPAN_MS
    base = spark.range(n).select(
        F.col("id"), (F.col("id") % QUEUES).cast("int").alias("queue_id"), (F.col("id") / QUEUES).cast("long")
        .alias("queue_offset"), (F.col("id") / per_ms).cast("long").alias("t_send"))
    base = base.withColumns({
        "msg_id": F.concat(F.lit("m"), F.col("id").cast("string")),
        "sharding_key": F.concat(F.lit("k"), F.col("queue_id").cast("string")),
        "owner": (F.col("queue_id") % CLIENTS).cast("int")})
    common = [F.lit(TOPIC).alias("topic"), "msg_id", "sharding_key", F.col("queue_offset").alias("seq")]

    # producers: invoke + ok per message
    sends = base.select("id", "t_send", "queue_id", "queue_offset", *common, F.explode(F.array(
        F.lit("invoke"), F.lit("ok"))).alias("type"))
    sends = sends.select(
        F.concat(F.lit("producer-"), (F.col("id") % PRODUCERS).cast("string")).alias("node"),
        (F.col("t_send") + F.when(F.col("type") == "ok", 3).otherwise(0)).alias("mono_ms"), F.lit("send").alias("event"),
        "type", F.concat(F.lit("op"), F.col("id").cast("string")).alias("op_id"), "msg_id", "topic", "sharding_key",
        "seq", F.when(F.col("type") == "ok", F.lit("SEND_OK")).alias("status"),
        F.when(F.col("type") == "ok", F.col("queue_id")).alias("queue_id"),
        F.when(F.col("type") == "ok", F.col("queue_offset")).alias("queue_offset"),
        F.when(F.col("type") == "ok", F.lit(BROKER)).alias("broker_name"))
    sends = sends.withColumn("wall_ms", F.col("mono_ms") + 1_700_000_000_000)
    for p in range(PRODUCERS):
        _write(sends.filter(F.col("node") == f"producer-{p}"), run_dir / f"producer-{p}" / "sends.jsonl")

    # consumers: the killed client's queues move to the next client once the broker lease ran out
    killed_queue = F.col("owner") == KILLED
    after_kill = killed_queue & (F.col("t_send") >= T_KILL - 10)
    owner = F.when(after_kill, (F.col("owner") + 1) % CLIENTS).otherwise(F.col("owner"))
    # the backlog that waited for the takeover is delivered in offset order just before T_TAKE + 1
    backlog = after_kill & (F.col("t_send") < T_TAKE)
    squeeze = 351.0 / (T_TAKE - T_KILL + 10)
    t_deliver = F.when(backlog, (F.lit(T_TAKE - 350) + (F.col("t_send") - (T_KILL - 10)) * squeeze).cast("long")) \
        .otherwise(F.col("t_send") + 5)
    deliveries = base.filter((F.col("id") % 3301) != 7).select("queue_id", "queue_offset", *common,
                                                               owner.alias("client"), t_deliver.alias("t"))
    # redelivered by the new owner: consumed by c1 after its last commit, before the kill
    again = base.filter(killed_queue & (F.col("t_send") >= T_LAST_COMMIT) & (F.col("t_send") < T_KILL - 10)).select(
        "queue_id", "queue_offset", *common, ((F.col("owner") + 1) % CLIENTS).alias("client"),
        (F.lit(T_TAKE - 400) + (F.col("t_send") - T_LAST_COMMIT) / 20).cast("long").alias("t"))
    deliveries = deliveries.unionByName(again)
    deliveries = deliveries.select(
        F.concat(F.lit("consumer-"), F.col("client").cast("string")).alias("node"), "t",
        F.col("t").alias("mono_ms"), (F.col("t") + 1_700_000_000_000).alias("wall_ms"), F.lit("deliver").alias("event"),
        F.lit(GROUP).alias("group"), F.concat(F.lit("c"), F.col("client").cast("string")).alias("client_id"),
        "msg_id", "topic", F.lit(BROKER).alias("broker_name"), "queue_id", "queue_offset",
        F.lit(0).alias("reconsume_times"), "sharding_key", "seq", F.lit("SUCCESS").alias("result"),
        F.lit(True).alias("orderly"), F.col("t").alias("consume_start_mono_ms"),
        (F.col("t") + 2).alias("consume_end_mono_ms"))
    pulls = deliveries.filter(F.col("queue_offset") % 32 == 0).select(
        "node", (F.col("t") - 1).alias("mono_ms"), F.lit("pull-route").alias("event"), "group", "client_id", "topic",
        "broker_name", "queue_id", "queue_offset", F.lit(0).alias("requested_broker_id"), F.lit(0).alias("broker_id"),
        F.lit(0).alias("suggest_which_broker_id"), F.lit("FOUND").alias("status"),
        (F.col("queue_offset") + 32).alias("next_begin_offset"), F.lit(False).alias("commit_flag"))
    for c in range(CLIENTS):
        node = f"consumer-{c}"
        _write(deliveries.filter(F.col("node") == node).drop("t"), run_dir / node / "deliveries.jsonl")
        _write(pulls.filter(F.col("node") == node), run_dir / node / "events.jsonl")

    # commits every P_c and lock events, small: built on the driver
    commits, locks = [], []
    for q in range(QUEUES):
        first_owner = q % CLIENTS
        for t in range(PERSIST, SPAN_MS, PERSIST):
            c = first_owner if first_owner != KILLED or t < T_KILL else (first_owner + 1) % CLIENTS
            if first_owner == KILLED and T_KILL <= t < T_TAKE:
                continue
            offset = int(((t - 20) * per_ms - q) // QUEUES) + 1  # what was delivered 20 ms ago
            commits.append({"node": f"consumer-{c}", "mono_ms": t + 1, "event": "offset-commit", "group": GROUP,
                            "client_id": f"c{c}", "topic": TOPIC, "broker_name": BROKER, "queue_id": q,
                            "offset": max(offset, 0), "target_broker_id": 0, "ok": True})
        for t in range(0, SPAN_MS, RENEW):
            c = first_owner
            if first_owner == KILLED and t > T_KILL:
                if t < T_TAKE:
                    continue
                c = (first_owner + 1) % CLIENTS
            action = "granted" if t == 0 else "renewed"
            for side, node, lease in (("broker", f"{BROKER}-0", TIMING["broker_lock_lease_ms"]),
                                      ("client", f"consumer-{c}", TIMING["client_lock_lease_ms"])):
                locks.append({"node": node, "mono_ms": t + (1 if side == "client" else 0), "event": "lock",
                              "side": side, "group": GROUP, "client_id": f"c{c}", "topic": TOPIC, "broker_name": BROKER,
                              "queue_id": q, "action": action, "lease_end_mono_ms": t + lease})
        if first_owner == KILLED:
            new = (first_owner + 1) % CLIENTS
            for side, node, lease in (("broker", f"{BROKER}-0", TIMING["broker_lock_lease_ms"]),
                                      ("client", f"consumer-{new}", TIMING["client_lock_lease_ms"])):
                locks.append({"node": node, "mono_ms": T_TAKE - 500, "event": "lock", "side": side, "group": GROUP,
                              "client_id": f"c{new}", "topic": TOPIC, "broker_name": BROKER, "queue_id": q,
                              "action": "granted", "lease_end_mono_ms": T_TAKE - 500 + lease})
    by_node: dict[str, list[dict]] = {}
    for r in commits + locks:
        by_node.setdefault(r["node"], []).append(r)
    for node, rows in by_node.items():
        (run_dir / node / "events.jsonl").mkdir(parents=True, exist_ok=True)
        path = run_dir / node / "events.jsonl" / "part-small.json"
        path.write_text("".join(json.dumps(r) + "\n" for r in sorted(rows, key=lambda r: r["mono_ms"])))
    harness = run_dir / "harness"
    harness.mkdir(parents=True, exist_ok=True)
    (harness / "nemesis.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (
        {"node": "harness", "mono_ms": T_KILL, "event": "nemesis", "op": "kill", "phase": "start",
         "targets": [f"consumer-{KILLED}"]},
        {"node": "harness", "mono_ms": T_KILL + 5, "event": "nemesis", "op": "kill", "phase": "end",
         "targets": [f"consumer-{KILLED}"]})))
    (harness / "processes.jsonl").write_text(json.dumps(
        {"node": f"consumer-{KILLED}", "mono_ms": T_KILL + 2, "event": "exit", "expected": False, "exit_code": -9}) + "\n")
    (run_dir / "timing.json").write_text(json.dumps(TIMING))
    (run_dir / "run.json").write_text(json.dumps({"suite": "bench-synthetic", "seed": 0}))
    return 2 * n + deliveries.count() + pulls.count() + len(commits) + len(locks) + 3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--run-dir", type=Path, default=None, help="generate here (default: a temp dir)")
    parser.add_argument("--reuse", action="store_true", help="check an already generated --run-dir")
    parser.add_argument("--keep", action="store_true", help="keep the generated run dir")
    parser.add_argument("--spark-master", default=None)
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="extra Spark setting (repeatable), to compare settings on the same history")
    args = parser.parse_args()
    conf = dict(item.split("=", 1) for item in args.conf)
    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="bench-checker-")) / "run"
    t0 = time.monotonic()
    spark = make_spark(args.spark_master, app_name="mqlab-bench-checker", driver_memory=args.driver_memory,
                       conf=conf)
    started = time.monotonic() - t0
    print(f"spark started in {started:.1f} s ({spark.sparkContext.master}, {spark.sparkContext.defaultParallelism} cores)")
    try:
        if args.reuse:
            written = json.loads((run_dir / "bench.json").read_text())["events"]
            print(f"reusing {run_dir} ({written:,} events)")
        else:
            t = time.monotonic()
            written = generate(spark, run_dir, args.events)
            (run_dir / "bench.json").write_text(json.dumps({"events": written}))
            size = sum(p.stat().st_size for p in run_dir.rglob("*") if p.is_file())
            print(f"generated {written:,} events ({size / 1e9:.2f} GB of JSONL) in {time.monotonic() - t:.1f} s: {run_dir}")
        t = time.monotonic()
        out = check_run(run_dir, spark=spark)
        took = time.monotonic() - t
    finally:
        spark.stop()
    v = out.verdict
    print(f"checked in {took:.1f} s ({written / took:,.0f} events/s): "
          + ", ".join(f"{k} {s:.1f} s" for k, s in out.seconds.items() if k != "spark_start"))
    for c in v.checks.values():
        print(f"  {c.name:17} {c.valid!s:8} {c.seconds:6.1f} s  {c.reason or ''}")
    print(f"verdict {v.valid} -> {out.verdict_path}; report {out.report_path}")
    if not args.keep and args.run_dir is None:
        shutil.rmtree(run_dir.parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
