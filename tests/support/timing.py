"""The one slack rule for tests that wait on real processes, threads or RPCs.

A test that waits for something its timers make happen (a route to expire, a lease to end, a
rebalance) derives the product's own bound from the Timing the nodes run with, then allows
`slack_ms(bound_ms)` on top of it: a busy machine (two cores shared by several test runs, a
JVM starting next door) delays a process by seconds, not by a fixed few milliseconds, and it
delays long waits more than short ones. Slack only ever widens an upper bound; a lower bound
("not before the lease ends") is the product's bound itself, since load cannot make anything
early.

A test that must tell two causes apart (a channel close versus an expiry, a wake-up versus a
scan) does not do it by a clock: it makes the other cause impossible within the wait (timers
far longer than `within_s` of the awaited bound) or reads the cause from the node's own log.

MQLAB_TEST_SLACK_MS widens the fixed part on a machine that is slower still.
"""

from __future__ import annotations

import os

LOAD_SLACK_MS = int(os.environ.get("MQLAB_TEST_SLACK_MS", "5000"))  # scheduler delay of a loaded 2-core machine
LOAD_SLACK_RATIO = 0.5  # a long wait is starved in proportion: half its bound again


def slack_ms(bound_ms: int = 0) -> int:
    """What a busy machine may add to a wait whose product bound is `bound_ms`."""
    return LOAD_SLACK_MS + int(bound_ms * LOAD_SLACK_RATIO)


def within_ms(bound_ms: int = 0) -> int:
    """The ceiling a test holds a wait of product bound `bound_ms` to: the bound plus its slack."""
    return bound_ms + slack_ms(bound_ms)


def within_s(bound_ms: int = 0) -> float:
    """`within_ms` in seconds, for deadlines on time.monotonic()."""
    return within_ms(bound_ms) / 1000
