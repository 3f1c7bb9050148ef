"""Master vs slave read routing (docs/chaos.md) over pull-route events."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from chaos.checker.checks._common import collect_parts, examples_of, queue_name, queue_refs, rel_s, s
from chaos.checker.config import CheckerConfig
from chaos.checker.faults import SILENT_OPS, FaultWindow, broker_identity
from chaos.checker.loader import GQ, History
from chaos.checker.verdict import CheckResult, combine_parts, unknown

ROUTING = (
    "Per client and queue, over its pulls in time order: R1/R2 each pull asks for the broker the previous "
    "response suggested (the master, id 0, for the first pull); R3/R4 it reaches the broker it asked for "
    "unless that broker is absent or down (a fault on it, until N_r + G_r + W_p after it returned: the route "
    "refresh); R5 a pull answered by a slave never carries the commit-offset flag; R6 when the answering "
    "broker changes after a FOUND response, the pull starts at that response's next_begin_offset (no rewind, "
    "no skip) unless the client rebalanced or restarted in between. Brokers: a suggestion other than the "
    "master needs a backlog above the memory budget (cold read), on master and slave alike (switch back). "
    "Timing: after a master kill or stop, active clients read from the slave within N_r + W_p (pause or "
    "partition: X_b + K_b + N_r + W_p), and after it returns they are back on the master within "
    "N_r + G_r + W_p (plus slack).")


def check_read_routing(h: History, cfg: CheckerConfig) -> CheckResult:
    if not h.has("events"):
        return unknown("read-routing", ROUTING, "no events history (pull-route events) in the run")
    kinds = h.stats["event_kinds"]
    total, n_sugg = kinds.get("pull-route", 0), kinds.get("pull-suggestion", 0)
    if not total and not n_sugg:
        return unknown("read-routing", ROUTING, "no pull-route or pull-suggestion events in the run")
    sugg = h.ev.filter(F.col("event") == "pull-suggestion")
    got, counted = collect_parts({
        "by_target": h.pulls.groupBy("broker_id").agg(F.count(F.lit(1)).alias("n")),
        "violations": _violation_candidates(h),
        "bad_sugg": sugg.filter((F.col("suggest_which_broker_id") != 0) & F.col("backlog_bytes").isNotNull()
                                & F.col("memory_budget_bytes").isNotNull()
                                & (F.col("backlog_bytes") <= F.col("memory_budget_bytes"))).select(
            "node", *GQ, "answering_broker_id", "suggest_which_broker_id", "backlog_bytes", "memory_budget_bytes",
            F.col("mono_ms").alias("t"), rel_s(h, "mono_ms").alias("t_s")),
        "pull_brokers": h.pulls.select("broker_name", "broker_id").distinct(),
        "broker_nodes": h.ev.filter(F.col("side") == "broker").select("node").distinct(),
        "rebalances": h.rebalances.select("node", "group", "t"),
    }, cap=100_000)
    result: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    counts: dict[str, Any] = {"pulls": total, "broker_suggestion_changes": n_sugg}
    examples: list[dict[str, Any]] = []
    measurements: list[dict[str, Any]] = []
    n = cfg.max_examples
    brokers = _broker_nodes(h, got["pull_brokers"], got["broker_nodes"])

    if total:
        counts["pulls_by_answering_broker_id"] = {f"{r['broker_id']}": r["n"] for r in got["by_target"]}
        violations = _classify_violations(h, cfg, brokers, got["violations"], got["rebalances"])
        for rule in ("commit flag to slave", "ignored suggestion", "wrong target", "non-monotonic read"):
            found = [v for v in violations if v["rule"] == rule]
            real = [v for v in found if not v.get("excused_by")]
            counts[rule] = {"violations": len(real), "excused": len(found) - len(real)}
            result[rule] = not real
            examples += real[:n]
        fo, sb, m = _failover(h, cfg, brokers)
        measurements += m
        if fo is None:
            result["failover"] = None
            skipped["failover"] = "no master fault with a slave to fail over to"
        else:
            result["failover"] = not fo
            counts["failover_problems"] = len(fo)
            examples += fo[:n]
        if sb is None:
            result["switch back"] = None
            skipped["switch back"] = "no master returned during the run"
        else:
            result["switch back"] = not sb
            counts["switch_back_problems"] = len(sb)
            examples += sb[:n]
    else:
        skipped["client rules"] = "no pull-route events (client side)"
    if n_sugg:
        counts["hot suggestion away from master"] = counted["bad_sugg"]
        result["broker suggestions"] = counted["bad_sugg"] == 0
        examples += examples_of(got["bad_sugg"], n, rule="hot suggestion away from master")
    else:
        result["broker suggestions"] = None
        skipped["broker suggestions"] = "no pull-suggestion events (broker side)"
    for e in examples:
        e.pop("t", None)
    failed = [k for k, v in result.items() if v is False]
    return CheckResult("read-routing", combine_parts(result), ROUTING, counts=counts, examples=examples[:n],
                       parts=result, skipped=skipped, measurements=measurements[:500], reason=", ".join(failed) or None)


def _broker_nodes(h: History, pull_brokers: list[dict[str, Any]], broker_nodes: list[dict[str, Any]]
                  ) -> dict[tuple[str, int], str]:
    """(broker_name, broker_id) -> node id, from cluster.json roles, broker events and node naming."""
    out: dict[tuple[str, int], str] = {}
    for node, role in h.roles.items():
        ident = broker_identity(node)
        if ident and role in ("broker", "master", "slave"):
            out[ident] = node
    for r in broker_nodes:
        ident = broker_identity(r["node"]) if r["node"] else None
        if ident:
            out.setdefault(ident, r["node"])
    for r in pull_brokers:
        if r["broker_name"] is not None and r["broker_id"] is not None:
            out.setdefault((r["broker_name"], r["broker_id"]), f"{r['broker_name']}-{r['broker_id']}")
    return out


def _down(h: History, cfg: CheckerConfig, node: str | None, t: float, extra_ms: int = 0,
          client_node: str | None = None) -> FaultWindow | None:
    """The fault on broker `node` that explains a pull sent at `t` not reaching it: `t` lies in the
    fault, or within the route refresh after it (N_r + G_r + W_p + `extra_ms`, plus slack). The
    refresh is counted from when the client could refresh: a client paused (SIGSTOP) while the
    broker came back runs on the route it had before the pause until its own timers fire again,
    and a pull it sends the moment it resumes still uses that route."""
    b = cfg.bounds
    grace = b.limit(b.switch_back() + extra_ms)
    own_pauses = h.node_faults(client_node, ("pause",)) if client_node else []
    for w in h.broker_fault_windows:
        if not w.hits(node) or t < w.start_ms - cfg.clock_slack_ms:
            continue
        end = w.end_ms
        for p in sorted(own_pauses, key=lambda p: p.start_ms):
            if p.start_ms <= end + grace and p.end_ms >= w.start_ms:
                end = max(end, p.end_ms)
        if t <= end + grace:
            return w
    return None


def _violation_candidates(h: History) -> DataFrame:
    w = Window.partitionBy("node", "client_id", *GQ).orderBy("t")
    p = h.pulls.withColumns({"p_suggest": F.lag("suggest_which_broker_id").over(w),
                             "p_next": F.lag("next_begin_offset").over(w), "p_status": F.lag("status").over(w),
                             "p_broker": F.lag("broker_id").over(w), "p_t": F.lag("t").over(w),
                             "p_sent_t": F.lag("sent_t").over(w)})
    commit_slave = F.coalesce("commit_flag", F.lit(False)) & (F.col("broker_id") != 0)
    ignored = F.col("requested_broker_id").isNotNull() & (
        F.col("requested_broker_id") != F.coalesce("p_suggest", F.lit(0)))
    wrong = F.col("requested_broker_id").isNotNull() & (F.col("broker_id") != F.col("requested_broker_id"))
    nonmono = ((F.col("broker_id") != F.col("p_broker")) & (F.col("p_status") == "FOUND")
               & (F.col("queue_offset") != F.col("p_next")))
    return p.filter(commit_slave | ignored | wrong | nonmono).select(
        "node", "client_id", *GQ, "t", "sent_t", "p_t", "p_sent_t", "queue_offset", "p_next", "requested_broker_id", "broker_id",
        "p_broker", "p_suggest", "commit_flag", commit_slave.alias("r5"), ignored.alias("r2"), wrong.alias("r4"),
        nonmono.alias("r6"))


def _classify_violations(h: History, cfg: CheckerConfig, brokers: dict[tuple[str, int], str],
                         cands: list[dict[str, Any]], reb: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for r in sorted(cands, key=lambda r: r["t"]):
        base = {"client": r["client_id"], "queue": queue_name(r), "group": r["group"], "t_s": s(h, r["t"]),
                "requested": r["requested_broker_id"], "answered_by": r["broker_id"]}
        lo = r["p_t"] if r["p_t"] is not None else r["t"]
        client_fault = next((w.label for w in h.node_faults(r["node"]) if w.start_ms <= r["t"] and w.end_ms >= lo),
                            None) or next((f"exit {e.node}" for e in h.exits if e.node == r["node"]
                                           and lo <= e.t_ms <= r["t"]), None)
        if r["r5"]:
            out.append({"rule": "commit flag to slave", **base})
        if r["r2"]:
            out.append({"rule": "ignored suggestion", **base, "previous_suggestion": r["p_suggest"],
                        "excused_by": client_fault})
        if r["r4"]:
            node = brokers.get((r["broker_name"], r["requested_broker_id"]))
            # a returning master re-creates a group's retry topic at the group's next heartbeat, and
            # only then routes it: one heartbeat period more before its retry queues are back on it
            retry_ms = cfg.bounds.H if str(r["topic"]).startswith("%RETRY%") else 0
            # judged when the pull was sent: that is when the client chose the address
            down = _down(h, cfg, node, r["sent_t"] if r["sent_t"] is not None else r["t"], retry_ms,
                         r["node"]) if node else None
            why = "requested broker not in the cluster" if node is None else (down.label if down else None)
            out.append({"rule": "wrong target", **base, "excused_by": why})
        if r["r6"]:
            # the queue re-opened after the previous pull, or this one, was *sent*: that pull's answer
            # went to a dropped ProcessQueue, and the new one starts where the master's offset says
            since = min(x for x in (r["p_sent_t"], r["sent_t"], lo) if x is not None)
            moved = next((x for x in reb if x["node"] == r["node"] and x["group"] == r["group"]
                          and since <= x["t"] <= r["t"]), None)
            out.append({"rule": "non-monotonic read", **base, "previous_broker": r["p_broker"],
                        "expected_offset": r["p_next"], "pulled_offset": r["queue_offset"],
                        "excused_by": client_fault or ("rebalance" if moved else None)})
    return out


def _queues_given_up(h: History) -> dict[tuple[Any, ...], list[int]]:
    """(client, group, topic, broker, queue id) -> when the client stopped pulling it on its own
    account: a rebalance removed it (or re-opened it after a regained lock), or its lock was lost or
    released (an orderly queue is pulled only while locked)."""
    if not h.has("events"):
        return {}
    out: dict[tuple[Any, ...], list[int]] = {}
    for r in h.rebalances.filter(F.col("removed").isNotNull() & (F.size("removed") > 0)).collect():
        for broker, queue_id in queue_refs(r["removed"]):
            out.setdefault((r["client_id"], r["group"], r["topic"], broker, queue_id), []).append(r["t"])
    for r in h.locks.filter((F.col("side") == "client") & F.col("action").isin("lost", "released")).select(
            "client_id", *GQ, "t").collect():
        out.setdefault((r["client_id"], r["group"], r["topic"], r["broker_name"], r["queue_id"]), []).append(r["t"])
    return out


def _down_again(h: History, w: FaultWindow, broker_name: str, until_ms: float) -> bool:
    """The master of `broker_name` went down again (another fault on it) before `until_ms`: the
    switch back after `w` is then due only after that fault, which is judged on its own."""
    return any(w2.start_ms <= until_ms and (w2.op != "partition" or len(w2.targets) == 1)
               and any(broker_identity(t) == (broker_name, 0) for t in w2.targets)
               for w2 in h.broker_fault_windows if w2.start_ms > w.start_ms)


def _client_fault(h: History, node: str, t0: int, t1: int) -> bool:
    """The client's own process was paused, killed, stopped or cut off at some point in [t0, t1]."""
    return any(w.start_ms <= t1 and w.end_ms >= t0 for w in h.node_faults(node, ("kill", "stop", "pause", "partition")))


