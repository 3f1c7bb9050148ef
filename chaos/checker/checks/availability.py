"""availability: while one broker group is out, sends keep landing on the other.

The outage windows are the nemesis's faults that take one group away from the producer: a kill,
stop, pause or power loss of a master (alone or with its slave), a partition isolating a master,
and the producer cut from a group. Per window the check measures, from the producer's history,
the sends invoked in it that failed (`fail` or `info`) and the longest stretch without an
acknowledged send, and holds them to bounds from the run's timers (docs/chaos.md):

  failed sends <= in-flight x (1 + floor(L / I_p))
      a send to an unresponsive broker fails once per producer thread, then latency fault tolerance
      keeps that broker out of selection for I_p (a failed attempt counts as the highest latency);
      a dead broker refuses at once and the same send retries on another broker. `in-flight` is the
      most sends the producer had open at once (its threads), L the window's length.
  longest gap without an acknowledged send <= T_s (+ slack)
      every thread may sit out one whole send timeout on the silent broker, at the same time.

The failed fraction (failed / invoked) is reported with its bound (bound / invoked).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import pairwise
from typing import Any

from pyspark.sql import functions as F

from chaos.checker.checks._common import rows, s
from chaos.checker.config import CheckerConfig
from chaos.checker.faults import FaultWindow, broker_identity
from chaos.checker.loader import History
from chaos.checker.verdict import CheckResult, unknown

AVAILABILITY = (
    "During each single broker-group outage (a master killed, stopped, paused or power-lost, alone or with its "
    "slave; a master isolated; the producer cut from a group) the producer keeps sending to the other group: "
    "(1) the sends invoked in the window that fail (fail or info) number at most in-flight x (1 + floor(L / I_p)), "
    "in-flight being the most sends the producer had open at once and L the window's length - one failure per "
    "producer thread before latency fault tolerance avoids the broker for I_p; (2) the longest stretch in the "
    "window without an acknowledged send is at most T_s (one send timeout, every thread stuck on the silent "
    "broker at once), plus slack. Windows that overlap an outage of another group, or the I_p after its end + T_s "
    "during which the producer may still avoid that group, are skipped (both groups avoided: the producer then "
    "picks the least bad broker, which may be the silent one).")

_OUTAGE_OPS = ("kill", "stop", "pause")
_FAILED = ("fail", "info")


def outage_group(w: FaultWindow, is_broker: Callable[[str], bool] = lambda n: n.startswith("broker")) -> str | None:
    """The broker group a fault window takes away from the producer, or None if it is no such outage."""
    masters = [ident[0] for t in w.targets
               if is_broker(t) and (ident := broker_identity(t)) is not None and ident[1] == 0]
    if len(set(masters)) != 1:
        return None
    detail = w.detail or ""
    if w.op in _OUTAGE_OPS:
        return masters[0]
    if w.op == "partition" and (detail.startswith("isolate ") or
                                (detail.startswith("cut ") and " from " in detail and "name servers" not in detail)):
        return masters[0]
    return None


def max_in_flight(events: Iterable[tuple[int, str, str]]) -> int:
    """The most sends open at once: (mono_ms, type, op_id) lines, an invoke opening its op, its
    outcome closing it (an outcome at the same instant closes before the next invoke opens)."""
    events = list(events)
    invoked_ms = {op_id: t for t, kind, op_id in events if kind == "invoke"}

    def order(e: tuple[int, str, str]) -> tuple[int, int]:
        # an outcome in the same ms as its own invoke closes after it (the op was open for an
        # instant); other outcomes at that instant close before the next invoke opens
        t, kind, op_id = e
        if kind == "invoke":
            return t, 1
        return t, 2 if invoked_ms.get(op_id) == t else 0

    open_ops: set[str] = set()
    most = 0
    for _, kind, op_id in sorted(events, key=order):
        if kind == "invoke":
            open_ops.add(op_id)
            most = max(most, len(open_ops))
        else:
            open_ops.discard(op_id)
    return most


def judge_window(w: FaultWindow, group: str, sends: Sequence[dict[str, Any]], in_flight: int,
                 not_available_max_ms: int, gap_limit_ms: float) -> dict[str, Any]:
    """One outage window measured against its bounds. `sends`: one row per op (invoke_ms, outcome,
    ok_ms), every op of the run."""
    length_ms = max(0, w.end_ms - w.start_ms)
    inside = [r for r in sends if r["invoke_ms"] is not None and w.start_ms <= r["invoke_ms"] <= w.end_ms]
    failed = sum(1 for r in inside if r["outcome"] in _FAILED)
    failed_max = in_flight * (1 + length_ms // not_available_max_ms)
    oks = sorted(r["ok_ms"] for r in sends if r["ok_ms"] is not None and w.start_ms <= r["ok_ms"] <= w.end_ms)
    edges = [w.start_ms, *oks, w.end_ms]
    gap_ms = max(b - a for a, b in pairwise(edges))
    invoked = len(inside)
    return {"fault": w.label, "group": group, "length_ms": length_ms, "invoked": invoked, "failed": failed,
            "failed_max": failed_max, "failed_fraction": round(failed / invoked, 4) if invoked else 0.0,
            "failed_fraction_max": round(failed_max / invoked, 4) if invoked else 1.0,
            "longest_gap_ms": gap_ms, "gap_limit_ms": round(gap_limit_ms),
            "ok": failed <= failed_max and gap_ms <= gap_limit_ms}


def windows_to_judge(outages: Sequence[tuple[FaultWindow, str]], avoided_after_ms: int
                     ) -> list[tuple[FaultWindow, str, str | None]]:
    """Each outage with why it is skipped (None: judged): it overlaps another group's outage or the
    `avoided_after_ms` (T_s + I_p) after that one's end.

    A failed attempt at the other group, up to T_s after its outage ends, keeps that group out of
    selection for I_p; with both groups avoided the producer picks the least bad broker
    (pickOneAtLeast: by latency, then by which is available first), which may be the silent one,
    so such a window says nothing about how the producer rides out this group's outage."""
    out = []
    for w, group in outages:
        others = [o for o, g in outages
                  if g != group and o.start_ms <= w.end_ms and w.start_ms <= o.end_ms + avoided_after_ms]
        why = (f"overlaps an outage of another group, or the T_s + I_p ({avoided_after_ms} ms) after it "
               f"({others[0].label})") if others else None
        out.append((w, group, why))
    return out


