"""CPU starvation of a node: a CFS bandwidth cap on its process group, or a SIGSTOP/SIGCONT duty cycle.

Owns the cgroups it makes (`<cpu cgroup root>/mqlab-<cluster id>-<node id>`) and the duty-cycle
threads; does not start or stop nodes (`harness.process`).

    starver = CpuStarver(run_dir)
    starver.starve(proc, share=0.2)          # 20 ms of CPU per 100 ms period, whole process group
    proof = starver.unstarve(proc.node_id)   # cpu.stat deltas and the measured CPU share

Mechanisms, in the order `auto` tries them:

  * `cgroup-v1`: a fresh cgroup in the v1 `cpu` hierarchy, `cpu.cfs_quota_us` = share x period.
    Children the node spawns later inherit it. The longest stall is period - quota (< 1 s).
  * `cgroup-v2`: the same with `cpu.max`, where the v2 hierarchy has the cpu controller enabled.
  * `duty-cycle`: a thread SIGCONTs the node's process group for share x period and SIGSTOPs it
    for the rest. Needs no root; coarser (the run slice overshoots by the signal latency).

Both cgroup mechanisms need root: without it `starve` raises HarnessError, and
`mechanism="duty-cycle"` is the way out.

A starvation applies to the process it was put on. A node restarted while starved runs free: its
new process is a child of the harness, which is never throttled, and the duty thread stops
signalling as soon as the node's pid changes. `unstarve` then still removes the (empty) cgroup and
reports the part of the fault the old process lived through.

A harness that exits without undoing a starvation undoes it at exit (an atexit hook, which runs
before the one that kills the nodes). Only a harness killed outright (SIGKILL) leaves the cgroup dir
behind; it is empty once the node's processes are gone, and `rmdir /sys/fs/cgroup/cpu/mqlab-*`
removes every such leftover (rmdir refuses a cgroup that still holds processes).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import hashlib
import logging
import os
import signal
import threading
import time
import weakref
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.process import NodeProcess, NodeState

log = logging.getLogger(__name__)

CGROUP_V1_CPU_ROOT = Path("/sys/fs/cgroup/cpu")
CGROUP_V2_ROOTS = (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))  # hybrid layout, then pure v2
CGROUP_PREFIX = "mqlab-"
MECHANISMS = ("cgroup-v1", "cgroup-v2", "duty-cycle")
CFS_PERIOD_MIN_MS = 1  # the kernel's bounds of cpu.cfs_period_us, in ms
CFS_PERIOD_MAX_MS = 1_000
CFS_QUOTA_MIN_US = 1_000  # the kernel refuses a smaller cpu.cfs_quota_us
CGROUP_RMDIR_BUDGET_MS = 1_000  # an exiting task can hold a cgroup a moment after it left cgroup.procs
CGROUP_RMDIR_RETRY_S = 0.02
DUTY_SLICE_MIN_MS = 1  # shorter run or stop slices are below what a sleeping thread can time
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def cluster_id(run_dir: str | Path) -> str:
    """A short, stable id of a cluster (its run dir) for names outside the run dir."""
    return hashlib.sha1(str(Path(run_dir).absolute()).encode()).hexdigest()[:10]


def cpu_mechanism(*, v1_root: Path = CGROUP_V1_CPU_ROOT, v2_roots: tuple[Path, ...] = CGROUP_V2_ROOTS,
                  euid: int | None = None) -> str:
    """The cgroup mechanism this machine offers for a CPU cap.

    Raises:
        HarnessError: not root, or no cgroup cpu controller; says what to do instead.
    """
    euid = os.geteuid() if euid is None else euid
    if euid != 0:
        raise HarnessError("starving a node's CPU through a cgroup needs root (cgroup files are root's); run "
                           "the harness as root, or pass mechanism='duty-cycle' for SIGSTOP/SIGCONT slices")
    if (v1_root / "cpu.cfs_quota_us").is_file() and (v1_root / "cgroup.procs").is_file():
        return "cgroup-v1"
    for root in v2_roots:
        if _v2_cpu_enabled(root):
            return "cgroup-v2"
    raise HarnessError(f"no cgroup cpu controller here (neither {v1_root}/cpu.cfs_quota_us nor 'cpu' in a "
                       "v2 cgroup.subtree_control); pass mechanism='duty-cycle' for SIGSTOP/SIGCONT slices")


def _v2_cpu_enabled(root: Path) -> bool:
    try:
        return "cpu" in (root / "cgroup.subtree_control").read_text().split()
    except OSError:
        return False


def process_cpu_ticks(pid: int) -> int | None:
    """utime + stime of a process (all its threads) in clock ticks; None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name may hold spaces and parentheses: the fields start after the last ')'
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5), counted from 1


