"""Apache's RocketMQ 5 Python client as a child process for the interop tests: its driver
(`chaos/real_clients/py5/driver.py`) runs in `.venv-py5`, answers one JSON line per command.

The client cannot share mqlab's venv (its package `rocketmq` is also the 4.x C++ binding's) nor
a process with the broker's apache.rocketmq.v2 stubs. A missing venv fails the test with the
command that installs it: a skipped interop test would count as passing.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
PY5_PYTHON = REPO / ".venv-py5" / "bin" / "python"
PY5_DRIVER = REPO / "chaos" / "real_clients" / "py5" / "driver.py"
PY5_VERSION = "5.1.2"
ANSWER_BUDGET_S = 30.0  # a send retries up to 3 times with a 3 s deadline each, on a loaded machine


_checked: list[bool] = []  # the venv was found good once in this process


def require_py5_client() -> None:
    """Fail (never skip) when .venv-py5 or its pinned client is missing."""
    if _checked:
        return
    how = "run ./scripts/bootstrap.sh from the repo root (scripts/test runs it too)"
    if not PY5_PYTHON.exists():
        pytest.fail(f"the RocketMQ 5 Python client's venv {PY5_PYTHON.parents[1]} does not exist: {how}",
                    pytrace=False)
    probe = subprocess.run([str(PY5_PYTHON), "-c", "from importlib.metadata import version; "
                            "print(version('rocketmq-python-client'))"], capture_output=True, text=True, timeout=60)
    if probe.stdout.strip() != PY5_VERSION:
        pytest.fail(f"rocketmq-python-client {PY5_VERSION} is not installed in {PY5_PYTHON.parents[1]} "
                    f"({probe.stdout.strip() or probe.stderr.strip()[-300:]}): {how}", pytrace=False)
    _checked.append(True)


class Py5Producer:
    """One driver process holding one 5.x Producer."""

    def __init__(self, workdir: Path, name: str = "py5") -> None:
        argv = self._argv()
        self.home = workdir / name
        self.home.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing of mqlab's
        env["HOME"] = str(self.home)  # the client logs under $HOME/logs
        self.stderr_path = self.home / "stderr.txt"
        with self.stderr_path.open("w") as stderr:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=stderr, text=True, env=env,
                                         start_new_session=True)
        self._answers: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, name=f"{name}-answers", daemon=True).start()

    def _argv(self) -> list[str]:
        """The driver's command line (a subclass runs another client's driver of the same protocol)."""
        require_py5_client()
        return [str(PY5_PYTHON), str(PY5_DRIVER)]

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self._answers.put(json.loads(line))
            except ValueError:
                self._answers.put({"event": "raw", "line": line.rstrip()})
        self._answers.put(None)

    def call(self, **command: Any) -> dict[str, Any]:
        self.submit(**command)
        return self.answer(command)

    def submit(self, **command: Any) -> None:
        """Write a command without waiting for its answer (`answer` reads it)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def answer(self, command: dict[str, Any]) -> dict[str, Any]:
        try:
            answer = self._answers.get(timeout=ANSWER_BUDGET_S)
        except queue.Empty:
            pytest.fail(f"the 5.x client did not answer {command.get('op')} within {ANSWER_BUDGET_S:.0f} s\n"
                        f"{self.story()}", pytrace=False)
        if answer is None or answer.get("event") in ("error", "raw"):
            pytest.fail(f"the 5.x client failed {command}: {answer}\n{self.story()}", pytrace=False)
        return answer

    def start(self, endpoints: str, topics: list[str]) -> dict[str, Any]:
        return self.call(op="start", endpoints=endpoints, topics=topics)

    def send(self, topic: str, body: str, **fields: Any) -> dict[str, Any]:
        return self.call(op="send", topic=topic, body=body, **fields)

    def shutdown(self) -> None:
        assert self.call(op="shutdown")["event"] == "done"
        assert self.proc.wait(30) == 0, self.story()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def story(self) -> str:
        parts = [f"exit code: {self.proc.poll()}", f"stderr:\n{_tail(self.stderr_path)}"]
        for log in sorted(self.home.rglob("*.log")):
            parts.append(f"{log.name}:\n{_tail(log)}")
        return "\n".join(parts)


def _tail(path: Path, chars: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(none)"
