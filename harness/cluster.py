"""A local multi-process cluster: start order, fixed ports, run dirs, cluster.json, teardown.

Owns the set of `NodeProcess`es of one cluster and the run dir they share; does not know
what a node does inside (it reads state only through Admin and the name server's gRPC API).

    with LocalCluster(time_scale=0.05) as cluster:       # namesrv-0 and the broker-a group
        producer = Producer(cluster.namesrv_addr)
        cluster.kill("broker-a-0"); cluster.restart("broker-a-0")   # same address after restart
        assert not cluster.unexpected_exits

Every name server and broker also has a fixed RocketMQ remoting port (`remoting_addr`); a real
RocketMQ client takes `namesrv_remoting_addr` as its namesrvAddr.

The run dir and its cluster.json are `harness.run_dir`'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import secrets
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from harness.clockfault import ClockState, clock_jump, clock_reset, clock_skew
from harness.cpu import CpuStarver, StarvationProof
from harness.disk import DiskFill, StoreMount, StoreMounts
from harness.errors import HarnessError, NamesrvUnreachable
from harness.exits import UnexpectedExit
from harness.links import DIALED_ROLES, ClusterLinks
from harness.namesrv_view import NamesrvView
from harness.ports import LOCALHOST, PortAllocator
from harness.process import NodeProcess, NodeState
from harness.request_journal import journal_path
from harness.run_dir import (
    CLUSTER_JSON,
    cluster_json,
    make_run_dir,
    namesrv_remoting,
    rocketmq5_endpoints,
    write_json_atomic,
)
from harness.spec import REMOTING_ROLES, ClusterSpec, NodeConfig, NodeSpec
from harness.waiting import wait_until
from nodes.common.config import ConsumerConfig, NamesrvConfig, Timing
from nodes.common.constants import CLUSTER_CREDENTIAL_BYTES as CREDENTIAL_BYTES

log = logging.getLogger(__name__)

# (node spec, path of its config.json) -> argv; the default runs `python -m nodes <role> ...`.
CommandFactory = Callable[[NodeSpec, Path], Sequence[str]]


def routable_budget_ms(timing: Timing) -> int:
    """How long a started broker may take to show up at the name server.

    It registers at once; a lost first attempt is retried after one register interval.
    """
    return 2 * timing.register_interval_ms + timing.register_timeout_ms


class LocalCluster:
    """Name servers, brokers and consumers as real processes on 127.0.0.1.

    Args:
        spec: the topology and settings; `ClusterSpec.default()` when None.
        time_scale: overrides the spec's time scale when given.
        run_dir: where configs, logs and stores go; a fresh `./runs/<utc>-<pid>/` when None.
        detach: start nodes so they can outlive this process (see `detach()`).
        start: start the nodes now (default); otherwise call `start()`.
        command: builds a node's argv instead of `python -m nodes` (test stand-ins).
    """

    def __init__(self, spec: ClusterSpec | None = None, *, time_scale: float | None = None,
                 run_dir: str | Path | None = None, detach: bool = False, start: bool = True,
                 command: CommandFactory | None = None, links: bool = False) -> None:
        spec = spec if spec is not None else ClusterSpec.default()
        if links and detach:
            raise HarnessError("link proxies live in the harness process: a detached cluster cannot have them")
        if time_scale is not None:
            spec = spec.with_time_scale(time_scale)
        self.spec = spec
        self.timing = spec.scaled_timing()
        self.run_dir = make_run_dir(run_dir)
        self._detach = detach
        self._lock = threading.RLock()
        self._unexpected: list[UnexpectedExit] = []
        self._closed = False
        self._detached = False
        self._ports = PortAllocator()
        self.links: ClusterLinks | None = None
        try:
            ports = dict(zip([n.id for n in spec.nodes], self._ports.allocate(len(spec.nodes)), strict=True))
            self._port_of = ports
            remoting = spec.remoting_nodes()
            self._remoting_port_of = dict(zip([n.id for n in remoting], self._ports.allocate(len(remoting)),
                                              strict=True))
            brokers = spec.broker_nodes()
            self._rocketmq5_port_of = dict(zip([n.id for n in brokers], self._ports.allocate(len(brokers)),
                                               strict=True))
            # one control-plane secret per cluster, into each node's config file only
            self._credential = secrets.token_hex(CREDENTIAL_BYTES)
            configs = spec.render_all(ports=ports, run_dir=self.run_dir,
                                      remoting_ports=self._remoting_port_of, credential=self._credential,
                                      rocketmq5_ports=self._rocketmq5_port_of)
            # With links, node-to-node traffic goes through harness-owned proxies (partitions).
            if links:
                self.links = ClusterLinks(journal_path=journal_path(self.run_dir))
                configs = {node_id: self._wire_links(node_id, config) for node_id, config in configs.items()}
            self._nodes: dict[str, NodeProcess] = {}
            for n in spec.start_order():
                node_dir = self.run_dir / n.id
                argv = list(command(n, node_dir / "config.json")) if command is not None else None
                self._nodes[n.id] = NodeProcess(
                    n.id, n.role, node_dir, config=configs[n.id], argv=argv, detached=detach,
                    on_unexpected_exit=self._record_exit)
            self._namesrv = NamesrvView(self.namesrv_addr)
            self.write_cluster_json()
        except BaseException:
            self._ports.release()
            if self.links is not None:
                self.links.close()
            raise
        if start:
            self.start()

    def _dialed_addrs(self) -> dict[str, str]:
        return {n.id: f"{LOCALHOST}:{self._port_of[n.id]}" for n in self.spec.nodes if n.role in DIALED_ROLES}

    def _wire_links(self, node_id: str, config: NodeConfig) -> NodeConfig:
        if self.links is None or isinstance(config, NamesrvConfig):
            return config  # name servers dial no one
        # a consumer's links to the brokers journal its requests that matter (commits, locks, ...)
        brokers = [n.id for n in self.spec.broker_nodes()] if isinstance(config, ConsumerConfig) else []
        overrides = self.links.overrides_for(node_id, self._dialed_addrs(), journal_to=brokers)
        return dataclasses.replace(config, dial_overrides={**config.dial_overrides, **overrides})

    # ---- partitions (need links=True) -------------------------------------------------

    def _require_links(self) -> ClusterLinks:
        if self.links is None:
            raise HarnessError("this cluster has no link proxies: start it with LocalCluster(..., links=True)")
        return self.links

    def client_dial_overrides(self, client_name: str) -> dict[str, str]:
        """Dial overrides for a client running in the harness, so partitions reach it too."""
        return self._require_links().overrides_for(client_name, self._dialed_addrs())

    def partition(self, *components: Iterable[str], mode: str = "DROP") -> list[str]:
        """Cut every link between the given groups of node ids; returns the links cut."""
        return self._require_links().partition(components, mode)

    def isolate(self, node_id: str, mode: str = "DROP") -> list[str]:
        return self._require_links().isolate(node_id, mode)

    def cut(self, src: str, dst: str, mode: str = "DROP", backward: str | None = None) -> None:
        self._require_links().cut(src, dst, mode, backward)

    def heal(self) -> None:
        """Every link back to OPEN; toxics stay in force (`clear_toxics` removes them)."""
        self._require_links().heal()

    def link_stats(self) -> dict[str, dict[str, Any]]:
        return self._require_links().proxy.stats()

    def add_toxic(self, src: str, dst: str, toxic: Any, direction: str = "both", *, rng: Any = None) -> str:
        """Slow, stall or cut link `src -> dst` with a `harness.toxics` toxic or its dict, on live
        and new connections; direction "forward" (src->dst), "backward" or "both"; `rng` (a
        random.Random) feeds its draws. Returns its id. `heal()` leaves toxics in force: remove
        them with `remove_toxic` / `clear_toxics`."""
        return self._require_links().add_toxic(src, dst, toxic, direction, rng=rng)

    def remove_toxic(self, src: str, dst: str, toxic_id: str) -> None:
        self._require_links().remove_toxic(src, dst, toxic_id)

    def clear_toxics(self, src: str | None = None, dst: str | None = None) -> list[str]:
        """Remove every toxic, or those on links from src and/or to dst; returns their ids."""
        return self._require_links().clear_toxics(src, dst)

    # ---- lifecycle ------------------------------------------------------------------

    def start(self, *, wait_routable: bool = True) -> LocalCluster:
        """Start every node: name servers, then masters, then slaves, a tier at a time.

        With `wait_routable`, each broker tier must show up at the name server before the
        next starts (slaves find their master there). On any failure, including Ctrl-C,
        everything started so far is killed before the error propagates.
        """
        try:
            self._resources()[1].mount_all()  # before any broker first opens its store
            for tier in self.spec.tiers():
                procs = [self._nodes[n.id] for n in tier]
                for proc in procs:
                    proc.spawn()
                for proc in procs:
                    proc.wait_ready()
                self.write_cluster_json()
                if wait_routable and tier[0].role == "broker":
                    self.wait_until_routable()
        except BaseException:
            self.close(graceful=False)
            raise
        return self

    def close(self, *, graceful: bool = True) -> None:
        """Stop every node (brokers first), kill stragglers, and check no pid survives.

        Idempotent. Raises HarnessError if a process survives SIGKILL.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        errors: list[str] = self._undo_starvations()
        try:
            if graceful:
                if self.links is not None:
                    self.links.heal()  # a stopping broker still unregisters from its name server
                for tier in reversed(self.spec.tiers()):
                    self._stop_parallel([self._nodes[n.id] for n in tier])
        finally:
            for proc in self._nodes.values():
                try:
                    proc.close()
                except HarnessError as exc:
                    errors.append(str(exc))
            errors += self._resources()[1].unmount_all()  # every node is gone: nothing holds a store
            self._namesrv.close()
            self._ports.release()
            if self.links is not None:
                self.links.close()
            with contextlib.suppress(OSError):
                self.write_cluster_json()
        if errors:
            raise HarnessError("; ".join(errors))

    def add_node(self, node: NodeSpec, *, start: bool = True) -> NodeProcess:
        """Add a node to the running cluster (e.g. one more consumer): a port, a config, a process.

        With `start`, it is spawned and awaited until READY. Raises SpecError for a bad node.
        """
        with self._lock:
            if self._closed:
                raise HarnessError(f"cannot add {node.id}: the cluster is closed")
            spec = self.spec.with_nodes(node)
            port = self._ports.allocate(1)[0]
            ports = {**self._port_of, node.id: port}
            if node.role in REMOTING_ROLES:
                self._remoting_port_of[node.id] = self._ports.allocate(1)[0]
            if node.role == "broker":
                self._rocketmq5_port_of[node.id] = self._ports.allocate(1)[0]
            self.spec, self._port_of = spec, ports
            config = self._wire_links(node.id, spec.render(node.id, ports=ports, run_dir=self.run_dir,
                                                           remoting_ports=self._remoting_port_of,
                                                           credential=self._credential,
                                                           rocketmq5_ports=self._rocketmq5_port_of))
            proc = NodeProcess(node.id, node.role, self.run_dir / node.id, config=config, detached=self._detach,
                               on_unexpected_exit=self._record_exit)
            self.spec, self._port_of = spec, ports
            self._nodes[node.id] = proc
        if start:
            proc.start()
        self.write_cluster_json()
        return proc

    def detach(self) -> None:
        """Leave the nodes running and stop supervising them (`mqlab up --detach`).

        Stop them later with `mqlab down --run-dir <run_dir>`.
        """
        with self._lock:
            self._detached = True
            self._closed = True
        self.write_cluster_json()
        for proc in self._nodes.values():
            proc.release()
        self._namesrv.close()
        self._ports.release()

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- nodes ----------------------------------------------------------------------

    @property
    def namesrv_addr(self) -> str:
        """The first name server's address (what clients are given)."""
        return self.namesrv_addrs[0]

    @property
    def namesrv_addrs(self) -> list[str]:
        return [self._nodes[n.id].addr for n in self.spec.namesrv_nodes()]

    @property
    def rocketmq5_endpoints(self) -> str:
        """The masters' RocketMQ 5 endpoints, `;`-joined: a 5.x client's `endpoints`."""
        return rocketmq5_endpoints(self._nodes.values())

    @property
    def namesrv_remoting_addr(self) -> str:
        """Every name server's RocketMQ remoting address, `;`-joined: a RocketMQ client's namesrvAddr."""
        return namesrv_remoting(self._nodes.values())

    def node(self, node_id: str) -> NodeProcess:
        try:
            return self._nodes[node_id]
        except KeyError:
            raise HarnessError(f"no node {node_id!r} in this cluster; nodes are {', '.join(self._nodes)}") from None

    def nodes(self, role: str | None = None) -> list[NodeProcess]:
        """Every node in start order, or only those of `role`."""
        return [p for p in self._nodes.values() if role is None or p.role == role]

    def kill(self, node_id: str) -> int:
        """SIGKILL a node (the chaos crash). Returns its exit code."""
        try:
            return self.node(node_id).kill()
        finally:
            self.write_cluster_json()

    def stop(self, node_id: str, grace_ms: int | None = None) -> int:
        """SIGTERM a node, SIGKILL it after the grace period. Returns its exit code."""
        try:
            return self.node(node_id).stop(grace_ms)
        finally:
            self.write_cluster_json()

    def restart(self, node_id: str, *, kill: bool = False) -> NodeProcess:
        """Stop (or kill) a node if it runs, and start it again on the same port."""
        try:
            return self.node(node_id).restart(kill=kill)
        finally:
            self.write_cluster_json()

    def pause(self, node_id: str) -> None:
        self.node(node_id).pause()

    def resume(self, node_id: str) -> None:
        self.node(node_id).resume()

    # ---- clock faults (nodes started with clock control: ClusterSpec.with_clock_control) ----

    def clock_jump(self, node_id: str, delta_ms: int) -> ClockState:
        """Step a node's wall clock by `delta_ms` (the preloaded shift); returns what is now in force."""
        return clock_jump(self.node(node_id), delta_ms, log_dir=self.run_dir)

    def clock_skew(self, node_id: str, rate: float, *, step_ms: int = 0) -> ClockState:
        """Run a node's lease and timer clock at `rate` (and step it by `step_ms`); returns what is in force."""
        return clock_skew(self.node(node_id), rate, step_ms=step_ms, log_dir=self.run_dir)

    def clock_reset(self, node_id: str) -> ClockState:
        """Heal every clock fault of a node: no jump, rate 1, no step."""
        return clock_reset(self.node(node_id), log_dir=self.run_dir)

    @property
    def unexpected_exits(self) -> list[UnexpectedExit]:
        """Every exit nobody asked for, in order (a copy)."""
        with self._lock:
            return list(self._unexpected)

    def assert_no_unexpected_exits(self) -> None:
        exits = self.unexpected_exits
        if exits:
            details = "\n\n".join(f"{e}\n{e.log_tail}" for e in exits)
            raise AssertionError(f"{len(exits)} node(s) exited unexpectedly:\n{details}")

    # ---- resource faults: starved CPUs (harness.cpu), full store disks (harness.disk) ----

    def starve(self, node_id: str, share: float, period_ms: int = 100, *, mechanism: str = "auto") -> str:
        """Cap a node's process group at `share` of a core; returns the mechanism used
        (cgroup-v1, cgroup-v2 or duty-cycle: see `harness.cpu`). `close()` undoes it."""
        return self._resources()[0].starve(self.node(node_id), share, period_ms, mechanism=mechanism)

    def unstarve(self, node_id: str) -> StarvationProof:
        """Lift a node's CPU cap; the proof holds cpu.stat deltas and the measured CPU share."""
        return self._resources()[0].unstarve(node_id)

    def fill_disk(self, node_id: str, target_ratio: float) -> DiskFill:
        """Fill a broker's store filesystem to `target_ratio` (used / (used + available))."""
        return self._resources()[1].fill(node_id, target_ratio)

    def free_disk(self, node_id: str) -> DiskFill:
        """Remove what `fill_disk` put on a broker's store filesystem."""
        return self._resources()[1].free(node_id)

    def store_mounts(self) -> list[StoreMount]:
        """The store filesystems mounted for this cluster (`ClusterSpec.with_store_filesystem`)."""
        return self._resources()[1].mounts()

    def _resources(self) -> tuple[CpuStarver, StoreMounts]:
        with self._lock:
            if not hasattr(self, "_starver"):  # made at first use: start() and close() reach them too
                self._starver = CpuStarver(self.run_dir)
                self._store_fs = StoreMounts(self.run_dir, self.spec.store_filesystems)
            return self._starver, self._store_fs

    def _undo_starvations(self) -> list[str]:
        """Unstarve every node before they stop: a node a duty cycle left SIGSTOPped cannot act on SIGTERM."""
        undone = self._resources()[0].unstarve_all()
        return [f"{node_id}: {result}" for node_id, result in undone.items() if isinstance(result, str)]

    # ---- observation ----------------------------------------------------------------

    def wait_until_routable(self, topic: str | None = None, budget_ms: int | None = None) -> None:
        """Wait until every running broker is registered (since its last start) with the first
        name server, and, given a topic, until its route lists a queue on every broker group.

        Raises:
            WaitTimeout: the budget (default: `routable_budget_ms(timing)`) ran out; the message
                lists what was still missing.
        """
        budget = budget_ms if budget_ms is not None else routable_budget_ms(self.timing)
        what = f"brokers to register with {self.namesrv_addr}" + (f" and route topic {topic}" if topic else "")
        wait_until(lambda: self._routing_gaps(topic), budget, what, done=lambda gaps: not gaps,
                   interval_ms=max(20, min(200, self.timing.register_interval_ms // 10)),
                   ignore=(NamesrvUnreachable,))

    def describe(self, timeout_ms: int = 2_000) -> list[dict[str, Any]]:
        """One dict per node: id, role, addr, remoting_addr, pid, run_dir, process (harness view), alive,
        and from Admin.Describe state, status_line, details; `error` if it did not answer."""
        rows = []
        for proc in self._nodes.values():
            row: dict[str, Any] = {
                "id": proc.node_id, "role": proc.role, "addr": proc.addr, "remoting_addr": proc.remoting_addr,
                "pid": proc.pid if proc.alive else None, "run_dir": str(proc.run_dir),
                "process": proc.state.value, "alive": proc.alive,
                "state": "DOWN", "status_line": "", "details": {}, "error": None,
            }
            if proc.state in (NodeState.RUNNING, NodeState.STARTING):
                try:
                    info = proc.describe(timeout_ms)
                    row.update(state=info["state"], status_line=info["status_line"], details=info["details"])
                except HarnessError as exc:
                    row.update(state="UNREACHABLE", error=str(exc))
            elif proc.state is NodeState.PAUSED:
                row["state"] = "PAUSED"
            rows.append(row)
        return rows

    def cluster_info(self) -> dict[str, Any]:
        """The contents of cluster.json."""
        return cluster_json(self.namesrv_addr, self.spec.time_scale, self._nodes.values())

    def write_cluster_json(self) -> Path:
        path = self.run_dir / CLUSTER_JSON
        with self._lock:
            write_json_atomic(path, self.cluster_info())
        return path

    # ---- internals ------------------------------------------------------------------

    def _record_exit(self, record: UnexpectedExit) -> None:
        with self._lock:
            self._unexpected.append(record)
        with contextlib.suppress(OSError):
            self.write_cluster_json()

    def _stop_parallel(self, procs: list[NodeProcess]) -> None:
        def stop(proc: NodeProcess) -> None:
            with contextlib.suppress(HarnessError):
                if proc.state in (NodeState.RUNNING, NodeState.PAUSED, NodeState.STARTING):
                    proc.stop()

        threads = [threading.Thread(target=stop, args=(p,), name=f"stop-{p.node_id}") for p in procs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def _routing_gaps(self, topic: str | None) -> list[str]:
        """What keeps the cluster from being routable right now ([] when nothing)."""
        registrations = self._namesrv.registrations()
        gaps = []
        running = [n for n in self.spec.broker_nodes() if self._nodes[n.id].state is NodeState.RUNNING]
        for n in running:
            proc = self._nodes[n.id]
            if registrations.addr_of.get((n.broker_name, n.broker_id)) != proc.addr:
                gaps.append(f"{n.id} not registered")
            elif 0 < registrations.last_seen_ms.get(proc.addr, 0) < proc.started_wall_ms:
                gaps.append(f"{n.id} not re-registered since its restart")
        if topic is not None and not gaps:
            route = self._namesrv.route(topic)
            if route.answer != "SUCCESS":
                gaps.append(f"topic {topic}: {route.answer}")
            else:
                for n in running:
                    if n.is_master and n.broker_name not in route.writable_brokers:
                        gaps.append(f"topic {topic} has no writable queue on {n.broker_name}")
        return gaps
