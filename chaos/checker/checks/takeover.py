"""Orderly takeover: how long a queue waits for its next consumer after its holder's fault, rebalance or release."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from chaos.checker.checks._common import collect_parts, queue_name, queue_refs, s, tally
from chaos.checker.config import Bounds, CheckerConfig
from chaos.checker.faults import SILENT_OPS, FaultWindow
from chaos.checker.loader import GQ, History
from chaos.checker.schemas import LOCK_HELD_ACTIONS
from chaos.checker.verdict import CheckResult, unknown

TAKEOVER = (
    "For every change of a queue's orderly consumer (A -> B): the cause is the earliest of A's faults "
    "(kill, stop, pause, partition), unexpected exit, lost/expired/released lock, or rebalance between A's "
    "last batch and B's first that comes after A's last lock grant or renewal t_L (the fault that ended A's "
    "lease). The time from the cause (for a kill: from A's last lock grant or renewal t_L) "
    "to B's first delivery, less any wait for that message to be sent, must stay within the bound for the "
    "cause (kill: L_b + max(R_b, R_l) + W_p from t_L; stop or release: R_b + W_p; pause/partition: "
    "max(L_b, X_c + K_c) + R_b + W_p, plus R_b for every member list B was given after that expiry that still named A "
    "(each rebalance asks one random broker, and brokers expire a silent client each on its own); lost lock: "
    "R_b + R_l + W_p; rebalance (A dropping the queue or B "
    "taking it): U_d + R_b + W_p) plus slack; a holder killed, paused or cut off after dropping the queue but "
    "before its delayed unlock leaves its lease to run out (the kill bound from t_L). A's later faults never reset that clock (a queue still waiting "
    "waits from the first). Whatever else starts before that deadline can only push it out: A's later lock or "
    "rebalance events, another consumer of the group - A's node restarted as a new client included - going "
    "silent (its bound from then) or restarted (its warm-up "
    "N_r + R_b + R_l + W_p after the restart), the master down (N_r + H + R_b + R_l + W_p after its return), a lease "
    "granted to A again (the kill bound from that grant); never to a reference after B's start (a negative "
    "time is a wrong attribution: the earlier reference stands). Time the queue's master spent starved of "
    "CPU between the reference and B's start is added to the bound (it answers late, but answers). "
    "After a kill, B must not start before t_L + L_b (the lease). A holder fault after which nobody consumes "
    "the queue again although acknowledged messages wait on it, for longer than the bound, is a stuck queue.")


_HOLDER_FAULTS = ("kill", "stop", "pause", "partition", "exit")
_CAUSE_RANK = {"kill": 0, "exit": 0, "stop": 1, "released": 1, "pause": 2, "partition": 2, "lost": 3,
               "expired": 3, "rebalance": 4}


def check_takeover(h: History, cfg: CheckerConfig) -> CheckResult:
    if not h.has("deliveries"):
        return unknown("takeover", TAKEOVER, "no deliveries history in the run")
    b = cfg.bounds
    parts: dict[str, DataFrame] = {
        "orderly": h.epochs.filter(F.col("orderly")).agg(F.count(F.lit(1)).alias("n")),
        "changes": _changes_with_context(h),
        "losses": h.locks.filter(F.col("action").isin("lost", "expired", "released")).select(
            *GQ, "t", "action", "client_id"),
        "rebalances": h.rebalances.filter(F.col("before").isNotNull() | F.col("after").isNotNull()
                                          | F.col("removed").isNotNull()),
        "starts": h.ev.filter((F.col("event") == "consumer-start") & F.col("client_id").isNotNull()).select(
            "node", "client_id", F.col("mono_ms").alias("t")),
        "members": h.ev.filter((F.col("event") == "consumer-ids") & F.col("client_id").isNotNull()).select(
            "client_id", "topic", F.col("mono_ms").alias("t"), "cids"),
    }
    holder_faults = [w for w in h.faults if w.op in ("kill", "stop", "pause", "partition")]
    if holder_faults and h.has("sends"):
        parts["epochs"] = h.epochs.filter(F.col("orderly")).select(*GQ, "client_id", "node", "start", "last_t",
                                                                   "max_offset")
        parts["acked"] = (h.outcomes.filter(F.col("acked") & F.col("queue_offset").isNotNull())
                          .groupBy("topic", "broker_name", "queue_id").agg(F.max("queue_offset").alias("hi")))
    got, _ = collect_parts(parts, cap=200_000)
    if not got["orderly"][0]["n"]:
        return unknown("takeover", TAKEOVER, "no orderly consumption in the run")
    changes = sorted(got["changes"], key=lambda r: r["start"])
    lock_rows = _loss_events(got["losses"])
    reb_rows = _rebalance_drops(got["rebalances"])
    starts: dict[str, list[tuple[int, str]]] = {}
    for row in got["starts"]:
        starts.setdefault(row["node"], []).append((row["t"], row["client_id"]))
    members: dict[tuple[str, str], list[tuple[int, frozenset[str]]]] = {}
    for row in got["members"]:
        members.setdefault((row["client_id"], row["topic"]), []).append((row["t"], frozenset(row["cids"] or ())))
    measurements: list[dict[str, Any]] = []
    for r in changes:
        lo, hi = r["prev_last_t"], r["start"]
        causes: list[tuple[int, str, str]] = []  # (t, kind, label)
        t_L = r["t_L"]
        # A's node back with another client (restarted after A's end): its faults from then on are
        # that consumer's, not A's
        reborn_ms = min((t for t, client in starts.get(r["prev_node"], ()) if client != r["prev_client"] and t >= lo),
                        default=math.inf)
        for w in h.node_faults(r["prev_node"], ("kill", "stop", "pause", "partition")):
            if w.start_ms >= reborn_ms:
                continue
            # a fault still open at A's last batch counts too: a partitioned holder goes on consuming
            # what it had cached until its client lease runs out, but the broker frees the queue only
            # after the channel expiry the fault started; so does one after A's last grant (the
            # fault that ended the lease, even if A's last batch came after it)
            if w.start_ms <= hi and (lo <= w.start_ms or w.end_ms is None or w.end_ms >= lo
                                     or (t_L is not None and w.start_ms >= t_L)):
                causes.append((w.start_ms, w.op, w.label))
        for e in h.exits:
            if e.node == r["prev_node"] and not e.expected and lo <= e.t_ms <= hi:
                causes.append((e.t_ms, "exit", f"exit {e.node}"))
        key = (r["group"], r["topic"], r["broker_name"], r["queue_id"])
        for t, action, client in lock_rows.get(key, ()):
            if client == r["prev_client"] and lo <= t <= hi:
                causes.append((t, action, f"lock {action} by {client}"))
        for t, client, gained in reb_rows.get(key, ()):
            # A giving the queue up, or B taking it; A *taking* it (or B giving it up) frees nothing
            if (client, gained) in ((r["prev_client"], False), (r["client_id"], True)) and lo - b.U_d <= t <= hi:
                causes.append((t, "rebalance", f"rebalance of {client}"))
        # another consumer of the group going silent can hold the queue too: the allocation may
        # hand it to that consumer, which cannot lock it until its channel expires; one killed or
        # stopped and restarted may be handed it after its warm-up; so can A's node restarted as a new client
        others = [w for w in h.faults if w.op in (*SILENT_OPS, "kill", "stop") and w.start_ms <= hi
                  and w.end_ms >= lo and any(not h.is_broker(t) and (t != r["prev_node"] or w.start_ms >= reborn_ms)
                                             for t in w.targets)]
        m = _measure(h, cfg, r, causes, others, members.get((r["client_id"], r["topic"]), ()))
        measurements.append(m)
    stuck = _stuck_queues(h, cfg, holder_faults, got.get("epochs", []), got.get("acked", []))
    slow = [m for m in measurements if m["verdict"] == "slow"]
    early = [m for m in measurements if m["verdict"] == "early"]
    counts = {"owner_changes": len(measurements), "slow": len(slow), "early": len(early), "stuck": len(stuck),
              "by_cause": tally(m["cause"] for m in measurements),
              "max_measured_ms": max((m["measured_ms"] for m in measurements if m["measured_ms"] is not None),
                                     default=None)}
    valid = not slow and not early and not stuck
    examples = (early + slow + [{"verdict": "stuck", **x} for x in stuck])[: cfg.max_examples]
    if not examples:
        examples = measurements[: cfg.max_examples]
    reason = None if valid else ", ".join(f"{k}: {counts[k]}" for k in ("slow", "early", "stuck") if counts[k])
    return CheckResult("takeover", valid, TAKEOVER, counts=counts, examples=examples, reason=reason,
                       measurements=measurements[:500])


def _changes_with_context(h: History) -> DataFrame:
    """Orderly epoch changes with t_L (A's last lock grant/renewal) and when B's first message was sent."""
    ep = h.epochs.filter(F.col("orderly") & F.col("prev_client").isNotNull())
    cols = [*GQ, "client_id", "node", "start", "first_msg", "first_offset", "prev_client", "prev_node",
            "prev_last_t", "prev_end"]
    ep = ep.select(*cols)
    if h.has("events"):
        held = h.locks.filter(F.col("action").isin(*LOCK_HELD_ACTIONS)).select(
            *GQ, F.col("client_id").alias("prev_client"), "t", "side", F.lit(0).alias("kind"))
        u = ep.withColumns({"t": F.col("start"), "kind": F.lit(1)}).unionByName(held, allowMissingColumns=True)
        w = Window.partitionBy(*GQ, "prev_client").orderBy("t", "kind").rowsBetween(Window.unboundedPreceding,
                                                                                  Window.currentRow)
        lock_t = {side: F.last(F.when((F.col("kind") == 0) & (F.col("side") == side), F.col("t")), ignorenulls=True)
                  .over(w) for side in ("broker", "client")}
        # the broker stamps the lease; the client's own record of the same renewal is the fallback
        ep = u.withColumn("t_L", F.coalesce(lock_t["broker"], lock_t["client"])) \
            .filter(F.col("kind") == 1).drop("kind", "t", "side")
    else:
        ep = ep.withColumn("t_L", F.lit(None).cast("long"))
    if h.has("sends"):
        ep = ep.join(h.outcomes.select(F.col("msg_id").alias("first_msg"), F.col("ack_ms").alias("avail")),
                     "first_msg", "left")
    else:
        ep = ep.withColumn("avail", F.lit(None).cast("long"))
    return ep


def _loss_events(gone: list[dict[str, Any]]) -> dict[tuple[Any, ...], list[tuple[int, str, str]]]:
    out: dict[tuple[Any, ...], list[tuple[int, str, str]]] = {}
    for r in gone:
        out.setdefault((r["group"], r["topic"], r["broker_name"], r["queue_id"]), []).append(
            (r["t"], r["action"], r["client_id"]))
    return out


def _rebalance_drops(reb: list[dict[str, Any]]) -> dict[tuple[Any, ...], list[tuple[int, str, bool]]]:
    """Rebalances that removed or added a queue, keyed by (group, topic, broker, queue id), as
    (t, client id, gained: True when the client took the queue, False when it gave it up)."""
    out: dict[tuple[Any, ...], list[tuple[int, str, bool]]] = {}
    for r in reb:
        before, after, removed = queue_refs(r["before"]), queue_refs(r["after"]), queue_refs(r["removed"])
        # a queue in `removed` and in `after` was re-opened (`lock-regained`: its lock came back),
        # not given up: the client holds its lock, so nothing was freed for another to take
        for broker, qid in (before - after) | (removed - after):
            out.setdefault((r["group"], r["topic"], broker, qid), []).append((r["t"], r["client_id"], False))
        for broker, qid in after - before:
            out.setdefault((r["group"], r["topic"], broker, qid), []).append((r["t"], r["client_id"], True))
    return out


def _measure(h: History, cfg: CheckerConfig, r: dict[str, Any], causes: list[tuple[int, str, str]],
             others: Sequence[FaultWindow] = (), taker_members: Sequence[tuple[int, frozenset[str]]] = (),
             ) -> dict[str, Any]:
    b = cfg.bounds
    out: dict[str, Any] = {"queue": queue_name(r), "group": r["group"], "from": r["prev_client"], "to": r["client_id"],
                           "taken_over_s": s(h, r["start"])}
    if not causes:
        bound, ref, kind, label = b.takeover_rebalance(), r["prev_end"], "unrecorded", "no recorded cause"
        extenders: list[tuple[int, int, int, str, str]] = []
    else:
        ordered = sorted(causes, key=lambda c: (c[0], _CAUSE_RANK.get(c[1], 9)))
        # the cause is the fault that ended A's lease: the first one after A's last grant t_L
        since_grant = [c for c in ordered if r["t_L"] is None or c[0] >= r["t_L"] - cfg.clock_slack_ms]
        t, kind, label = (since_grant or ordered)[0]
        ref, bound = _cause_bound(b, kind, t, r["t_L"])
        if kind == "stop" and cfg.real_client_findings and not any(
                k == "released" and t2 >= t - cfg.clock_slack_ms for t2, k, _ in ordered):
            ref, bound = _cause_bound(b, "kill", t, r["t_L"])
            kind, label = "stop-without-unlock", f"{label}, which never unlocked (a client finding): the lease ran out"
        # A's later faults do not reset the clock of a queue still waiting for its takeover (A is
        # gone from it already); A's later lock or rebalance events still can
        extenders = [(t2, *_cause_bound(b, kind2, t2, r["t_L"]), kind2, f"{label2}, after {label}")
                     for t2, kind2, label2 in ordered if t2 > t and kind2 not in _HOLDER_FAULTS]
        if kind == "rebalance":
            extenders += _silenced_before_unlock(b, r["t_L"], t, label, ordered)
    first_kind, first_ref, first_label = kind, ref, label
    # The first cause sets the deadline; anything else that starts before that deadline can only
    # push it out, never pull it in; what starts after it excuses nothing. Besides A's other faults:
    # - another consumer going silent (the allocation may hand it the queue, which it cannot lock
    #   until its channel expires) or restarted (handed it after its warm-up);
    # - the master down or cut off: nobody can lock meanwhile, and the returned master's table is
    #   empty, so the takeover is due a lock round after its return;
    # - A granted the queue again after the cause (by the returned master, or a queue it was still
    #   giving up): the broker honours that lease as any other.
    for w in others:
        if w.op in SILENT_OPS:
            extenders.append((w.start_ms, w.start_ms, b.takeover_silent(), w.op, f"{w.label}, after {first_label}"))
        else:
            extenders.append((w.start_ms, w.end_ms, b.takeover_after_restart(), w.op,
                              f"{w.label} (restarted), after {first_label}"))
    for w in h.group_fault_windows(r.get("broker_name")):  # only the queue's own master matters
        if w.start_ms < r["start"] and w.end_ms > first_ref and _master_out(h, w):
            extenders.append((w.start_ms, w.end_ms, b.takeover_master_return(), "master-return",
                              f"{first_label}, then the master was back after {w.label}"))
    released_after = any(k == "released" and t >= (r["t_L"] or 0) for t, k, _ in causes)
    if r["t_L"] is not None and r["t_L"] > first_ref and not released_after:
        extenders.append((r["t_L"], r["t_L"], b.takeover_kill(), "lease",
                          f"lease granted to {r['prev_client']} again, after {first_label}"))
    for t2, ref2, bound2, kind2, label2 in sorted(extenders, key=lambda e: e[0]):
        # a reference after B's start would measure a negative time: a wrong attribution, so the
        # earlier reference stands
        if t2 <= ref + bound + b.slack(bound) and ref2 + bound2 > ref + bound and ref2 <= r["start"]:
            ref, bound, kind, label = ref2, bound2, kind2, label2
    if kind in SILENT_OPS:
        bound, label = _stale_member_lists(b, r, ref, bound, label, taker_members)
    avail = r.get("avail")
    start_from = max(ref, avail) if avail is not None and avail <= r["start"] else ref
    # the queue's master starved of CPU meanwhile answers every lock and member-list call late, but
    # answers (a pause, which it counts as, would have to end first): its starved time is not
    # counted against the bound
    starved_ms = _master_starved_ms(h, r.get("broker_name"), start_from, r["start"])
    if starved_ms:
        bound += starved_ms
        label = f"{label}; the master starved of CPU for {starved_ms:,} ms of it"
    judged = b.judge("takeover", r["start"] - start_from, bound)
    # an unlock A sent just before its kill still reaches the broker: a release it recorded after
    # t_L freed the queue, so an earlier takeover is no breach of the lease
    if first_kind in ("kill", "exit") and r["t_L"] is not None and r["t_L"] <= first_ref + 1 \
            and not released_after and r["start"] < r["t_L"] + b.L_b - cfg.clock_slack_ms:
        judged["verdict"] = "early"
        judged["judged"] = f"takeover {r['start'] - r['t_L']:,} ms after the lease began < L_b {b.L_b:,} ms"
    out.update(cause=kind, cause_label=label, cause_s=s(h, ref), **judged, t_L_s=s(h, r["t_L"]))
    return out


def _stale_member_lists(b: Bounds, r: dict[str, Any], ref: int, bound: int, label: str,
                        taker_members: Sequence[tuple[int, frozenset[str]]]) -> tuple[int, str]:
    """A silent holder leaves the group when a broker's scan expires its channel, but brokers do not
    expire it together: one cut from the holder expires it while another still hears its heartbeats
    (a partition of part of the cluster), or a second broker's scan comes later. Each rebalance asks
    one random broker for the members (RocketMQ's findConsumerIdList) and allocates over its answer,
    so the taker keeps A's queue allocated to A for every answer that still names A: each such answer
    after the brokers could first have expired A costs the takeover one more rebalance, R_b."""
    expired_by_ms = ref + max(b.L_b, b.X_c + b.K_c)
    stale = sum(1 for t, cids in taker_members if expired_by_ms <= t <= r["start"] and r["prev_client"] in cids)
    if not stale:
        return bound, label
    return (bound + stale * b.R_b,
            f"{label}; {stale} member list(s) {r['client_id']} got since still named {r['prev_client']} "
            f"(+{stale} x R_b)")


def _silenced_before_unlock(b: Bounds, t_L: int | None, t: int, label: str,
                          ordered: list[tuple[int, str, str]]) -> list[tuple[int, int, int, str, str]]:
    """A queue given up by a rebalance still holding cached messages is unlocked only U_d later
    (RocketMQ's unlockDelay); a holder killed before it released the queue never unlocks it, so
    its lease runs out: the kill bound from t_L (the first such kill; none once it released).
    A holder paused or cut off before its unlock sends it only once it is back, if the lease has
    not run out by then: the queue is free no later than the lease's end, so the same bound."""
    for t2, kind2, label2 in ordered:
        if t2 <= t:
            continue
        if kind2 == "released":
            return []
        if kind2 in ("kill", "exit", *SILENT_OPS):
            return [(t2, *_cause_bound(b, "kill", t2, t_L), kind2, f"{label2} before its unlock, after {label}")]
    return []


def _cause_bound(b: Bounds, kind: str, t: int, t_L: int | None) -> tuple[int, int]:
    """(reference time, bound) of one takeover cause: a kill counts from A's last lock renewal."""
    if kind in ("kill", "exit"):
        return (t_L if t_L is not None and t_L <= t else t), b.takeover_kill()
    if kind in ("stop", "released"):
        return t, b.takeover_graceful()
    if kind in SILENT_OPS:
        return t, b.takeover_silent()
    if kind in ("lost", "expired"):
        return t, b.takeover_lost()
    return t, b.takeover_rebalance()


def _master_starved_ms(h: History, broker_name: str | None, t0: int, t1: int) -> int:
    """How much of [t0, t1] the queue's master spent starved of CPU (the gray `starve`)."""
    spans = sorted((max(t0, w.start_ms), min(t1, w.end_ms)) for w in h.group_fault_windows(broker_name)
                   if w.gray == "starve" and _master_out(h, w) and w.start_ms < t1 and w.end_ms > t0)
    total, covered_to = 0, t0
    for lo, hi in spans:  # overlapping windows count once
        lo = max(lo, covered_to)
        if hi > lo:
            total, covered_to = total + hi - lo, hi
    return total


def _master_out(h: History, w: FaultWindow) -> bool:
    """A fault that takes a master away from every client: killed, stopped, paused, or isolated
    (a cut between the master and one consumer leaves it serving the others). Broker node ids end
    in their broker id (`broker-a-0` is broker-a's master)."""
    masters = [t for t in w.targets if h.is_broker(t) and t.endswith("-0")]
    if not masters:
        return False
    return w.op in ("kill", "stop", "pause", "exit") or (w.op == "partition" and len(w.targets) == 1)


def _stuck_queues(h: History, cfg: CheckerConfig, holder_faults: list[FaultWindow], ep: list[dict[str, Any]],
                  acked_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Holder faults after which no one consumed the queue again though acknowledged messages waited."""
    if not holder_faults or not ep:
        return []
    acked = {(r["topic"], r["broker_name"], r["queue_id"]): r["hi"] for r in acked_rows}
    by_queue: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in ep:
        by_queue.setdefault((r["group"], r["topic"], r["broker_name"], r["queue_id"]), []).append(r)
    b = cfg.bounds
    out = []
    for key, epochs in by_queue.items():
        epochs.sort(key=lambda e: e["start"])
        delivered_max = max(e["max_offset"] for e in epochs)
        pending = acked.get(key[1:], -1) > delivered_max
        last = epochs[-1]
        if not pending:
            continue
        for w in holder_faults:
            if not w.hits(last["node"]) or w.start_ms < last["last_t"]:
                continue  # not the holder, or the queue was consumed after the fault began
            bound = b.takeover_kill() if w.op in ("kill", "stop") else b.takeover_silent()
            if h.t_end - w.start_ms > b.limit(bound):
                out.append({"queue": "/".join(map(str, key[1:])), "group": key[0], "holder": last["client_id"],
                            "fault": w.label, "fault_s": s(h, w.start_ms), "last_delivered_offset": delivered_max,
                            "acked_max_offset": acked.get(key[1:]), "bound_ms": bound, "slack_ms": b.slack(bound)})
            break
    return out
