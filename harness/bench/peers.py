"""Peer systems the benchmark compares with in the same run (`--peers redis`).

Owns the Redis servers' lives in a run: `redis_missing()` says what is not installed (before a
long run starts), `RedisPeer` starts `redis-server` on a free loopback port with persistence
off (optionally as the replica of another, `--replicaof`), preloads the pull stream with the
same body size and count as the mqlab preload, and stops the server when the run ends, whatever
happens. A run has two masters: one alone (the pull references and `redis-xadd`) and one with a
replica attached, the peer of a master broker with its slave (`redis-xadd-replicated`,
`redis-xadd-wait`); the replica's CPU counts as the slave's does. The Redis clients themselves are roles
of the worker (`harness.bench.ref_workers`).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from harness.bench.processes import BenchError

PEERS = ("redis",)
REDIS_PULL_STREAM = "bench:pull"
REDIS_SEND_STREAM = "bench:send"
REDIS_START_BUDGET_S = 20.0
REPLICA_LINK_BUDGET_S = 30.0  # a replica of an empty master links within a second
REDIS_STOP_GRACE_S = 5.0
PRELOAD_PIPELINE = 1000  # XADDs per pipeline while preloading
INSTALL_HINT = ("install it with `apt-get install -y redis-server` (scripts/bootstrap.sh does so when it runs as "
                "root), or run without --peers redis")


def redis_missing() -> str | None:
    """Why `--peers redis` cannot run here, None if it can."""
    if shutil.which("redis-server") is None:
        return f"--peers redis needs redis-server on PATH: {INSTALL_HINT}"
    try:
        import hiredis  # noqa: F401  # redis-py parses replies with it when it is there
        import redis  # noqa: F401
    except ImportError:
        return ("--peers redis needs the redis and hiredis Python packages: install the dev extra, "
                "e.g. `pip install -e '.[dev]'`")
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisPeer:
    """A redis-server of this run: loopback, no persistence, stopped by `close`; with
    `replica_of`, the replica of that server (asynchronous replication, as Redis always has)."""

    def __init__(self, run_dir: Path, name: str = "redis", replica_of: RedisPeer | None = None) -> None:
        self.dir = run_dir / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.replica_of = replica_of
        self._log = (self.dir / "redis-server.log").open("wb")
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", str(self.dir), "--daemonize", "no"]
        if replica_of is not None:
            argv += ["--replicaof", "127.0.0.1", str(replica_of.port)]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT)
        self.pid = self.proc.pid

    def client(self) -> Any:
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + REDIS_START_BUDGET_S
        while True:
            if self.proc.poll() is not None:
                raise BenchError(f"redis-server exited with code {self.proc.returncode}; see {self.dir}")
            try:
                with self.client() as client:
                    if client.ping():
                        return
            except Exception:  # not listening yet
                pass
            if time.monotonic() > deadline:
                raise BenchError(f"redis-server did not answer within {REDIS_START_BUDGET_S:.0f} s")
            time.sleep(0.1)

    def wait_linked(self) -> None:
        """A replica: wait until its master link is up and the initial sync is done."""
        deadline = time.monotonic() + REPLICA_LINK_BUDGET_S
        with self.client() as client:
            while True:
                info = client.info("replication")
                if info.get("master_link_status") == "up" and not info.get("master_sync_in_progress"):
                    return
                if self.proc.poll() is not None:
                    raise BenchError(f"redis replica exited with code {self.proc.returncode}; see {self.dir}")
                if time.monotonic() > deadline:
                    raise BenchError(f"the redis replica did not link to its master within "
                                     f"{REPLICA_LINK_BUDGET_S:.0f} s; see {self.dir}")
                time.sleep(0.1)

    def preload(self, messages: int, body_bytes: int) -> None:
        body = b"m" * body_bytes
        with self.client() as client:
            client.delete(REDIS_PULL_STREAM)
            for first in range(0, messages, PRELOAD_PIPELINE):
                pipe = client.pipeline(transaction=False)
                for _ in range(min(PRELOAD_PIPELINE, messages - first)):
                    pipe.xadd(REDIS_PULL_STREAM, {b"b": body})
                pipe.execute()
            stored = client.xlen(REDIS_PULL_STREAM)
        if stored != messages:
            raise BenchError(f"redis preload stored {stored} of {messages} entries")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(REDIS_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
