"""One node process: spawn, READY, stop / kill / pause / resume / restart, exit watching.

Owns a single OS process (and its process group) and its run dir's log files; does not
know the topology (`harness.cluster`) or render configs (`harness.spec`).

Process contract (nodes/__main__.py):
  * started as `python -m nodes <role> --config <run_dir>/config.json` in its own session,
    so `killpg` reaches anything it spawns and a terminal's Ctrl-C never does;
  * prints exactly one `READY {json}` line on stdout when serving (`harness.ready`); logs go to
    node.log (written by the node), stderr to stderr.log, any stray stdout to stdout.log;
  * exit codes: 0 clean (SIGTERM), 70 broken invariant, 78 bad config.

Supervision without auto-restart: an exit-watcher thread per process records every exit
nobody asked for as an `UnexpectedExit` (`harness.exits`, handed to `on_unexpected_exit`).

State machine (every public method asserts the state it needs):

    NEW/STOPPED/EXITED/FAILED --spawn--> STARTING --READY--> RUNNING <--pause/resume--> PAUSED
    STARTING --no READY / exit--> FAILED
    RUNNING|PAUSED --stop()/kill()--> STOPPING --> STOPPED
    RUNNING|PAUSED --exits by itself--> EXITED (recorded)
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import psutil

import nodes
from harness.admin import DESCRIBE_TIMEOUT_MS, AdminClient
from harness.clockfault import wall_shift_env
from harness.errors import HarnessError, NodeStartError
from harness.exits import UnexpectedExit, mark_gone, mark_live
from harness.pids import (
    KILL_REAP_BUDGET_MS,
    LOG_TAIL_LINES,
    POLL_INTERVAL_S,
    describe_exit_code,
    session_pids,
    tail_lines,
    wait_gone,
)
from harness.ports import LOCALHOST
from harness.ready import READY_PREFIX, FileLines, PipeLines, Ready, StdoutLines
from nodes.common import constants as c
from nodes.common.config import save_node_config

log = logging.getLogger(__name__)

PROJECT_ROOT = Path(nodes.__file__).resolve().parent.parent
PAUSE_CONFIRM_BUDGET_MS = 2_000  # wait until the kernel reports the group stopped


# What a node may exit with after the SIGTERM of a stop: its clean stop, or the signal itself when
# it came before the node's handler was installed. Anything else (a crash on a broken invariant
# while shutting down, exit 70) is an exit nobody asked for; a SIGKILL after the grace period is
# the harness's own doing.
_STOPPED_CLEANLY = frozenset({c.EXIT_OK, -signal.SIGTERM})


class NodeState(enum.Enum):
    NEW = "NEW"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"
    EXITED = "EXITED"  # died without being asked to: see `unexpected_exits`
    FAILED = "FAILED"  # never became ready


_STOPPABLE = (NodeState.STARTING, NodeState.RUNNING, NodeState.PAUSED)
LIVE_STATES = (*_STOPPABLE, NodeState.STOPPING)  # the harness believes a process exists
_STARTABLE = (NodeState.NEW, NodeState.STOPPED, NodeState.EXITED, NodeState.FAILED)


class NodeProcess:
    """A node process with a fixed address across restarts.

    Args:
        node_id: the node's id (also the name of its run dir under the cluster's).
        role: `namesrv` or `broker`; the argument to `python -m nodes`.
        run_dir: the node's run dir (config.json, node.log, stderr.log, store/).
        config: the node's config dataclass; written to run_dir/config.json at every start.
        port: the node's port when no `config` gives it.
        argv: the command to run instead of `python -m nodes ...` (tests use stand-ins).
        detached: stdout goes to a file instead of a pipe, so the node survives the
            harness process exiting (`mqlab up --detach`).
        on_unexpected_exit: called (from the watcher thread) with every `UnexpectedExit`.
    """

    def __init__(self, node_id: str, role: str, run_dir: str | Path, *, config: Any = None,
                 port: int | None = None, argv: Sequence[str] | None = None, detached: bool = False,
                 on_unexpected_exit: Callable[[UnexpectedExit], None] | None = None,
                 start_budget_ms: int = c.NODE_START_BUDGET_MS,
                 stop_grace_ms: int = c.NODE_STOP_GRACE_MS) -> None:
        if port is None:
            if config is None:
                raise HarnessError(f"{node_id}: give NodeProcess a config or a port")
            port = int(config.port)
        self.node_id = node_id
        self.role = role
        self.run_dir = Path(run_dir).absolute()
        self.config = config
        self.port = port
        # fixed like `port`; 0 for a node without a remoting listener (consumers, stand-ins)
        self.remoting_port = int(getattr(config, "remoting_port", 0) or 0)
        # a broker's RocketMQ 5 gRPC endpoint, fixed the same way; 0 for every other node
        self.rocketmq5_port = int(getattr(config, "rocketmq5_port", 0) or 0)
        self.detached = detached
        self.start_budget_ms = start_budget_ms
        self.stop_grace_ms = stop_grace_ms
        self.ready: Ready | None = None
        self.last_exit_code: int | None = None
        self.starts = 0
        self.started_wall_ms = 0  # wall clock at the last spawn (registrations must be newer)
        self._argv = list(argv) if argv is not None else None
        self._on_unexpected_exit = on_unexpected_exit
        self._lock = threading.RLock()
        self._state = NodeState.NEW
        self._proc: subprocess.Popen[bytes] | None = None
        self._exited = threading.Event()
        self._expect_exit = False
        self._released = False
        self._stdout: StdoutLines | None = None
        self._admin = AdminClient(self.addr, node_id, getattr(config, "cluster_credential", "") or "")

    # ---- properties -----------------------------------------------------------------

    @property
    def addr(self) -> str:
        return f"{LOCALHOST}:{self.port}"

    @property
    def remoting_addr(self) -> str:
        """The RocketMQ remoting address ("" for a node without a listener)."""
        return f"{LOCALHOST}:{self.remoting_port}" if self.remoting_port else ""

    @property
    def rocketmq5_addr(self) -> str:
        """A broker's RocketMQ 5 gRPC endpoint ("" for a node without one)."""
        return f"{LOCALHOST}:{self.rocketmq5_port}" if self.rocketmq5_port else ""

    @property
    def config_path(self) -> Path:
        return self.run_dir / "config.json"

    @property
    def node_log(self) -> Path:
        return self.run_dir / "node.log"

    @property
    def stderr_log(self) -> Path:
        return self.run_dir / "stderr.log"

    @property
    def stdout_log(self) -> Path:
        return self.run_dir / "stdout.log"

    @property
    def state(self) -> NodeState:
        return self._state

    @property
    def pid(self) -> int | None:
        """The pid of the current (or last) process, None before the first start."""
        return self._proc.pid if self._proc is not None else None

    @property
    def alive(self) -> bool:
        return self._proc is not None and not self._exited.is_set()

    def __repr__(self) -> str:
        return f"NodeProcess({self.node_id} {self.role} {self.addr} pid={self.pid} {self._state.value})"

    # ---- lifecycle ------------------------------------------------------------------

    def start(self) -> NodeProcess:
        """Spawn and wait for READY (at most `start_budget_ms`).

        Raises:
            NodeStartError: the node exited or stayed silent; carries the exit code and log tail.
        """
        self.spawn()
        self.wait_ready()
        return self

    def spawn(self) -> None:
        """Start the process without waiting for READY (the cluster spawns a tier at once)."""
        with self._lock:
            self._require(_STARTABLE, "start")
            self.run_dir.mkdir(parents=True, exist_ok=True)
            if self.config is not None:
                save_node_config(self.config_path, self.role, self.config)
            self._admin.close()
            self._expect_exit = False
            self._released = False
            self._exited = threading.Event()
            self.ready = None
            self.last_exit_code = None
            self._state = NodeState.STARTING
            with contextlib.ExitStack() as files:
                stderr = files.enter_context(self.stderr_log.open("ab"))
                stdout: IO[bytes] | int = subprocess.PIPE
                if self.detached:
                    stdout = files.enter_context(self.stdout_log.open("ab"))
                    self._stdout = FileLines(self.stdout_log, self.stdout_log.stat().st_size)
                self.started_wall_ms = time.time_ns() // 1_000_000
                try:
                    proc = subprocess.Popen(
                        self._command(), stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                        cwd=self.run_dir, env=self._env(), start_new_session=True, close_fds=True)
                except OSError as exc:
                    self._state = NodeState.FAILED
                    raise NodeStartError(f"{self.node_id}: cannot run {self._command()[0]}: {exc}",
                                         node_id=self.node_id, exit_code=None, log_tail="") from exc
            self._proc = proc
            self.starts += 1
            mark_live(self)
            if not self.detached:
                self._stdout = PipeLines(proc, self.stdout_log, name=f"{self.node_id}-stdout")
            threading.Thread(target=self._watch, args=(proc, self._exited), name=f"{self.node_id}-watch",
                             daemon=True).start()
        log.info("%s: spawned pid %d (%s)", self.node_id, proc.pid, " ".join(self._command()))

    def wait_ready(self) -> Ready:
        """Block until the READY line, the process's exit, or the start budget's end."""
        deadline = time.monotonic() + self.start_budget_ms / 1000
        with self._lock:
            self._require((NodeState.STARTING,), "wait for READY of")
            exited, stdout = self._exited, self._stdout
        assert stdout is not None
        while True:
            line = stdout.next_line()
            if line:
                if line.startswith(READY_PREFIX):
                    return self._on_ready(line)
                continue
            if exited.is_set() or line is None:
                exited.wait(timeout=1.0)  # stdout closed: the exit itself is a moment behind
                self._fail_start(f"{self.node_id} exited before it was ready: "
                                 f"{describe_exit_code(self.last_exit_code)}")
            if time.monotonic() >= deadline:
                self._fail_start(f"{self.node_id} printed no READY line within {self.start_budget_ms} ms")

    def stop(self, grace_ms: int | None = None) -> int:
        """SIGTERM, wait up to `grace_ms` (default NODE_STOP_GRACE_MS), then SIGKILL. Returns the exit code."""
        with self._lock:
            self._require(_STOPPABLE, "stop")
            self._expect_exit = True
            was_paused = self._state is NodeState.PAUSED
            self._state = NodeState.STOPPING
            self._signal_leader(signal.SIGTERM)
            if was_paused:
                self._signal_group(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
        grace = self.stop_grace_ms if grace_ms is None else grace_ms
        escalated = False
        if not self._exited.wait(timeout=grace / 1000):
            log.warning("%s: no exit %d ms after SIGTERM; sending SIGKILL", self.node_id, grace)
            self._signal_group(signal.SIGKILL)
            escalated = True
        code = self._finish_stop()
        if not escalated and code not in _STOPPED_CLEANLY:
            self._report_exit(self.pid, code, "while stopping")
        return code

    def kill(self) -> int:
        """SIGKILL the whole process group at once (the chaos crash). Returns the exit code."""
        with self._lock:
            self._require(_STOPPABLE, "kill")
            self._expect_exit = True
            self._state = NodeState.STOPPING
            self._signal_group(signal.SIGKILL)
        return self._finish_stop()

    def pause(self) -> None:
        """SIGSTOP the process group and wait until the kernel reports it stopped."""
        with self._lock:
            self._require((NodeState.RUNNING,), "pause")
            self._signal_group(signal.SIGSTOP)
            self._state = NodeState.PAUSED
        deadline = time.monotonic() + PAUSE_CONFIRM_BUDGET_MS / 1000
        while time.monotonic() < deadline and self.alive:
            try:
                if psutil.Process(self.pid).status() == psutil.STATUS_STOPPED:
                    return
            except psutil.NoSuchProcess:
                return
            time.sleep(POLL_INTERVAL_S)

    def resume(self) -> None:
        with self._lock:
            self._require((NodeState.PAUSED,), "resume")
            self._signal_group(signal.SIGCONT)
            self._state = NodeState.RUNNING

    def set_command(self, argv: Sequence[str]) -> None:
        """Run `argv` from the next spawn on (a real-client consumer's command, known once its links exist)."""
        with self._lock:
            self._require(_STARTABLE, "set the command of")
            self._argv = [str(a) for a in argv]

    def restart(self, *, kill: bool = False) -> NodeProcess:
        """Stop (or kill) if alive, then start again with the same config and port."""
        if self._state in _STOPPABLE:
            self.kill() if kill else self.stop()
        return self.start()

    def close(self) -> None:
        """Kill whatever is left of this node and check that no process of its group survives.

        Raises:
            HarnessError: a process of the node's session is still alive after SIGKILL.
        """
        if self._state in _STOPPABLE:
            with contextlib.suppress(HarnessError):
                self.kill()
        self._admin.close()
        mark_gone(self)
        leftovers = self.live_pids()
        if leftovers:
            for pid in leftovers:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            wait_gone(leftovers, KILL_REAP_BUDGET_MS)
            leftovers = self.live_pids()
            if leftovers:
                raise HarnessError(f"{self.node_id}: pids {leftovers} survived SIGKILL; kill them by hand")

    def release(self) -> None:
        """Stop supervising without stopping the process (for `mqlab up --detach`)."""
        with self._lock:
            self._released = True
        self._admin.close()
        mark_gone(self)

    def live_pids(self) -> list[int]:
        """Pids (not zombies) still in this node's session: the node and anything it spawned."""
        if self._proc is None:
            return []
        return session_pids(self._proc.pid)

    # ---- control plane --------------------------------------------------------------

    def describe(self, timeout_ms: int = DESCRIBE_TIMEOUT_MS) -> dict[str, Any]:
        """Admin.Describe as a dict (details parsed from JSON).

        Raises:
            HarnessError: the node did not answer within `timeout_ms`.
        """
        return self._admin.describe(timeout_ms)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last `lines` lines of node.log, stderr.log and (if any) stdout.log, labelled."""
        parts = []
        for path in (self.node_log, self.stderr_log, self.stdout_log):
            tail = tail_lines(path, lines)
            if tail:
                parts.append(f"--- {path} (last {len(tail)} lines) ---")
                parts.extend(tail)
        return "\n".join(parts) if parts else f"(no output in {self.run_dir})"

    # ---- internals ------------------------------------------------------------------

    def _command(self) -> list[str]:
        if self._argv is not None:
            return self._argv
        return [sys.executable, "-m", "nodes", self.role, "--config", str(self.config_path)]

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        path = env.get("PYTHONPATH")
        env["PYTHONPATH"] = f"{PROJECT_ROOT}{os.pathsep}{path}" if path else str(PROJECT_ROOT)
        env["PYTHONUNBUFFERED"] = "1"  # the READY line must not sit in a buffer
        if getattr(self.config, "clock_control", "") == c.CLOCK_CONTROL_WALL:
            env = wall_shift_env(self.run_dir, env)  # wall-clock jumps (harness.clockfault)
        return env

    def _require(self, states: tuple[NodeState, ...], action: str) -> None:
        if self._state not in states:
            raise HarnessError(f"cannot {action} {self.node_id}: it is {self._state.value} "
                               f"(needs {' or '.join(s.value for s in states)})")

    def _on_ready(self, line: str) -> Ready:
        try:
            ready = Ready.parse(line)
        except ValueError as exc:
            self._fail_start(f"{self.node_id} printed a malformed READY line: {exc}")
        if ready.port != self.port or ready.node_id != self.node_id:
            self._fail_start(f"{self.node_id} announced {ready.node_id} on port {ready.port}, "
                             f"expected {self.node_id} on port {self.port}; check its config.json")
        announced_remoting = ready.extra.get("remoting_addr")
        if self.remoting_port and announced_remoting is not None and announced_remoting != self.remoting_addr:
            self._fail_start(f"{self.node_id} bound its remoting listener at {announced_remoting}, "
                             f"expected {self.remoting_addr}; check its config.json")
        announced_rmq5 = ready.extra.get("rocketmq5_addr")
        if self.rocketmq5_port and announced_rmq5 is not None and announced_rmq5 != self.rocketmq5_addr:
            self._fail_start(f"{self.node_id} bound its RocketMQ 5 endpoint at {announced_rmq5}, "
                             f"expected {self.rocketmq5_addr}; check its config.json")
        with self._lock:
            running = self._state is NodeState.STARTING and not self._exited.is_set()
            if running:
                self.ready = ready
                self._state = NodeState.RUNNING
        if not running:
            self._exited.wait(timeout=1.0)
            self._fail_start(f"{self.node_id} exited right after READY: {describe_exit_code(self.last_exit_code)}")
        log.info("%s: READY at %s (pid %d)", self.node_id, self.addr, ready.pid)
        return ready

    def _fail_start(self, message: str) -> None:
        with self._lock:
            self._expect_exit = True
        self._signal_group(signal.SIGKILL)
        self._exited.wait(timeout=KILL_REAP_BUDGET_MS / 1000)
        with self._lock:
            self._state = NodeState.FAILED
            code = self.last_exit_code
            mark_gone(self)
        raise NodeStartError(f"{message}; logs in {self.run_dir}", node_id=self.node_id,
                             exit_code=code, log_tail=self.log_tail())

    def _finish_stop(self) -> int:
        if not self._exited.wait(timeout=KILL_REAP_BUDGET_MS / 1000):
            raise HarnessError(f"{self.node_id} (pid {self.pid}) did not exit after SIGKILL; is it in D state?")
        self._signal_group(signal.SIGKILL, leftovers_only=True)  # anything the node spawned
        with self._lock:
            self._state = NodeState.STOPPED
            mark_gone(self)
        self._admin.close()
        assert self.last_exit_code is not None
        log.info("%s: stopped, %s", self.node_id, describe_exit_code(self.last_exit_code))
        return self.last_exit_code

    def _watch(self, proc: subprocess.Popen[bytes], exited: threading.Event) -> None:
        """Reap the process; record the exit if nobody asked for it. Sets `exited` last."""
        try:
            code = proc.wait()
            unexpected = False
            with self._lock:
                if proc is not self._proc:
                    return
                self.last_exit_code = code
                if self._state in (NodeState.RUNNING, NodeState.PAUSED) and not self._expect_exit:
                    self._state = NodeState.EXITED
                    unexpected = not self._released
            if not unexpected:
                return
            mark_gone(self)
            self._signal_group(signal.SIGKILL, leftovers_only=True)
            self._report_exit(proc.pid, code)
        finally:
            exited.set()

    def _report_exit(self, pid: int | None, code: int, when: str = "") -> None:
        """An exit nobody asked for (or, `when` stopping, not the clean one asked for): logged
        and handed to `on_unexpected_exit`."""
        record = UnexpectedExit(self.node_id, pid or 0, code, time.time_ns() // 1_000_000, self.log_tail())
        log.error("%s: unexpected exit%s: %s\n%s", self.node_id, f" {when}" if when else "", record,
                  record.log_tail)
        if self._on_unexpected_exit is not None:
            self._on_unexpected_exit(record)

    def sigkill_group(self) -> None:
        """SIGKILL the process group now, without waiting or changing state (the atexit hook)."""
        self._signal_group(signal.SIGKILL)

    def _signal_leader(self, sig: signal.Signals) -> None:
        if self._proc is not None and not self._exited.is_set():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._proc.pid, sig)

    def _signal_group(self, sig: signal.Signals, *, leftovers_only: bool = False) -> None:
        """Signal the node's process group (its pgid is its pid: it leads its own session).

        Before the leader is reaped its pid cannot be reused, so this is race-free; after, only
        `leftovers_only` calls go out, and only while processes of the session remain.
        """
        if self._proc is None:
            return
        if leftovers_only:
            if not self.live_pids():
                return
        elif self._exited.is_set():
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, sig)