def check_availability(h: History, cfg: CheckerConfig) -> CheckResult:
    if not h.has("sends"):
        return unknown("availability", AVAILABILITY, "no sends history in the run")
    if not h.has("nemesis"):
        return unknown("availability", AVAILABILITY, "no nemesis history in the run")
    outages = [(w, g) for w in h.faults if (g := outage_group(w, h.is_broker)) is not None]
    if not outages:  # nothing this rule speaks about happened: it holds (as a check on any run must)
        return CheckResult("availability", True, AVAILABILITY, counts={"outages": 0},
                           reason="no single broker-group outage in the run")
    b = cfg.bounds
    lines = rows(h.sends.filter(F.col("type").isNotNull() & F.col("op_id").isNotNull())
                 .select("type", "op_id", "mono_ms"))
    in_flight = max(1, max_in_flight((r["mono_ms"], r["type"], r["op_id"]) for r in lines))
    by_op: dict[str, dict[str, Any]] = {}
    for r in lines:
        op = by_op.setdefault(r["op_id"], {"invoke_ms": None, "outcome": None, "ok_ms": None})
        if r["type"] == "invoke":
            op["invoke_ms"] = r["mono_ms"]
        else:
            op["outcome"] = r["type"]
            if r["type"] == "ok":
                op["ok_ms"] = r["mono_ms"]
    sends = list(by_op.values())
    gap_limit_ms = b.limit(b.run.ms("send_stall_ms"))
    measurements, skipped = [], {}
    for w, group, why_skipped in windows_to_judge(outages, b.T_s + b.I_p):
        if why_skipped is not None:
            skipped[w.label] = why_skipped
            continue
        m = judge_window(w, group, sends, in_flight, b.I_p, gap_limit_ms)
        m["t_s"] = s(h, w.start_ms)
        measurements.append(m)
    if not measurements:
        return unknown("availability", AVAILABILITY, "every outage overlapped another group's")
    bad = [m for m in measurements if not m["ok"]]
    counts = {"outages": len(measurements), "in_flight_max": in_flight, "I_p_ms": b.I_p, "T_s_ms": b.T_s,
              "failed": sum(m["failed"] for m in measurements), "invoked": sum(m["invoked"] for m in measurements),
              "longest_gap_ms": max(m["longest_gap_ms"] for m in measurements), "windows_over_bound": len(bad)}
    reason = None
    if bad:
        worst = max(bad, key=lambda m: m["failed"] - m["failed_max"])
        reason = (f"{len(bad)} of {len(measurements)} outages over bound; e.g. {worst['fault']}: {worst['failed']} "
                  f"of {worst['invoked']} sends failed (bound {worst['failed_max']}), longest gap "
                  f"{worst['longest_gap_ms']} ms (bound {worst['gap_limit_ms']} ms)")
    return CheckResult(name="availability", valid=not bad, definition=AVAILABILITY, counts=counts,
                       examples=bad[:cfg.max_examples], reason=reason, skipped=skipped, measurements=measurements)
