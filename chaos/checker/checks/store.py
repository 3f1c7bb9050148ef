"""Storage faults judged: store-health (store errors explained by an injected fault) and durability
(acknowledged loss against the run's flush x replication mode, `chaos.checker.storage`)."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from chaos.checker.checks._common import collect_parts, s
from chaos.checker.config import CheckerConfig
from chaos.checker.faults import StorageFault, broker_identity
from chaos.checker.loader import History
from chaos.checker.storage import allowed_loss, loss_windows, mode_of, run_mode
from chaos.checker.verdict import CheckResult, unknown

STORE_HEALTH = (
    "Every store-error event a broker reports (torn-tail, cq-truncated, damaged-range, bad-record, "
    "replica-refused, recovery-anomaly) is explained by an injected storage fault on that node: a power loss "
    "or corruption from its start until the node's next store-recovered event plus A_h + S_s (a slave "
    "reconnect and a sync), and a corruption also for any later bad-record or damaged-range inside the "
    "record it flipped. A fault on a master also explains its replicas' errors (broker group = node id "
    "without its -<broker id> suffix): its power loss their replica-refused events until its next "
    "store-recovered plus A_h + S_s (they are cut back to its recovered log; each node's first refusal after "
    "the power loss however late: it is found when the slave first reaches the master again), its corruption their later "
    "bad-record or damaged-range inside the flipped record. Anything else fails - in particular a torn tail "
    "or truncated consume queue after a plain SIGKILL (the page cache survives a process kill, so nothing may "
    "be torn), and a bad-record after a power loss's restart on the same node outside a flipped record. "
    "Per power loss the "
    "report shows the torn tail the recovery cut (bytes, phys offset).")

DURABILITY = (
    "Acknowledged messages of a broker that lost power or had a record corrupted, and were never consumed, "
    "are judged against the run's mode (each broker's config.json): SYNC_FLUSH, or SYNC_MASTER with a live "
    "slave, loses no acknowledged message even after a power loss (only a FLUSH_DISK_TIMEOUT, resp. a send no "
    "slave confirmed, may go); ASYNC_FLUSH + ASYNC_MASTER may lose the acknowledged messages whose queue offsets "
    "lie in [flushed_queue_offset, written_queue_offset) of the power-lossed master's queue; a corrupted "
    "record's messages may be lost in any mode. A message counts as lost when no consumer ever took it, or when the "
    "end-of-run read-back (if any) finds it on no replica of its group at its queue offset while that queue reads "
    "back from at or below it: SYNC_FLUSH promises the master's own disk, so an acknowledged message cut by a power "
    "loss is lost even if a consumer had read it. A power loss that also took the group's slave (a rack: the same "
    "op, or the slave still down from its own) leaves no replica to give the cut tail back: SYNC_MASTER then allows "
    "the unflushed window as the async modes do. The recovered master hands the cut queue offsets out again: "
    "messages acknowledged after the power loss at offsets inside that window, which consumers whose committed "
    "offset had passed them skip, are allowed loss in the async modes (ASYNC_FLUSH + ASYNC_MASTER; ASYNC_FLUSH + "
    "SYNC_MASTER only where a send no slave confirmed was cut or the slave lost power too; under SYNC_FLUSH only when "
    "the slave lost power too: the cut held unacknowledged records consumers may have read), counted apart as "
    "reused_offsets. Allowed loss is counted with its window; any other loss of "
    "such a message fails (lost consults the same allowance).")

STORE_ERRORS_EXPLAINED_BY_CORRUPT = ("bad-record", "damaged-range")


def check_store_health(h: History, cfg: CheckerConfig) -> CheckResult:
    if not h.has("events"):
        return unknown("store-health", STORE_HEALTH, "no events history in the run")
    kinds = h.stats["event_kinds"]
    if not kinds.get("store-error") and not kinds.get("store-recovered"):
        return unknown("store-health", STORE_HEALTH,
                       "no store-recovered or store-error events: the brokers of this run do not report store health")
    cols = ["node", "event", "kind", "file", "phys_offset", "bytes", "topic", "queue_id", "queue_offset", "detail",
            "clean", "commitlog_max_phys_offset", "truncated_bytes", "damaged_ranges", "cq_units_dropped",
            F.col("mono_ms").alias("t")]
    got, counted = collect_parts({"store": h.ev.filter(F.col("event").isin("store-error", "store-recovered"))
                                  .select(*cols)}, cap=50_000)
    rows = sorted(got["store"], key=lambda r: r["t"])
    errors = [r for r in rows if r["event"] == "store-error"]
    recovered = [r for r in rows if r["event"] == "store-recovered"]
    b = cfg.bounds
    settle = b.A_h + b.S_s
    settle_limit = b.limit(settle)
    faults = h.storage_faults
    unexplained: list[dict[str, Any]] = []
    by_kind: dict[str, int] = {}
    explained = 0
    for e in errors:
        by_kind[e["kind"] or "?"] = by_kind.get(e["kind"] or "?", 0) + 1
        why = _explained_by(e, faults, recovered, settle_limit, errors)
        if why:
            explained += 1
            continue
        unexplained.append({"node": e["node"], "kind": e["kind"], "t_s": s(h, e["t"]), "file": e["file"],
                            "phys_offset": e["phys_offset"], "bytes": e["bytes"],
                            "queue": f"{e['topic']}/{e['queue_id']}" if e["topic"] else None,
                            "queue_offset": e["queue_offset"], "detail": e["detail"],
                            "after": _last_fault_before(h, e)})
    measurements = _power_loss_rows(h, faults, errors, recovered)
    counts = {"store_errors": len(errors), "explained": explained, "unexplained": len(unexplained),
              "by_kind": dict(sorted(by_kind.items())), "store_recovered": len(recovered),
              "unclean_recoveries": sum(1 for r in recovered if r["clean"] is False),
              "storage_faults": len(faults), "settle_bound_ms": settle, "settle_slack_ms": b.slack(settle)}
    if counted["store"] > len(rows):
        counts["store_events_not_read"] = counted["store"] - len(rows)
    valid = not unexplained
    reason = None if valid else f"{len(unexplained)} store error(s) no injected storage fault explains"
    return CheckResult("store-health", valid, STORE_HEALTH, counts=counts, examples=unexplained[:cfg.max_examples],
                       reason=reason, measurements=measurements)


def _explained_by(e: dict[str, Any], faults: list[StorageFault], recovered: list[dict[str, Any]],
                  settle_limit: int, errors: list[dict[str, Any]]) -> str | None:
    for f in faults:
        if e["t"] < f.start_ms:
            continue
        # until the faulted node's next recovery after the fault, plus the settle bound; with no
        # recovery since (not restarted yet), until the end
        after = [r["t"] for r in recovered if r["node"] == f.node and r["t"] >= f.start_ms]
        settling = not after or e["t"] <= after[0] + settle_limit
        # the divergence a master's power loss leaves is found whenever the slave first reaches
        # it again: after a rack power loss both restart, and the slave's registration or its
        # first connection may be retried on a busy machine, past the settle bound. So a node's
        # first refusal after the fault is explained however late; a later one only while settling
        settling = settling or (e["kind"] == "replica-refused" and _first_refusal_since(e, f.start_ms, errors))
        if f.node == e["node"]:
            # a bad record read after a power loss's recovery means the recovery kept garbage
            # (the torn tail is the recovery's to cut), not that the power loss made it
            kept_garbage = f.op == "power-loss" and e["kind"] == "bad-record" and bool(after) and e["t"] > after[0]
            if settling and not kept_garbage:
                return f.label
        elif _same_group(f.node, e["node"]):
            # a master's power loss cuts its replicas back to the recovered log: they refuse what
            # they hold beyond it until they truncate
            if f.op == "power-loss" and _is_master(f.node) and e["kind"] == "replica-refused" and settling:
                return f.label
        else:
            continue
        # a flipped record stays flipped, and replicates: any later read of it, on any replica
        if f.op == "corrupt" and e["kind"] in STORE_ERRORS_EXPLAINED_BY_CORRUPT and _inside(e, f.detail) \
                and (f.node == e["node"] or _is_master(f.node)):
            return f.label
    return None


def _first_refusal_since(e: dict[str, Any], since_ms: int, errors: list[dict[str, Any]]) -> bool:
    """Whether `e` is its node's first replica-refused event at or after `since_ms`."""
    first = min((x["t"] for x in errors if x["node"] == e["node"] and x["kind"] == "replica-refused"
                 and x["t"] >= since_ms), default=None)
    return first == e["t"]


