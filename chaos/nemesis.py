"""Nemeses as data, and the runner that inflicts them on a `LocalCluster` and records every action.

An op is a frozen dataclass naming a symbolic target; the runner resolves it (with a seeded
`random.Random`, so a seed picks the same nodes) and performs it through the harness:

    Kill("lock-holder:3", restart_after_ms=...)   SIGKILL, later a restart from the same store
    Stop("master", restart_after_ms=...)           SIGTERM (graceful), later a restart
    Pause("slave", duration_ms=...)                SIGSTOP, later SIGCONT
    Partition("isolate", "master", mode="DROP")    cut links (needs LocalCluster(links=True)), later heal
    Heal()                                         every link OPEN again, every partition closed

Targets: "master" / "slave" (of the first broker group; "master:<broker_name>" for another),
"random-consumer" (a running one), "all-consumers", "lock-holder" (the consumer holding the
master's lock on a random locked queue of the runner's topic), "lock-holder:<queue_id>" (or
"lock-holder:<broker_name>:<queue_id>"), or a node id. Durations belong to the op (a schedule
derives them from `chaos.bounds`); the runner never waits: `start()` inflicts, `recover()` undoes.

Every action is two flushed lines of `<run_dir>/nemesis/nemesis.jsonl` (the contract in
`chaos.checker.schemas`): phase `start` before the harness call, phase `end` after it returns,
both with the resolved `targets`, the exact action in `detail`, the `fault_id` a fault shares with
its recovery, and `error` (also appended to `detail`) when it failed; a fault that reached no node
leaves nothing to recover.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Protocol

from harness import HarnessError, LocalCluster, NodeState
from harness.netproxy import LinkMode, complete_grudge, isolate
from nodes.common import constants as c

log = logging.getLogger(__name__)

NEMESIS_NODE = "nemesis"
PARTITION_KINDS = ("isolate", "halves", "master-slave", "consumer-master", "one-way")
LINK_MODES = (LinkMode.DROP.value, LinkMode.REJECT.value)
RECOVERY_OP = {"kill": "restart", "stop": "restart", "pause": "resume", "partition": "heal"}
_OPEN = LinkMode.OPEN.value
_RESTARTABLE = (NodeState.NEW, NodeState.STOPPED, NodeState.EXITED, NodeState.FAILED)


class Clock(Protocol):
    def monotonic_ms(self) -> int: ...
    def wall_ms(self) -> int: ...


def nemesis_history_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / "nemesis" / "nemesis.jsonl"


# ---- ops ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kill:
    """SIGKILL the target's process group; restart it (same port, same store) `restart_after_ms` later."""

    op: ClassVar[str] = "kill"
    target: str = "random-consumer"
    restart_after_ms: int | None = None  # None: down until recover_all

    @property
    def duration_ms(self) -> int | None:
        return self.restart_after_ms


@dataclass(frozen=True)
class Stop:
    """SIGTERM (graceful: a consumer unlocks and persists), SIGKILL after `grace_ms`; restart later."""

    op: ClassVar[str] = "stop"
    target: str = "random-consumer"
    restart_after_ms: int | None = None
    grace_ms: int | None = None  # None: the harness's stop grace

    @property
    def duration_ms(self) -> int | None:
        return self.restart_after_ms


@dataclass(frozen=True)
class Pause:
    """SIGSTOP the target's process group; SIGCONT `duration_ms` later."""

    op: ClassVar[str] = "pause"
    target: str = "random-consumer"
    duration_ms: int | None = None


@dataclass(frozen=True)
class Partition:
    """Cut links; heal them `duration_ms` later.

    kind: `isolate` the target from everyone; `halves` every node shuffled into two halves;
    `master-slave` the target (a master) from `peer` (its slave); `consumer-master` the target
    (a consumer) from `peer` (the master) only; `one-way` the target's bytes to `peer` (the
    master) dropped, the other direction open. mode: DROP (silent) or REJECT (connections reset).
    """

    op: ClassVar[str] = "partition"
    kind: str = "isolate"
    target: str = "master"
    peer: str | None = None
    mode: str = LinkMode.DROP.value
    duration_ms: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in PARTITION_KINDS:
            raise ValueError(f"partition kind must be one of {PARTITION_KINDS}, got {self.kind!r}")
        if self.mode not in LINK_MODES:
            raise ValueError(f"partition mode must be one of {LINK_MODES}, got {self.mode!r}")


