"""matplotlib PNGs for the report, drawn from small Spark aggregates (never from raw rows).

`plot_data` gathers everything in two Spark jobs; the `render_*` functions only draw. Every
time axis is seconds since the first event of the history (CLOCK_MONOTONIC); fault windows
are shaded and labelled on every time plot, unexpected exits are dashed lines. Figures use
matplotlib's object API (no pyplot state), so any backend and any thread works.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from matplotlib.figure import Figure
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from chaos.checker.checks._common import collect_parts
from chaos.checker.faults import broker_identity
from chaos.checker.loader import GQ, History
from chaos.checker.schemas import ACKED_STATUSES

FAULT_COLOURS = {"kill": "#d62728", "stop": "#ff7f0e", "pause": "#9467bd", "partition": "#8c564b"}
MAX_QUEUES = 8
MAX_BARS = 4000
_QS = [0.5, 0.95, 0.99]
_PALETTE = ["#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#17becf", "#bcbd22", "#e377c2", "#8c564b"]

Queue = tuple[Any, ...]


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return buf.getvalue()


def _sec(h: History, t: float) -> float:
    return (t - h.t0) / 1000.0


def _bucket_ms(h: History) -> int:
    return max(1, (h.t_end - h.t0) // 240)


def _in_queues(queues: Sequence[Queue]) -> Column:
    cond = F.lit(False)
    for q in queues:
        one = F.lit(True)
        for name, value in zip(GQ, q, strict=True):
            one = one & (F.col(name) == F.lit(value))
        cond = cond | one
    return cond


# ---- data -------------------------------------------------------------------------------------


def plot_data(h: History) -> dict[str, Any]:
    """Rates, latency percentiles (per bucket and overall), and per-queue ownership / offsets."""
    bucket = _bucket_ms(h)
    b = F.floor((F.col("t") - F.lit(h.t0)) / bucket).alias("b")
    parts: dict[str, DataFrame] = {}
    series = []
    if h.has("sends"):
        s = h.sends.withColumn("t", F.col("mono_ms"))
        acked = (F.col("type") == "ok") & (F.col("status").isNull() | F.col("status").isin(*ACKED_STATUSES))
        series.append(s.filter(acked).select(F.lit("sends acknowledged").alias("label"), "t"))
        if len(_broker_groups(h)) > 1:  # which groups the producer's routes sent to, over time
            series.append(s.filter(acked & F.col("broker_name").isNotNull()).select(
                F.concat(F.lit("acknowledged on "), "broker_name").alias("label"), "t"))
        series.append(s.filter(F.col("type").isin("fail", "info")).select(F.lit("sends failed / unknown").alias("label"),
                                                                          "t"))
    if h.has("deliveries"):
        series.append(h.deliv.filter("success").select(F.lit("deliveries").alias("label"), "t"))
    if series:
        u = series[0]
        for x in series[1:]:
            u = u.unionByName(x)
        parts["rates"] = u.groupBy("label", b).agg(F.count(F.lit(1)).alias("n"))
    lat = _latencies(h)
    if lat is not None:
        parts["latency"] = lat.rollup("kind", b).agg(F.percentile_approx("lat", _QS, 1000).alias("p"),
                                                     F.count(F.lit(1)).alias("n"), F.max("lat").alias("max"))
    if h.has("deliveries"):
        parts["queues"] = h.queue_deliveries.groupBy(*GQ).agg(F.count(F.lit(1)).alias("n"))
    got, _ = collect_parts(parts, cap=20_000)
    out: dict[str, Any] = {"bucket_ms": bucket, "rates": {}, "latency": [], "latency_overall": {}}
    for r in got.get("rates", []):
        out["rates"].setdefault(r["label"], []).append(((r["b"] + 0.5) * bucket / 1000.0, r["n"] * 1000.0 / bucket))
    # a group the producer avoided has no sends in a bucket: draw that as 0, not a line across the gap
    all_x = {x for x, _ in out["rates"].get("sends acknowledged", [])}
    for label, pts in out["rates"].items():
        if label.startswith("acknowledged on "):
            pts += [(x, 0.0) for x in all_x - {x for x, _ in pts}]
    for r in got.get("latency", []):
        if r["kind"] is None:
            continue
        p = r["p"] or [None, None, None]
        if r["b"] is None:
            out["latency_overall"][r["kind"]] = {"n": r["n"], "p50_ms": p[0], "p95_ms": p[1], "p99_ms": p[2],
                                                 "max_ms": r["max"]}
        else:
            out["latency"].append({"kind": r["kind"], "x": (r["b"] + 0.5) * bucket / 1000.0, "p50": p[0],
                                   "p95": p[1], "p99": p[2]})
    out["queues"] = sorted((r["group"], r["topic"], r["broker_name"], r["queue_id"])
                           for r in busiest_per_broker(got.get("queues", []), MAX_QUEUES))
    out.update(_queue_data(h, out["queues"], b) if out["queues"] else {"epochs": [], "batches": [], "grants": [],
                                                                        "offsets": []})
    return out


def _broker_groups(h: History) -> set[str]:
    """The broker groups of the run's cluster (cluster.json's broker nodes, `<group>-<broker id>`)."""
    return {ident[0] for node in h.roles if h.is_broker(node) and (ident := broker_identity(node)) is not None}


def busiest_per_broker(queues: Sequence[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """The `limit` busiest queues (rows with broker_name and n), taken in turns from each broker
    group, so a topology with several groups shows every group's queues."""
    by_broker: dict[Any, list[dict[str, Any]]] = {}
    for r in sorted(queues, key=lambda r: -r["n"]):
        by_broker.setdefault(r["broker_name"], []).append(r)
    out: list[dict[str, Any]] = []
    while len(out) < limit and any(by_broker.values()):
        for name in sorted(by_broker, key=str):
            if by_broker[name] and len(out) < limit:
                out.append(by_broker[name].pop(0))
    return out


