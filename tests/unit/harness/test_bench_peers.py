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


def test_a_replicated_peer_copies_what_its_master_takes_and_the_wait_role_waits_for_it(tmp_path):
    master = RedisPeer(tmp_path, "redis-replicated")
    replica = RedisPeer(tmp_path, "redis-replica", replica_of=master)
    try:
        for peer in (master, replica):
            peer.wait_ready()
        replica.wait_linked()
        base = {"host": "127.0.0.1", "redis_port": master.port, "seconds": 0.2, "windows": 2, "body_bytes": 100,
                "role": "redis-xadd", "batch": 1}
        waited = _run_worker({**base, "stream": "bench:wait", "wait": True}, tmp_path)
        assert sum(waited["windows"]) > 0 and waited["errors"] == 0  # WAIT 1 found the replica every time
        with master.client() as client:
            client.xadd("probe", {b"b": b"x"})
            assert client.wait(1, 3_000) == 1
        with replica.client() as client:
            assert client.xlen("probe") == 1  # the replica holds what the master took
    finally:
        replica.close()
        master.close()
    alone = RedisPeer(tmp_path, "redis-alone")
    try:
        alone.wait_ready()
        lonely = _run_worker({**base, "redis_port": alone.port, "stream": "bench:lonely", "wait": True,
                              "wait_timeout_ms": 20, "seconds": 0.1, "windows": 1}, tmp_path)
        # no replica: every WAIT 1 times out; each counts as an error and adds nothing
        assert lonely["errors"] > 0 and sum(lonely["windows"]) == 0
    finally:
        alone.close()