def read_cpu_stat(path: Path) -> dict[str, int]:
    """A cgroup's cpu.stat as {name: value}; v2's throttled_usec also as throttled_time (ns)."""
    stats: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            with contextlib.suppress(ValueError):
                stats[name] = int(value)
    if "throttled_time" not in stats and "throttled_usec" in stats:
        stats["throttled_time"] = stats["throttled_usec"] * 1_000
    return stats


@dataclass(frozen=True)
class StarvationProof:
    """What `unstarve` measured over the fault.

    `cpu_share` is the node's CPU time over wall time (1.0 = one core) from /proc/<pid>/stat, over
    the processes alive at both ends of the fault; the throttling counters are cpu.stat deltas
    (None for the duty cycle, which counts its own `stop_cycles`).
    """

    node_id: str
    mechanism: str
    share: float
    period_ms: int
    duration_ms: int
    cpu_share: float | None
    nr_periods: int | None = None
    nr_throttled: int | None = None
    throttled_time_ns: int | None = None
    stop_cycles: int | None = None
    pids: tuple[int, ...] = ()
    pids_gone: tuple[int, ...] = ()  # exited (or restarted) during the fault: not in cpu_share

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Starvation:
    proc: NodeProcess
    leader_pid: int
    share: float
    period_ms: int
    mechanism: str
    ticks0: dict[int, int]
    started: float
    cgroup: Path | None = None
    origins: dict[int, Path] = field(default_factory=dict)
    stat0: dict[str, int] = field(default_factory=dict)
    duty: _DutyCycle | None = None


