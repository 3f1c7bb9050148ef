"""disk-full: a master whose disk is full refuses sends with the disk-full answer, and takes them again once freed."""

from __future__ import annotations

import re
from typing import Any

from pyspark.sql import functions as F

from chaos.checker.checks._common import s
from chaos.checker.config import CheckerConfig
from chaos.checker.faults import FaultWindow, broker_identity
from chaos.checker.loader import History
from chaos.checker.verdict import CheckResult, unknown
from nodes.common import constants as c

DISK_FULL = (
    "For every disk-fill that took a master's store filesystem past the disk guard's ratio "
    "(diskSpaceWarningLevelRatio, 0.90), from one disk check D_c (+ slack) after the fill until it was freed: "
    "no send the producer started then is acknowledged by that broker group (the guard let a write through), "
    "every refusal is the disk-full answer (SERVICE_NOT_AVAILABLE, code 14, whose remark names the disk) and not "
    "another error, no send is left with an unknown outcome (a refusal is an answer, not a timeout), and at "
    "least one send was refused if any was tried (the fault applied). After the disk is freed, sends to the "
    "group are acknowledged again within D_c (+ slack) if any was tried. A full slave refuses nothing a "
    "producer sees (it stops acknowledging replication; `replication` judges its catch-up); nothing dies "
    "either way (`deaths`).")

_RATIO = re.compile(r" to (\d+)%")
_DISK_FULL_ANSWER = "SERVICE_NOT_AVAILABLE"


def check_disk_full(h: History, cfg: CheckerConfig) -> CheckResult:
    fills = [w for w in h.faults if w.op == "disk-fill"]
    if not fills:  # nothing filled a disk: no send had to be refused (coverage shows the path unreached)
        return CheckResult(name="disk-full", valid=True, definition=DISK_FULL, counts={"fills": 0},
                           reason="no disk-fill fault in the run: nothing to judge")
    if not h.has("sends"):
        return unknown("disk-full", DISK_FULL, "no sends history in the run")
    b = cfg.bounds
    detect_ms = b.D_c + b.slack(b.D_c)
    rows = [r.asDict() for r in h.sends.filter(F.col("type").isin("invoke", "ok", "fail", "info"))
            .select("op_id", "type", "mono_ms", "status", "broker_name").collect()]
    invoked = {r["op_id"]: r["mono_ms"] for r in rows if r["type"] == "invoke"}
    outcomes = [(invoked.get(r["op_id"], r["mono_ms"]), r) for r in rows if r["type"] != "invoke"]
    groups = {ident[0] for node in h.roles if (ident := broker_identity(node)) is not None and h.is_broker(node)}
    one_group = len(groups) <= 1
    counts: dict[str, Any] = {"fills": len(fills), "judged": 0, "refused_disk_full": 0, "accepted_while_full": 0,
                              "refused_otherwise": 0, "unknown_while_full": 0, "not_back": 0}
    examples: list[dict[str, Any]] = []
    windows = []
    for w in fills:
        masters = [ident[0] for t in w.targets if (ident := broker_identity(t)) is not None and ident[1] == 0]
        ratio = _fill_ratio(w)
        if not masters or ratio is None or ratio <= c.DISK_SPACE_WARNING_LEVEL_RATIO:
            continue  # a slave's disk, or a fill below the guard: nothing a producer sees
        counts["judged"] += 1
        group = masters[0]
        lo, hi = w.start_ms + detect_ms, w.end_ms
        windows.append({"fill": w.label, "ratio": ratio, "refusing_s": [s(h, lo), s(h, hi)]})
        mine = [(t, r) for t, r in outcomes if lo <= t <= hi and (r["broker_name"] in (None, group))]
        refused_here = 0
        for t, r in mine:
            kind = r["type"]
            if kind == "ok" and r["broker_name"] == group:
                counts["accepted_while_full"] += 1
                examples.append(_example("accepted while the disk was full", h, w, t, r))
            elif kind == "fail" and _DISK_FULL_ANSWER in (r["status"] or ""):
                counts["refused_disk_full"] += 1
                refused_here += 1
            elif kind == "fail":
                counts["refused_otherwise"] += 1
                examples.append(_example("refused with another answer", h, w, t, r))
            elif kind == "info" and one_group:
                counts["unknown_while_full"] += 1
                examples.append(_example("outcome left unknown while the disk was full", h, w, t, r))
        if mine and not refused_here:
            examples.append({"anomaly": "no send refused while the disk was full", "fill": w.label,
                             "window_s": [s(h, lo), s(h, hi)]})
            counts["not_refused"] = counts.get("not_refused", 0) + 1
        if w.recovered:
            after = [(t, r) for t, r in outcomes if t >= w.end_ms + detect_ms]
            back = any(r["type"] == "ok" and r["broker_name"] == group for _, r in after)
            if after and not back and any(r["broker_name"] in (None, group) for _, r in after):
                counts["not_back"] += 1
                examples.append({"anomaly": "sends never acknowledged again after the disk was freed",
                                 "fill": w.label, "freed_s": s(h, w.end_ms)})
    bad = (counts["accepted_while_full"] + counts["refused_otherwise"] + counts["unknown_while_full"]
           + counts["not_back"] + counts.get("not_refused", 0))
    result = CheckResult(name="disk-full", valid=not bad, definition=DISK_FULL, counts=counts,
                         examples=examples[: cfg.max_examples], measurements=windows)
    if not counts["judged"]:
        result.valid, result.reason = True, "no fill took a master past the disk guard's ratio: nothing to judge"
    elif bad:
        result.reason = examples[0].get("anomaly") if examples else "disk-full answers broken"
    return result


def _fill_ratio(w: FaultWindow) -> float | None:
    """The ratio a disk-fill asked for, from its journal line (`disk-fill broker-a-0 to 95%`)."""
    m = _RATIO.search(w.detail or "")
    return int(m.group(1)) / 100 if m else None


def _example(anomaly: str, h: History, w: FaultWindow, t: int, r: dict[str, Any]) -> dict[str, Any]:
    return {"anomaly": anomaly, "fill": w.label, "op_id": r["op_id"], "invoked_s": s(h, t), "outcome": r["type"],
            "status": r["status"], "broker_name": r["broker_name"]}
