"""Read a run's histories into DataFrames with the explicit schemas, and derive shared views.

`load_history(spark, run_dir)` finds every process's `sends`, `deliveries`, `events`,
`nemesis` and `processes` files and the link proxies' `requests` (JSONL or Parquet, see `schemas`) and unions them per kind.
`history_from_rows` builds the same `History` from Python dicts (tests, synthetic runs).
Derived views that several checks share (normalised deliveries, send outcomes, commits,
locks, pulls, per-queue ownership epochs) are computed once, lazily, and persisted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from chaos.checker import schemas as S
from chaos.checker.faults import (
    FaultWindow,
    ProcessExit,
    StorageFault,
    broker_identity,
    fault_windows,
    process_exits,
    storage_faults,
)

QUEUE = ["topic", "broker_name", "queue_id"]
BROKER_ROLES = ("broker", "master", "slave")
GQ = ["group", *QUEUE]
_MQ_STRING = r"topic=([^,\]]+), brokerName=([^,\]]+), queueId=(\d+)"


@dataclass
class History:
    spark: SparkSession
    sends: DataFrame
    deliveries: DataFrame
    events: DataFrame
    nemesis: DataFrame
    processes: DataFrame
    readback: DataFrame
    requests: DataFrame  # the link proxies' request journal (links/requests.jsonl); absent before it existed
    present: dict[str, int]  # kind -> files found (0: absent)
    run_dir: Path | None = None
    roles: dict[str, str] = field(default_factory=dict)  # node -> role (cluster.json)
    # persist shared derived views: worth it for real runs; for tiny in-memory histories the cache
    # lookups every later query pays cost more than recomputing
    cache: bool = True
    _persisted: list[DataFrame] = field(default_factory=list, repr=False)

    # ---- housekeeping ---------------------------------------------------------------

    def has(self, kind: str) -> bool:
        return self.present.get(kind, 0) > 0

    def persist(self, df: DataFrame) -> DataFrame:
        if not self.cache:
            return df
        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        self._persisted.append(df)
        return df

    def unpersist(self) -> None:
        for df in self._persisted:
            df.unpersist()
        self._persisted.clear()

    @cached_property
    def stats(self) -> dict[str, Any]:
        """Rows per kind, unreadable lines, event kinds and the history's time span, in one pass."""
        parts = [getattr(self, kind).select(F.lit(kind).alias("kind"), "event", "mono_ms") for kind in S.KINDS]
        union = parts[0]
        for p in parts[1:]:
            union = union.unionByName(p)
        got = union.groupBy("kind", "event").agg(F.count(F.lit(1)).alias("n"), F.min("mono_ms").alias("lo"),
                                                 F.max("mono_ms").alias("hi")).collect()
        out: dict[str, Any] = {"rows": dict.fromkeys(S.KINDS, 0), "unreadable_lines": dict.fromkeys(S.KINDS, 0),
                               "event_kinds": {}}
        for r in got:
            if r["event"] is None:
                out["unreadable_lines"][r["kind"]] += r["n"]
                continue
            out["rows"][r["kind"]] += r["n"]
            if r["kind"] == "events":
                out["event_kinds"][r["event"]] = r["n"]
        times = [r for r in got if r["event"] is not None and r["lo"] is not None
                 and r["kind"] not in S.AFTER_RUN_KINDS]
        out["t0_ms"] = min((r["lo"] for r in times), default=0)
        out["t_end_ms"] = max((r["hi"] for r in times), default=0)
        return out

    @property
    def t0(self) -> int:
        return self.stats["t0_ms"]

    @property
    def t_end(self) -> int:
        return self.stats["t_end_ms"]

    # ---- small, driver-side ------------------------------------------------------------

    @cached_property
    def faults(self) -> list[FaultWindow]:
        rows = [r.asDict(recursive=True) for r in self.nemesis.filter(F.col("event").isNotNull()).collect()]
        return fault_windows(rows, self.t_end)

    @cached_property
    def storage_faults(self) -> list[StorageFault]:
        rows = [r.asDict(recursive=True) for r in self.nemesis.filter(F.col("op").isin("power-loss", "corrupt"))
                .collect()]
        return storage_faults(rows)

    @cached_property
    def exits(self) -> list[ProcessExit]:
        rows = [r.asDict() for r in self.processes.filter(F.col("event") == "exit").collect()]
        return process_exits(rows)

    def is_broker(self, node: str | None) -> bool:
        if node is None:
            return False
        role = self.roles.get(node)
        return role in BROKER_ROLES if role else node.startswith("broker")

    def node_faults(self, node: str | None, ops: Iterable[str] | None = None) -> list[FaultWindow]:
        wanted = set(ops) if ops is not None else None
        return [w for w in self.faults if w.hits(node) and (wanted is None or w.op in wanted)]

    @cached_property
    def pop_lines(self) -> list[dict[str, Any]]:
        """The POP lines that name an entry (schemas.POP_EVENTS and client-ack), collected once for
        the POP checks: a run's hand-outs, acks, changes and revives, tens of thousands of rows."""
        if not self.has("events"):
            return []
        lines = self.ev.filter(F.col("event").isin(*S.POP_EVENTS, S.CLIENT_ACK) & F.col("queue_offset").isNotNull())
        return [r.asDict() for r in lines.select(*S.POP_LINE_COLUMNS).collect()]

    @cached_property
    def broker_fault_windows(self) -> list[FaultWindow]:
        """Faults on broker nodes, plus unexpected broker exits (as kill windows to the next event)."""
        out = [w for w in self.faults if any(self.is_broker(t) for t in w.targets)]
        for e in self.exits:
            if self.is_broker(e.node) and not e.expected:
                out.append(FaultWindow(op="kill", targets=(e.node,), start_ms=e.t_ms, end_ms=e.t_ms, recovered=True,
                                       detail="unexpected exit"))
        return sorted(out, key=lambda w: w.start_ms)

    def group_fault_windows(self, broker_name: str | None) -> list[FaultWindow]:
        """The broker faults on nodes of one broker group (a queue's, with several groups); all of
        them when the group is not known."""
        if broker_name is None:
            return self.broker_fault_windows
        return [w for w in self.broker_fault_windows
                if any((ident := broker_identity(t)) is not None and ident[0] == broker_name
                       for t in w.targets if self.is_broker(t))]

    def faults_df(self) -> DataFrame:
        """One row per (fault window, target node); an untargeted window gets node '*'."""
        rows = [(i, w.op, t, w.start_ms, w.end_ms, w.recovered)
                for i, w in enumerate(self.faults) for t in (w.targets or ("*",))]
        rows += [(len(self.faults) + i, "exit", e.node, e.t_ms, e.t_ms, True)
                 for i, e in enumerate(self.exits) if not e.expected]
        return self.spark.createDataFrame(
            rows, "fault_id INT, op STRING, node STRING, start_ms LONG, end_ms LONG, recovered BOOLEAN")

    # ---- shared derived views -----------------------------------------------------------

    @cached_property
    def deliv(self) -> DataFrame:
        """Deliveries with t (consume start or log time), success, and whether they belong to a queue's
        offset sequence (orderly, or concurrent first attempts: retries come from retry queues)."""
        d = self.deliveries.filter(F.col("event").isNotNull() & F.col("msg_id").isNotNull())
        orderly = F.coalesce("orderly", F.lit(False))
        d = d.withColumns({
            "client_id": F.coalesce("client_id", "node"),
            "orderly": orderly,
            "t": F.coalesce("consume_start_mono_ms", "mono_ms"),
            "t_end": F.coalesce("consume_end_mono_ms", "mono_ms", "consume_start_mono_ms"),
            "success": F.coalesce(F.col("result").isin(*S.SUCCESS_RESULTS), F.lit(False)),
            "in_queue": orderly | (F.coalesce("reconsume_times", F.lit(0)) == 0),
        })
        return d  # a projection of the (cached) raw deliveries

    @cached_property
    def outcomes(self) -> DataFrame:
        """One row per msg_id: attempted, acked (a stored status), outcome, times and where it was stored."""
        s = self.sends.filter(F.col("msg_id").isNotNull() & F.col("type").isNotNull())
        is_ok = F.col("type") == "ok"
        acked = is_ok & (F.col("status").isNull() | F.col("status").isin(*S.ACKED_STATUSES))
        out = s.groupBy("msg_id").agg(
            F.max((F.col("type") == "invoke").cast("int")).cast("boolean").alias("attempted"),
            F.max(acked.cast("int")).cast("boolean").alias("acked"),
            F.max(is_ok.cast("int")).alias("n_ok"),
            F.max((F.col("type") == "info").cast("int")).alias("n_info"),
            F.max((F.col("type") == "fail").cast("int")).alias("n_fail"),
            F.first("topic", ignorenulls=True).alias("topic"),
            F.first("sharding_key", ignorenulls=True).alias("sharding_key"),
            F.first("seq", ignorenulls=True).alias("seq"),
            F.min(F.when(F.col("type") == "invoke", F.col("mono_ms"))).alias("invoke_ms"),
            F.min(F.when(acked, F.col("mono_ms"))).alias("ack_ms"),
            F.min(F.when(F.col("type").isin("ok", "fail", "info"), F.col("mono_ms"))).alias("done_ms"),
            F.max(F.when(acked, F.col("broker_name"))).alias("broker_name"),
            F.max(F.when(acked, F.col("queue_id"))).alias("queue_id"),
            F.max(F.when(acked, F.col("queue_offset"))).alias("queue_offset"),
            F.first("node", ignorenulls=True).alias("producer"),
        ).withColumn("outcome", F.when(F.col("acked"), "ok").when(F.col("n_ok") > 0, "ok-not-stored")
                     .when(F.col("n_info") > 0, "info").when(F.col("n_fail") > 0, "fail").otherwise("pending"))
        return self.persist(out.drop("n_ok", "n_info", "n_fail"))

    @cached_property
    def per_msg(self) -> DataFrame:
        """One row per (group, msg_id) delivered: deliveries `n`, successful ones `n_success` and the
        first successful one's time `t_first` (lost, unexpected, duplicates and the report's
        end-to-end latency all start from it; one shuffle instead of one each)."""
        return self.persist(self.deliv.groupBy("group", "msg_id").agg(
            F.count(F.lit(1)).alias("n"), F.sum(F.col("success").cast("long")).alias("n_success"),
            F.min(F.when(F.col("success"), F.col("t"))).alias("t_first")))

    @cached_property
    def ev(self) -> DataFrame:
        return self.events.filter(F.col("event").isNotNull())

    def _client_ids(self) -> DataFrame:
        """(node, group) -> client_id where the node ran exactly one client of the group."""
        d = self.deliv.select("node", "group", "client_id")
        e = self.ev.filter((F.col("side") == "client") & F.col("client_id").isNotNull()).select(
            "node", "group", "client_id")
        return (d.unionByName(e).groupBy("node", "group")
                .agg(F.countDistinct("client_id").alias("n"), F.first("client_id").alias("mapped_client"))
                .filter(F.col("n") == 1).drop("n"))

    def _with_client(self, df: DataFrame) -> DataFrame:
        return (df.join(F.broadcast(self._client_ids()), ["node", "group"], "left")
                .withColumn("client_id", F.coalesce("client_id", "mapped_client", "node")).drop("mapped_client"))

    @cached_property
    def commits(self) -> DataFrame:
        """Client offset commits that succeeded: group, queue, client_id, offset, target broker id, t (the
        answer's line) and decided_t (when the client decided and sent it; t when the line does not say)."""
        c = self.ev.filter((F.col("event") == "offset-commit") & (F.col("side") == "client")
                           & F.col("offset").isNotNull() & (F.coalesce("ok", F.lit(True))))
        c = c.withColumn("target_broker_id", F.coalesce("target_broker_id", "broker_id"))
        c = self._with_client(c).select("node", "client_id", *GQ, "offset", "target_broker_id",
                                        F.col("mono_ms").alias("t"),
                                        F.coalesce("decided_mono_ms", "mono_ms").alias("decided_t"))
        return self.persist(c)

    @cached_property
    def broker_offsets(self) -> DataFrame:
        """What brokers stored: node, broker id, group, queue, offset, source, t."""
        return self.persist(self.ev.filter((F.col("event") == "offset-commit") & (F.col("side") == "broker")
                                           & F.col("offset").isNotNull())
                            .select("node", F.coalesce("target_broker_id", "broker_id", "answering_broker_id")
                                    .alias("broker_id"), *GQ,
                                    "offset", F.coalesce("source", F.lit("client")).alias("source"), "client_id",
                                    F.col("mono_ms").alias("t")))

    @cached_property
    def locks(self) -> DataFrame:
        return (self.ev.filter((F.col("event") == "lock") & F.col("action").isNotNull())
                .select("node", "side", "client_id", *GQ, "action", "lease_end_mono_ms", "reason",
                        F.col("mono_ms").alias("t")))

    @cached_property
    def pulls(self) -> DataFrame:
        return (self.ev.filter((F.col("event") == "pull-route") & (F.col("side") == "client"))
                .select("node", F.coalesce("client_id", "node").alias("client_id"), *GQ, "queue_offset",
                                    "requested_broker_id", "broker_id", "commit_flag", "suggest_which_broker_id",
                                    "status", "next_begin_offset", F.col("mono_ms").alias("t"),
                                    F.coalesce("sent_mono_ms", "mono_ms").alias("sent_t")))

    @cached_property
    def rebalances(self) -> DataFrame:
        return self.ev.filter(F.col("event") == "rebalance").select(
            "node", F.coalesce("client_id", "node").alias("client_id"), "group", "topic", "before", "after",
            "removed", "reason", F.col("mono_ms").alias("t"))

    @cached_property
    def queue_resumes(self) -> DataFrame:
        """A real client's dropped pull request resumed with its old cache (schemas: queue-resumed)."""
        return self.ev.filter(F.col("event") == "queue-resumed").select(
            "node", F.coalesce("client_id", "node").alias("client_id"), *GQ, "queue_offset",
            F.col("mono_ms").alias("t"))

    @cached_property
    def queue_deliveries(self) -> DataFrame:
        """Deliveries in queue-offset order per (group, queue), with ownership epochs.

        An epoch is a maximal run of deliveries by one client; `prev_max` is the highest offset
        delivered on the queue before the row; `prev_*` describe the previous delivery."""
        d = self.deliv.filter(F.col("in_queue") & F.col("queue_offset").isNotNull() & F.col("queue_id").isNotNull()
                              & F.col("group").isNotNull())
        d = d.select(*GQ, "client_id", "node", "t", "t_end", "queue_offset", "msg_id", "result", "success", "orderly")
        w = Window.partitionBy(*GQ).orderBy("t", "queue_offset")
        upto = w.rowsBetween(Window.unboundedPreceding, Window.currentRow)
        before = w.rowsBetween(Window.unboundedPreceding, -1)
        d = d.withColumns({
            "prev_client": F.lag("client_id").over(w),
            "prev_offset": F.lag("queue_offset").over(w),
            "prev_success": F.lag("success").over(w),
            "prev_t": F.lag("t").over(w),
            "prev_max": F.max("queue_offset").over(before),
        })
        d = d.withColumn("new_epoch", (F.col("prev_client").isNull()
                                       | (F.col("prev_client") != F.col("client_id"))).cast("int"))
        d = d.withColumn("epoch", F.sum("new_epoch").over(upto))
        return self.persist(d)

    @cached_property
    def epochs(self) -> DataFrame:
        """One row per ownership epoch with the commit state when it began (C_last) and its predecessor."""
        d = self.queue_deliveries
        first_key = F.struct("t", "queue_offset")
        ep = d.groupBy(*GQ, "epoch").agg(
            F.first("client_id").alias("client_id"), F.first("node").alias("node_id"),
            F.min("t").alias("start"), F.max("t").alias("last_t"), F.max("t_end").alias("end"),
            F.min("queue_offset").alias("min_offset"), F.max("queue_offset").alias("max_offset"),
            F.min_by("queue_offset", first_key).alias("first_offset"),
            F.min_by("msg_id", first_key).alias("first_msg"),
            F.min_by("prev_max", first_key).alias("prev_max"),
            F.count(F.lit(1)).alias("n"), F.max(F.col("orderly").cast("int")).cast("boolean").alias("orderly"))
        commits = self.commits.select(*GQ, "t", F.col("offset").alias("c_offset"),
                                      F.col("target_broker_id").alias("c_target"),
                                      F.col("client_id").alias("c_client"), F.lit(0).alias("kind"))
        starts = ep.withColumn("kind", F.lit(1)).withColumn("t", F.col("start"))
        u = starts.unionByName(commits, allowMissingColumns=True)
        w = Window.partitionBy(*GQ).orderBy("t", "kind").rowsBetween(Window.unboundedPreceding, Window.currentRow)
        u = u.withColumns({
            "c_last": F.last("c_offset", ignorenulls=True).over(w),
            "c_last_t": F.last(F.when(F.col("kind") == 0, F.col("t")), ignorenulls=True).over(w),
            "c_last_target": F.last("c_target", ignorenulls=True).over(w),
            "c_last_client": F.last("c_client", ignorenulls=True).over(w),
        }).filter(F.col("kind") == 1).drop("kind", "c_offset", "c_target", "c_client", "t")
        we = Window.partitionBy(*GQ).orderBy("epoch")
        u = u.withColumns({
            "prev_client": F.lag("client_id").over(we),
            "prev_node": F.lag("node_id").over(we),
            "prev_start": F.lag("start").over(we),
            "prev_last_t": F.lag("last_t").over(we),
            "prev_end": F.lag("end").over(we),
        }).withColumnRenamed("node_id", "node")
        return self.persist(u)


