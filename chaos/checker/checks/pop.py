"""POP consumption (RocketMQ 5 clients): acks, redelivery and FIFO queues, from the brokers' own
`pop*` events and a SimpleConsumer's `client-ack` lines (docs/history.md).

A hand-out is one (entry, generation): the entry is where the message is (group, broker, queue
topic, queue id, queue offset), the generation names the receipt handle; a change of invisible
time gives the entry a new generation and makes the old handle stale. The events of one master
are in its own clock's order; deadlines are on its wall clock and are turned into the monotonic
timeline through the same line's two stamps.

A master journals a hand-out, a change or an ack before the state change is on disk, and answers
after: a kill in between loses it, and the restarted master acts on what it stored. Its hand-out
generations then start again below the lost ones (the counter is stored with every change), so a
hand-out or change whose generation a later line of the same master reuses never took effect; an
ack journalled within ACK_PERSIST_WINDOW_MS before its master's kill may not have.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.sql import functions as F

from chaos.checker.checks._common import rows, s
from chaos.checker.config import CheckerConfig
from chaos.checker.faults import FaultWindow
from chaos.checker.loader import History
from chaos.checker.schemas import CLIENT_ACK
from chaos.checker.verdict import CheckResult, unknown

POP_ACK = (
    "Nothing acknowledged comes back, and only a current receipt handle is acknowledged. Once a broker "
    "settled a hand-out with an ack (pop-ack ok), that entry is never handed out, revived or dead-lettered "
    "again; once a client was answered OK for an ack (client-ack), its message is not delivered to the "
    "group again from that entry. An ack is accepted only for the entry's current handle: not one whose "
    "invisible time had ended when the ack was sent (its deadline, plus the clock slack), not one a change "
    "of invisible time superseded, not one whose entry was revived.")
POP_REDELIVERY = (
    "An unacknowledged hand-out comes back no sooner than its invisible time and no later than the revive "
    "bound after it. A non-FIFO hand-out whose deadline passed is revived (copied to the group's pop retry "
    "topic, attempt + 1) or dead-lettered at its deadline or later, and by deadline + 2 revive intervals + "
    "slack (pushed out past any kill, pause or starvation of its master, plus a restart); an entry is never "
    "handed out again while its current handle is invisible; a hand-out of the group's max attempts is "
    "dead-lettered, never revived. A FIFO batch comes back in place at the queue's next receive.")
POP_FIFO = (
    "A FIFO queue serves one batch at a time, in queue order. When a FIFO pop hands a batch out of a queue, "
    "every message handed out of that queue before must be settled (acked or dead-lettered) or visible "
    "again (its invisible time over), and the batch starts at the lowest of them still unsettled: a "
    "message never goes out while an earlier one of its queue waits for its ack or its redelivery.")

# one master's lines of one millisecond: settlements before new hand-outs
_RANK = {"pop-ack": 0, "pop-dlq": 1, "pop-revive": 2, "pop-change-invisible": 3, "pop": 4, CLIENT_ACK: 5}
# faults of a master that delay its revive passes (a wall-clock step moves the deadlines it compares)
_MASTER_DELAY_OPS = ("kill", "pause", "stop", "starve", "disk-fill", "clock")
# a master back from a kill loads its store and pop state before its first revive pass (ms)
RESTART_ALLOWANCE_MS = 15_000
# an ack journalled this long before its master was killed may not have reached the disk (ms)
ACK_PERSIST_WINDOW_MS = 1_000
Entry = tuple[str, str, str, int, int]  # group, broker_name, queue_topic, queue_id, queue_offset


@dataclass
class _Handout:
    generation: int
    msg_id: str | None
    deadline_mono_ms: float
    fifo: bool
    attempt: int | None
    node: str
    popped_mono_ms: int


@dataclass
class _EntryState:
    current: _Handout | None = None
    # the hand-out's earlier generations (before changes of its invisible time), oldest first
    earlier: list[_Handout] = field(default_factory=list)
    # generation -> (its deadline on the monotonic timeline, when it stopped being current and how)
    generations: dict[int, tuple[float, int | None, str]] = field(default_factory=dict)
    settled_mono_ms: int | None = None
    settled_msg_id: str | None = None


def _entry(r: dict[str, Any]) -> Entry:
    return (r["group"], r["broker_name"], r["queue_topic"] or r["topic"], int(r["queue_id"]), int(r["queue_offset"]))


def _to_mono(r: dict[str, Any], wall_ms: int | None) -> float:
    """A wall-clock time of the line's process on the monotonic timeline (its own two stamps)."""
    if wall_ms is None or r["wall_ms"] is None:
        return float("inf")
    return wall_ms - r["wall_ms"] + r["mono_ms"]


