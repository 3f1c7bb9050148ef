"""Reading a node's history files while it runs, and waiting on them, for tests of real processes."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from nodes.consumer.journal import read_journal


def deliveries(run_dir: Path, node: str = "consumer-0") -> list[dict]:
    """The node's `deliveries.jsonl` lines so far (a torn last line is left out)."""
    return read_journal(run_dir / node / "deliveries.jsonl")


def wait_until(what: str, budget_s: float, done: Callable[[], object]) -> None:
    """Poll `done` every half second; fail the test saying `what` did not happen within `budget_s`."""
    deadline = time.monotonic() + budget_s
    while time.monotonic() < deadline:
        if done():
            return
        time.sleep(0.5)
    pytest.fail(f"no {what} within {budget_s:.0f} s")
