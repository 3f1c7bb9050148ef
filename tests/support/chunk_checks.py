"""The two replicated-chunk checks for tests: the compiled one and the Python walk it mirrors."""

from __future__ import annotations

from collections.abc import Callable

from nodes.broker import ha_check
from nodes.broker.ha_check import ChunkCheck
from support.twins import require_compiled

CHECKS = ("compiled", "python")


def compiled_check() -> Callable[[bytes, int, int], ChunkCheck]:
    """The compiled check as check_chunk runs it; fails (never skips) when it is not built."""
    compiled = require_compiled(ha_check.compiled_checker, "record check nodes.store._record_check")

    def check(data: bytes, phys_offset: int, segment_bytes: int) -> ChunkCheck:
        return ChunkCheck(*compiled(data, phys_offset, segment_bytes))

    return check


def checker(name: str) -> Callable[[bytes, int, int], ChunkCheck]:
    """One of CHECKS by name."""
    return compiled_check() if name == "compiled" else ha_check.check_chunk_python
