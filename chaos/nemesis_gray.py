"""The gray faults of `chaos.nemesis.NemesisRunner`: slow links, moved clocks, starved CPUs, full disks.

None of them stops a process or cuts a link: every node stays up and reachable, only worse. Each
start and its undo goes through the harness (`LocalCluster.add_toxic` / `remove_toxic`,
`clock_jump` / `clock_skew` / `clock_reset`, `starve` / `unstarve`, `fill_disk` / `free_disk`) and
journals, as JSON in its end line's detail, what is in force and the proof that it applied: the
toxic and its links, the clocks' offsets and rates, the cgroup's throttling and the node's measured
CPU share, the filesystem's usage before and after. A schedule replays them like any fault.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from chaos.nemesis_ops import (
    RECOVERY_OP,
    ClockFault,
    DiskFill,
    LinkToxic,
    Outcome,
    Partition,
    Starve,
    describe_op,
)
from chaos.nemesis_targets import ResolveError
from harness import HarnessError

if TYPE_CHECKING:
    from chaos.nemesis import ActiveFault, NemesisRunner

log = logging.getLogger(__name__)

GrayOp = LinkToxic | ClockFault | Starve | DiskFill

_DIRECTIONS = {"both": ("forward", "backward"), "forward": ("forward",), "backward": ("backward",)}


class GrayFaults:
    """Starts and undoes the gray ops of one `NemesisRunner` (whose lock serializes them)."""

    def __init__(self, runner: NemesisRunner) -> None:
        self._runner = runner

    def start(self, op: GrayOp, fault_id: str, targets: list[str], note: str) -> Outcome:
        if isinstance(op, LinkToxic):
            return self._link_toxic(op, fault_id, targets, note)
        act: Callable[[str], Any]
        cluster = self._runner.cluster
        if isinstance(op, ClockFault):
            def act(t: str) -> Any:
                done: dict[str, Any] = {}
                if op.jump_ms:
                    done["wall"] = cluster.clock_jump(t, op.jump_ms)
                if op.rate != 1.0:
                    done["rate"] = cluster.clock_skew(t, op.rate)
                return done
        elif isinstance(op, Starve):
            def act(t: str) -> Any:
                return cluster.starve(t, op.share, period_ms=op.period_ms)
        else:
            def act(t: str) -> Any:
                return cluster.fill_disk(t, op.ratio)
        return self._per_node(op.op, fault_id, targets, describe_op(op) + (f"; {note}" if note else ""), act,
                              symbol=op.target, opens=True)

    def recover(self, fault: ActiveFault) -> Outcome:
        cluster = self._runner.cluster
        if fault.op == "link-toxic":
            return self._remove_toxics(fault)
        undo: Callable[[str], Any] = {"clock": cluster.clock_reset, "starve": cluster.unstarve,
                                      "disk-fill": cluster.free_disk}[fault.op]
        op = RECOVERY_OP[fault.op]
        return self._per_node(op, fault.fault_id, list(fault.targets), f"{op} {', '.join(fault.targets)}", undo,
                              symbol=None, opens=False)

    # ---- link toxics ----------------------------------------------------------------------

    def _link_toxic(self, op: LinkToxic, fault_id: str, targets: list[str], note: str) -> Outcome:
        runner = self._runner
        if runner.cluster.links is None:
            return runner._failed(op.op, fault_id, targets, describe_op(op),
                                  "this cluster has no link proxies: start it with LocalCluster(..., links=True)")
        # the links a partition of the same kind would cut (its modes are not used)
        plan = Partition(op.kind, op.target, peer=op.peer, duration_ms=op.duration_ms)
        try:
            links, involved, what = runner._plan_partition(plan, targets[0] if targets else "")
        except ResolveError as exc:
            return runner._failed(op.op, fault_id, targets, describe_op(op), str(exc), op.target)
        detail = f"{describe_op(op)}: {what}, {len(links)} links"
        if note:
            detail += f"; {note}"
        added: list[tuple[str, str, Any]] = []
        # seeded: a replay draws the same jitter and losses
        rng = random.Random(runner.resolver.rng.getrandbits(64))
        with runner._journal.action(op.op, fault_id, involved, detail, symbol=op.target) as result:
            try:
                for src, dst in sorted(links):
                    added.append((src, dst, runner.cluster.add_toxic(src, dst, dict(op.toxic), direction=op.direction,
                                                                     rng=random.Random(rng.getrandbits(64)))))
                result["detail"] = json.dumps({"toxic": dict(op.toxic), "direction": op.direction,
                                               "links": [f"{a}->{b}" for a, b, _ in added], "what": what},
                                              sort_keys=True)
            except (HarnessError, KeyError, ValueError) as exc:
                result["error"] = str(exc)
        # even a half-applied toxic is tracked, so its removal clears whatever was added
        runner._open(fault_id, op.op, involved, detail, undo={"toxics": added})
        return Outcome(op.op, fault_id, tuple(involved), result["detail"], result["error"])

    def _remove_toxics(self, fault: ActiveFault) -> Outcome:
        runner = self._runner
        added = list((fault.undo or {}).get("toxics", ()))
        stats: dict[str, Any] = {}
        with runner._journal.action("remove-toxic", fault.fault_id, list(fault.targets),
                                    f"remove {len(added)} toxics") as result:
            errors = []
            for src, dst, toxic_id in added:
                try:
                    runner.cluster.remove_toxic(src, dst, toxic_id)
                except (HarnessError, KeyError) as exc:
                    errors.append(f"{src}->{dst}: {exc}")
            try:  # what each toxic did while it was on (the proof that it applied)
                link_stats = runner.cluster.link_stats()
                stats = {f"{src}->{dst}": (link_stats.get(f"{src}->{dst}", {}).get("toxics") or {}).get(toxic_id)
                         for src, dst, toxic_id in added}
            except HarnessError:
                pass
            result["detail"] = json.dumps({"removed": len(added) - len(errors), "applied": stats}, sort_keys=True,
                                          default=str)
            result["error"] = "; ".join(errors) or None
        return Outcome("remove-toxic", fault.fault_id, fault.targets, result["detail"], result["error"])

    # ---- per node -------------------------------------------------------------------------

    def _per_node(self, op: str, fault_id: str, targets: list[str], detail: str, act: Callable[[str], Any], *,
                  symbol: str | None, opens: bool) -> Outcome:
        """`act` on each target; the end line's detail is the JSON of what each returned."""
        runner = self._runner
        done: dict[str, Any] = {}
        errors = []
        with runner._journal.action(op, fault_id, targets, detail, symbol=symbol) as result:
            for t in targets:
                try:
                    done[t] = _jsonable(act(t))
                except (HarnessError, OSError, ValueError) as exc:
                    errors.append(f"{t}: {exc}")
            result["detail"] = json.dumps({"what": detail, "nodes": done}, sort_keys=True, default=str)
            result["error"] = "; ".join(errors) or None
        if opens and done:
            runner._open(fault_id, op, list(done), detail)
        return Outcome(op, fault_id, tuple(targets), result["detail"], result["error"])


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if callable(getattr(value, "as_dict", None)):  # the harness's proofs say what they are
        return _jsonable(value.as_dict())
    if hasattr(value, "__dict__"):
        return _jsonable(vars(value))
    return str(value)