@dataclass(frozen=True)
class Heal:
    """Every link OPEN again; closes every partition fault."""

    op: ClassVar[str] = "heal"
    target: str = "all-links"

    @property
    def duration_ms(self) -> int | None:
        return None


Op = Kill | Stop | Pause | Partition | Heal
OP_TYPES: dict[str, type[Kill | Stop | Pause | Partition | Heal]] = {
    t.op: t for t in (Kill, Stop, Pause, Partition, Heal)}


def op_to_dict(op: Op) -> dict[str, Any]:
    """`{"op": "kill", "target": "master", "params": {"restart_after_ms": 1500}}`."""
    return {"op": op.op, "target": op.target,
            "params": {f.name: getattr(op, f.name) for f in fields(op) if f.name != "target"}}


def op_from_dict(data: Mapping[str, Any]) -> Op:
    cls = OP_TYPES.get(str(data.get("op")))
    if cls is None:
        raise ValueError(f"unknown nemesis op {data.get('op')!r}; known: {', '.join(OP_TYPES)}")
    return cls(target=data["target"], **dict(data.get("params") or {}))


def describe_op(op: Op) -> str:
    """One short line: `kill master`, `partition consumer-master lock-holder DROP`."""
    if isinstance(op, Partition):
        return f"partition {op.kind} {op.target}{f'->{op.peer}' if op.peer else ''} {op.mode}"
    return f"{op.op} {op.target}"


# ---- state ----------------------------------------------------------------------------------

LinkState = tuple[str, str]  # (forward mode, backward mode) of one directed link


@dataclass(frozen=True)
class ActiveFault:
    """A fault inflicted and not yet undone."""

    fault_id: str
    op: str
    targets: tuple[str, ...]
    started_mono_ms: int
    detail: str
    links: Mapping[tuple[str, str], LinkState] = field(default_factory=dict, hash=False)

    def label(self, now_ms: int) -> str:
        return f"{self.op} {','.join(self.targets)} ({(now_ms - self.started_mono_ms) / 1000:.1f} s)"


@dataclass(frozen=True)
class Outcome:
    """What one action did: the fault it opened or closed, the nodes named, its error."""

    op: str
    fault_id: str | None
    targets: tuple[str, ...]
    detail: str
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class ResolveError(HarnessError):
    """A symbolic target names nothing that can be faulted right now."""


# ---- target resolution ------------------------------------------------------------------


def locked_queues(broker_details: Mapping[str, Any], topic: str, group: str | None = None,
                  broker_name: str | None = None) -> dict[tuple[str, int], str]:
    """(broker_name, queue_id) -> holder client id, for every live lease on `topic` in a master's
    Admin.Describe details (`queue_locks`: group -> [{topic, broker_name, queue_id, client_id, lease_left_ms}])."""
    held = {}
    for grp, entries in sorted((broker_details.get("queue_locks") or {}).items()):
        for e in entries:
            if ((group is None or grp == group) and e.get("topic") == topic and e.get("lease_left_ms", 0) > 0
                    and (broker_name is None or e.get("broker_name") == broker_name)):
                held[(str(e.get("broker_name")), int(e["queue_id"]))] = str(e["client_id"])
    return held


def consumer_locked_queues(consumer_details: Mapping[str, Any], topic: str) -> set[tuple[str, int]]:
    """(broker_name, queue_id) a consumer's Admin.Describe details show it holding locked."""
    return {(str(q.get("broker_name")), int(q["queue_id"]))
            for q in (consumer_details.get("consumer") or {}).get("queues", [])
            if q.get("topic") == topic and q.get("locked") and not q.get("dropped")}


