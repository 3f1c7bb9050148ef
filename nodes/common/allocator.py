"""A node's allocator settings: glibc's mmap and trim thresholds, fixed at start.

Owns one call, made by `python -m nodes` before the node serves. Why the values: see
`MALLOC_MMAP_THRESHOLD_BYTES` in `nodes.common.constants`. Measured on the pull benchmark
(docs/benchmark.md): the master's CPU per message at batch 1024 fell from 3.9-4.4 to 2.5-2.6 µs.

Only glibc has `mallopt`; elsewhere, or with `MQLAB_MALLOC_TUNING=0` in the environment, the
allocator is left alone. glibc's own `MALLOC_MMAP_THRESHOLD_` / `MALLOC_TRIM_THRESHOLD_`
environment variables, when set, win: the node does not override a choice made for it.
"""

from __future__ import annotations

import ctypes
import os

from nodes.common.constants import MALLOC_MMAP_THRESHOLD_BYTES, MALLOC_TRIM_THRESHOLD_BYTES

SWITCH_ENV = "MQLAB_MALLOC_TUNING"  # "0": leave glibc's defaults
GLIBC_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
# mallopt parameters (glibc malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3


def tune_allocator() -> str:
    """Set the thresholds if this is glibc and nobody chose otherwise; returns what was done."""
    if os.environ.get(SWITCH_ENV, "1") == "0":
        return f"left alone ({SWITCH_ENV}=0)"
    chosen = [name for name in GLIBC_ENV if name in os.environ]
    if chosen:
        return f"left alone ({', '.join(chosen)} set in the environment)"
    try:
        # the C library this process already runs on (no lookup: find_library would spawn ldconfig)
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):
        return "left alone (no glibc mallopt)"
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    # mallopt returns 1 on success; the mmap threshold first: setting it also stops glibc moving it
    if mallopt(M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD_BYTES) != 1 or mallopt(M_TRIM_THRESHOLD,
                                                                              MALLOC_TRIM_THRESHOLD_BYTES) != 1:
        return "left alone (mallopt refused the thresholds)"
    return (f"mmap threshold {MALLOC_MMAP_THRESHOLD_BYTES >> 20} MiB, "
            f"trim threshold {MALLOC_TRIM_THRESHOLD_BYTES >> 20} MiB")