def _failover(h: History, cfg: CheckerConfig, brokers: dict[tuple[str, int], str]
              ) -> tuple[list[dict[str, Any]] | None, list[dict[str, Any]] | None, list[dict[str, Any]]]:
    b = cfg.bounds
    masters = {node: name for (name, bid), node in brokers.items() if bid == 0}
    has_slave = {name for (name, bid) in brokers if bid != 0}
    faults = [(i, w, masters[t]) for i, w in enumerate(h.faults) if w.op in ("kill", "stop", *SILENT_OPS)
              for t in w.targets if t in masters and masters[t] in has_slave]
    if not faults:
        return None, None, []
    fdf = h.spark.createDataFrame([(i, name, w.start_ms, w.end_ms) for i, w, name in faults],
                                  "fault LONG, broker_name STRING, f_start LONG, f_end LONG")
    p = h.pulls.join(F.broadcast(fdf), "broker_name")
    keys = ["fault", "node", "client_id", "group", "topic", "queue_id"]
    got, _ = collect_parts({
        "spans": h.pulls.groupBy("node", "client_id", *GQ).agg(F.min("t").alias("first_t"), F.max("t").alias("last_t")),
        # a pull counts when it was *sent*: one sent to the slave may wait in its long-poll hold
        # (the slave has nothing new while the master is down) long after the client failed over
        "to_slave": p.filter((F.col("broker_id") != 0) & (F.col("sent_t") >= F.col("f_start"))
                             & (F.col("sent_t") <= F.col("f_end")))
        .groupBy(*keys).agg(F.min("sent_t").alias("t")),
        "back": p.filter((F.col("broker_id") == 0) & (F.col("sent_t") >= F.col("f_end"))).groupBy(*keys).agg(
            F.min("sent_t").alias("t")),
        # who was pulling each queue just before the fault: long polls come back at least this often
        "recent": p.filter((F.col("t") < F.col("f_start")) & (F.col("t") >= F.col("f_start") - max(b.R_b, b.N_r)))
        .select(*keys).distinct(),
    }, cap=200_000)
    recent = {tuple(r[k] for k in keys) for r in got["recent"]}
    gave_up = _queues_given_up(h)
    spans = got["spans"]
    to_slave = {tuple(r[k] for k in keys): r["t"] for r in got["to_slave"]}
    back = {tuple(r[k] for k in keys): r["t"] for r in got["back"]}
    fo_bad: list[dict[str, Any]] = []
    sb_bad: list[dict[str, Any]] = []
    measurements: list[dict[str, Any]] = []
    any_recovered = False
    for i, w, name in faults:
        bound = b.failover_silent() if w.op in SILENT_OPS else b.failover_kill()
        limit = b.limit(bound)
        any_recovered |= w.recovered
        for sp in spans:
            if sp["broker_name"] != name or sp["first_t"] >= w.start_ms or sp["last_t"] <= w.start_ms:
                continue
            key = (i, sp["node"], sp["client_id"], sp["group"], sp["topic"], sp["queue_id"])
            if key not in recent:
                continue  # not pulling this queue when the fault began (another client owned it)
            drops = gave_up.get((sp["client_id"], sp["group"], sp["topic"], sp["broker_name"], sp["queue_id"]), ())
            if any(w.start_ms - max(b.R_b, b.N_r) <= t <= w.start_ms + limit for t in drops):
                continue  # it gave the queue up (rebalance, lock lost or released) around the fault
            base = {"client": sp["client_id"], "queue": queue_name(sp), "group": sp["group"], "fault": w.label,
                    "fault_s": s(h, w.start_ms)}
            # a returning master re-creates a group's retry topic at the group's next heartbeat, and
            # only then routes it: one heartbeat period more before its retry queues are back on it
            back_bound = b.switch_back() + (b.H if str(sp["topic"]).startswith("%RETRY%") else 0)
            back_limit = b.limit(back_bound)
            t_slave = to_slave.get(key)
            if t_slave is not None:
                m = {"what": "failover", **base, **b.judge("failover", t_slave - w.start_ms, bound)}
                measurements.append(m)
                if m["verdict"] != "ok":
                    fo_bad.append({"rule": "slow failover", **m})
            elif w.op != "partition" and w.end_ms - w.start_ms > limit and sp["last_t"] > w.start_ms + limit \
                    and not _client_fault(h, sp["node"], w.start_ms, w.start_ms + limit):
                fo_bad.append({"rule": "no failover", **base, "bound_ms": bound, "slack_ms": b.slack(bound)})
            if not w.recovered or t_slave is None or _client_fault(h, sp["node"], w.end_ms, w.end_ms + back_limit) \
                    or any(w.start_ms <= t <= w.end_ms + back_limit for t in drops) \
                    or _down_again(h, w, name, w.end_ms + back_limit):
                continue  # a client that was itself paused, cut off or restarted meanwhile, or gave the
                # queue up, is not timed; nor is a switch back the master's next fault cut short
            t_back = back.get(key)
            if t_back is not None:
                m = {"what": "switch back", **base, **b.judge("switch back", t_back - w.end_ms, back_bound)}
                measurements.append(m)
                if m["verdict"] != "ok":
                    sb_bad.append({"rule": "slow switch back", **m})
            elif sp["last_t"] > w.end_ms + back_limit:
                sb_bad.append({"rule": "stuck on slave", **base, "bound_ms": back_bound, "slack_ms": b.slack(back_bound)})
    return fo_bad, (sb_bad if any_recovered else None), measurements
