"""The benchmark's admin calls: a broker that does not answer is a BenchError naming it (the CLI's
one-line error, exit 2), not an internal error with a gRPC repr."""

from __future__ import annotations

import socket

import pytest

from harness.bench.broker_admin import queue_max_offsets
from harness.bench.processes import BenchError


def test_a_broker_that_does_not_answer_is_a_bench_error_naming_it():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        addr = f"127.0.0.1:{probe.getsockname()[1]}"
    with pytest.raises(BenchError, match=rf"the broker at {addr} did not answer the max offsets of T: peer unavailable"):
        queue_max_offsets(addr, "T", 2)