# ---- building histories ------------------------------------------------------------------


def load_history(spark: SparkSession, run_dir: str | Path) -> History:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir} is not a directory")
    frames: dict[str, DataFrame] = {}
    present: dict[str, int] = {}
    for kind, (stem, schema) in S.KINDS.items():
        jsonl = _existing([*run_dir.glob(f"{stem}.jsonl"), *run_dir.glob(f"*/{stem}.jsonl")])
        parquet = _existing([*run_dir.glob(f"{stem}.parquet"), *run_dir.glob(f"*/{stem}.parquet")])
        parts: list[DataFrame] = []
        if jsonl:
            parts.append(spark.read.schema(schema).option("mode", "PERMISSIVE").json([str(p) for p in jsonl])
                         .withColumn("_path", F.col("_metadata.file_path")))
        if parquet:
            parts.append(spark.read.schema(schema).parquet(*[str(p) for p in parquet])
                         .withColumn("_path", F.col("_metadata.file_path")))
        present[kind] = len(jsonl) + len(parquet)
        if parts:
            df = parts[0]
            for p in parts[1:]:
                df = df.unionByName(p)
            node_from_path = F.regexp_extract("_path", rf"/([^/]+)/{re.escape(stem)}\.(?:jsonl|parquet)", 1)
            df = df.withColumn("node", F.coalesce("node", F.when(node_from_path != "", node_from_path))).drop("_path")
        else:
            df = spark.createDataFrame([], schema)
        frames[kind] = df
    roles = _roles(run_dir)
    h = _finish(spark, frames, present, roles, run_dir)
    for kind in ("sends", "deliveries", "events"):  # parsed once (by `stats`), read from memory afterwards
        if present[kind]:
            setattr(h, kind, h.persist(getattr(h, kind)))
    return h


