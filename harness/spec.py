"""Cluster topology and per-node settings, and their rendering into node config files.

Owns *what* runs: which nodes, in which roles, with which config. Does not start anything
(`harness.process`) or pick ports (`harness.ports`); `render()` takes the ports it is given.

A spec is built in code (`ClusterSpec.default()`, `NodeSpec(...)`) or loaded from TOML:

    time_scale = 0.05                 # every Timing field is multiplied by this
    cluster_name = "DefaultCluster"

    [timing]                          # cluster-wide, absolute ms *after* scaling
    broker_expiry_ms = 2000

    [defaults.broker]                 # every broker (also: [defaults.namesrv])
    auto_create_topic_enable = true

    [[nodes]]                         # omit every [[nodes]] entry for the default topology
    id = "namesrv-0"
    role = "namesrv"
    [[nodes]]
    id = "broker-a-0"
    role = "broker"
    broker_name = "broker-a"
    broker_id = 0                     # 0 = master, >= 1 = slave

    [broker-a-0]                      # overrides for one node
    auto_create_topic_enable = false
    [broker-a-0.store]
    commitlog_segment_bytes = 4194304

    [[nodes]]                         # consumers start after every broker
    id = "consumer-0"
    role = "consumer"
    [consumer-0]
    group = "g1"
    subscriptions = { T = "*" }       # topic -> tag expression
    workload = "ack"

Every problem raises `SpecError` naming the table or key to fix; specs validate on
construction, including rendering every node's config once with placeholder ports.
"""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from harness.disk import STORE_FS_DEFAULT_BYTES, StoreFilesystem
from harness.errors import HarnessError, SpecError
from harness.ports import LOCALHOST
from harness.spec_overrides import NESTED, check_options, deep_merge, nested_config
from nodes.common import constants as c
from nodes.common.config import BrokerConfig, ConsumerConfig, NamesrvConfig, Timing
from nodes.common.errors import ConfigError

ROLES = ("namesrv", "broker", "consumer")
# Roles with a RocketMQ remoting listener beside gRPC: each gets a second fixed port.
REMOTING_ROLES = ("namesrv", "broker")
ROLE_CONFIG: dict[str, type] = {"namesrv": NamesrvConfig, "broker": BrokerConfig, "consumer": ConsumerConfig}
NodeConfig = NamesrvConfig | BrokerConfig | ConsumerConfig
NODE_ID_RE = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
BROKER_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
TIME_SCALE_MAX = 100.0

_TOP_LEVEL = ("time_scale", "cluster_name", "timing", "defaults", "nodes")
_NODE_ENTRY_KEYS = ("id", "role", "broker_name", "broker_id")


@dataclass(frozen=True)
class NodeSpec:
    """One node of the topology. `options` override fields of its role's config dataclass."""

    id: str
    role: str
    broker_name: str | None = None
    broker_id: int | None = None
    options: Mapping[str, Any] = field(default_factory=dict, hash=False)

    @property
    def is_master(self) -> bool:
        return self.role == "broker" and self.broker_id == c.MASTER_ID

    @property
    def start_tier(self) -> int:
        """Start order: name servers (0), then masters (1), then slaves (2), then consumers (3)."""
        if self.role == "namesrv":
            return 0
        if self.role == "consumer":
            return 3
        return 1 if self.is_master else 2


DEFAULT_NODES: tuple[NodeSpec, ...] = (
    NodeSpec("namesrv-0", "namesrv"),
    NodeSpec("broker-a-0", "broker", broker_name="broker-a", broker_id=0),
    NodeSpec("broker-a-1", "broker", broker_name="broker-a", broker_id=1),
)