def _latencies(h: History) -> DataFrame | None:
    frames = []
    # both from the per-message views the checks already built (no new shuffle of the histories)
    if h.has("sends"):
        frames.append(h.outcomes.select(F.lit("send").alias("kind"), F.col("invoke_ms").alias("t"),
                                        (F.col("done_ms") - F.col("invoke_ms")).alias("lat")))
    if h.has("sends") and h.has("deliveries"):
        first = h.per_msg.filter(F.col("t_first").isNotNull()).select("msg_id", "t_first")
        frames.append(h.outcomes.filter("acked").join(first, "msg_id").select(
            F.lit("end-to-end").alias("kind"), F.col("ack_ms").alias("t"), (F.col("t_first") - F.col("ack_ms")).alias("lat")))
    if not frames:
        return None
    u = frames[0]
    for x in frames[1:]:
        u = u.unionByName(x)
    return u.filter(F.col("lat").isNotNull())


def _queue_data(h: History, queues: list[Queue], b: Column) -> dict[str, Any]:
    qf = _in_queues(queues)
    parts: dict[str, DataFrame] = {
        "epochs": h.epochs.filter(qf).select(*GQ, "client_id", "start", "end"),
        "batches": _merged_batches(h, qf, gap_ms=max(1, _bucket_ms(h) // 8)),
        "offsets": h.queue_deliveries.filter(qf).groupBy(*GQ, F.lit("delivered (max)").alias("label"), b).agg(
            F.max("queue_offset").alias("v")),
    }
    if h.has("events"):
        parts["grants"] = h.locks.filter((F.col("action") == "granted") & qf).select(*GQ, "client_id", "side", "t")
        target = F.when(F.coalesce("target_broker_id", F.lit(0)) == 0, "committed to master").otherwise(
            "committed to slave")
        parts["commits"] = h.commits.filter(qf).groupBy(*GQ, target.alias("label"), b).agg(F.max("offset").alias("v"))
        parts["stored"] = h.broker_offsets.filter(qf).groupBy(*GQ, F.concat(F.lit("stored on "), "node").alias("label"),
                                                              b).agg(F.max("offset").alias("v"))
    got, _ = collect_parts(parts, cap=MAX_BARS)
    return {"epochs": got["epochs"], "batches": got["batches"], "grants": got.get("grants", []),
            "offsets": got["offsets"] + got.get("commits", []) + got.get("stored", [])}


def _merged_batches(h: History, qf: Column, gap_ms: int) -> DataFrame:
    """Orderly consume intervals, merged per queue and client where closer than `gap_ms` (plot resolution)."""
    from pyspark.sql import Window

    batches = h.deliv.filter(F.col("orderly") & F.col("consume_start_mono_ms").isNotNull() & qf).groupBy(
        *GQ, "client_id", F.col("consume_start_mono_ms").alias("start")).agg(F.max("t_end").alias("end"))
    w = Window.partitionBy(*GQ).orderBy("start")
    new = (F.lag("client_id").over(w).isNull() | (F.lag("client_id").over(w) != F.col("client_id"))
           | (F.col("start") - F.max("end").over(w.rowsBetween(Window.unboundedPreceding, -1)) > gap_ms))
    segments = batches.withColumn("seg", F.sum(new.cast("int")).over(w.rowsBetween(Window.unboundedPreceding, 0)))
    return segments.groupBy(*GQ, "client_id", "seg").agg(F.min("start").alias("consume_start_mono_ms"),
                                                         F.max("end").alias("end"))


# ---- drawing -----------------------------------------------------------------------------------


def _shade(h: History, ax: Any, *, label: bool = True) -> None:
    lo, hi = ax.get_ylim()
    for i, w in enumerate(h.faults):
        x0, x1 = _sec(h, w.start_ms), _sec(h, max(w.end_ms, w.start_ms + 1))
        colour = FAULT_COLOURS.get(w.op, "#7f7f7f")
        ax.axvspan(x0, x1, color=colour, alpha=0.15, lw=0)
        if label:
            ax.text(x0, hi - (hi - lo) * (0.06 + 0.07 * (i % 3)), w.label, fontsize=7, color=colour,
                    clip_on=True, va="top")
    for e in h.exits:
        if not e.expected:
            ax.axvline(_sec(h, e.t_ms), color="#d62728", ls="--", lw=0.8)


def _empty(title: str, why: str) -> bytes:
    fig = Figure(figsize=(10, 1.6))
    ax = fig.subplots()
    ax.axis("off")
    ax.text(0.5, 0.5, f"{title}: {why}", ha="center", va="center", fontsize=10)
    return _png(fig)


def _xlim(h: History, ax: Any) -> None:
    ax.set_xlim(0, max(_sec(h, h.t_end), 0.001))


def render_rates(h: History, data: dict[str, Any]) -> bytes:
    if not data["rates"]:
        return _empty("rates", "no sends or deliveries")
    fig = Figure(figsize=(10, 3.2))
    ax = fig.subplots()
    for label, pts in sorted(data["rates"].items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label, lw=1)
    ax.set_xlabel("s since start")
    ax.set_ylabel("per second")
    ax.set_title(f"send and delivery rates ({data['bucket_ms']} ms buckets)")
    _xlim(h, ax)
    ax.legend(loc="upper right", fontsize=8)
    _shade(h, ax)
    return _png(fig)


def render_latency(h: History, data: dict[str, Any]) -> bytes:
    points = data["latency"]
    if not points:
        return _empty("latency", "no send outcomes with an invoke and an answer")
    kinds = sorted({p["kind"] for p in points})
    fig = Figure(figsize=(10, 2.8 * len(kinds)))
    axes = fig.subplots(len(kinds), 1, squeeze=False)[:, 0]
    for ax, kind in zip(axes, kinds, strict=True):
        pts = sorted((p for p in points if p["kind"] == kind), key=lambda p: p["x"])
        for q, style in (("p50", "-"), ("p95", "--"), ("p99", ":")):
            ax.plot([p["x"] for p in pts], [max(p[q] or 0, 0.1) for p in pts], style, lw=1, label=q)
        ax.set_yscale("log")
        ax.set_ylabel("ms")
        ax.set_title(f"{kind} latency percentiles")
        _xlim(h, ax)
        ax.legend(loc="upper right", fontsize=8)
        _shade(h, ax)
    axes[-1].set_xlabel("s since start")
    return _png(fig)


def render_ownership(h: History, data: dict[str, Any]) -> bytes:
    """Per-queue Gantt: who consumed when (epochs), orderly consume intervals, lock grants, faults."""
    queues: list[Queue] = data["queues"]
    if not queues:
        return _empty("ownership", "no deliveries with queue offsets")
    clients = sorted({r["client_id"] for r in data["epochs"]})
    colour = {c: _PALETTE[i % len(_PALETTE)] for i, c in enumerate(clients)}
    ypos = {q: i for i, q in enumerate(queues)}
    fig = Figure(figsize=(10, 0.9 + 0.55 * len(queues)))
    ax = fig.subplots()

    def y(r: dict[str, Any]) -> int:
        return ypos[(r["group"], r["topic"], r["broker_name"], r["queue_id"])]

    bars: dict[tuple[int, str, str], list[tuple[float, float]]] = {}  # one collection per (row, client, kind)
    for r in data["epochs"]:
        x0, x1 = _sec(h, r["start"]), _sec(h, max(r["end"], r["start"] + 1))
        bars.setdefault((y(r), r["client_id"], "epoch"), []).append((x0, max(x1 - x0, 0.002)))
    for r in data["batches"]:
        x0, x1 = _sec(h, r["consume_start_mono_ms"]), _sec(h, r["end"])
        bars.setdefault((y(r), r["client_id"], "batch"), []).append((x0, max(x1 - x0, 0.002)))
    for (row, client, kind), ranges in bars.items():
        if kind == "epoch":
            ax.broken_barh(ranges, (row - 0.35, 0.7), color=colour.get(client, "#333333"), alpha=0.45)
        else:
            ax.broken_barh(ranges, (row - 0.12, 0.24), color=colour.get(client, "#333333"))
    for r in data["grants"]:
        broker = r["side"] == "broker"
        ax.plot([_sec(h, r["t"])], [y(r) + (0.42 if broker else -0.42)], marker="v" if broker else "^", ms=4,
                color=colour.get(r["client_id"], "black"), ls="none")
    ax.set_yticks(range(len(queues)))
    ax.set_yticklabels([f"{g} {t}/{b}/{q}" for g, t, b, q in queues], fontsize=7)
    ax.set_ylim(-0.8, len(queues) - 0.2)
    _xlim(h, ax)
    ax.set_xlabel("s since start")
    ax.set_title("queue ownership: epochs (wide), orderly consume intervals (narrow), lock grants (^ client, v broker)",
                 fontsize=9)
    for c in clients[:12]:
        ax.plot([], [], color=colour[c], lw=6, label=c)
    if clients:
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    _shade(h, ax)
    return _png(fig)


def render_offsets(h: History, data: dict[str, Any]) -> bytes:
    """Per queue: highest delivered offset, commits by target (master / slave), broker-stored offsets."""
    queues: list[Queue] = data["queues"]
    if not queues:
        return _empty("offsets", "no deliveries with queue offsets")
    bucket = data["bucket_ms"]
    lines: dict[Queue, dict[str, list[tuple[float, float]]]] = {q: {} for q in queues}
    for r in data["offsets"]:
        key = (r["group"], r["topic"], r["broker_name"], r["queue_id"])
        lines[key].setdefault(r["label"], []).append(((r["b"] + 0.5) * bucket / 1000.0, r["v"]))
    fig = Figure(figsize=(10, 2.1 * len(queues)))
    axes = fig.subplots(len(queues), 1, squeeze=False, sharex=True)[:, 0]
    for ax, q in zip(axes, queues, strict=True):
        for label, pts in sorted(lines[q].items()):
            pts.sort()
            style = "-" if label.startswith("delivered") else "--" if "master" in label or label.endswith("-0") else ":"
            ax.step([p[0] for p in pts], [p[1] for p in pts], style, where="post", lw=1, label=label)
        ax.set_title(f"{q[0]} {q[1]}/{q[2]}/{q[3]}", fontsize=8)
        ax.set_ylabel("offset", fontsize=8)
        _xlim(h, ax)
        if lines[q]:
            ax.legend(loc="upper left", fontsize=7)
        _shade(h, ax, label=False)
    axes[-1].set_xlabel("s since start")
    return _png(fig)
