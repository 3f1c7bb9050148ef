"""rebalance: after every change that moves queue ownership, every live queue settles on exactly one
live consumer within a bound from the run's timers, and stays there until the next change.

Ownership is replayed from the consumers' journals: a `rebalance` event's `after` is the client's
queue set of the topic from then on, a `route` event's `queues` its route's readable queues. A
consumer is live from its first event after a (re)start until it is killed, stopped, paused or
exits (nemesis windows, unexpected exits, its `consumer-stopping` / `consumer-stop` events); a
dead or paused consumer owns nothing. A queue is live when it is in the route every live consumer
holds (they must agree) and its broker group's master is up.

Changes and their bounds (chaos.bounds, docs/chaos.md):
    route   a consumer's route gains or loses queues first (later clients seeing the
            same route are the same change)                 N_r + H + R_b
    join    a consumer starts, resumes, stops, is killed or exits; a master goes down
            or returns; a consumer's partition heals      H + R_b
    silent  a consumer paused or cut off                     X_c + K_c + R_b
    (orderly groups add the lock handover max(U_d, L_b) + R_b to each)

The state at each instant is settled (every live queue owned once, no live consumer owning a
queue its route lacks), unsettled, or not judged: no live consumer, a consumer cut from brokers
(the group's members then differ per broker, by RocketMQ's design), or a routed broker group down
(a client that asks it for the members skips its rebalance; a group whose queues return to a route
is up again). Every change moves the deadline to
at least its time + bound + slack; an unsettled state past the deadline fails the check. Per
change the check reports the time to settle and the bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import functions as F

from chaos.checker.checks._common import queue_refs, rows, s
from chaos.checker.config import CheckerConfig
from chaos.checker.faults import FaultWindow, ProcessExit, broker_identity
from chaos.checker.loader import History
from chaos.checker.verdict import CheckResult, unknown
from nodes.common import constants as c

REBALANCE = (
    "After every change that moves queue ownership (a broker group's queues leave or return to the route, a "
    "consumer joins, dies, pauses or leaves, a master goes down or returns) every live queue (its broker group's "
    "master up, in the route every live consumer holds) is owned by exactly one live consumer, and no live consumer "
    "owns a queue its route lacks, within a bound from the run's timers (route change N_r + H + R_b; join, leave, "
    "death H + R_b; pause or cut X_c + K_c + R_b; orderly groups add max(U_d, L_b) + R_b) plus slack, and stays so until the "
    "next change. Not judged while no consumer is live, a consumer is cut from brokers or a routed group is down.")

Queue = tuple[str, int]
_DEATH_OPS = ("kill", "stop")
_DOWN_OPS = ("kill", "stop", "pause")


@dataclass(frozen=True)
class Change:
    t_ms: int
    kind: str  # route | join | silent
    label: str
    bound_ms: int


@dataclass
class Replay:
    """The inputs of one (group, topic), as time-ordered actions: (t_ms, order, action, node, value,
    client id of the process that wrote it, when known)."""

    actions: list[tuple[int, int, str, str, Any, str | None]] = field(default_factory=list)

    def add(self, t_ms: int, action: str, node: str, value: Any = None, order: int = 1,
            client: str | None = None) -> None:
        self.actions.append((int(t_ms), order, action, node, value, client))


@dataclass
class _State:
    live: set[str] = field(default_factory=set)  # running, not paused, seen since its (re)start
    dead: set[str] = field(default_factory=set)  # killed or stopped: its next event is a restart
    paused: set[str] = field(default_factory=set)
    cut: dict[str, int] = field(default_factory=dict)  # consumer -> partitions it is in
    down: dict[str, int] = field(default_factory=dict)  # broker group -> faults keeping its master down
    owned: dict[str, frozenset[Queue]] = field(default_factory=dict)
    view: dict[str, frozenset[Queue]] = field(default_factory=dict)
    client: dict[str, str] = field(default_factory=dict)  # node -> client id of its latest process

    def judge(self) -> tuple[str, str]:
        """('settled' | 'unsettled' | 'skip', why) for the state as it is."""
        live = sorted(n for n in self.live if n not in self.paused)
        if not live:
            return "skip", "no live consumer"
        if any(self.cut.get(n) for n in live):
            return "skip", "a consumer is cut from brokers"
        views = {self.view.get(n) for n in live}
        if None in views:
            return "unsettled", "a live consumer has no route yet"
        if len(views) > 1:
            return "unsettled", "live consumers hold different routes"
        view = next(iter(views))
        assert view is not None
        down = {g for g, n in self.down.items() if n}
        if any(b in down for b, _ in view):
            return "skip", "a routed broker group is down"
        problems = []
        for q in sorted(view):
            owners = [n for n in live if q in self.owned.get(n, ())]
            if len(owners) != 1:
                problems.append(f"{q[0]}/{q[1]} owned by {len(owners)}" + (f" ({', '.join(owners)})" if owners else ""))
        for n in live:
            stale = sorted(self.owned.get(n, frozenset()) - view)
            if stale:
                problems.append(f"{n} owns {', '.join(f'{b}/{q}' for b, q in stale)} outside its route")
        if problems:
            return "unsettled", "; ".join(problems[:4]) + (f" (+{len(problems) - 4})" if len(problems) > 4 else "")
        return "settled", ""


def replay(r: Replay, bounds: Mapping[str, int], slack: Mapping[str, int], t_end_ms: int,
           merge_ms: int = 0) -> dict[str, Any]:
    """Replay one (group, topic): the changes with their time to settle, and the late stretches.

    `bounds` / `slack`: kind -> ms. Changes within `merge_ms` of the previous one are one change
    (the slower bound counts). Returns {"changes": [...], "late": [...], "segments": n}."""
    st = _State()
    changes: list[Change] = []
    segments: list[tuple[int, str, str]] = []  # (from t, status, why)
    last_route: frozenset[Queue] | None = None

    def change(t: int, kind: str, label: str) -> None:
        changes.append(Change(t, kind, label, bounds[kind] + slack[kind]))

    for t, _, action, node, value, client in sorted(r.actions, key=lambda a: (a[0], a[1])):
        if action in ("event", "route", "owned") and node in st.dead:
            if client is not None and client == st.client.get(node):
                continue  # written by the stopped process while it shut down: no restart
            st.dead.discard(node)  # a restarted process: it owns nothing yet
            st.owned.pop(node, None)
            st.view.pop(node, None)
        if client is not None:
            st.client[node] = client
        if action in ("event", "route", "owned") and node not in st.live:
            st.live.add(node)
            change(t, "join", f"{node} started")
        if action == "route":
            st.view[node] = value
            if value != last_route:
                if last_route is not None:
                    gone, back = sorted(last_route - value), sorted(value - last_route)
                    for b, _ in back:  # registered again: its master serves (maybe before its restart ended)
                        st.down[b] = 0
                    change(t, "route", f"route seen by {node}: " + ", ".join(
                        [f"-{b}/{q}" for b, q in gone] + [f"+{b}/{q}" for b, q in back]))
                last_route = value
        elif action == "owned":
            st.owned[node] = value
        elif action in ("death", "stopping"):
            if node in st.live:
                st.live.discard(node)
                change(t, "join", f"{node} {value or 'died'}")
            st.dead.add(node)
            st.owned.pop(node, None)
        elif action == "pause":
            st.paused.add(node)
            change(t, "silent", f"{node} paused")
        elif action == "resume":
            st.paused.discard(node)
            change(t, "join", f"{node} resumed")
        elif action == "cut":
            st.cut[node] = st.cut.get(node, 0) + 1
            change(t, "silent", f"{node} cut off")
        elif action == "uncut":
            st.cut[node] = max(0, st.cut.get(node, 0) - 1)
            change(t, "join", f"{node} healed")
        elif action == "down":
            st.down[node] = st.down.get(node, 0) + 1
            change(t, "join", f"{node} master down")
        elif action == "up":
            st.down[node] = max(0, st.down.get(node, 0) - 1)
            # a route change for its clients: each learns the master is back from the routes (N_r)
            # before it heartbeats it (H); a rebalance on its short member list until then may drop
            # queues, which the next one (R_b) takes back (the takeover check reasons the same way)
            change(t, "route", f"{node} master back")
        status, why = st.judge()
        if not segments or segments[-1][1:] != (status, why):
            segments.append((t, status, why))
    return _measure(_merge(changes, merge_ms), segments, t_end_ms)


def _merge(changes: list[Change], merge_ms: int) -> list[Change]:
    out: list[Change] = []
    for ch in sorted(changes, key=lambda x: x.t_ms):
        if out and ch.t_ms - out[-1].t_ms <= merge_ms:
            prev = out[-1]
            out[-1] = Change(prev.t_ms, prev.kind if prev.bound_ms >= ch.bound_ms else ch.kind,
                             f"{prev.label}; {ch.label}", max(prev.bound_ms, ch.bound_ms))
        else:
            out.append(ch)
    return out


def _measure(changes: list[Change], segments: list[tuple[int, str, str]], t_end_ms: int) -> dict[str, Any]:
    """Per change: when the state settled for good before the next change, against the deadline."""
    out, late = [], []
    deadline = None
    for i, ch in enumerate(changes):
        end = changes[i + 1].t_ms if i + 1 < len(changes) else t_end_ms
        deadline = max(deadline or 0, ch.t_ms + ch.bound_ms)
        inside = _clip(segments, ch.t_ms, end)
        bad = [(a, b, why) for a, b, status, why in inside if status == "unsettled"]
        settled_at = bad[-1][1] if bad else ch.t_ms
        if bad and bad[-1][1] >= end:
            settled_at = None
        over = [(max(a, deadline), b, why) for a, b, why in bad if b > deadline]
        verdict = "late" if over else ("superseded" if settled_at is None else "ok")
        row = {"t_ms": ch.t_ms, "change": ch.label, "kind": ch.kind,
               "settle_ms": None if settled_at is None else settled_at - ch.t_ms,
               "limit_ms": deadline - ch.t_ms, "verdict": verdict}
        if over:
            a, b, why = over[0]
            late.append({"t_ms": a, "until_ms": b, "change": ch.label, "limit_ms": deadline - ch.t_ms,
                         "late_by_ms": b - deadline if b < end else None, "why": why})
            row["why"] = why
        elif settled_at is None and bad:
            row["why"] = bad[-1][2]
        out.append(row)
    return {"changes": out, "late": late, "segments": len(segments)}


def _clip(segments: list[tuple[int, str, str]], lo: int, hi: int) -> list[tuple[int, int, str, str]]:
    """The segments as (from, to, status, why) intervals, clipped to [lo, hi)."""
    out = []
    for i, (t, status, why) in enumerate(segments):
        t_next = segments[i + 1][0] if i + 1 < len(segments) else hi
        a, b = max(t, lo), min(t_next, hi)
        if a < b:
            out.append((a, b, status, why))
    return out


# ---- from the history -----------------------------------------------------------------------------


def build_replays(events: Sequence[Mapping[str, Any]], faults: Iterable[FaultWindow], exits: Iterable[ProcessExit],
                  consumers: set[str]) -> dict[tuple[str, str], Replay]:
    """One `Replay` per (group, topic) of the consumers' events (retry topics left out)."""
    by_gt: dict[tuple[str, str], Replay] = {}
    node_groups: dict[str, set[str]] = {}
    for e in events:
        if e.get("group"):
            node_groups.setdefault(e["node"], set()).add(e["group"])
    for e in events:
        topic, group = e.get("topic"), e.get("group")
        if topic and group and not topic.startswith(c.RETRY_GROUP_TOPIC_PREFIX):
            by_gt.setdefault((group, topic), Replay())
    for (group, topic), r in by_gt.items():
        members = {n for n, gs in node_groups.items() if group in gs}
        for e in events:
            node, t, kind = e["node"], e["t"], e["event"]
            if e.get("group") != group:
                continue
            if kind == "route" and e.get("topic") == topic:
                r.add(t, "route", node, frozenset(_queues(e.get("queues"))), client=e.get("client_id"))
            elif kind == "rebalance" and e.get("topic") == topic:
                r.add(t, "owned", node, frozenset(_queues(e.get("after"))), client=e.get("client_id"))
            elif kind in ("consumer-stopping", "consumer-stop"):
                r.add(t, "stopping", node, "stopping", order=0, client=e.get("client_id"))
            elif kind == "consumer-start":
                r.add(t, "event", node, client=e.get("client_id"))
        _add_faults(r, faults, exits, members, consumers)
    return by_gt


