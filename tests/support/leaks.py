"""A compiled twin holds no reference and no memory it should have let go."""

from __future__ import annotations

import gc
import sys
import tracemalloc
from collections.abc import Callable, Sequence

ROUNDS = 1000
WARM_UP_ROUNDS = 50  # name caches, interned strings: allocations that happen once
GROWTH_BYTES_MAX = 64 * 1024  # one leaked object per call is well over this in ROUNDS calls


def assert_no_leaks(run: Callable[[int], object], watched: Sequence[object]) -> None:
    """`run(rounds)` calls the twin `rounds` times; after a warm-up, ROUNDS more must leave
    every `watched` object's reference count as it was and the traced memory within
    GROWTH_BYTES_MAX."""
    run(WARM_UP_ROUNDS)
    gc.collect()
    before = [sys.getrefcount(obj) for obj in watched]
    tracemalloc.start()
    try:
        start_bytes, _ = tracemalloc.get_traced_memory()
        run(ROUNDS)
        gc.collect()
        grown_bytes = tracemalloc.get_traced_memory()[0] - start_bytes
    finally:
        tracemalloc.stop()
    assert [sys.getrefcount(obj) for obj in watched] == before
    assert grown_bytes < GROWTH_BYTES_MAX, grown_bytes
