"""Helpers shared by the checks: examples, relative times, cause windows."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from chaos.checker.faults import FaultWindow
from chaos.checker.loader import History
from chaos.checker.verdict import jsonable


def rel_s(h: History, col: str | Column) -> Column:
    """A mono_ms column as seconds since the start of the history (for readable examples)."""
    c = F.col(col) if isinstance(col, str) else col
    return F.round((c - F.lit(h.t0)) / 1000.0, 3)


def take(df: DataFrame, n: int, order: Sequence[str | Column] = ()) -> list[dict[str, Any]]:
    if order:
        df = df.orderBy(*order)
    return [jsonable(r.asDict(recursive=True)) for r in df.limit(n).collect()]


def rows(df: DataFrame, cap: int = 200_000) -> list[dict[str, Any]]:
    """Collect a frame that is small by construction (candidates, epochs); capped as a guard."""
    return [r.asDict(recursive=True) for r in df.limit(cap).collect()]


def count_by(df: DataFrame, *cols: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in df.groupBy(*cols).agg(F.count(F.lit(1)).alias("n")).collect():
        key = "/".join(str(r[c]) for c in cols)
        out[key] = int(r["n"])
    return dict(sorted(out.items()))


def s(h: History, t_ms: float | None) -> float | None:
    return None if t_ms is None else round((t_ms - h.t0) / 1000.0, 3)


def first_cause(windows: Iterable[FaultWindow], lo: float, hi: float) -> FaultWindow | None:
    """The earliest window that starts inside [lo, hi]."""
    inside = [w for w in windows if lo <= w.start_ms <= hi]
    return min(inside, key=lambda w: w.start_ms) if inside else None


def overlapping(windows: Iterable[FaultWindow], lo: float, hi: float, *, slack: float = 0) -> list[FaultWindow]:
    return [w for w in windows if w.start_ms - slack <= hi and w.end_ms + slack >= lo]


def queue_name(r: dict[str, Any]) -> str:
    return f"{r.get('topic')}/{r.get('broker_name')}/{r.get('queue_id')}"


def queue_refs(queues: Iterable[Any] | None) -> set[tuple[str, int | None]]:
    """A rebalance event's queue list ([broker_name, queue_id] pairs) as a set of (broker, queue id)."""
    out: set[tuple[str, int | None]] = set()
    for q in queues or ():
        if q and len(q) >= 2:
            try:
                out.add((q[0], int(q[1])))
            except (TypeError, ValueError):
                out.add((q[0], None))
    return out


def tally(values: Iterable[Any]) -> dict[Any, int]:
    """How often each value occurs, in the order values first appear."""
    out: dict[Any, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def collect_n(df: DataFrame, cap: int = 10_000) -> tuple[list[dict[str, Any]], int]:
    """All rows of a frame expected to be small (violations), and their count, in one job when under `cap`."""
    got = df.limit(cap + 1).collect()
    if len(got) <= cap:
        return [r.asDict(recursive=True) for r in got], len(got)
    return [r.asDict(recursive=True) for r in got[:cap]], df.count()


def examples_of(found: list[dict[str, Any]], n: int, key: str = "t", **extra: Any) -> list[dict[str, Any]]:
    """The first n rows by `key`, JSON-ready, with `extra` fields prepended."""
    ordered = sorted(found, key=lambda r: (r.get(key) is None, r.get(key)))[:n]
    return [jsonable({**extra, **r}) for r in ordered]


def collect_parts(parts: Mapping[str, DataFrame], cap: int = 10_000) -> tuple[dict[str, list[dict[str, Any]]],
                                                                           dict[str, int]]:
    """Collect several small frames (violation candidates, summaries) in one Spark job.

    Each frame is capped at `cap` rows; a frame that had more is counted with a second job.
    Returns (rows by name, row count by name)."""
    got: dict[str, list[dict[str, Any]]] = {name: [] for name in parts}
    if not parts:
        return got, {}
    frames = [df.limit(cap + 1).select(F.lit(name).alias("_part"),
                                       F.to_json(F.struct(*[F.col(f"`{c}`") for c in df.columns]),
                                                 {"ignoreNullFields": "false"}).alias("_row"))
              for name, df in parts.items()]
    union = reduce(lambda a, b: a.unionByName(b), frames)
    for r in union.collect():
        got[r["_part"]].append(json.loads(r["_row"]))
    counts = {name: len(rows_) for name, rows_ in got.items()}
    for name, rows_ in got.items():
        if len(rows_) > cap:
            counts[name] = parts[name].count()
            del rows_[cap:]
    return got, counts