class TargetResolver:
    """Turns a symbolic target into node ids of `cluster`, drawing from `rng` only where it must choose.

    `note` holds what the last resolution found (e.g. which queue's holder), for the history.
    """

    def __init__(self, cluster: LocalCluster, rng: random.Random, *, topic: str | None = None,
                 group: str | None = None, describe_timeout_ms: int | None = None) -> None:
        self.cluster = cluster
        self.rng = rng
        self.topic = topic
        self.group = group
        # Admin calls are control plane (never faulted); a paused node simply does not answer in time.
        self.describe_timeout_ms = describe_timeout_ms or cluster.timing.rpc_timeout_ms
        self.note = ""

    def resolve(self, target: str) -> list[str]:
        self.note = ""
        name, _, arg = target.partition(":")
        if name in ("master", "slave"):
            return [self.broker(name, arg or None)]
        if name == "random-consumer":
            return [self.rng.choice(self._consumers(running=True))]
        if name == "all-consumers":
            return self._consumers(running=False)
        if name == "lock-holder":
            return [self._lock_holder(arg)]
        if target in {p.node_id for p in self.cluster.nodes()}:
            return [target]
        raise ResolveError(f"unknown target {target!r}: use master, slave, random-consumer, all-consumers, "
                           "lock-holder[:<queue_id>] or a node id")

    def broker(self, role: str, broker_name: str | None = None) -> str:
        brokers = self.cluster.spec.broker_nodes()
        name = broker_name or (brokers[0].broker_name if brokers else None)
        for n in brokers:
            if n.broker_name == name and (n.broker_id == c.MASTER_ID) == (role == "master"):
                return n.id
        raise ResolveError(f"no {role} of broker group {name!r} in this cluster")

    def _consumers(self, *, running: bool) -> list[str]:
        ids = sorted(p.node_id for p in self.cluster.nodes("consumer")
                     if not running or p.state is NodeState.RUNNING)
        if not ids:
            raise ResolveError("no running consumer to fault" if running else "the cluster has no consumers")
        return ids

    def _lock_holder(self, arg: str) -> str:
        """The master's lock table is the authority; the consumers' own view is the fallback (the
        master may be down or paused). A bare `lock-holder` draws one of the locked queues."""
        if self.topic is None:
            raise ResolveError("lock-holder targets need the runner's topic")
        broker_name, _, queue = arg.rpartition(":")
        try:
            queue_id = int(queue) if queue else None
        except ValueError:
            raise ResolveError(f"lock-holder:{arg}: expected lock-holder[:<broker_name>]:<queue_id>") from None
        master = self.broker("master", broker_name or None)
        by_client: dict[str, str] = {}
        own: dict[tuple[str, int], set[str]] = {}
        for proc in self.cluster.nodes("consumer"):
            if proc.state is not NodeState.RUNNING:
                continue
            with contextlib.suppress(HarnessError):
                details = proc.describe(self.describe_timeout_ms).get("details", {})
                by_client[str(details.get("client_id"))] = proc.node_id
                for q in consumer_locked_queues(details, self.topic):
                    own.setdefault(q, set()).add(proc.node_id)
        holders: dict[tuple[str, int], str] = {}
        with contextlib.suppress(HarnessError):
            master_details = self.cluster.node(master).describe(self.describe_timeout_ms).get("details", {})
            holders = {q: by_client[cid] for q, cid in locked_queues(
                master_details, self.topic, self.group, broker_name or None).items() if cid in by_client}
        source = "the master's lock table"
        if not holders:
            holders = {q: sorted(nodes)[0] for q, nodes in own.items() if not broker_name or q[0] == broker_name}
            source = "the consumers' own locks"
        if queue_id is not None:
            holders = {q: n for q, n in holders.items() if q[1] == queue_id}
        if not holders:
            which = f"queue {queue_id}" if queue_id is not None else "any queue"
            raise ResolveError(f"no running consumer holds a lock on {self.topic} {which}")
        q = self.rng.choice(sorted(holders)) if queue_id is None else min(holders)
        self.note = f"holder of {self.topic} {q[0]}:{q[1]} per {source}"
        return holders[q]


# ---- the runner ---------------------------------------------------------------------------


