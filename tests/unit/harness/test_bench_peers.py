"""The Redis peer of `mqlab bench pull --peers redis`: a real redis-server, preloaded, read and written
by the Redis worker roles, gone afterwards."""

from __future__ import annotations

import json
import sys

import pytest

from harness.bench.peers import REDIS_PULL_STREAM, RedisPeer, redis_missing
from harness.bench.processes import Child

pytestmark = [pytest.mark.timeout(60)]


def _run_worker(job: dict, tmp_path) -> dict:
    worker = Child([sys.executable, "-m", "harness.bench.worker", json.dumps(job)], "worker", tmp_path)
    try:
        worker.expect("READY", 30)
        worker.go()
        return json.loads(worker.expect("RESULT", 30))
    finally:
        worker.close()


def test_redis_peer_preloads_serves_the_worker_roles_and_stops(tmp_path):
    assert redis_missing() is None  # the bootstrap installs redis-server and the dev extra the clients
    peer = RedisPeer(tmp_path)
    try:
        peer.wait_ready()
        peer.preload(50, 100)
        base = {"host": "127.0.0.1", "redis_port": peer.port, "seconds": 0.2, "windows": 2, "body_bytes": 100}
        acked = _run_worker({**base, "role": "redis-pull", "batch": 8, "noack": False, "stream": REDIS_PULL_STREAM},
                            tmp_path)
        # round and round the 50 entries: more than one pass, each read with its body
        assert sum(acked["windows"]) > 50 and acked["bytes_touched"] >= 100 * sum(acked["windows"])
        noack = _run_worker({**base, "role": "redis-pull", "batch": 8, "noack": True, "stream": REDIS_PULL_STREAM},
                            tmp_path)
        assert sum(noack["windows"]) > 0
        added = _run_worker({**base, "role": "redis-xadd", "batch": 4, "stream": "bench:send:4"}, tmp_path)
        assert all(count > 0 and count % 4 == 0 for count in added["windows"])
        with peer.client() as client:
            assert client.xlen(REDIS_PULL_STREAM) == 50
            assert client.xinfo_groups(REDIS_PULL_STREAM) == []  # the workers removed their groups
            assert client.exists("bench:send:4") == 0
    finally:
        peer.close()
    assert peer.proc.returncode is not None
