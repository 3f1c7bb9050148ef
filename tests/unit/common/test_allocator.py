"""A node fixes glibc's mmap threshold at start, so ~1 MiB buffers come from the reused heap."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Allocates and frees a 2 MiB buffer and reports how many blocks glibc holds as separate mmaps
# while it lives (mallinfo2's hblks): 1 with glibc's defaults, 0 once the threshold is above it.
PROBE = """
import ctypes, json, sys
from nodes.common.allocator import tune_allocator
done = tune_allocator() if sys.argv[1] == "tune" else "not asked"
class Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Mallinfo2
before = libc.mallinfo2().hblks
buf = bytearray(2 * 1024 * 1024)
during = libc.mallinfo2().hblks
print(json.dumps({"done": done, "mmapped": during - before}))
"""


def probe(mode: str, **env: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", **env}, timeout=60)
    return json.loads(out.stdout)


@pytest.fixture(autouse=True)
def _glibc_only():
    if not sys.platform.startswith("linux"):
        pytest.fail("this test needs Linux with glibc (the nodes' allocator settings are glibc's)")


def test_a_tuned_process_takes_a_two_mib_buffer_from_the_heap_and_an_untuned_one_maps_it():
    assert probe("plain")["mmapped"] == 1
    tuned = probe("tune")
    assert tuned == {"done": "mmap threshold 32 MiB, trim threshold 256 MiB", "mmapped": 0}


def test_the_switch_and_glibcs_own_variables_leave_the_allocator_alone():
    assert probe("tune", MQLAB_MALLOC_TUNING="0") == {"done": "left alone (MQLAB_MALLOC_TUNING=0)", "mmapped": 1}
    chosen = probe("tune", MALLOC_MMAP_THRESHOLD_="131072")
    assert chosen == {"done": "left alone (MALLOC_MMAP_THRESHOLD_ set in the environment)", "mmapped": 1}

