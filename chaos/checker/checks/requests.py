"""The broker held to the answers its consumers' links saw (links/requests.jsonl, docs/chaos.md)."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from pyspark.sql import functions as F

from chaos.checker.checks._common import collect_parts, s
from chaos.checker.config import CheckerConfig
from chaos.checker.loader import History
from chaos.checker.schemas import LOCK_HELD_ACTIONS
from chaos.checker.verdict import CheckResult, combine_parts, set_aside

REQUESTS = (
    "What the broker answered its consumers, as their link proxies journalled it, is what it did: "
    "(a) commits - an offset commit answered success (remoting UPDATE_CONSUMER_OFFSET, mqlab's "
    "UpdateConsumerOffset) is in the answering broker's offset history for that group and queue: a "
    "value of at least the committed offset was in force when the request reached the broker or was "
    "stored while it was there (a commit of the value already stored writes nothing; one overtaken by "
    "a later commit of the same client is dropped, RocketMQ keeps the last), unless an operator's "
    "reset of the queue falls within one client persist period P_c before it; (b) unlocks - after an "
    "unlock answered success, the broker does not still hold the lock for that client on those queues "
    "(a broker `lock` released for it while the request was there, its last grant went to someone "
    "else, or the broker restarted since: a started broker's lock table is empty; a grant or renewal "
    "after a lock request the client sent once the unlock was answered is that request's, not "
    "the unlock's); (c) acks - a RocketMQ 5 ack entry answered OK settled the entry its receipt handle "
    "names (a `pop-ack` status ok, or a `pop-dlq`, for that group and queue offset, no later than the "
    "answer; a repeated ack writes nothing, so the earlier settlement counts); (d) reported, never "
    "failed: requests forwarded and never answered (a link cut, a broker killed), by kind.")

_PART = {"offset-commit": "commits", "unlock": "unlocks", "ack": "acks"}


def check_requests(h: History, cfg: CheckerConfig) -> CheckResult:
    if not h.has("requests"):
        return set_aside("requests", REQUESTS, "no request journal in the run (links/requests.jsonl): it predates "
                         "the journal, or its consumers did not reach the brokers through link proxies")
    slack = cfg.clock_slack_ms
    r = h.requests.filter(F.col("event").isNotNull() & F.col("kind").isNotNull())
    broker_name = F.coalesce("broker_name", F.regexp_extract("dst", r"^(.+)-\d+$", 1))
    answers = r.filter(F.col("event") == "answer").withColumn("broker_name", broker_name)
    key = ["link", "conn", "request_id", "entry"]
    judged = answers.filter(F.col("ok") & F.col("kind").isin(*_PART))
    parts = {
        "by_kind": r.groupBy("event", "kind", F.coalesce("ok", F.lit(False)).alias("ok")).agg(
            F.count(F.lit(1)).alias("n")),
        "unanswered": r.filter((F.col("event") == "request") & ~F.coalesce("oneway", F.lit(False)))
        .join(answers.select(*key), key, "left_anti").groupBy("kind").agg(F.count(F.lit(1)).alias("n")),
        "answered": judged.select("kind", "dst", "group", "client_id", "topic", "broker_name", "queue_id", "offset",
                                  "handle_group", "queue_topic", "queue_offset", "generation", "message_id",
                                  "sent_mono_ms", "answered_mono_ms", "link", "conn", "request_id"),
        "offsets": h.broker_offsets.select("node", "group", "topic", "queue_id", "offset", "source", "t"),
        "locks": h.locks.filter(F.col("side") == "broker").select("node", "group", "topic", "broker_name", "queue_id",
                                                                  "client_id", "action", "t"),
        # a client's lock requests: one sent after its unlock was answered explains a grant after it
        "lock_requests": r.filter((F.col("event") == "request") & (F.col("kind") == "lock"))
        .withColumn("broker_name", broker_name)
        .select("dst", "group", "client_id", "topic", "broker_name", "queue_id", F.col("mono_ms").alias("t")),
        # a broker's start (once per start): its lock table begins empty, with no release journalled
        "starts": h.ev.filter(F.col("event") == "store-recovered").select("node", F.col("mono_ms").alias("t")),
        "settled": h.ev.filter(((F.col("event") == "pop-ack") & (F.col("status") == "ok"))
                               | (F.col("event") == "pop-dlq"))
        .select("event", "group", "queue_topic", "broker_name", "queue_id", "queue_offset",
                F.col("mono_ms").alias("t")),
    }
    got, _ = collect_parts(parts, cap=500_000)
    answered = defaultdict(list)
    for a in got["answered"]:
        answered[_PART[a["kind"]]].append(a)
    found: dict[str, list[dict[str, Any]]] = {
        "commits": _unheld_commits(answered["commits"], got["offsets"], slack, cfg.bounds.P_c),
        "unlocks": _held_after_unlock(answered["unlocks"], got["locks"], got["starts"], got["lock_requests"], slack),
        "acks": _unsettled_acks(answered["acks"], got["settled"], slack),
    }
    result: dict[str, bool | None] = {}
    skipped: dict[str, str] = {}
    for part, bad in found.items():
        judged_n = sum(1 for a in answered[part] if not a.get("_unjudgeable"))
        if not judged_n:
            result[part] = None
            skipped[part] = f"no {part[:-1]} answered success in the journal"
        else:
            result[part] = not bad
    counts: dict[str, Any] = {
        "requests": {x["kind"]: x["n"] for x in got["by_kind"] if x["event"] == "request"},
        "answers": {f"{x['kind']}/{'ok' if x['ok'] else 'refused'}": x["n"] for x in got["by_kind"]
                    if x["event"] == "answer"},
        "unanswered": {x["kind"]: x["n"] for x in got["unanswered"]},
        "judged": {part: len(v) for part, v in answered.items()},
        "violations": {part: len(bad) for part, bad in found.items()},
        "acks_unjudgeable": sum(1 for a in answered["acks"] if a.get("_unjudgeable")),
    }
    if not any(v is not None for v in result.values()):
        return set_aside("requests", REQUESTS, "the request journal holds no commit, unlock or ack answered success")
    examples = []
    for part, bad in found.items():
        for x in sorted(bad, key=lambda x: x["answered_mono_ms"] or 0)[: cfg.max_examples]:
            examples.append({"anomaly": _ANOMALY[part], "answered_s": s(h, x["answered_mono_ms"]),
                             "sent_s": s(h, x["sent_mono_ms"]),
                             **{k: v for k, v in x.items() if v is not None and not k.startswith("_")
                                and k not in ("answered_mono_ms", "sent_mono_ms")}})
    failed = [f"{counts['violations'][p]} {p}" for p, v in result.items() if v is False]
    return CheckResult("requests", combine_parts(result), REQUESTS, counts=counts, examples=examples[: cfg.max_examples],
                       parts=result, skipped=skipped,
                       reason=("answered success but not done: " + ", ".join(failed)) if failed else None)


_ANOMALY = {"commits": "commit answered success, not in the broker's offsets",
            "unlocks": "unlock answered success, lock still held",
            "acks": "ack answered OK, entry never settled"}


def _by(rows: Iterable[dict[str, Any]], *keys: str) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    out: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        out[tuple(row.get(k) for k in keys)].append(row)
    for group in out.values():
        group.sort(key=lambda x: x["t"])
    return out


def _unheld_commits(commits: list[dict[str, Any]], offsets: list[dict[str, Any]], slack: int,
                    persist_ms: int) -> list[dict[str, Any]]:
    """(a): the values in force over [sent - slack, answered + slack] on the answering broker."""
    stored = _by(offsets, "node", "group", "topic", "queue_id")
    times = {k: [e["t"] for e in v] for k, v in stored.items()}
    bad = []
    for a in commits:
        if a["offset"] is None or a["sent_mono_ms"] is None:
            a["_unjudgeable"] = True
            continue
        k = (a["dst"], a["group"], a["topic"], a["queue_id"])
        events, ts = stored.get(k, []), times.get(k, [])
        lo, hi = a["sent_mono_ms"] - slack, a["answered_mono_ms"] + slack
        before = bisect.bisect_left(ts, lo)
        values = [e["offset"] for e in events[before:bisect.bisect_right(ts, hi)]]
        if before:
            values.append(events[before - 1]["offset"])  # the value in force when it arrived
        if values and max(values) >= a["offset"]:
            continue
        reset_from = bisect.bisect_left(ts, lo - persist_ms)
        if any(e["source"] == "reset" for e in events[reset_from:bisect.bisect_right(ts, hi)]):
            continue
        bad.append({**a, "stored_in_window": values or None})
    return bad


def _held_after_unlock(unlocks: list[dict[str, Any]], locks: list[dict[str, Any]], starts: list[dict[str, Any]],
                       lock_requests: list[dict[str, Any]], slack: int) -> list[dict[str, Any]]:
    """(b): the broker's last lock event by the answer names this client holding, it released nothing, and
    the broker did not restart since that event (a restarted broker's table is empty).

    "By the answer" reaches `slack` past it, for the stamps of two processes; a lock request the
    client sent after the answer ends that reach (a consumer that unlocks a queue it did not
    hold and locks it again a few milliseconds later is granted by the second request)."""
    table = _by(locks, "node", "group", "topic", "broker_name", "queue_id")
    asked = _by(lock_requests, "dst", "group", "client_id", "topic", "broker_name", "queue_id")
    started: dict[Any, list[int]] = defaultdict(list)
    for e in starts:
        started[e["node"]].append(e["t"])
    bad = []
    for a in unlocks:
        if a["queue_id"] is None:
            a["_unjudgeable"] = True
            continue
        events = table.get((a["dst"], a["group"], a["topic"], a["broker_name"], a["queue_id"]), [])
        lo, hi = a["sent_mono_ms"] - slack, a["answered_mono_ms"] + slack
        relocked = [r["t"] for r in asked.get((a["dst"], a["group"], a["client_id"], a["topic"], a["broker_name"],
                                                a["queue_id"]), []) if r["t"] > a["answered_mono_ms"]]
        if relocked and relocked[0] <= hi:
            hi = relocked[0] - 1
        upto = [e for e in events if e["t"] <= hi]
        if not upto:
            continue
        last = upto[-1]
        still_held = last["action"] in LOCK_HELD_ACTIONS and last["client_id"] == a["client_id"]
        released = any(e["action"] == "released" and e["client_id"] == a["client_id"] and lo <= e["t"] <= hi
                       for e in upto)
        restarted = any(last["t"] < t <= hi for t in started.get(a["dst"], ()))
        if still_held and not released and not restarted:
            bad.append({**a, "broker_last_action": last["action"], "broker_last_mono_ms": last["t"]})
    return bad


def _unsettled_acks(acks: list[dict[str, Any]], settled: list[dict[str, Any]], slack: int) -> list[dict[str, Any]]:
    """(c): a pop-ack ok or pop-dlq of the handle's entry no later than the answer."""
    first: dict[tuple[Any, ...], int] = {}
    for e in settled:
        k = (e["group"], e["queue_topic"], e["broker_name"], e["queue_id"], e["queue_offset"])
        first[k] = min(first.get(k, e["t"]), e["t"])
    bad = []
    for a in acks:
        group = a["handle_group"] or a["group"]
        if a["queue_offset"] is None or a["queue_topic"] is None:
            a["_unjudgeable"] = True  # a handle of no shape we know: nothing names the entry
            continue
        t = first.get((group, a["queue_topic"], a["broker_name"], a["queue_id"], a["queue_offset"]))
        if t is None or t > a["answered_mono_ms"] + slack:
            bad.append({**a, "settled_mono_ms": t})
    return bad