class NemesisRunner:
    """Inflicts ops on `cluster`, records them in `history_path`, and can undo all it started.

    Thread-safe: actions are serialized; `active_faults()` may be read from any thread.
    """

    def __init__(self, cluster: LocalCluster, history_path: str | Path, rng: random.Random, clock: Clock, *,
                 topic: str | None = None, group: str | None = None) -> None:
        self.cluster = cluster
        self.clock = clock
        self.resolver = TargetResolver(cluster, rng, topic=topic, group=group)
        self.history_path = Path(history_path)
        self.history_path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.history_path.open("a", encoding="utf-8")
        self._act_lock = threading.RLock()
        self._state_lock = threading.Lock()
        self._active: dict[str, ActiveFault] = {}
        self._seq = 0

    def close(self) -> None:
        with self._act_lock:
            self._file.close()

    def __enter__(self) -> NemesisRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def faults(self) -> list[ActiveFault]:
        """Every fault inflicted and not yet undone, oldest first."""
        with self._state_lock:
            return sorted(self._active.values(), key=lambda f: f.started_mono_ms)

    def active_faults(self) -> list[str]:
        """One label per active fault, for a progress display: `pause consumer-1 (2.4 s)`."""
        now_ms = self.clock.monotonic_ms()
        return [f.label(now_ms) for f in self.faults()]

    def start(self, op: Op) -> Outcome:
        """Inflict `op` now; `recover(outcome.fault_id)` undoes it."""
        with self._act_lock:
            if isinstance(op, Heal):
                return self._heal_all()
            self._seq += 1
            fault_id = f"f{self._seq}-{op.op}"
            try:
                halves = isinstance(op, Partition) and op.kind == "halves"  # draws its own sides
                targets = [] if halves else self.resolver.resolve(op.target)
            except ResolveError as exc:
                return self._failed(op.op, fault_id, [], f"resolve {op.target}", str(exc), op.target)
            note = self.resolver.note  # resolving a partition's peer below would overwrite it
            if isinstance(op, Partition):
                return self._partition(op, fault_id, targets, note)
            return self._signal_nodes(op, fault_id, targets, note)

    def recover(self, fault_id: str) -> Outcome | None:
        """Undo one fault (restart, resume, or open its links); None if it is not active."""
        with self._act_lock:
            with self._state_lock:
                fault = self._active.get(fault_id)
            if fault is None:
                return None
            try:
                if fault.op == "partition":
                    return self._heal_fault(fault)
                return self._recover_nodes(fault)
            finally:
                with self._state_lock:
                    self._active.pop(fault_id, None)

    def recover_all(self) -> list[Outcome]:
        """Undo everything this runner started: resume what is paused, heal links, restart what was
        killed or stopped (in that order: restarted nodes find their peers awake and reachable)."""
        outcomes: list[Outcome] = []
        with self._act_lock:
            order = {"pause": 0, "partition": 1, "kill": 2, "stop": 2}
            for fault in sorted(self.faults(), key=lambda f: (order[f.op], f.started_mono_ms)):
                try:
                    result = self.recover(fault.fault_id)
                except Exception as exc:  # keep undoing the rest; the end line carries the error
                    log.exception("recovering %s failed", fault.fault_id)
                    result = Outcome(RECOVERY_OP[fault.op], fault.fault_id, fault.targets, "", str(exc))
                if result is not None:
                    outcomes.append(result)
            if self.cluster.links is not None and self._cut_links():
                outcomes.append(self._heal_all())
        return outcomes

    # ---- actions ----------------------------------------------------------------------

    def _signal_nodes(self, op: Kill | Stop | Pause, fault_id: str, targets: list[str], note: str) -> Outcome:
        cluster = self.cluster
        signal_name = {"kill": "SIGKILL", "stop": "SIGTERM", "pause": "SIGSTOP"}[op.op]
        detail = ", ".join(f"{signal_name} pid {cluster.node(t).pid} ({t})" for t in targets)
        if note:
            detail += f"; {note}"
        grace_ms = op.grace_ms if isinstance(op, Stop) else None
        act: Callable[[str], object] = {"kill": cluster.kill, "pause": cluster.pause,
                                        "stop": lambda t: cluster.stop(t, grace_ms)}[op.op]
        done: list[str] = []
        outcome = self._per_node(op.op, fault_id, targets, detail, act, done, op.target)
        if done:
            self._open(fault_id, op.op, done, detail)
        return outcome

    def _recover_nodes(self, fault: ActiveFault) -> Outcome:
        """Restart (kill, stop) or SIGCONT (pause) the fault's nodes; a node another recovery already
        brought back, or a paused node killed since, is skipped and said so."""
        op = RECOVERY_OP[fault.op]
        wanted = _RESTARTABLE if op == "restart" else (NodeState.PAUSED,)
        todo = [t for t in fault.targets if self.cluster.node(t).state in wanted]
        parts = [f"skip {t} ({self.cluster.node(t).state.value})" for t in fault.targets if t not in todo]
        if op == "resume":
            parts = [f"SIGCONT pid {self.cluster.node(t).pid} ({t})" for t in todo] + parts
            act: Callable[[str], object] = self.cluster.resume
        else:
            parts = [f"restart {t}" for t in todo] + parts
            act = self.cluster.restart
        return self._per_node(op, fault.fault_id, list(fault.targets), ", ".join(parts), act, [], None, only=todo)

    def _per_node(self, op: str, fault_id: str, targets: list[str], detail: str, act: Callable[[str], object],
                  done: list[str], symbol: str | None, *, only: list[str] | None = None) -> Outcome:
        """Apply `act` to every target (or `only` those), one failing sparing none of the others."""
        errors = []
        with self._action(op, fault_id, targets, detail, symbol=symbol) as result:
            for t in targets if only is None else only:
                try:
                    act(t)
                    done.append(t)
                except HarnessError as exc:
                    errors.append(f"{t}: {exc}")
            if op == "restart" and done:
                result["detail"] += "; now " + ", ".join(f"pid {self.cluster.node(t).pid} ({t})" for t in done)
            result["error"] = "; ".join(errors) or None
        return Outcome(op, fault_id, tuple(targets), result["detail"], result["error"])

    def _partition(self, op: Partition, fault_id: str, targets: list[str], note: str) -> Outcome:
        if self.cluster.links is None:
            return self._failed(op.op, fault_id, targets, describe_op(op),
                                "this cluster has no link proxies: start it with LocalCluster(..., links=True)")
        try:
            links, involved, what = self._plan_partition(op, targets[0] if targets else "")
        except ResolveError as exc:
            return self._failed(op.op, fault_id, targets, describe_op(op), str(exc), op.target)
        detail = f"{what} {op.mode}: {len(links)} links ({', '.join(f'{a}->{b}' for a, b in sorted(links))})"
        if note:
            detail += f"; {note}"
        with self._action(op.op, fault_id, involved, detail, symbol=op.target) as result:
            merged = self._merged_links(self.faults(), extra=links)
            try:
                for src, dst in sorted(links):
                    self.cluster.cut(src, dst, *merged[(src, dst)])
            except (HarnessError, KeyError) as exc:
                result["error"] = str(exc)
        # Even a half-applied partition is tracked, so its heal restores whatever was cut.
        self._open(fault_id, op.op, involved, detail, links)
        return Outcome(op.op, fault_id, tuple(involved), detail, result["error"])

    def _plan_partition(self, op: Partition, target: str) -> tuple[dict[tuple[str, str], LinkState], list[str], str]:
        """The directed links to set (with their modes), the nodes involved, and a description."""
        existing = self._existing_links()
        if op.kind == "isolate":
            everyone = {n for link in existing for n in link}
            pairs, involved, what = isolate(target, everyone), [target], f"isolate {target}"
        elif op.kind == "halves":
            shuffled = sorted(p.node_id for p in self.cluster.nodes())
            self.resolver.rng.shuffle(shuffled)
            a, b = sorted(shuffled[:len(shuffled) // 2]), sorted(shuffled[len(shuffled) // 2:])
            pairs, involved = complete_grudge([set(a), set(b)]), sorted(shuffled)
            what = f"halves {' '.join(a)} | {' '.join(b)}"
        elif op.kind in ("master-slave", "consumer-master"):
            peer = self.resolver.resolve(op.peer or ("slave" if op.kind == "master-slave" else "master"))[0]
            pairs, involved, what = complete_grudge([{target}, {peer}]), [target, peer], f"cut {target}<->{peer}"
        else:  # one-way: the target's bytes never reach the peer; the peer's still reach the target
            peer = self.resolver.resolve(op.peer or "master")[0]
            links = {link: state for link, state in (((target, peer), (op.mode, _OPEN)),
                                                     ((peer, target), (_OPEN, op.mode))) if link in existing}
            if not links:
                raise ResolveError(f"no link between {target} and {peer}")
            return links, [target, peer], f"cut {target}->{peer} one way"
        links = {link: (op.mode, op.mode) for link in pairs if link in existing}
        if not links:
            raise ResolveError(f"{what}: no link proxies between these nodes")
        return links, involved, what

    def _heal_fault(self, fault: ActiveFault) -> Outcome:
        """Open this fault's links, except where another active partition still cuts them."""
        others = [f for f in self.faults() if f.fault_id != fault.fault_id and f.op == "partition"]
        restore = self._merged_links(others)
        kept = sorted(f"{a}->{b}" for a, b in fault.links if restore.get((a, b), (_OPEN, _OPEN)) != (_OPEN, _OPEN))
        detail = f"open {len(fault.links) - len(kept)} links"
        if kept:
            detail += f", {len(kept)} still cut by another partition ({', '.join(kept)})"
        with self._action("heal", fault.fault_id, list(fault.targets), detail) as result:
            try:
                for src, dst in sorted(fault.links):
                    self.cluster.cut(src, dst, *restore.get((src, dst), (_OPEN, _OPEN)))
            except (HarnessError, KeyError) as exc:
                result["error"] = str(exc)
        return Outcome("heal", fault.fault_id, fault.targets, detail, result["error"])

    def _heal_all(self) -> Outcome:
        cut = self._cut_links() if self.cluster.links is not None else []
        detail = f"open every link ({len(cut)} cut: {', '.join(cut)})" if cut else "open every link (none cut)"
        with self._action("heal", None, [], detail) as result:
            try:
                self.cluster.heal()
            except HarnessError as exc:
                result["error"] = str(exc)
        with self._state_lock:
            for fid in [fid for fid, f in self._active.items() if f.op == "partition"]:
                del self._active[fid]
        return Outcome("heal", None, (), detail, result["error"])

    # ---- bookkeeping ------------------------------------------------------------------

    def _existing_links(self) -> set[tuple[str, str]]:
        return {(src, dst) for src, _, dst in (name.partition("->") for name in self.cluster.link_stats())}

    def _cut_links(self) -> list[str]:
        return sorted(name for name, s in self.cluster.link_stats().items()
                      if s["forward"] != _OPEN or s["backward"] != _OPEN)

    @staticmethod
    def _merged_links(faults: list[ActiveFault], *, extra: Mapping[tuple[str, str], LinkState] | None = None,
                      ) -> dict[tuple[str, str], LinkState]:
        """Per link, what the partitions (oldest first, `extra` last) ask for together: a direction any
        of them cuts stays cut, by the most recent cut's mode."""
        layers = [f.links for f in sorted(faults, key=lambda f: f.started_mono_ms) if f.op == "partition"]
        merged: dict[tuple[str, str], LinkState] = {}
        for layer in [*layers, extra or {}]:
            for link, (fwd, back) in layer.items():
                old_fwd, old_back = merged.get(link, (_OPEN, _OPEN))
                merged[link] = (fwd if fwd != _OPEN else old_fwd, back if back != _OPEN else old_back)
        return merged

    def _open(self, fault_id: str, op: str, targets: list[str], detail: str,
              links: Mapping[tuple[str, str], LinkState] | None = None) -> None:
        with self._state_lock:
            self._active[fault_id] = ActiveFault(fault_id, op, tuple(targets), self.clock.monotonic_ms(), detail,
                                                 dict(links or {}))

    def _failed(self, op: str, fault_id: str, targets: list[str], detail: str, error: str,
                symbol: str | None = None) -> Outcome:
        with self._action(op, fault_id, targets, detail, symbol=symbol) as result:
            result["error"] = error
        return Outcome(op, fault_id, tuple(targets), detail, error)

    @contextlib.contextmanager
    def _action(self, op: str, fault_id: str | None, targets: list[str], detail: str, *,
                symbol: str | None = None) -> Iterator[dict[str, Any]]:
        """Write the start line, run the body, write the end line (also when the body raises)."""
        base: dict[str, Any] = {"op": op, "targets": list(targets), "fault_id": fault_id}
        if symbol is not None:
            base["symbol"] = symbol
        self._write({**base, "phase": "start", "detail": detail})
        result: dict[str, Any] = {"detail": detail, "error": None}
        try:
            yield result
        except BaseException as exc:
            result["error"] = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            end = {**base, "phase": "end", "detail": result["detail"]}
            if result["error"]:
                end.update(detail=f"{result['detail']}; error: {result['error']}", error=result["error"])
                log.warning("nemesis %s %s failed: %s", op, targets, result["error"])
            self._write(end)

    def _write(self, line: dict[str, Any]) -> None:
        row = {"node": NEMESIS_NODE, "wall_ms": self.clock.wall_ms(), "mono_ms": self.clock.monotonic_ms(),
               "event": "nemesis", **line}
        self._file.write(json.dumps(row, sort_keys=True) + "\n")
        self._file.flush()


def read_nemesis(path: str | Path) -> list[dict[str, Any]]:
    """The lines of a nemesis history (a torn last line is skipped)."""
    rows = []
    with contextlib.suppress(FileNotFoundError), Path(path).open(encoding="utf-8") as f:
        for line in f:
            with contextlib.suppress(ValueError):
                rows.append(json.loads(line))
    return rows
