"""What a run's storage faults allow: the one place acknowledged loss is excused.

RocketMQ's durability promise depends on the run's mode (each broker's `config.json`): flush
(ASYNC_FLUSH | SYNC_FLUSH) x replication (ASYNC_MASTER | SYNC_MASTER). After a power loss of a
master (every byte after its last fsync dropped):

- SYNC_FLUSH: an acknowledged message was fsync'd before its SEND_OK; only a FLUSH_DISK_TIMEOUT
  (the flush did not confirm) may be lost;
- SYNC_MASTER (ASYNC_FLUSH) with a live slave: the slave held it before the SEND_OK; only a
  FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE (no slave confirmed) may be lost;
- ASYNC_FLUSH + ASYNC_MASTER: whatever the page cache held may be lost: acknowledged messages whose
  queue offsets lie in [flushed_queue_offset, written_queue_offset) of the power-lossed master's
  queue (the nemesis records both), acknowledged before the power loss.

The recovered master hands those queue offsets [flushed_queue_offset, written_queue_offset) out
again to new messages; a consumer whose committed offset had already passed them skips the new
ones (RocketMQ does the same). Messages acknowledged after the power loss at queue offsets inside
that window are allowed loss ("reused offsets", counted apart) in the async modes: ASYNC_FLUSH +
ASYNC_MASTER always, ASYNC_FLUSH + SYNC_MASTER only when the window held a send no slave
confirmed (a live slave kept every acknowledged message, so nothing was cut); never under SYNC_FLUSH.

A power loss that also takes the group's slave (a rack's power: the same op, or the slave still
down from its own power loss) leaves no replica to give the cut tail back: the slave's copy of
what it acknowledged sat in its page cache too. SYNC_MASTER then promises no more than the async
modes (the master's unflushed window is allowed loss, and its reused offsets), and under
SYNC_FLUSH the offsets of the cut, unacknowledged records (consumers may have read them: dispatch
does not wait for the fsync) are handed out again, so reused offsets are allowed loss there too;
an acknowledged SYNC_FLUSH message the cut took stays unallowed.

A `corrupt` fault allows the loss of the messages of the record(s) it flipped, in any mode.
`allowed_loss` is what `lost` and `durability` both consult, so one never fails what the other allows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from chaos.checker.config import CheckerConfig
from chaos.checker.faults import StorageFault, broker_identity
from chaos.checker.loader import History

ASYNC_FLUSH, SYNC_FLUSH = "ASYNC_FLUSH", "SYNC_FLUSH"
ASYNC_MASTER, SYNC_MASTER = "ASYNC_MASTER", "SYNC_MASTER"
# statuses that say the promised copy was not confirmed (the message is stored on the master)
NOT_FLUSHED = ("FLUSH_DISK_TIMEOUT",)
NOT_REPLICATED = ("FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE")


@dataclass(frozen=True)
class LossWindow:
    """Acknowledged messages a storage fault may take: a queue's offsets [lo, hi) (hi None: one
    record's msg_ids), acknowledged up to `acked_before_ms`, with the send statuses it covers
    (None: any)."""

    fault: str
    node: str
    broker_name: str
    topic: str | None
    queue_id: int | None
    lo: int | None
    hi: int | None
    acked_before_ms: int
    statuses: tuple[str, ...] | None
    why: str
    msg_ids: tuple[str, ...] = ()
    # reused offsets: messages acknowledged after `acked_after_ms` (the power loss) instead of before
    acked_after_ms: int | None = None
    # reused offsets under SYNC_MASTER: only if a send in the window acknowledged before the power
    # loss has one of these statuses (the slave was not live for it)
    needs_status_before: tuple[str, ...] | None = None

    @property
    def reused(self) -> bool:
        return self.acked_after_ms is not None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"fault": self.fault, "broker_name": self.broker_name, "why": self.why}
        if self.msg_ids:
            out["msg_ids"] = list(self.msg_ids)[:20]
        else:
            out.update(queue=f"{self.topic}/{self.queue_id}", window=[self.lo, self.hi])
        if self.reused:
            out["reused_offsets"] = True
        if self.statuses is not None:
            out["only_statuses"] = list(self.statuses)
        return out


def mode_of(cfg: CheckerConfig, node: str, fault: StorageFault | None = None) -> tuple[str, str]:
    """(flush_disk_type, broker_role) of a broker node; the nemesis's record of the flush mode wins."""
    m = cfg.store_modes.get(node, {})
    flush = (fault.detail.get("flush_disk_type") if fault else None) or m.get("flush_disk_type") or ASYNC_FLUSH
    role = m.get("broker_role") or ASYNC_MASTER
    return str(flush), str(role)