def _same_group(a: str, b: str) -> bool:
    """Two nodes of one broker group (`broker-a-0`, `broker-a-1`: the node id without `-<broker id>`)."""
    ia, ib = broker_identity(a), broker_identity(b)
    return ia is not None and ib is not None and ia[0] == ib[0]


def _is_master(node: str) -> bool:
    ident = broker_identity(node)
    return ident is not None and ident[1] == 0


def _inside(e: dict[str, Any], detail: dict[str, Any]) -> bool:
    lo, n = detail.get("phys_offset"), detail.get("bytes")
    if lo is None or e["phys_offset"] is None:
        return False
    hi = lo + max(1, int(n or 1))
    e_hi = e["phys_offset"] + max(1, int(e["bytes"] or 1))
    return e["phys_offset"] < hi and lo < e_hi


def _last_fault_before(h: History, e: dict[str, Any]) -> str | None:
    before = [w for w in h.faults if w.hits(e["node"]) and w.start_ms <= e["t"]]
    return before[-1].label if before else None


def _power_loss_rows(h: History, faults: list[StorageFault], errors: list[dict[str, Any]],
                     recovered: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per power loss: what the nemesis cut, and the torn tail the node's next recovery reported."""
    out = []
    for f in faults:
        if f.op != "power-loss":
            continue
        nxt = next((r for r in recovered if r["node"] == f.node and r["t"] >= f.start_ms), None)
        until = nxt["t"] if nxt else h.t_end
        torn = [e for e in errors if e["node"] == f.node and e["kind"] == "torn-tail" and f.start_ms <= e["t"] <= until]
        cl = ((f.detail.get("store") or {}).get("commitlog") or {})
        out.append({"what": "power loss", "fault": f.label, "fault_s": s(h, f.start_ms),
                    "flushed_phys_offset": cl.get("flushed_phys_offset"),
                    "written_phys_offset": cl.get("written_phys_offset"), "nemesis_torn_bytes": cl.get("torn_bytes"),
                    "recovered_torn_tail_bytes": sum(int(e["bytes"] or 0) for e in torn) if torn else None,
                    "recovered_torn_tail_phys_offset": torn[0]["phys_offset"] if torn else None,
                    "recovered_torn_tail_file": torn[0]["file"] if torn else None,
                    "recovery_truncated_bytes": nxt["truncated_bytes"] if nxt else None,
                    "recovery_cq_units_dropped": nxt["cq_units_dropped"] if nxt else None,
                    "recovered_s": s(h, nxt["t"]) if nxt else None})
    return out


def check_durability(h: History, cfg: CheckerConfig) -> CheckResult:
    if not h.has("sends") or not h.has("deliveries"):
        return unknown("durability", DURABILITY, "needs the sends and deliveries histories")
    faults = h.storage_faults
    if not faults:
        return unknown("durability", DURABILITY, "no power-loss or corrupt fault in the run")
    windows = loss_windows(h, cfg)
    allowed = allowed_loss(h, cfg, windows)
    # the messages a storage fault put at risk: acknowledged by a faulted broker before its fault
    at_risk_faults = h.spark.createDataFrame(
        [(_broker_name(cfg, f.node), f.start_ms, f.label) for f in faults
         if f.op == "corrupt" or _broker_id(cfg, f.node) == 0],
        "broker_name STRING, f_start LONG, fault STRING")
    consumed = h.per_msg.filter(F.col("n_success") > 0).select("msg_id").distinct()
    acked = h.outcomes.filter("acked")
    at_risk = (acked.join(F.broadcast(at_risk_faults), "broker_name").filter(F.col("ack_ms") <= F.col("f_start"))
               .groupBy("msg_id").agg(F.first("fault").alias("fault"), F.first("broker_name").alias("broker_name"),
                                      F.first("topic").alias("topic"), F.first("queue_id").alias("queue_id"),
                                      F.first("queue_offset").alias("queue_offset")))
    never_consumed = at_risk.join(consumed, "msg_id", "left_anti")
    gone = _not_read_back(h, at_risk)
    if gone is not None:
        never_consumed = never_consumed.unionByName(gone).dropDuplicates(["msg_id"])
    lost = never_consumed.join(allowed, "msg_id", "left")
    # offsets the power loss cut and the recovered master handed out again: acknowledged after it
    reused = (acked.join(allowed.filter("reused"), "msg_id").join(consumed, "msg_id", "left_anti")
              .select("msg_id", F.col("allowed_by").alias("fault"), "broker_name", "topic", "queue_id",
                      "queue_offset", "allowed_by", "why"))
    got, counted = collect_parts({
        "reused": reused,
        "lost": lost.select("msg_id", "fault", "broker_name", "topic", "queue_id", "queue_offset", "allowed_by", "why"),
        "at_risk": at_risk.agg(F.count(F.lit(1)).alias("n")),
    })
    reused_n = counted["reused"]
    found = got["lost"] + got["reused"]
    allowed_n = sum(1 for r in found if r["allowed_by"])
    unallowed = [r for r in found if not r["allowed_by"]]
    if counted["lost"] > len(found):  # beyond the cap: count the rest in Spark
        allowed_n = lost.filter(F.col("allowed_by").isNotNull()).count() + reused_n
    elif counted["reused"] > len(got["reused"]):
        allowed_n += reused_n - len(got["reused"])
    unallowed_n = counted["lost"] + reused_n - allowed_n
    modes = {node: " + ".join(mode_of(cfg, node)) for node in sorted({f.node for f in faults})}
    counts = {"mode": run_mode(cfg), "faulted_broker_modes": modes, "storage_faults": len(faults),
              "acknowledged_at_risk": got["at_risk"][0]["n"], "read_back_judged": gone is not None,
              "lost": counted["lost"] + reused_n,
              "allowed_loss": allowed_n, "unallowed_loss": unallowed_n, "reused_offsets": reused_n, "windows": [w.to_json() for w in windows][:50]}
    valid = unallowed_n == 0
    reason = None if valid else (f"{unallowed_n} acknowledged message(s) lost beyond what {run_mode(cfg)} allows"
                                 f" ({allowed_n} allowed)")
    examples = [{"anomaly": "unallowed loss", **r} for r in unallowed[:cfg.max_examples]]
    examples += [{"anomaly": "allowed loss", **r} for r in found if r["allowed_by"]][:max(0, cfg.max_examples - len(examples))]
    return CheckResult("durability", valid, DURABILITY, counts=counts, examples=examples, reason=reason)


def _not_read_back(h: History, at_risk: DataFrame) -> DataFrame | None:
    """The at-risk messages the end-of-run read-back finds on no replica at their queue offset, in
    queues it read from at or below that offset (older offsets may have been retired); None
    without a read-back."""
    if not h.has("readback"):
        return None
    reads = h.readback.filter(F.col("event") == "readback")
    pos = ["broker_name", "topic", "queue_id"]
    held = reads.select(*pos, "queue_offset", "msg_id").distinct()
    first = reads.groupBy(*pos).agg(F.min("queue_offset").alias("first_read"))
    return (at_risk.filter(F.col("queue_offset").isNotNull())
            .join(held, [*pos, "queue_offset", "msg_id"], "left_anti")
            .join(F.broadcast(first), pos).filter(F.col("queue_offset") >= F.col("first_read"))
            .select(*at_risk.columns))


def _broker_name(cfg: CheckerConfig, node: str) -> str:
    ident = broker_identity(node)
    return cfg.store_modes.get(node, {}).get("broker_name") or (ident[0] if ident else node)


def _broker_id(cfg: CheckerConfig, node: str) -> int:
    got = cfg.store_modes.get(node, {}).get("broker_id")
    if got is not None:
        return int(got)
    ident = broker_identity(node)
    return ident[1] if ident else 0