class CpuStarver:
    """Starves nodes of one cluster; `unstarve_all()` undoes everything (the cluster's close)."""

    def __init__(self, run_dir: str | Path, *, v1_root: Path = CGROUP_V1_CPU_ROOT,
                 v2_roots: tuple[Path, ...] = CGROUP_V2_ROOTS) -> None:
        self.cluster_id = cluster_id(run_dir)
        self._v1_root = v1_root
        self._v2_roots = v2_roots
        self._lock = threading.Lock()
        self._active: dict[str, _Starvation] = {}
        _LIVE_STARVERS.add(self)

    def starved(self) -> list[str]:
        with self._lock:
            return list(self._active)

    def starve(self, proc: NodeProcess, share: float, period_ms: int = 100, *, mechanism: str = "auto") -> str:
        """Cap `proc`'s whole process group at `share` of a core; returns the mechanism used.

        Raises:
            HarnessError: the node is not running, already starved, the share or period is out of
                range, or the mechanism is unavailable (not root, no controller).
        """
        node_id = proc.node_id
        if mechanism not in ("auto", *MECHANISMS):
            raise HarnessError(f"unknown CPU starvation mechanism {mechanism!r}; use auto or one of {MECHANISMS}")
        if mechanism == "auto":
            mechanism = cpu_mechanism(v1_root=self._v1_root, v2_roots=self._v2_roots)
        elif mechanism != "duty-cycle":
            found = cpu_mechanism(v1_root=self._v1_root, v2_roots=self._v2_roots)
            if found != mechanism:
                raise HarnessError(f"{mechanism} is not available here ({found} is); pass mechanism='auto'")
        _check_shape(node_id, share, period_ms, mechanism)
        with self._lock:
            old = self._active.get(node_id)
        if old is not None:
            if old.proc.alive and old.proc.pid == old.leader_pid:
                raise HarnessError(f"{node_id} is already starved ({old.mechanism}, share {old.share:g}); "
                                   "unstarve it first")
            self.unstarve(node_id)  # the starved process is gone: drop its leftovers first
        if proc.state not in (NodeState.RUNNING, NodeState.PAUSED) or proc.pid is None or not proc.alive:
            raise HarnessError(f"cannot starve {node_id}: it is {proc.state.value}; start it first")
        leader = proc.pid
        pids = proc.live_pids()
        if os.getpid() in pids or os.getppid() in pids:
            raise HarnessError(f"{node_id}'s session holds the harness process; the harness is never throttled")
        ticks0 = {pid: t for pid in pids if (t := process_cpu_ticks(pid)) is not None}
        entry = _Starvation(proc, leader, share, period_ms, mechanism, ticks0, time.monotonic())
        if mechanism == "duty-cycle":
            entry.duty = _DutyCycle(proc, leader, share, period_ms)
            entry.duty.start()
        else:
            self._enter_cgroup(entry, pids)
        with self._lock:
            self._active[node_id] = entry
        log.info("%s: starved to %.3g of a core per %d ms (%s, pids %s)", node_id, share, period_ms, mechanism, pids)
        return mechanism

    def unstarve(self, node_id: str) -> StarvationProof:
        """Lift the cap and return the proof. Raises HarnessError if the node is not starved."""
        with self._lock:
            entry = self._active.pop(node_id, None)
        if entry is None:
            raise HarnessError(f"{node_id} is not starved; nothing to undo")
        ticks1 = {pid: t for pid in entry.ticks0 if (t := process_cpu_ticks(pid)) is not None}
        elapsed_s = time.monotonic() - entry.started
        stats: dict[str, int] = {}
        stop_cycles = None
        try:
            if entry.duty is not None:
                stop_cycles = entry.duty.stop()
            elif entry.cgroup is not None:
                stats = read_cpu_stat(entry.cgroup / "cpu.stat")
                self._leave_cgroup(entry)
        finally:
            gone = tuple(sorted(set(entry.ticks0) - set(ticks1)))
            used = sum(ticks1[pid] - entry.ticks0[pid] for pid in ticks1) / _CLK_TCK
        proof = StarvationProof(
            node_id=node_id, mechanism=entry.mechanism, share=entry.share, period_ms=entry.period_ms,
            duration_ms=round(elapsed_s * 1000), cpu_share=round(used / elapsed_s, 4) if ticks1 else None,
            nr_periods=_delta(stats, entry.stat0, "nr_periods"),
            nr_throttled=_delta(stats, entry.stat0, "nr_throttled"),
            throttled_time_ns=_delta(stats, entry.stat0, "throttled_time"),
            stop_cycles=stop_cycles, pids=tuple(sorted(entry.ticks0)), pids_gone=gone)
        log.info("%s: unstarved: %s", node_id, proof.as_dict())
        return proof

    def unstarve_all(self) -> dict[str, StarvationProof | str]:
        """Undo every starvation; node id -> proof, or the error text of an undo that failed."""
        results: dict[str, StarvationProof | str] = {}
        for node_id in self.starved():
            try:
                results[node_id] = self.unstarve(node_id)
            except (HarnessError, OSError) as exc:
                log.error("%s: could not undo its CPU starvation: %s", node_id, exc)
                results[node_id] = str(exc)
        return results

    # ---- cgroups --------------------------------------------------------------------

    def cgroup_path(self, node_id: str, mechanism: str) -> Path:
        root = self._v1_root if mechanism == "cgroup-v1" else self._v2_root()
        return root / f"{CGROUP_PREFIX}{self.cluster_id}-{node_id}"

    def _v2_root(self) -> Path:
        return next(r for r in self._v2_roots if _v2_cpu_enabled(r))

    def _enter_cgroup(self, entry: _Starvation, pids: list[int]) -> None:
        path = self.cgroup_path(entry.proc.node_id, entry.mechanism)
        period_us = entry.period_ms * 1000
        quota_us = round(entry.share * period_us)
        try:
            path.mkdir()
        except FileExistsError:
            # a leftover of a crashed harness with the same run dir; it must hold no process
            if _cgroup_pids(path):
                raise HarnessError(f"cgroup {path} exists and holds processes {_cgroup_pids(path)}; "
                                   "is another harness starving this node?") from None
        except OSError as exc:
            raise HarnessError(f"cannot create cgroup {path}: {exc}; run as root on a host with cgroup cpu "
                               "control, or pass mechanism='duty-cycle'") from exc
        entry.cgroup = path
        try:
            if entry.mechanism == "cgroup-v1":
                (path / "cpu.cfs_period_us").write_text(str(period_us))
                (path / "cpu.cfs_quota_us").write_text(str(quota_us))
            else:
                (path / "cpu.max").write_text(f"{quota_us} {period_us}")
            entry.stat0 = read_cpu_stat(path / "cpu.stat")
            for pid in pids:
                origin = _cpu_cgroup_of(pid, path.parent, entry.mechanism)
                try:
                    (path / "cgroup.procs").write_text(str(pid))
                except ProcessLookupError:
                    continue  # exited since it was listed
                entry.origins[pid] = origin
        except OSError as exc:
            with contextlib.suppress(OSError, HarnessError):
                self._leave_cgroup(entry)
            raise HarnessError(f"cannot cap CPU through {path}: {exc}; pass mechanism='duty-cycle' "
                               "if cgroup writes are refused here") from exc

    def _leave_cgroup(self, entry: _Starvation) -> None:
        path = entry.cgroup
        assert path is not None
        unlimited = "-1" if entry.mechanism == "cgroup-v1" else f"max {entry.period_ms * 1000}"
        with contextlib.suppress(FileNotFoundError):
            (path / ("cpu.cfs_quota_us" if entry.mechanism == "cgroup-v1" else "cpu.max")).write_text(unlimited)
        root = path.parent
        for pid in _cgroup_pids(path):  # children spawned while starved are in it too
            target = entry.origins.get(pid, root)
            try:
                (target / "cgroup.procs").write_text(str(pid))
            except ProcessLookupError:
                continue
            except OSError:
                (root / "cgroup.procs").write_text(str(pid))  # its old cgroup went away
        _rmdir_cgroup(path)