def run_mode(cfg: CheckerConfig) -> str:
    """The run's mode as `FLUSH + ROLE` of its masters (mixed modes listed)."""
    modes = sorted({f"{m.get('flush_disk_type') or ASYNC_FLUSH} + {m.get('broker_role')}"
                    for m in cfg.store_modes.values() if m.get("broker_role") not in (None, "SLAVE")})
    return ", ".join(modes) or "unknown (no broker config.json)"


def loss_windows(h: History, cfg: CheckerConfig) -> list[LossWindow]:
    out: list[LossWindow] = []
    for f in h.storage_faults:
        ident = broker_identity(f.node)
        broker_name = cfg.store_modes.get(f.node, {}).get("broker_name") or (ident[0] if ident else f.node)
        broker_id = cfg.store_modes.get(f.node, {}).get("broker_id")
        broker_id = broker_id if broker_id is not None else (ident[1] if ident else 0)
        if f.op == "corrupt":
            ids = tuple(str(x) for x in f.detail.get("msg_ids") or ())
            if ids:
                out.append(LossWindow(f.label, f.node, broker_name, f.detail.get("topic"), f.detail.get("queue_id"),
                                      None, None, f.start_ms, None, "the record's bytes were flipped", ids))
            continue
        if broker_id != 0:
            continue  # a slave's power loss takes nothing the consumers read from the master
        flush, role = mode_of(cfg, f.node, f)
        no_replica = slave_lost_power_with(h, cfg, f, broker_name)
        if flush == SYNC_FLUSH:
            statuses: tuple[str, ...] | None = NOT_FLUSHED
            why = "SYNC_FLUSH: only a send whose flush timed out"
        elif role == SYNC_MASTER and no_replica:
            statuses = None
            why = "ASYNC_FLUSH + SYNC_MASTER, the slave's power lost too: the unflushed window"
        elif role == SYNC_MASTER:
            statuses = NOT_REPLICATED
            why = "SYNC_MASTER: only a send no slave confirmed"
        else:
            statuses = None
            why = "ASYNC_FLUSH + ASYNC_MASTER: the unflushed window"
        queues = ((f.detail.get("store") or {}).get("consume_queues") or {})
        for key, w in sorted(queues.items()):
            topic, _, qid = key.rpartition("/")
            lo, hi = w.get("flushed_queue_offset"), w.get("written_queue_offset")
            if not topic or not qid.isdigit() or lo is None or hi is None or hi <= lo:
                continue
            out.append(LossWindow(f.label, f.node, broker_name, topic, int(qid), int(lo), int(hi), f.start_ms,
                                  statuses, why))
            if flush == SYNC_FLUSH and not no_replica:
                continue  # every acknowledged message was on disk, the rest on the slave: nothing cut is reused
            out.append(LossWindow(f.label, f.node, broker_name, topic, int(qid), int(lo), int(hi), h.t_end,
                                  None, "reused offsets: handed out again after the power loss, behind the "
                                  "consumers' committed offsets", acked_after_ms=f.start_ms,
                                  needs_status_before=NOT_REPLICATED if role == SYNC_MASTER and not no_replica
                                  else None))
    return out