def history_from_rows(spark: SparkSession, *, sends: Iterable[Mapping[str, Any]] | None = None,
                      deliveries: Iterable[Mapping[str, Any]] | None = None,
                      events: Iterable[Mapping[str, Any]] | None = None,
                      nemesis: Iterable[Mapping[str, Any]] | None = None,
                      processes: Iterable[Mapping[str, Any]] | None = None,
                      readback: Iterable[Mapping[str, Any]] | None = None,
                      requests: Iterable[Mapping[str, Any]] | None = None,
                      roles: Mapping[str, str] | None = None, cache: bool = False) -> History:
    """A History from dicts (missing fields are null); a kind given as None is absent."""
    given = {"sends": sends, "deliveries": deliveries, "events": events, "nemesis": nemesis, "processes": processes,
             "readback": readback, "requests": requests}
    frames: dict[str, DataFrame] = {}
    present: dict[str, int] = {}
    for kind, rows in given.items():
        schema = S.KINDS[kind][1]
        data = [] if rows is None else [_row(r, schema, kind) for r in rows]
        frames[kind] = _local_frame(spark, data, schema)
        present[kind] = 0 if rows is None else 1
    h = _finish(spark, frames, present, dict(roles or {}), None)
    h.cache = cache
    return h


def _local_frame(spark: SparkSession, data: list[tuple[Any, ...]], schema: StructType) -> DataFrame:
    """Rows held by the driver as a frame of the JVM's own (an Arrow table becomes a local relation):
    a list of tuples would become a Python RDD that every query re-reads through the pickler, which
    cost about a tenth more JVM CPU per check of a small history (measured on every check of the
    clean orderly history, warm session). In one partition, every grouping, window and join above it
    needs no shuffle: the 14 checks of that history run 53 stages instead of 125, about a tenth less CPU."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(schema)
    columns = list(zip(*data, strict=True)) if data else [() for _ in schema.fields]
    rows: Any
    try:
        rows = pa.Table.from_arrays([pa.array(list(values), type=f.type)
                                     for values, f in zip(columns, arrow_schema, strict=True)], schema=arrow_schema)
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        # a value of another type than its column's (a queue id as an int in a string list): Spark's
        # own conversion takes it as the JSON reader would, as its text
        rows = data
    return spark.createDataFrame(rows, schema).coalesce(1)


def _row(record: Mapping[str, Any], schema: StructType, kind: str) -> tuple[Any, ...]:
    defaults = {"sends": "send", "deliveries": "deliver", "nemesis": "nemesis", "processes": "exit",
                "readback": "readback"}
    values = dict(record)
    values.setdefault("event", defaults.get(kind))
    unknown = set(values) - set(schema.fieldNames())
    if unknown:
        raise ValueError(f"{kind} record has fields outside the schema: {sorted(unknown)}")
    return tuple(values.get(name) for name in schema.fieldNames())


def _finish(spark: SparkSession, frames: dict[str, DataFrame], present: dict[str, int], roles: dict[str, str],
            run_dir: Path | None) -> History:
    frames["events"] = _normalise_events(frames["events"], roles)
    return History(spark=spark, present=present, run_dir=run_dir, roles=roles, **frames)


def _normalise_events(df: DataFrame, roles: Mapping[str, str]) -> DataFrame:
    broker_nodes = [n for n, r in roles.items() if r in BROKER_ROLES]
    is_broker_node: Column = F.col("node").isin(*broker_nodes) if broker_nodes else F.lit(False)
    if roles:
        is_broker_node = is_broker_node | (~F.col("node").isin(*roles) & F.col("node").startswith("broker"))
    else:
        is_broker_node = F.col("node").startswith("broker")
    side = F.coalesce(F.lower("side"), F.when(is_broker_node, F.lit("broker")).otherwise(F.lit("client")))
    node_name = F.regexp_extract("node", r"^(.+)-\d+$", 1)
    node_id = F.regexp_extract("node", r"-(\d+)$", 1)
    mq_topic = F.regexp_extract("queue", _MQ_STRING, 1)
    mq_broker = F.regexp_extract("queue", _MQ_STRING, 2)
    mq_qid = F.regexp_extract("queue", _MQ_STRING, 3)
    on_broker = side == "broker"
    return df.withColumns({
        "side": side,
        "topic": F.coalesce("topic", F.when(mq_topic != "", mq_topic)),
        "broker_name": F.coalesce("broker_name", F.when(mq_broker != "", mq_broker),
                                  F.when(on_broker & (node_name != ""), node_name)),
        "queue_id": F.coalesce("queue_id", F.when(mq_qid != "", mq_qid.cast("int"))),
        "answering_broker_id": F.coalesce("answering_broker_id",
                                          F.when(on_broker & (node_id != ""), node_id.cast("int"))),
    })


def _existing(paths: list[Path]) -> list[Path]:
    return [p for p in sorted(set(paths)) if p.exists()]


def _roles(run_dir: Path) -> dict[str, str]:
    path = run_dir / "cluster.json"
    try:
        data = json.loads(path.read_text())
        return {n["id"]: n["role"] for n in data.get("nodes", []) if n.get("id") and n.get("role")}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}