def _check_shape(node_id: str, share: float, period_ms: int, mechanism: str) -> None:
    if isinstance(period_ms, bool) or not isinstance(period_ms, int) or not (
            CFS_PERIOD_MIN_MS <= period_ms <= CFS_PERIOD_MAX_MS):
        raise HarnessError(f"starve {node_id}: period_ms must be an integer in "
                           f"[{CFS_PERIOD_MIN_MS}, {CFS_PERIOD_MAX_MS}], got {period_ms!r}")
    top = 1.0 if mechanism == "duty-cycle" else float(os.cpu_count() or 1)
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= top:
        raise HarnessError(f"starve {node_id}: share must be in (0, {top:g}] of a core for {mechanism}, "
                           f"got {share!r}")
    if mechanism == "duty-cycle":
        run_ms, stop_ms = share * period_ms, (1 - share) * period_ms
        if share < 1 and min(run_ms, stop_ms) < DUTY_SLICE_MIN_MS:
            raise HarnessError(f"starve {node_id}: a duty cycle of {run_ms:g} ms run / {stop_ms:g} ms stopped "
                               f"has a slice under {DUTY_SLICE_MIN_MS} ms; use a longer period_ms")
    elif share * period_ms * 1000 < CFS_QUOTA_MIN_US:
        raise HarnessError(f"starve {node_id}: quota {share * period_ms:g} ms per period is under the kernel's "
                           f"{CFS_QUOTA_MIN_US // 1000} ms minimum; use a longer period_ms")