def _timeline(h: History) -> list[dict[str, Any]]:
    got = h.pop_lines
    # one master's lines of one millisecond in the order it drew their generations (a FIFO batch's
    # hand-outs are drawn in queue order)
    return sorted(got, key=lambda r: (r["mono_ms"], _RANK[r["event"]], r["node"] or "",
                                      r["new_generation"] or r["generation"] or 0, r["queue_offset"]))


def _example(h: History, r: dict[str, Any], what: str, **extra: Any) -> dict[str, Any]:
    return {"what": what, "t_s": s(h, r["mono_ms"]), "event": r["event"], "node": r["node"], "group": r["group"],
            "queue": f"{r['queue_topic'] or r['topic']}/{r['broker_name']}/{r['queue_id']}",
            "queue_offset": r["queue_offset"], "msg_id": r["msg_id"], "client_id": r["client_id"], **extra}


@dataclass
class _Replay:
    """One pass over the POP timeline: every entry's hand-outs, settlements and revivals, and what broke."""

    h: History
    cfg: CheckerConfig
    entries: dict[Entry, _EntryState] = field(default_factory=dict)
    found: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    max_generation: dict[str, int] = field(default_factory=dict)  # master node -> highest generation drawn
    _kills: dict[str, list[FaultWindow]] = field(default_factory=dict)  # master node -> its kill windows

    def flag(self, kind: str, example: dict[str, Any]) -> None:
        self.found.setdefault(kind, []).append(example)

    def tally(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1

    def run(self, timeline: Iterable[dict[str, Any]]) -> _Replay:
        slack = self.cfg.clock_slack_ms
        for r in timeline:
            st = self.entries.setdefault(_entry(r), _EntryState())
            drawn = r["generation"] if r["event"] == "pop" and not r["repeat"] else (
                r["new_generation"] if r["event"] == "pop-change-invisible" else None)
            if drawn is not None:
                self._drawn(r["node"], int(drawn))
            getattr(self, "_" + r["event"].replace("-", "_"))(r, st, slack)
        return self

    def _drawn(self, node: str, generation: int) -> None:
        """A generation drawn again after a restart: what was journalled from it on was lost."""
        if generation <= self.max_generation.get(node, -1):
            for st in self.entries.values():
                while st.current is not None and st.current.node == node and st.current.generation >= generation:
                    st.generations.pop(st.current.generation, None)
                    self.tally("lost_in_restarts")
                    st.current = st.earlier.pop() if st.earlier else None
                    if st.current is not None:
                        deadline, _, _ = st.generations.get(st.current.generation, (st.current.deadline_mono_ms,
                                                                                     None, ""))
                        st.generations[st.current.generation] = (deadline, None, "")
        self.max_generation[node] = generation

    def _killed_soon(self, node: str, t: float) -> bool:
        if node not in self._kills:
            self._kills[node] = [w for w in _master_windows(self.h, node) if w.op == "kill"]
        return any(w.start_ms >= t - self.cfg.clock_slack_ms and w.start_ms <= t + ACK_PERSIST_WINDOW_MS
                   for w in self._kills[node])

    def _pop(self, r: dict[str, Any], st: _EntryState, slack: int) -> None:
        if r["repeat"]:  # a FIFO retry with the batch's attempt id: the same handle again
            return
        self.tally("hand_outs")
        t = r["mono_ms"]
        if st.settled_mono_ms is not None and t > st.settled_mono_ms and r["msg_id"] == st.settled_msg_id:
            self.flag("handed-out-after-ack", _example(self.h, r, "handed out again after its ack was settled",
                                                       acked_t_s=s(self.h, st.settled_mono_ms)))
        cur = st.current
        if cur is not None and cur.deadline_mono_ms > t + slack:
            self.flag("handed-out-while-invisible", _example(
                self.h, r, "handed out again while its earlier handle was still invisible",
                earlier_generation=cur.generation, earlier_deadline_t_s=s(self.h, cur.deadline_mono_ms)))
        max_attempts = self.cfg.pop_max_attempts
        if r["attempt"] is not None and r["attempt"] > max_attempts:
            self.flag("past-max-attempts", _example(self.h, r, f"delivery attempt {r['attempt']} of a group with "
                                                               f"{max_attempts} attempts", attempt=r["attempt"]))
        deadline = _to_mono(r, r["deadline_wall_ms"])
        st.earlier = []
        st.current = _Handout(int(r["generation"]), r["msg_id"], deadline, bool(r["fifo"]), r["attempt"],
                              r["node"], t)
        st.generations[int(r["generation"])] = (deadline, None, "")

    def _pop_change_invisible(self, r: dict[str, Any], st: _EntryState, slack: int) -> None:
        self._end_generation(st, int(r["generation"]), r["mono_ms"], "superseded")
        new = r["new_generation"]
        if new is None:
            return
        new_deadline = _to_mono(r, r["deadline_wall_ms"])
        st.generations[int(new)] = (new_deadline, None, "")
        if st.current is not None:
            st.earlier.append(replace(st.current))
            st.current.generation, st.current.deadline_mono_ms = int(new), new_deadline

    def _pop_ack(self, r: dict[str, Any], st: _EntryState, slack: int) -> None:
        if r["status"] != "ok":
            return
        self.tally("acks_settled")
        t = r["mono_ms"]
        handle = int(r["handle_generation"] if r["handle_generation"] is not None else r["generation"])
        self._judge_handle(r, st, handle, t, _to_mono(r, r["handle_deadline_wall_ms"])
                           if r["handle_deadline_wall_ms"] is not None else None, "accepted by the broker")
        if self._killed_soon(r["node"], t):
            # perhaps never on disk: the restarted master may hand it out, revive or dead-letter it
            self.tally("acks_at_kill")
            st.current = None
            return
        if st.settled_mono_ms is None:
            st.settled_mono_ms = t
            st.settled_msg_id = st.current.msg_id if st.current is not None else r["msg_id"]
        self._end_generation(st, handle, t, "settled")
        st.current = None

    def _client_ack(self, r: dict[str, Any], st: _EntryState, slack: int) -> None:
        """A SimpleConsumer's ack as the client sent it and was answered: the handle it named is its own."""
        if r["status"] != "ok" or r["generation"] is None:
            return
        self.tally("client_acks_ok")
        sent = r["sent_mono_ms"] if r["sent_mono_ms"] is not None else r["mono_ms"]
        deadline = _to_mono(r, r["deadline_wall_ms"]) if r["deadline_wall_ms"] is not None else None
        self._judge_handle(r, st, int(r["generation"]), sent, deadline, "answered OK to the client")
        if st.settled_mono_ms is None or r["mono_ms"] < st.settled_mono_ms:
            # the client's answer is the promise: nothing of this entry may come back after it
            st.settled_mono_ms = r["mono_ms"]
            st.settled_msg_id = r["msg_id"] or st.settled_msg_id

    @staticmethod
    def _end_generation(st: _EntryState, generation: int, t: int, how: str) -> None:
        deadline, ended, _ = st.generations.get(generation, (float("inf"), None, ""))
        if ended is None:
            st.generations[generation] = (deadline, t, how)

    def _judge_handle(self, r: dict[str, Any], st: _EntryState, handle: int, sent_ms: float,
                      deadline_mono_ms: float | None, how: str) -> None:
        slack = self.cfg.clock_slack_ms
        known = st.generations.get(handle)
        deadline = deadline_mono_ms if deadline_mono_ms is not None else (known[0] if known else None)
        if deadline is not None and sent_ms > deadline + slack:
            self.flag("stale-handle-acked", _example(
                self.h, r, f"an ack of an expired handle {how}", handle_generation=handle,
                sent_after_deadline_ms=round(sent_ms - deadline)))
        elif known is not None and known[1] is not None and known[1] < sent_ms - slack:
            self.flag("stale-handle-acked", _example(
                self.h, r, f"an ack of a {known[2]} handle {how}", handle_generation=handle,
                handle_ended_t_s=s(self.h, known[1])))

    def _pop_revive(self, r: dict[str, Any], st: _EntryState, slack: int) -> None:
        self.tally("revives")
        self._came_back(r, st, "revived")
        if (not r["in_place"] and not r["lost"] and r["attempt"] is not None
                and r["attempt"] >= self.cfg.pop_max_attempts):
            self.flag("past-max-attempts", _example(self.h, r, f"attempt {r['attempt']} revived instead of "
                                                               "dead-lettered", attempt=r["attempt"]))
        if r["generation"] is not None:
            self._end_generation(st, int(r["generation"]), r["mono_ms"], "revived")
        st.current = None

    def _pop_dlq(self, r: dict[str, Any], st: _EntryState, slack: int) -> None:
        self.tally("dead_lettered")
        self._came_back(r, st, "dead-lettered")
        st.current = None
        if st.settled_mono_ms is None:
            st.settled_mono_ms, st.settled_msg_id = r["mono_ms"], r["msg_id"]

    def _clock_moved(self, node: str, t: float) -> bool:
        return any(w.op == "clock" and w.hits(node) and w.start_ms <= t for w in self.h.faults)

    def _came_back(self, r: dict[str, Any], st: _EntryState, how: str) -> None:
        t = r["mono_ms"]
        if st.settled_mono_ms is not None and t > st.settled_mono_ms:
            self.flag(f"{how}-after-ack", _example(self.h, r, f"{how} after its ack was settled",
                                                   acked_t_s=s(self.h, st.settled_mono_ms)))
        if r.get("reason") == "client":
            return  # a client's forward to the DLQ may come at any time
        deadline = _to_mono(r, r["deadline_wall_ms"])
        if t < deadline - self.cfg.clock_slack_ms and not self._clock_moved(r["node"], t):
            self.flag(f"{how}-early", _example(self.h, r, f"{how} {round(deadline - t)} ms before its deadline"))


def _master_delays(h: History, node: str) -> list[FaultWindow]:
    return [w for w in _master_windows(h, node) if w.op in _MASTER_DELAY_OPS]


def _master_windows(h: History, node: str) -> list[FaultWindow]:
    """The faults of one master, its unexpected exits included (as kills)."""
    return [w for w in h.broker_fault_windows if w.hits(node)]


def _never_revived(h: History, cfg: CheckerConfig, replay: _Replay) -> None:
    """Non-FIFO hand-outs still current at the end whose deadline + bound lies inside the run."""
    bound = 2 * cfg.pop_revive_interval_ms + cfg.slack_ms
    downtime: dict[str, list[FaultWindow]] = {}
    for entry, st in replay.entries.items():
        cur = st.current
        if cur is None or cur.fifo or st.settled_mono_ms is not None:
            continue
        due = cur.deadline_mono_ms + bound
        if cur.node not in downtime:
            downtime[cur.node] = _master_delays(h, cur.node)  # in start order
        for w in downtime[cur.node]:
            if w.start_ms <= due and w.end_ms >= cur.deadline_mono_ms:
                due = max(due, w.end_ms + RESTART_ALLOWANCE_MS + bound)
        if due < h.t_end:
            group, broker, queue_topic, queue_id, queue_offset = entry
            replay.flag("never-revived", {
                "what": "its invisible time ended and it was neither acked, revived nor dead-lettered",
                "group": group, "queue": f"{queue_topic}/{broker}/{queue_id}", "queue_offset": queue_offset,
                "msg_id": cur.msg_id, "generation": cur.generation, "deadline_t_s": s(h, cur.deadline_mono_ms),
                "due_t_s": s(h, due), "run_end_t_s": s(h, h.t_end)})


def _redelivered_after_client_ack(h: History, cfg: CheckerConfig, replay: _Replay) -> None:
    """A delivery, to the same group, of the message an OK-answered client ack settled, from that entry."""
    if not h.has("deliveries"):
        return
    acked = {(e[0], e[1], e[2], e[3], e[4]): (st.settled_mono_ms, st.settled_msg_id)
             for e, st in replay.entries.items() if st.settled_mono_ms is not None}
    if not acked:
        return
    d = h.deliv.filter(F.col("queue_topic").isNotNull() & F.col("queue_offset").isNotNull()).select(
        "group", "broker_name", "queue_topic", "queue_id", "queue_offset", "msg_id", "t", "client_id", "node")
    for r in rows(d, cap=5_000_000):
        got = acked.get((r["group"], r["broker_name"], r["queue_topic"], int(r["queue_id"]), int(r["queue_offset"])))
        if got is not None and r["msg_id"] == got[1] and r["t"] > got[0] + cfg.clock_slack_ms:
            replay.flag("delivered-after-ack", {
                "what": "delivered again after its ack was settled", "group": r["group"],
                "queue": f"{r['queue_topic']}/{r['broker_name']}/{r['queue_id']}", "queue_offset": r["queue_offset"],
                "msg_id": r["msg_id"], "client_id": r["client_id"], "t_s": s(h, r["t"]), "acked_t_s": s(h, got[0])})


def _replayed(h: History, cfg: CheckerConfig) -> _Replay | None:
    if not h.has("events"):
        return None
    timeline = _timeline(h)
    if not any(r["event"] == "pop" for r in timeline):
        return None
    return _Replay(h, cfg).run(timeline)


def _result(name: str, definition: str, replay: _Replay, kinds: tuple[str, ...], cfg: CheckerConfig,
            counted: tuple[str, ...]) -> CheckResult:
    failed = {k: replay.found[k] for k in kinds if replay.found.get(k)}
    counts: dict[str, Any] = {k: replay.counts.get(k, 0) for k in counted}
    counts.update({k.replace("-", "_"): len(replay.found.get(k, [])) for k in kinds})
    examples = [ex for k in kinds for ex in replay.found.get(k, [])[:cfg.max_examples]]
    reason = "; ".join(f"{len(v)} {k}" for k, v in failed.items()) if failed else None
    return CheckResult(name=name, valid=not failed, definition=definition, counts=counts,
                       examples=examples[:cfg.max_examples], reason=reason)


_NO_POP = "no POP hand-outs in the run (no RocketMQ 5 consumer received anything)"


def check_pop_ack(h: History, cfg: CheckerConfig) -> CheckResult:
    replay = _replayed(h, cfg)
    if replay is None:
        return unknown("pop-ack", POP_ACK, _NO_POP)
    _redelivered_after_client_ack(h, cfg, replay)
    return _result("pop-ack", POP_ACK, replay, (
        "stale-handle-acked", "handed-out-after-ack", "revived-after-ack", "dead-lettered-after-ack",
        "delivered-after-ack"), cfg, ("hand_outs", "acks_settled", "client_acks_ok", "acks_at_kill"))


def check_pop_redelivery(h: History, cfg: CheckerConfig) -> CheckResult:
    replay = _replayed(h, cfg)
    if replay is None:
        return unknown("pop-redelivery", POP_REDELIVERY, _NO_POP)
    _never_revived(h, cfg, replay)
    return _result("pop-redelivery", POP_REDELIVERY, replay, (
        "never-revived", "revived-early", "dead-lettered-early", "handed-out-while-invisible", "past-max-attempts"),
        cfg, ("hand_outs", "revives", "dead_lettered", "lost_in_restarts"))


def check_pop_fifo(h: History, cfg: CheckerConfig) -> CheckResult:
    if not h.has("events"):
        return unknown("pop-fifo", POP_FIFO, "no events history in the run")
    timeline = [r for r in _timeline(h) if r["event"] != CLIENT_ACK]
    fifo_pops = [r for r in timeline if r["event"] == "pop" and r["fifo"] and not r["repeat"]]
    if not fifo_pops:
        return unknown("pop-fifo", POP_FIFO, "no FIFO hand-outs in the run (no FIFO group received anything)")
    replay = _Replay(h, cfg)
    batches = 0
    # per FIFO queue: queue offset -> (its current deadline (monotonic), generation, master) while unsettled
    open_: dict[tuple[str, str, str, int], dict[int, tuple[float, int, str]]] = {}
    last_batch: dict[tuple[str, str, str, int], tuple[Any, ...]] = {}
    max_generation: dict[str, int] = {}
    for r in timeline:
        queue = (r["group"], r["broker_name"], r["queue_topic"] or r["topic"], int(r["queue_id"]))
        offset = int(r["queue_offset"])
        held = open_.setdefault(queue, {})
        drawn = r["generation"] if r["event"] == "pop" and not r["repeat"] else (
            r["new_generation"] if r["event"] == "pop-change-invisible" else None)
        if drawn is not None:
            if int(drawn) <= max_generation.get(r["node"], -1):  # lost in a restart (module doc)
                for offsets in open_.values():
                    for o in [o for o, (_, g, n) in offsets.items() if n == r["node"] and g >= int(drawn)]:
                        del offsets[o]
            max_generation[r["node"]] = int(drawn)
        if r["event"] == "pop":
            if not r["fifo"] or r["repeat"]:
                continue
            batch = (r["pop_wall_ms"], r["client_id"], r["attempt_id"], r["node"])
            if last_batch.get(queue) != batch:  # the first hand-out of a new batch: judge the queue
                last_batch[queue] = batch
                batches += 1
                _judge_fifo_batch(h, cfg, replay, r, held)
            held[offset] = (_to_mono(r, r["deadline_wall_ms"]), int(r["generation"]), r["node"])
        elif r["event"] == "pop-change-invisible" and offset in held and r["new_generation"] is not None:
            held[offset] = (_to_mono(r, r["deadline_wall_ms"]), int(r["new_generation"]), r["node"])
        elif (r["event"] == "pop-ack" and r["status"] == "ok") or r["event"] == "pop-dlq":
            held.pop(offset, None)
    replay.counts["fifo_batches"] = batches
    replay.counts["fifo_queues"] = len(last_batch)
    return _result("pop-fifo", POP_FIFO, replay, ("two-batches-in-flight", "out-of-order"), cfg,
                   ("fifo_batches", "fifo_queues"))


def _judge_fifo_batch(h: History, cfg: CheckerConfig, replay: _Replay, r: dict[str, Any],
                      held: dict[int, tuple[float, int, str]]) -> None:
    if not held:
        return
    t = r["mono_ms"]
    live = sorted(o for o, (deadline, _, _) in held.items() if deadline > t + cfg.clock_slack_ms)
    if live:
        replay.flag("two-batches-in-flight", _example(
            h, r, "a FIFO batch handed out while an earlier one of its queue was still invisible",
            invisible_offsets=live[:10]))
    first_unsettled = min(held)
    if int(r["queue_offset"]) > first_unsettled:
        replay.flag("out-of-order", _example(
            h, r, f"offset {r['queue_offset']} handed out while offset {first_unsettled} of its queue was unsettled",
            first_unsettled_offset=first_unsettled))
