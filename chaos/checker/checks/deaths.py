"""Node deaths: every process that ended did so because a nemesis op or the harness ended it."""

from __future__ import annotations

from chaos.checker.config import CheckerConfig
from chaos.checker.loader import History
from chaos.checker.verdict import CheckResult, unknown
from harness.pids import describe_exit_code

DEATHS = (
    "Every node that stopped running was stopped by a nemesis op (kill, stop, power loss) or by the "
    "harness at the end of the run. A node that exited by itself - a crash on a broken invariant (exit 70), "
    "a signal nobody sent (SIGBUS from a write into a full disk, SIGSEGV), an exit on a client's mistake - is "
    "an unexplained death and fails the run, whatever fault was active at the time: a gray fault (a slow "
    "link, a skewed clock, a starved CPU, a full disk) must never take a node down.")


def check_deaths(h: History, cfg: CheckerConfig) -> CheckResult:
    if not h.has("processes"):
        return unknown("deaths", DEATHS, "no processes history in the run (processes/processes.jsonl)")
    deaths = [e for e in h.exits if not e.expected]
    examples = []
    for e in deaths:
        active = [w.label for w in h.faults if w.covers(e.t_ms)]
        examples.append({"node": e.node, "t_ms": e.t_ms - h.t0, "exit_code": e.exit_code,
                         "signal": e.signal, "how": describe_exit_code(e.exit_code),
                         "faults_active": active})
    by_node: dict[str, int] = {}
    for e in deaths:
        by_node[e.node] = by_node.get(e.node, 0) + 1
    counts = {"unexplained_deaths": len(deaths), "by_node": by_node,
              "signals": sorted({x["how"] for x in examples})}
    reason = None
    if deaths:
        first = examples[0]
        reason = f"{first['node']} {first['how']} at +{first['t_ms'] / 1000:.1f} s with no nemesis op ending it"
    return CheckResult(name="deaths", valid=not deaths, definition=DEATHS, counts=counts,
                       examples=examples[: cfg.max_examples], reason=reason)
