"""What every compiled twin's tests share: the twin itself (a missing one fails, never skips)
and a fresh interpreter run with or without the twin's pure-Python switch."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import TypeVar

import pytest

COMPILED_MISSING_HINT = "run ./scripts/bootstrap.sh (needs gcc)"
F = TypeVar("F")


def require_compiled(load: Callable[[], F], what: str) -> F:
    """`load()`, the compiled twin `what` (e.g. "record check nodes.store._record_check"); a
    twin that was not built fails the test: a skipped test would count as passing."""
    try:
        return load()
    except ImportError as exc:
        pytest.fail(f"the compiled {what} is missing ({exc}): {COMPILED_MISSING_HINT}")


def run_switched(switch_env: str, value: str | None, code: str, stdin: str = "") -> list[str]:
    """The lines `python -c code` prints with `switch_env` set to `value` (None: unset), so
    the module reads its switch at import as a node would."""
    environ = {k: v for k, v in os.environ.items() if k != switch_env}
    if value is not None:
        environ[switch_env] = value
    done = subprocess.run([sys.executable, "-c", code], input=stdin, env=environ, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()
