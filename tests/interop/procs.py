"""Real RocketMQ clients as child processes: start a driver, read its JSON events, wait, stop.

The drivers (`cpp_client.py`, `ons_client.js`) import nothing from mqlab. A missing client fails
the test with the command that installs it: a skipped interop test would count as passing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
CPP_DRIVER = HERE / "cpp_client.py"
ONS_DRIVER = HERE / "ons_client.js"
ONS_PACKAGE = HERE.parents[1] / "chaos" / "real_clients" / "js" / "node_modules" / "ali-ons" / "package.json"
CPP_VERSION = "0.4.4"
ONS_VERSION = "3.12.0"
INSTALL = "./scripts/bootstrap.sh from the repo root (scripts/test runs it too)"
EXIT_GRACE_S = 30.0  # a client's own shutdown: unregister, persist offsets, close connections
TAIL_CHARS = 4000

Event = dict[str, Any]


def require_cpp_client() -> None:
    """Fail (never skip) when the `rocketmq` package with Apache's C++ client is not installed."""
    if importlib.util.find_spec("rocketmq") is None:
        pytest.fail(f"the C++ RocketMQ client is not installed in {sys.prefix}: run {INSTALL}, or "
                    f"{sys.executable} -m pip install rocketmq=={CPP_VERSION}", pytrace=False)


def require_ons_client() -> str:
    """The node executable; fails (never skips) when node or ali-ons is missing."""
    node = shutil.which("node")
    if node is None:
        pytest.fail(f"no node on PATH for the ali-ons client: apt-get install -y nodejs npm, then run {INSTALL}",
                    pytrace=False)
    if not ONS_PACKAGE.exists():
        pytest.fail(f"ali-ons is not installed under {ONS_PACKAGE.parents[2]}: run {INSTALL}, or "
                    f"cd {ONS_PACKAGE.parents[2]} && npm ci", pytrace=False)
    version = json.loads(ONS_PACKAGE.read_text())["version"]
    if version != ONS_VERSION:
        pytest.fail(f"ali-ons {version} is installed, the tests pin {ONS_VERSION}: run {INSTALL}", pytrace=False)
    return node


def _flags(options: dict[str, Any]) -> list[str]:
    argv: list[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple, set)) and key != "plan":
            for item in value:
                argv += [flag, str(item)]
        else:
            argv += [flag, value if isinstance(value, (str, Path)) else json.dumps(value)]
    return argv


class ClientProcess:
    """One driver process; its stdout events are collected on a thread as they arrive."""

    def __init__(self, name: str, argv: list[str], workdir: Path, env: dict[str, str], logs: Path) -> None:
        self.name = name
        self.argv = [str(a) for a in argv]
        self.logs = logs  # where the client writes its own logs (C++: HOME/logs)
        self.stderr_path = workdir / f"{name}.stderr"
        self.events: list[Event] = []
        self._cond = threading.Condition()
        with self.stderr_path.open("w") as stderr:
            self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL,
                                         env=env, text=True, start_new_session=True)
        self._reader = threading.Thread(target=self._read, name=f"{name}-events", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                event = {"event": "raw", "line": line.rstrip("\n")}
            with self._cond:
                self.events.append(event)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    # ---- reading ---------------------------------------------------------------------------
    def of(self, kind: str) -> list[Event]:
        with self._cond:
            return [e for e in self.events if e.get("event") == kind]

    def received(self, *, acked_only: bool = False) -> list[Event]:
        return [e for e in self.of("received") if not acked_only or e["status"] == "CONSUME_SUCCESS"]

    def acked_bodies(self) -> set[str]:
        return {e["body"] for e in self.received(acked_only=True)}

    def wait_for(self, predicate: Callable[[ClientProcess], Any], budget_s: float, what: str) -> Any:
        """Wait until `predicate(self)` is truthy; fail with the client's story if it never is."""
        deadline = time.monotonic() + budget_s
        with self._cond:
            while True:
                result = predicate(self)
                if result:
                    return result
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    break
                self._cond.wait(min(left, 0.2))
        pytest.fail(f"{self.name}: no {what} within {budget_s:.0f} s\n{self.story()}", pytrace=False)

    def wait_received(self, bodies: Iterable[str], budget_s: float) -> None:
        wanted = set(bodies)
        self.wait_for(lambda p: wanted <= p.acked_bodies(), budget_s, f"delivery of all {len(wanted)} messages")

    def wait_exit(self, budget_s: float = EXIT_GRACE_S) -> int:
        try:
            code = self.proc.wait(budget_s)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"{self.name} did not exit within {budget_s:.0f} s\n{self.story()}", pytrace=False)
        self._reader.join(5)
        return code

    def finish(self, budget_s: float = EXIT_GRACE_S) -> list[Event]:
        """Wait for a clean exit (code 0 and a "done" event) and return every event."""
        code = self.wait_exit(budget_s)
        assert code == 0 and self.of("done"), f"{self.name} exited with {code}\n{self.story()}"
        return list(self.events)

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)

    # ---- diagnostics -----------------------------------------------------------------------
    def story(self) -> str:
        """The last events, stderr and the client's own log: what a failure message shows."""
        with self._cond:
            events = "\n".join(json.dumps(e) for e in self.events[-25:])
            n = len(self.events)
        parts = [f"argv: {' '.join(self.argv)}", f"exit code: {self.proc.poll()}",
                 f"last events (of {n}):\n{events}", f"stderr:\n{_tail(self.stderr_path)}"]
        for log in sorted(self.logs.rglob("*.log*")) if self.logs.exists() else []:
            parts.append(f"{log.name}:\n{_tail(log)}")
        return "\n".join(parts)


def _tail(path: Path) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(none)"
    return text[-TAIL_CHARS:]


class Clients:
    """Starts driver processes for one test and kills whatever is left when it ends."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: list[ClientProcess] = []

    def cpp(self, mode: str, namesrv: str, **options: Any) -> ClientProcess:
        """The C++ client (`rocketmq` 0.4.4) with its own HOME, where it writes logs/rocketmq-cpp."""
        require_cpp_client()
        name = f"cpp-{mode}-{len(self.procs)}"
        home = self.workdir / name
        home.mkdir(parents=True)
        env = {**os.environ, "HOME": str(home)}
        argv = [sys.executable, str(CPP_DRIVER), mode, "--namesrv", namesrv, *_flags(options)]
        return self._start(ClientProcess(name, argv, self.workdir, env, home / "logs"))

    def ons(self, mode: str, namesrv: str, **options: Any) -> ClientProcess:
        """ali-ons 3.12.0 under node."""
        node = require_ons_client()
        name = f"ons-{mode}-{len(self.procs)}"
        home = self.workdir / name
        home.mkdir(parents=True)
        env = {**os.environ, "HOME": str(home)}
        argv = [node, str(ONS_DRIVER), mode, "--namesrv", namesrv, *_flags(options)]
        return self._start(ClientProcess(name, argv, self.workdir, env, home / "logs"))

    def _start(self, proc: ClientProcess) -> ClientProcess:
        self.procs.append(proc)
        return proc

    def stop_file(self, name: str = "stop") -> Path:
        return self.workdir / name

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()