def slave_lost_power_with(h: History, cfg: CheckerConfig, fault: StorageFault, broker_name: str) -> bool:
    """Whether a slave of `broker_name` was down from a power loss (the same op or an earlier one
    not yet recovered) when the master's power loss `fault` began: no replica kept the cut tail."""
    for w in h.faults:
        if w.storage != "power-loss" or not w.start_ms <= fault.start_ms <= w.end_ms:
            continue
        for node in w.targets:
            ident = broker_identity(node)
            m = cfg.store_modes.get(node, {})
            name = m.get("broker_name") or (ident[0] if ident else None)
            broker_id = m.get("broker_id") if m.get("broker_id") is not None else (ident[1] if ident else 0)
            if name == broker_name and int(broker_id) != 0:
                return True
    return False


def allowed_loss(h: History, cfg: CheckerConfig, windows: list[LossWindow] | None = None) -> DataFrame:
    """msg_id, allowed_by (the fault), why, reused (a reused offset): acknowledged messages the run's
    storage faults may lose."""
    windows = loss_windows(h, cfg) if windows is None else windows
    schema = ("msg_id STRING, allowed_by STRING, why STRING, broker_name STRING, topic STRING, queue_id INT, "
              "lo LONG, hi LONG, acked_before LONG, statuses ARRAY<STRING>, acked_after LONG, "
              "needs_before ARRAY<STRING>")
    by_id = [(m, w.fault, w.why, None, None, None, None, None, None, None, None, None)
             for w in windows for m in w.msg_ids]
    ranges = [(None, w.fault, w.why, w.broker_name, w.topic, w.queue_id, w.lo, w.hi, w.acked_before_ms,
               list(w.statuses) if w.statuses is not None else None, w.acked_after_ms,
               list(w.needs_status_before) if w.needs_status_before is not None else None)
              for w in windows if not w.msg_ids]
    empty = h.spark.createDataFrame([], "msg_id STRING, allowed_by STRING, why STRING, reused BOOLEAN")
    if not windows or not h.has("sends"):
        return empty
    acked = h.outcomes.filter("acked").select("msg_id", "broker_name", "topic", "queue_id", "queue_offset", "ack_ms")
    statuses = h.sends.filter((F.col("type") == "ok") & F.col("msg_id").isNotNull()).groupBy("msg_id").agg(
        F.first("status", ignorenulls=True).alias("status"))
    parts = []
    if by_id:
        ids = h.spark.createDataFrame(by_id, schema).select("msg_id", "allowed_by", "why")
        parts.append(ids.join(acked.select("msg_id"), "msg_id", "left_semi").withColumn("reused", F.lit(False)))
    if ranges:
        rdf = h.spark.createDataFrame(ranges, schema).drop("msg_id")
        in_window = (F.col("queue_offset") >= F.col("lo")) & (F.col("queue_offset") < F.col("hi"))
        hit = acked.join(F.broadcast(rdf), ["broker_name", "topic", "queue_id"]).filter(
            in_window & (F.col("ack_ms") <= F.col("acked_before"))
            & (F.col("acked_after").isNull() | (F.col("ack_ms") > F.col("acked_after"))))
        hit = hit.join(statuses, "msg_id", "left").filter(
            F.col("statuses").isNull() | F.array_contains(F.col("statuses"), F.coalesce("status", F.lit(""))))
        # SYNC_MASTER: offsets are reused only where the power loss cut something, i.e. where a
        # send acknowledged before it had no slave's copy
        cut = (acked.join(statuses, "msg_id", "left")
               .join(F.broadcast(rdf.filter(F.col("needs_before").isNotNull())), ["broker_name", "topic", "queue_id"])
               .filter(in_window & (F.col("ack_ms") <= F.col("acked_after"))
                       & F.array_contains(F.col("needs_before"), F.coalesce("status", F.lit(""))))
               .select("allowed_by", "broker_name", "topic", "queue_id", "lo").distinct()
               .withColumn("cut", F.lit(True)))
        hit = hit.join(cut, ["allowed_by", "broker_name", "topic", "queue_id", "lo"], "left").filter(
            F.col("needs_before").isNull() | F.col("cut").isNotNull())
        parts.append(hit.select("msg_id", "allowed_by", "why", F.col("acked_after").isNotNull().alias("reused")))
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out.dropDuplicates(["msg_id"])
