"""The runner that inflicts nemesis ops on a `LocalCluster`, tracks the faults it opened, and
journals every action.

The runner resolves an op's symbolic target (chaos.nemesis_targets) and performs it through
the harness; it never waits: `start()` inflicts, `recover()` undoes, `recover_all()` undoes
everything still open. Every action is journaled (chaos.nemesis_journal); a fault that reached
no node leaves nothing to recover.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos import nemesis_storage
from chaos.nemesis_gray import GrayFaults
from chaos.nemesis_journal import Clock, NemesisJournal
from chaos.nemesis_ops import (
    GRAY_OPS,
    RECOVERY_OP,
    ClockFault,
    Corrupt,
    DiskFill,
    Heal,
    Kill,
    LinkToxic,
    Op,
    Outcome,
    Partition,
    Pause,
    PowerLoss,
    Starve,
    Stop,
    describe_op,
)
from chaos.nemesis_targets import ResolveError, TargetResolver
from harness import HarnessError, LocalCluster, NodeState
from harness.netproxy import LinkMode, complete_grudge, isolate

log = logging.getLogger(__name__)

_OPEN = LinkMode.OPEN.value
_RESTARTABLE = (NodeState.NEW, NodeState.STOPPED, NodeState.EXITED, NodeState.FAILED)

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
    undo: Mapping[str, Any] = field(default_factory=dict, hash=False)  # what a gray fault's undo needs

    def label(self, now_ms: int) -> str:
        return f"{self.op} {','.join(self.targets)} ({(now_ms - self.started_mono_ms) / 1000:.1f} s)"


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
        self._journal = NemesisJournal(self.history_path, clock)
        self._act_lock = threading.RLock()
        self._state_lock = threading.Lock()
        self._active: dict[str, ActiveFault] = {}
        self._seq = 0
        self._gray = GrayFaults(self)

    def close(self) -> None:
        with self._act_lock:
            self._journal.close()

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
            if isinstance(op, PowerLoss | Corrupt):
                return self._storage(op, fault_id, targets, note)
            if isinstance(op, LinkToxic | ClockFault | Starve | DiskFill):
                return self._gray.start(op, fault_id, targets, note)
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
                if fault.op in GRAY_OPS:
                    return self._gray.recover(fault)
                return self._recover_nodes(fault)
            finally:
                with self._state_lock:
                    self._active.pop(fault_id, None)

    def recover_all(self) -> list[Outcome]:
        """Undo everything this runner started: free disks, reset clocks, feed starved CPUs and clear
        link toxics, resume what is paused, heal links, restart what was killed or stopped (in that
        order: restarted nodes find their peers awake, reachable and with room to write)."""
        outcomes: list[Outcome] = []
        with self._act_lock:
            order = {"disk-fill": 0, "clock": 0, "starve": 0, "link-toxic": 0, "pause": 1, "partition": 2, "kill": 3,
                     "stop": 3, "power-loss": 3}
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

    def _storage(self, op: PowerLoss | Corrupt, fault_id: str, targets: list[str], note: str) -> Outcome:
        """A power loss (SIGKILL, then the unsynced bytes dropped; restarted by its recovery) or a
        corruption (instant). The end line's detail is the JSON of what the files lost. A power
        loss of several nodes (a broker group: a rack) hits them all at once."""
        rng = random.Random(self.resolver.rng.getrandbits(64))  # seeded: the same bytes on a replay
        together = isinstance(op, PowerLoss) and len(targets) > 1
        if not together:
            targets = targets[:1]
        if isinstance(op, PowerLoss):
            pids = ", ".join(f"pid {self.cluster.node(t).pid} ({t})" for t in targets)
            detail = f"SIGKILL {pids}, then drop {'their' if together else 'its'} unsynced store bytes"
        else:
            detail = f"flip bytes in a sealed commitlog record of {targets[0]}"
        if note:
            detail += f"; {note}"
        with self._journal.action(op.op, fault_id, targets, detail, symbol=op.target) as result:
            try:
                if together:
                    done = nemesis_storage.lose_power_together(self.cluster, targets, rng)
                else:
                    act = nemesis_storage.lose_power if isinstance(op, PowerLoss) else nemesis_storage.corrupt
                    done = act(self.cluster, targets[0], rng)
                result["detail"] = json.dumps(done, sort_keys=True)
            except (HarnessError, OSError) as exc:
                result["error"] = str(exc)
        down = [t for t in targets if self.cluster.node(t).state in _RESTARTABLE]
        if isinstance(op, PowerLoss) and down:
            self._open(fault_id, op.op, down, detail)  # down (even if the rewrite failed): restart it later
        return Outcome(op.op, fault_id, tuple(targets), result["detail"], result["error"])

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
        with self._journal.action(op, fault_id, targets, detail, symbol=symbol) as result:
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
        with self._journal.action(op.op, fault_id, involved, detail, symbol=op.target) as result:
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
        elif op.kind == "from-namesrv":
            namesrvs = {n.id for n in self.cluster.spec.namesrv_nodes()}
            group = set(self.resolver.resolve(op.target))
            pairs, involved = complete_grudge([group, namesrvs]), sorted(group | namesrvs)
            what = f"cut {' '.join(sorted(group))} from the name servers"
        elif op.kind == "from-group":
            group = set(self.resolver.resolve(op.peer or "group"))
            pairs, involved = complete_grudge([{target}, group]), [target, *sorted(group)]
            what = f"cut {target} from {' '.join(sorted(group))}"
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
        with self._journal.action("heal", fault.fault_id, list(fault.targets), detail) as result:
            try:
                for src, dst in sorted(fault.links):
                    self.cluster.cut(src, dst, *restore.get((src, dst), (_OPEN, _OPEN)))
            except (HarnessError, KeyError) as exc:
                result["error"] = str(exc)
        return Outcome("heal", fault.fault_id, fault.targets, detail, result["error"])

    def _heal_all(self) -> Outcome:
        cut = self._cut_links() if self.cluster.links is not None else []
        detail = f"open every link ({len(cut)} cut: {', '.join(cut)})" if cut else "open every link (none cut)"
        with self._journal.action("heal", None, [], detail) as result:
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
              links: Mapping[tuple[str, str], LinkState] | None = None, *,
              undo: Mapping[str, Any] | None = None) -> None:
        with self._state_lock:
            self._active[fault_id] = ActiveFault(fault_id, op, tuple(targets), self.clock.monotonic_ms(), detail,
                                                 dict(links or {}), dict(undo or {}))

    def _failed(self, op: str, fault_id: str, targets: list[str], detail: str, error: str,
                symbol: str | None = None) -> Outcome:
        with self._journal.action(op, fault_id, targets, detail, symbol=symbol) as result:
            result["error"] = error
        return Outcome(op, fault_id, tuple(targets), detail, error)
