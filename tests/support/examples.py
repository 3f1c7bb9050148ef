"""How many examples a property test tries: all of them in `./scripts/test --full`, a quarter in
the default run (which must stay a few minutes on two cores; the compiled-vs-Python twins alone
were a third of its unit-test time).

`--full` sets `MQLAB_TEST_FULL=1`; tests without their own count get the profile's (loaded in
tests/conftest.py): Hypothesis' 100, or 25."""

from __future__ import annotations

import os

FULL_ENV = "MQLAB_TEST_FULL"
DEFAULT_RUN_FRACTION = 4
MIN_EXAMPLES = 10


def full_run() -> bool:
    return os.environ.get(FULL_ENV) == "1"


def examples(full_count: int) -> int:
    """`full_count` in the full run; a quarter of it (at least 10) in the default run."""
    if full_run():
        return full_count
    return max(MIN_EXAMPLES, full_count // DEFAULT_RUN_FRACTION)