@dataclass(frozen=True)
class ClusterSpec:
    """A whole cluster: nodes, the time scale, and cluster-wide settings.

    Attributes:
        nodes: every node, in declaration order (start order comes from `start_order()`).
        time_scale: multiplies every `Timing` field (see `nodes.common.config.Timing.scaled`).
        cluster_name: the brokers' cluster name.
        timing: `Timing` fields set to absolute ms after scaling, for every node.
        defaults: role -> options applied to every node of that role (node options win).
        store_filesystems: broker id -> the filesystem of its own its store gets
            (`with_store_filesystem`, mounted by the cluster before the broker first starts).
    """

    nodes: tuple[NodeSpec, ...] = DEFAULT_NODES
    time_scale: float = 1.0
    cluster_name: str = c.DEFAULT_CLUSTER_NAME
    timing: Mapping[str, int] = field(default_factory=dict, hash=False)
    defaults: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, hash=False)
    store_filesystems: Mapping[str, StoreFilesystem] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", tuple(self.nodes))
        self.validate()

    # ---- construction ---------------------------------------------------------------

    @classmethod
    def default(cls, *, time_scale: float = 1.0) -> ClusterSpec:
        """namesrv-0 plus the broker-a group."""
        return cls(time_scale=time_scale)

    @classmethod
    def from_toml(cls, path: str | Path) -> ClusterSpec:
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise SpecError(f"cannot read spec file {path}: {exc.strerror}; check the path") from exc
        return cls.from_toml_text(text, source=str(path))

    @classmethod
    def from_toml_text(cls, text: str, *, source: str = "<spec>") -> ClusterSpec:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise SpecError(f"{source}: not valid TOML ({exc}); fix the syntax") from exc
        return cls.from_dict(data, source=source)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "<spec>") -> ClusterSpec:
        """Build from parsed TOML (see the module docstring for the layout)."""
        if "nodes" in data:
            entries = data["nodes"]
            if not isinstance(entries, list) or not entries:
                raise SpecError(f"{source}: 'nodes' must be a non-empty array of [[nodes]] tables")
            nodes = [_node_from_entry(entry, source) for entry in entries]
        else:
            nodes = list(DEFAULT_NODES)
        ids = [n.id for n in nodes]
        overrides: dict[str, Mapping[str, Any]] = {}
        for key, value in data.items():
            if key in _TOP_LEVEL:
                continue
            if not isinstance(value, dict):
                raise SpecError(
                    f"{source}: unknown top-level setting {key!r}; known settings are "
                    f"{', '.join(_TOP_LEVEL[:2])} and the tables [timing], [defaults.<role>], [<node id>]")
            if key not in ids:
                raise SpecError(
                    f"{source}: table [{key}] names no node; nodes are {', '.join(ids)} "
                    "(add the node under [[nodes]] or fix the table name)")
            overrides[key] = value
        nodes = [dataclasses.replace(n, options=deep_merge(n.options, overrides.get(n.id, {}))) for n in nodes]
        kwargs: dict[str, Any] = {"nodes": tuple(nodes)}
        for key in ("time_scale", "cluster_name", "timing", "defaults"):
            if key in data:
                kwargs[key] = data[key]
        try:
            return cls(**kwargs)
        except SpecError as exc:
            raise SpecError(f"{source}: {exc}") from exc

    def with_time_scale(self, time_scale: float) -> ClusterSpec:
        return dataclasses.replace(self, time_scale=time_scale)

    def with_node_options(self, node_id: str, **options: Any) -> ClusterSpec:
        """A copy with `options` deep-merged into one node's overrides."""
        self.node(node_id)
        nodes = tuple(
            dataclasses.replace(n, options=deep_merge(n.options, options)) if n.id == node_id else n
            for n in self.nodes)
        return dataclasses.replace(self, nodes=nodes)

    def with_clock_control(self, *node_ids: str, wall: bool = False) -> ClusterSpec:
        """A copy whose named nodes start with clock control (`clock_control`): a SkewedClock for
        rate skew and steps, and with `wall` the wall-clock shift preloaded for wall-clock jumps
        (harness.clockfault). Off for every other node, which keeps the system clock and pays nothing."""
        mode = c.CLOCK_CONTROL_WALL if wall else c.CLOCK_CONTROL_RATE
        spec = self
        for node_id in node_ids:
            spec = spec.with_node_options(node_id, clock_control=mode)
        return spec

    def with_nodes(self, *extra: NodeSpec) -> ClusterSpec:
        return dataclasses.replace(self, nodes=(*self.nodes, *extra))

    def with_consumers(self, count: int, **options: Any) -> ClusterSpec:
        """A copy with `count` more consumer nodes (`consumer-<n>`, numbered on from the last),
        each with `options` (ConsumerConfig fields, e.g. group=, subscriptions=)."""
        taken = {n.id for n in self.nodes}
        extra, index = [], 0
        while len(extra) < count:
            node_id = f"consumer-{index}"
            index += 1
            if node_id not in taken:
                extra.append(NodeSpec(node_id, "consumer", options=dict(options)))
        return self.with_nodes(*extra)

    # ---- store filesystems (harness.disk) -------------------------------------------------

    def with_store_filesystem(self, node_ids: str | Iterable[str] = "brokers", size_bytes: int = STORE_FS_DEFAULT_BYTES,
                              kind: str = "tmpfs") -> ClusterSpec:
        """A copy in which each broker of `node_ids` ("brokers": every broker) keeps its store on a
        filesystem of its own: a tmpfs or a loop-mounted ext4 image of `size_bytes` (needs root)."""
        ids = [n.id for n in self.broker_nodes()] if node_ids == "brokers" else (
            [node_ids] if isinstance(node_ids, str) else list(node_ids))
        fs = StoreFilesystem(size_bytes, kind)
        return dataclasses.replace(self, store_filesystems={**self.store_filesystems, **dict.fromkeys(ids, fs)})

    def _validate_store_filesystems(self) -> None:
        if not isinstance(self.store_filesystems, Mapping):
            raise SpecError("store_filesystems must map broker ids to StoreFilesystem; use with_store_filesystem")
        brokers = {n.id for n in self.broker_nodes()}
        for node_id, fs in self.store_filesystems.items():
            if node_id not in brokers:
                raise SpecError(f"store filesystem for {node_id!r}: only a broker has a store; brokers are "
                                f"{', '.join(sorted(brokers))}")
            if not isinstance(fs, StoreFilesystem):
                raise SpecError(f"store filesystem for {node_id}: expected a StoreFilesystem, got {fs!r}")
            try:
                fs.validate(f"store filesystem for {node_id}")
            except HarnessError as exc:
                raise SpecError(str(exc)) from None

    # ---- queries --------------------------------------------------------------------

    def node(self, node_id: str) -> NodeSpec:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise SpecError(f"no node {node_id!r} in the spec; nodes are {', '.join(n.id for n in self.nodes)}")

    def start_order(self) -> list[NodeSpec]:
        return sorted(self.nodes, key=lambda n: n.start_tier)

    def tiers(self) -> list[list[NodeSpec]]:
        """Nodes grouped by start tier, in start order; a tier may start in parallel."""
        grouped: dict[int, list[NodeSpec]] = {}
        for n in self.start_order():
            grouped.setdefault(n.start_tier, []).append(n)
        return [grouped[t] for t in sorted(grouped)]

    def namesrv_nodes(self) -> list[NodeSpec]:
        return [n for n in self.nodes if n.role == "namesrv"]

    def broker_nodes(self) -> list[NodeSpec]:
        return [n for n in self.nodes if n.role == "broker"]

    def remoting_nodes(self) -> list[NodeSpec]:
        """The nodes with a RocketMQ remoting listener (name servers and brokers)."""
        return [n for n in self.nodes if n.role in REMOTING_ROLES]

    def consumer_nodes(self) -> list[NodeSpec]:
        return [n for n in self.nodes if n.role == "consumer"]

    def effective_options(self, node: NodeSpec) -> dict[str, Any]:
        return deep_merge(self.defaults.get(node.role, {}), node.options)

    def scaled_timing(self) -> Timing:
        try:
            timing = dataclasses.replace(Timing().scaled(self.time_scale), **dict(self.timing))
            timing.validate()
        except ConfigError as exc:
            raise SpecError(f"[timing] with time_scale {self.time_scale}: {exc}") from exc
        return timing

    # ---- rendering ------------------------------------------------------------------

    def render(self, node_id: str, *, ports: Mapping[str, int], run_dir: str | Path,
               remoting_ports: Mapping[str, int] | None = None, credential: str = "",
               rocketmq5_ports: Mapping[str, int] | None = None) -> NodeConfig:
        """The complete config of one node, ready for `save_node_config`.

        Args:
            node_id: the node to render.
            ports: node id -> port, for every node (brokers need the name servers').
            run_dir: the cluster's run dir; the node's own is `run_dir/<node_id>`.
            remoting_ports: node id -> remoting port, for every name server and broker; None
                leaves `remoting_port` 0 (the node takes any free port).
            credential: the cluster's control-plane secret (`cluster_credential`); "" for none.
            rocketmq5_ports: node id -> RocketMQ 5 endpoint port, for every broker; None leaves
                `rocketmq5_port` 0 (the broker takes any free port).
        """
        node = self.node(node_id)
        missing = [n.id for n in self.nodes if n.id not in ports]
        if missing:
            raise SpecError(f"no port for {', '.join(missing)}; allocate one per node before rendering")
        common: dict[str, Any] = {
            "node_id": node.id,
            "listen_host": LOCALHOST,
            "port": ports[node.id],
            "run_dir": str(Path(run_dir).absolute() / node.id),
            "timing": self.scaled_timing(),
            "time_scale": self.time_scale,
        }
        if credential:
            common["cluster_credential"] = credential
        if remoting_ports is not None and node.role in REMOTING_ROLES:
            if node.id not in remoting_ports:
                raise SpecError(f"no remoting port for {node.id}; allocate one per name server and broker")
            common["remoting_port"] = remoting_ports[node.id]
        if rocketmq5_ports is not None and node.role == "broker":
            if node.id not in rocketmq5_ports:
                raise SpecError(f"no RocketMQ 5 endpoint port for {node.id}; allocate one per broker")
            common["rocketmq5_port"] = rocketmq5_ports[node.id]
        if node.role == "broker":
            common |= {
                "cluster_name": self.cluster_name,
                "broker_name": node.broker_name,
                "broker_id": node.broker_id,
                "namesrv_addrs": tuple(f"{LOCALHOST}:{ports[n.id]}" for n in self.namesrv_nodes()),
            }
        elif node.role == "consumer":
            common["namesrv_addrs"] = tuple(f"{LOCALHOST}:{ports[n.id]}" for n in self.namesrv_nodes())
        cls = ROLE_CONFIG[node.role]
        options = self.effective_options(node)
        for name, value in options.items():
            if name in NESTED:
                common[name] = nested_config(name, value)
            else:
                common[name] = tuple(value) if isinstance(value, list) else value
        try:
            config = cls(**common)
            config.validate()
        except ConfigError as exc:
            raise SpecError(f"node {node.id}: {exc}; fix the [{node.id}] or [defaults.{node.role}] table") from exc
        return config

    def render_all(self, *, ports: Mapping[str, int], run_dir: str | Path,
                   remoting_ports: Mapping[str, int] | None = None, credential: str = "",
                   rocketmq5_ports: Mapping[str, int] | None = None) -> dict[str, NodeConfig]:
        return {n.id: self.render(n.id, ports=ports, run_dir=run_dir, remoting_ports=remoting_ports,
                                  credential=credential, rocketmq5_ports=rocketmq5_ports)
                for n in self.start_order()}

    # ---- validation -----------------------------------------------------------------

    def validate(self) -> None:
        """Raise SpecError for the first problem found, saying what to change."""
        ts = self.time_scale
        if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts) or not 0 < ts <= TIME_SCALE_MAX:
            raise SpecError(f"time_scale must be a number in (0, {TIME_SCALE_MAX:g}], got {ts!r}")
        if not isinstance(self.cluster_name, str) or not BROKER_NAME_RE.match(self.cluster_name):
            raise SpecError(f"cluster_name must match {BROKER_NAME_RE.pattern}, got {self.cluster_name!r}")
        self._validate_topology()
        self._validate_timing()
        self._validate_store_filesystems()
        if not isinstance(self.defaults, Mapping):
            raise SpecError("[defaults] must hold tables named after roles, e.g. [defaults.broker]")
        for role, options in self.defaults.items():
            if role not in ROLES:
                raise SpecError(f"[defaults.{role}]: unknown role; use one of {', '.join(ROLES)}")
            check_options(ROLE_CONFIG[role], options, f"[defaults.{role}]")
        for n in self.nodes:
            check_options(ROLE_CONFIG[n.role], n.options, f"[{n.id}]")
        placeholder = {n.id: 1 for n in self.nodes}
        for n in self.nodes:
            self.render(n.id, ports=placeholder, run_dir=".")

    def _validate_topology(self) -> None:
        seen: set[str] = set()
        for n in self.nodes:
            if not isinstance(n, NodeSpec):
                raise SpecError(f"nodes must be NodeSpec objects, got {n!r}")
            if not isinstance(n.id, str) or not NODE_ID_RE.match(n.id):
                raise SpecError(f"node id {n.id!r} must match {NODE_ID_RE.pattern} (e.g. 'broker-a-0')")
            if n.id in seen:
                raise SpecError(f"node id {n.id!r} appears twice; give every node its own id")
            seen.add(n.id)
            if n.role not in ROLES:
                raise SpecError(f"node {n.id}: unknown role {n.role!r}; use one of {', '.join(ROLES)}")
            if n.role in ("namesrv", "consumer") and (n.broker_name is not None or n.broker_id is not None):
                raise SpecError(f"node {n.id}: a {n.role} takes no broker_name/broker_id; remove them")
            if n.role == "broker":
                if not isinstance(n.broker_name, str) or not BROKER_NAME_RE.match(n.broker_name):
                    raise SpecError(f"node {n.id}: a broker needs broker_name matching {BROKER_NAME_RE.pattern}")
                if isinstance(n.broker_id, bool) or not isinstance(n.broker_id, int) or n.broker_id < 0:
                    raise SpecError(f"node {n.id}: broker_id must be an integer >= 0 (0 = master, >= 1 = slave)")
            if not isinstance(n.options, Mapping):
                raise SpecError(f"node {n.id}: options must be a table of config overrides")
        if not self.namesrv_nodes():
            raise SpecError("the spec has no namesrv node; add one, e.g. id = 'namesrv-0', role = 'namesrv'")
        groups: dict[str, list[int]] = {}
        for n in self.broker_nodes():
            ids = groups.setdefault(n.broker_name or "", [])
            if n.broker_id in ids:
                raise SpecError(f"broker group {n.broker_name} has two nodes with broker_id {n.broker_id}; "
                                "give each a distinct broker_id")
            ids.append(n.broker_id or 0)
        for name, ids in groups.items():
            if c.MASTER_ID not in ids:
                raise SpecError(f"broker group {name} has no master; add a node with broker_name = "
                                f"'{name}' and broker_id = 0")

    def _validate_timing(self) -> None:
        if not isinstance(self.timing, Mapping):
            raise SpecError("[timing] must be a table of <field>_ms = <int>")
        known = {f.name for f in fields(Timing)}
        for key, value in self.timing.items():
            if key not in known:
                raise SpecError(f"[timing]: unknown field {key!r}; known fields: {', '.join(sorted(known))}")
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise SpecError(f"[timing] {key} must be a positive integer of ms, got {value!r}")
        self.scaled_timing()


def _node_from_entry(entry: Any, source: str) -> NodeSpec:
    if not isinstance(entry, dict):
        raise SpecError(f"{source}: every [[nodes]] entry must be a table")
    unknown = set(entry) - set(_NODE_ENTRY_KEYS)
    label = entry.get("id", "?")
    if unknown:
        raise SpecError(f"{source}: [[nodes]] entry {label!r} has unknown keys {sorted(unknown)}; "
                        f"entries take {', '.join(_NODE_ENTRY_KEYS)} (put config overrides in a [{label}] table)")
    if "id" not in entry or "role" not in entry:
        raise SpecError(f"{source}: every [[nodes]] entry needs an id and a role")
    return NodeSpec(id=entry["id"], role=entry["role"], broker_name=entry.get("broker_name"),
                    broker_id=entry.get("broker_id"))
