"""The report's routes-and-ownership plot: per broker group, when its queues were in each consumer's
route (and which name server said so), and which consumer owned each of its queues.

Drawn from the consumers' `route` and `rebalance` events (small: one line per change), replayed
on the driver: a consumer's route and ownership end when it is killed, stopped or exits. Fault
windows are shaded as on the other plots (`plots._shade`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from matplotlib.figure import Figure
from pyspark.sql import functions as F

from chaos.checker.checks._common import queue_refs, rows
from chaos.checker.faults import FaultWindow, ProcessExit
from chaos.checker.loader import History
from chaos.checker.plots import _PALETTE, _empty, _png, _sec, _shade, _xlim
from nodes.common import constants as c

Interval = dict[str, Any]


def replay_intervals(events: Sequence[Mapping[str, Any]], faults: Iterable[FaultWindow], exits: Iterable[ProcessExit],
                     t_end_ms: int) -> tuple[list[Interval], list[Interval]]:
    """(route intervals {node, broker_name, namesrv, start, end}, owner intervals {node, broker_name,
    queue_id, start, end}) of the consumers' non-retry topics."""
    timeline: dict[str, list[tuple[int, int, str, Any]]] = {}
    for e in events:
        if e.get("topic") and e["topic"].startswith(c.RETRY_GROUP_TOPIC_PREFIX):
            continue
        if e["event"] == "route":
            timeline.setdefault(e["node"], []).append((e["t"], 1, "route", (e.get("queues"), e.get("namesrv"))))
        elif e["event"] == "rebalance":
            timeline.setdefault(e["node"], []).append((e["t"], 1, "owned", e.get("after")))
        elif e["event"] in ("consumer-stopping", "consumer-stop"):
            timeline.setdefault(e["node"], []).append((e["t"], 0, "end", None))
    for w in faults:
        if w.op in ("kill", "stop"):
            for n in w.targets:
                if n in timeline:
                    timeline[n].append((w.start_ms, 0, "end", None))
    for x in exits:
        if not x.expected and x.node in timeline:
            timeline[x.node].append((x.t_ms, 0, "end", None))
    routes: list[Interval] = []
    owners: list[Interval] = []
    for node, acts in timeline.items():
        open_routes: dict[str, Interval] = {}
        open_owned: dict[tuple[str, int], Interval] = {}

        def close(t: int, keep_brokers: set[str] | None = None, keep_queues: set[tuple[str, int]] | None = None,
                  open_routes: dict[str, Interval] = open_routes,
                  open_owned: dict[tuple[str, int], Interval] = open_owned) -> None:
            for b in [b for b in open_routes if keep_brokers is None or b not in keep_brokers]:
                routes.append({**open_routes.pop(b), "end": t})
            for q in [q for q in open_owned if keep_queues is None or q not in keep_queues]:
                owners.append({**open_owned.pop(q), "end": t})

        for t, _, kind, value in sorted(acts, key=lambda a: (a[0], a[1])):
            if kind == "end":
                close(t)
            elif kind == "route":
                raw, namesrv = value
                brokers = {b for b, _ in queue_refs(raw)}
                close(t, keep_brokers={b for b in brokers if open_routes.get(b, {}).get("namesrv") == namesrv},
                      keep_queues=set(open_owned))
                for b in brokers - set(open_routes):
                    open_routes[b] = {"node": node, "broker_name": b, "namesrv": namesrv, "start": t}
            else:
                queues = {(b, q) for b, q in queue_refs(value) if q is not None}
                close(t, keep_brokers=set(open_routes), keep_queues=queues)
                for b, q in queues - set(open_owned):
                    open_owned[(b, q)] = {"node": node, "broker_name": b, "queue_id": q, "start": t}
        close(t_end_ms)
    return routes, owners


def _namesrv_names(h: History) -> dict[str, str]:
    """gRPC address -> name server node id, from the run's cluster.json."""
    if h.run_dir is None:
        return {}
    try:
        nodes = json.loads((h.run_dir / "cluster.json").read_text()).get("nodes", [])
    except (OSError, ValueError, AttributeError):
        return {}
    return {n["addr"]: n["id"] for n in nodes if isinstance(n, dict) and n.get("role") == "namesrv" and n.get("addr")}


def route_ownership_data(h: History) -> dict[str, Any]:
    if not h.has("events"):
        return {"routes": [], "owners": []}
    ev = h.ev.filter((F.col("side") == "client") & F.col("event").isin(
        "route", "rebalance", "consumer-stopping", "consumer-stop"))
    events = rows(ev.select("node", "event", "topic", "after", "queues", "namesrv", F.col("mono_ms").alias("t")))
    routes, owners = replay_intervals(events, h.faults, h.exits, h.t_end)
    names = _namesrv_names(h)
    for r in routes:
        r["namesrv"] = names.get(r["namesrv"], r["namesrv"])
    return {"routes": routes, "owners": owners}


def render_route_ownership(h: History, data: Mapping[str, Any] | None = None) -> bytes:
    """Per broker group: one row per consumer (its route listed the group's queues; the name server
    that said so written at each start), then one row per queue (its owner), faults shaded."""
    data = route_ownership_data(h) if data is None else data
    routes, owners = data["routes"], data["owners"]
    if not routes:
        return _empty("routes and ownership", "no route events from consumers (a run from before they were journaled)")
    groups = sorted({r["broker_name"] for r in routes} | {o["broker_name"] for o in owners})
    consumers = sorted({r["node"] for r in routes} | {o["node"] for o in owners})
    colour = {n: _PALETTE[i % len(_PALETTE)] for i, n in enumerate(consumers)}
    queues = {g: sorted({o["queue_id"] for o in owners if o["broker_name"] == g}) for g in groups}
    heights = [len(consumers) + len(queues[g]) for g in groups]
    fig = Figure(figsize=(10, 0.8 + 0.32 * sum(heights) + 0.5 * len(groups)))
    axes = fig.subplots(len(groups), 1, squeeze=False, sharex=True, gridspec_kw={"height_ratios": heights})[:, 0]
    for ax, g in zip(axes, groups, strict=True):
        labels = [f"route @{n}" for n in consumers] + [f"{g}/{q} owner" for q in queues[g]]
        for i, n in enumerate(consumers):
            for r in (r for r in routes if r["broker_name"] == g and r["node"] == n):
                x0, x1 = _sec(h, r["start"]), _sec(h, r["end"])
                ax.broken_barh([(x0, max(x1 - x0, 0.002))], (i - 0.3, 0.6), color=colour[n], alpha=0.35, hatch="//")
                if r["namesrv"]:
                    ax.text(x0, i, f" {r['namesrv']}", fontsize=6, va="center", clip_on=True)
        for j, q in enumerate(queues[g]):
            row = len(consumers) + j
            for o in (o for o in owners if o["broker_name"] == g and o["queue_id"] == q):
                x0, x1 = _sec(h, o["start"]), _sec(h, o["end"])
                ax.broken_barh([(x0, max(x1 - x0, 0.002))], (row - 0.35, 0.7), color=colour[o["node"]], alpha=0.8)
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels, fontsize=7)
        ax.set_ylim(len(labels) - 0.5, -0.5)
        ax.set_title(f"{g}: in each consumer's route (hatched, with the name server that answered) and owners",
                     fontsize=9)
        _xlim(h, ax)
        _shade(h, ax, label=ax is axes[0])
    for n in consumers:
        axes[0].plot([], [], color=colour[n], lw=6, label=n)
    axes[0].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    axes[-1].set_xlabel("s since start")
    return _png(fig)
