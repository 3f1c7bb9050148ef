"""Clock skew against RocketMQ's lock margin: which injected rates the lock rules can survive.

An orderly holder trusts its lock for L_c on its own clock (rate r_c: L_c / r_c real ms) from when
it asked; the broker lets another client take the queue L_b after its last grant on its own
clock (L_b / r_b real ms). The holder stops consuming in time only while

    L_c / r_c + batch + answer delay  <  L_b / r_b,   i.e.   r_c / r_b  >  (L_c + batch + delay) / L_b

RocketMQ's 30 s against 60 s tolerate a rate difference under 2x, with no room left at 2x. The
batch and the answer delay are bounded here by the judging slack of L_c, so the smallest ratio a
run's bounds call safe is (L_c + slack(L_c)) / L_b (0.6 at time scale 0.05). A schedule whose clock
faults go below it is told so before it runs, and `lock-exclusivity` reports the overlaps such a
window allows as expected-by-skew, by name, instead of failing or hiding them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from chaos.bounds import JUDGE_SLACK_MS, JUDGE_SLACK_RATIO, Bounds
from chaos.nemesis_ops import ClockFault

_BROKER_TARGETS = ("master", "slave", "group", "broker")
_RATE = re.compile(r"rate x([0-9.]+)")


def safe_ratio(L_c: int, L_b: int) -> float:
    """The smallest client-to-broker rate ratio under which a holder's lease ends before the broker's."""
    return (L_c + JUDGE_SLACK_MS + JUDGE_SLACK_RATIO * L_c) / L_b


def is_broker_target(target: str) -> bool:
    return target.startswith(_BROKER_TARGETS)


def client_broker_ratio(target: str, rate: float) -> float:
    """r_c / r_b when only `target`'s clock runs at `rate` (faults are staggered: one at a time)."""
    return 1.0 / rate if is_broker_target(target) else rate


def unsafe_skews(ops: Iterable[object], bounds: Bounds) -> list[str]:
    """One line per clock fault whose rate takes r_c / r_b below the safe ratio: the violation to expect."""
    floor = safe_ratio(bounds.L_c, bounds.L_b)
    out = []
    for op in ops:
        if not isinstance(op, ClockFault) or op.rate == 1.0:
            continue
        ratio = client_broker_ratio(op.target, op.rate)
        if ratio < floor:
            out.append(f"clock {op.target} at x{op.rate:g}: r_c / r_b = {ratio:.2f} is below "
                       f"(L_c + slack) / L_b = {floor:.2f}: a holder may consume past the broker's lease, so "
                       "lock-exclusivity may report overlaps expected by skew (RocketMQ allows under 2x)")
    return out


def window_ratio(detail: str | None, targets: Iterable[str]) -> float | None:
    """r_c / r_b of a clock fault window from its journal line (`clock master rate x0.5`), or None."""
    m = _RATE.search(detail or "")
    if not m:
        return None
    rate = float(m.group(1))
    targets = list(targets)
    broker = any(t.startswith("broker") for t in targets)
    return 1.0 / rate if broker else rate