def _delta(stats: dict[str, int], before: dict[str, int], name: str) -> int | None:
    if name not in stats:
        return None
    return stats[name] - before.get(name, 0)


def _cgroup_pids(path: Path) -> list[int]:
    try:
        return [int(line) for line in (path / "cgroup.procs").read_text().split()]
    except FileNotFoundError:
        return []


def _cpu_cgroup_of(pid: int, root: Path, mechanism: str) -> Path:
    """The cgroup dir `pid` is in now, in the hierarchy mounted at `root` (the root if unknown)."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return root
    for line in lines:
        _, controllers, rel = line.split(":", 2)
        v1_cpu = mechanism == "cgroup-v1" and "cpu" in controllers.split(",")
        if v1_cpu or (mechanism == "cgroup-v2" and controllers == ""):
            candidate = root / rel.lstrip("/")
            return candidate if candidate.is_dir() else root
    return root


def _rmdir_cgroup(path: Path) -> None:
    deadline = time.monotonic() + CGROUP_RMDIR_BUDGET_MS / 1000
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() >= deadline:
                raise HarnessError(f"cannot remove cgroup {path}: {exc}; it holds {_cgroup_pids(path)}: "
                                   f"move them to {path.parent}/cgroup.procs and rmdir it") from exc
            time.sleep(CGROUP_RMDIR_RETRY_S)


class _DutyCycle:
    """SIGCONT for share x period, SIGSTOP for the rest, on the node's process group.

    Never resumes a node the harness paused (`NodeProcess.pause`), and stops signalling once the
    node's pid is no longer the one it was started on (a restart, an exit).
    """

    def __init__(self, proc: NodeProcess, leader_pid: int, share: float, period_ms: int) -> None:
        self._proc = proc
        self._leader = leader_pid
        self._run_s = share * period_ms / 1000
        self._stop_s = (1 - share) * period_ms / 1000
        self._done = threading.Event()
        self.stop_cycles = 0
        self._thread = threading.Thread(target=self._loop, name=f"{proc.node_id}-duty-cycle", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> int:
        """End the cycle and leave the node running (or paused, if the harness paused it)."""
        self._done.set()
        self._thread.join()
        self._cont()
        return self.stop_cycles

    def _same_process(self) -> bool:
        return self._proc.pid == self._leader and self._proc.alive

    def _signal(self, sig: signal.Signals) -> None:
        if self._same_process():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._leader, sig)

    def _cont(self) -> None:
        if self._proc.state is NodeState.PAUSED:
            return
        self._signal(signal.SIGCONT)
        # a pause() that ran between the check and the signal: put the node back where it wants to be
        if self._proc.state is NodeState.PAUSED:
            self._signal(signal.SIGSTOP)

    def _loop(self) -> None:
        if self._stop_s <= 0:
            return
        while not self._done.is_set() and self._same_process():
            self._cont()
            if self._done.wait(self._run_s):
                return
            self._signal(signal.SIGSTOP)
            self.stop_cycles += 1
            if self._done.wait(self._stop_s):
                return


_LIVE_STARVERS: weakref.WeakSet[CpuStarver] = weakref.WeakSet()


def _unstarve_all_at_exit() -> None:
    for starver in list(_LIVE_STARVERS):
        starver.unstarve_all()


# registered after harness.exits' hook (this module imports it), so it runs before the nodes are killed
atexit.register(_unstarve_all_at_exit)