def _add_faults(r: Replay, faults: Iterable[FaultWindow], exits: Iterable[ProcessExit], members: set[str],
                consumers: set[str]) -> None:
    for w in faults:
        hit = [n for n in w.targets if n in members]
        if w.op in _DEATH_OPS:
            for n in hit:
                r.add(w.start_ms, "death", n, "killed" if w.op == "kill" else "stopped", order=0)
        elif w.op == "pause":
            for n in hit:
                r.add(w.start_ms, "pause", n, order=0)
                if w.recovered:
                    r.add(w.end_ms, "resume", n, order=0)
        elif w.op == "partition":
            # a consumer in a partition may be cut from some brokers (its membership then differs per broker)
            for n in [n for n in w.targets if n in consumers]:
                r.add(w.start_ms, "cut", n, order=0)
                if w.recovered:
                    r.add(w.end_ms, "uncut", n, order=0)
        for group in _downed_groups(w):
            r.add(w.start_ms, "down", group, order=0)
            if w.recovered:
                r.add(w.end_ms, "up", group, order=0)
    for e in exits:
        if not e.expected and e.node in members:
            r.add(e.t_ms, "death", e.node, "exited", order=0)


def _downed_groups(w: FaultWindow) -> list[str]:
    """Broker groups whose master this window takes away from the consumers: killed, stopped or
    paused, or isolated by a partition."""
    masters = sorted({ident[0] for t in w.targets if (ident := broker_identity(t)) is not None and ident[1] == 0
                      and t.startswith("broker")})
    if w.op in _DOWN_OPS:
        return masters
    if w.op == "partition" and (w.detail or "").startswith("isolate "):
        return masters
    return []


