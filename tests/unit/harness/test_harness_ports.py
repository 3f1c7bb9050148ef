"""Port allocation: below the ephemeral range, distinct, locked across processes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import harness
from harness.errors import HarnessError
from harness.ports import (
    EPHEMERAL_RANGE_DEFAULT,
    PortAllocator,
    candidate_range,
    ephemeral_range,
    is_bindable,
)


def test_ephemeral_range_is_read_from_proc_format(tmp_path):
    path = tmp_path / "range"
    path.write_text("40000\t60999\n")
    assert ephemeral_range(path) == (40000, 60999)
    path.write_text("garbage")
    assert ephemeral_range(path) == EPHEMERAL_RANGE_DEFAULT
    assert ephemeral_range(tmp_path / "missing") == EPHEMERAL_RANGE_DEFAULT


def test_candidates_lie_below_the_ephemeral_range():
    low, _ = ephemeral_range()
    ports = candidate_range()
    assert ports.stop == low and ports.start >= 1024 and len(ports) >= 1000
    assert candidate_range((32768, 60999)) == range(20000, 32768)
    assert candidate_range((20500, 60999)) == range(10500, 20500)  # widened downwards
    with pytest.raises(HarnessError, match="too few ports below it"):
        candidate_range((1500, 60999))


def test_allocated_ports_are_distinct_bindable_and_in_range():
    with PortAllocator() as alloc:
        ports = alloc.allocate(10) + alloc.allocate(5)
        assert len(set(ports)) == 15
        assert all(p in candidate_range() for p in ports)
        assert all(is_bindable(p) for p in ports)
        assert alloc.ports == sorted(ports)


def test_two_allocators_never_share_a_port():
    small = range(candidate_range().start, candidate_range().start + 40)
    with PortAllocator(ports=small, seed=1) as a, PortAllocator(ports=small, seed=1) as b:
        ours = a.allocate(10)
        theirs = b.allocate(10)  # same seed, same start: only the locks keep them apart
        assert not set(ours) & set(theirs)


def test_release_frees_the_locks():
    one = range(candidate_range().start + 100, candidate_range().start + 101)
    first = PortAllocator(ports=one)
    first.allocate(1)
    with pytest.raises(HarnessError, match="found only 0 of 1 free ports"):
        PortAllocator(ports=one).allocate(1)
    first.release()
    with PortAllocator(ports=one) as again:
        assert again.allocate(1) == [one.start]


def test_ports_in_use_are_skipped():
    pair = range(candidate_range().start + 200, candidate_range().start + 202)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", pair.start))
        busy.listen()
        with PortAllocator(ports=pair) as alloc:
            assert alloc.allocate(1) == [pair.start + 1]
            with pytest.raises(HarnessError, match="stop leftover clusters"):
                alloc.allocate(1)


def test_parallel_processes_get_disjoint_ports():
    code = ("import json, sys\n"
            "from harness.ports import PortAllocator\n"
            "a = PortAllocator()\n"
            "print(json.dumps(a.allocate(25)), flush=True)\n"
            "sys.stdin.read()\n")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             cwd=Path(harness.__file__).resolve().parents[1])
             for _ in range(4)]
    try:
        allocated = [json.loads(p.stdout.readline()) for p in procs]
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(10)
            p.stdout.close()
    flat = [port for ports in allocated for port in ports]
    assert len(flat) == len(set(flat)) == 100
