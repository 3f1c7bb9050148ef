"""Reading a node's history files while it runs, and waiting on them, for tests of real processes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from nodes.consumer.journal import read_journal
from support.cluster_rpc import wait_for


def deliveries(run_dir: Path, node: str = "consumer-0") -> list[dict]:
    """The node's `deliveries.jsonl` lines so far (a torn last line is left out)."""
    return read_journal(run_dir / node / "deliveries.jsonl")


JOURNAL_POLL_S = 0.5  # each look reads the files again: a node's history changes at its own pace


def wait_until(what: str, budget_s: float, done: Callable[[], object]) -> None:
    """`wait_for(done)` every half second: fail the test saying `what` did not happen within
    `budget_s` (and what `done` last returned or raised: a file read while being written)."""
    wait_for(done, budget_s, what, interval_s=JOURNAL_POLL_S)