def _queues(raw: Any) -> list[Queue]:
    return [(b, q) for b, q in queue_refs(raw) if q is not None]


def check_rebalance(h: History, cfg: CheckerConfig) -> CheckResult:
    if not h.has("events"):
        return unknown("rebalance", REBALANCE, "no events history in the run")
    ev = h.ev.filter((F.col("side") == "client") & F.col("event").isin(
        "route", "rebalance", "consumer-start", "consumer-stopping", "consumer-stop"))
    events = rows(ev.select("node", "event", "group", "client_id", "topic", "after", "queues",
                            F.col("mono_ms").alias("t")))
    if not any(e["event"] == "route" for e in events):
        why = ("its consumers are a real RocketMQ client, which journals no route events"
               if cfg.real_client_findings else "it predates them")
        return unknown("rebalance", REBALANCE, f"no route events in the run ({why}): the live queues are not known")
    consumers = {n for n, role in h.roles.items() if role == "consumer"} | {e["node"] for e in events}
    orderly = {r["group"] for r in rows(h.deliv.filter("orderly").select("group").distinct())} \
        if h.has("deliveries") else set()
    b = cfg.bounds
    measurements, late_all = [], []
    for (group, topic), r in sorted(build_replays(events, h.faults, h.exits, consumers).items()):
        kinds = {k: b.rebalance_bound(k, orderly=group in orderly) for k in ("route", "join", "silent")}
        got = replay(r, kinds, {k: b.slack(v) for k, v in kinds.items()}, h.t_end, cfg.clock_slack_ms)
        for row in got["changes"]:
            measurements.append({"group": group, "topic": topic, "t_s": s(h, row.pop("t_ms")), **row})
        for row in got["late"]:
            late_all.append({"group": group, "topic": topic, "t_s": s(h, row.pop("t_ms")),
                             "until_s": s(h, row.pop("until_ms")), **row})
    if not measurements:
        return unknown("rebalance", REBALANCE, "no consumer of a non-retry topic journaled a route or a rebalance")
    settle = [m["settle_ms"] for m in measurements if m["settle_ms"] is not None and m["verdict"] == "ok"]
    counts = {"changes": len(measurements), "late": len(late_all),
              "superseded": sum(m["verdict"] == "superseded" for m in measurements),
              "settle_ms_max": max(settle, default=None),
              "bounds_ms": {k: b.rebalance_bound(k) for k in ("route", "join", "silent")},
              "orderly_groups": sorted(orderly)}
    reason = None
    if late_all:
        w = late_all[0]
        reason = (f"{len(late_all)} changes not settled within their bound; first at {w['t_s']} s after "
                  f"'{w['change']}' (limit {w['limit_ms']} ms): {w['why']}")
    return CheckResult("rebalance", not late_all, REBALANCE, counts=counts, examples=late_all[:cfg.max_examples],
                       reason=reason, measurements=measurements)
