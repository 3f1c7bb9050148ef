"""Which real clients exist, what each needs installed, and how a cluster runs them as its consumers.

A real-client consumer node keeps everything a node has in the harness (its id, run dir, fixed
port, process group, stop / kill / pause, unexpected-exit watching); only its command changes.
Its links to the name server and the brokers are the same link proxies an mqlab consumer's are,
pointed at their RocketMQ remoting listeners: the client is given its name-server link's loopback
address, and that link rewrites the brokers' addresses in route answers to the client's own
broker links (`harness.remoting_rewrite`). So every partition a suite draws reaches it too.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chaos.bounds import REAL_CLIENT_TIME_SCALE, REAL_CLIENT_TIMERS_MS
from harness.bench.real_client_install import PY5_VERSION, py5_python
from harness.grpc_rewrite import endpoint_rewriter_factory
from harness.ports import LOCALHOST
from harness.remoting_rewrite import rewriter_factory
from harness.spec import ClusterSpec
from nodes.common import constants as c

if TYPE_CHECKING:
    from harness import LocalCluster

HERE = Path(__file__).resolve().parent
MQLAB = "mqlab"
PY5 = "py5"
PY5_SIMPLE = "py5-simple"
NODE5 = "node5"
CPP_VERSION = "0.4.4"
ONS_VERSION = "3.12.0"
ONS_PACKAGE = HERE / "js" / "node_modules" / "ali-ons" / "package.json"
PY5_PYTHON = py5_python()  # its own venv: see py5/requirements.txt
# Apache's RocketMQ 5 Node.js client, pinned by node5/package.json (and its lock file), installed
# beside it by the bootstrap's `npm ci`
NODE5_DIR = HERE / "node5"
NODE5_PACKAGE_NAME = "rocketmq-client-nodejs"
NODE5_PACKAGE = NODE5_DIR / "node_modules" / NODE5_PACKAGE_NAME / "package.json"
# a 5.x PushConsumer's consumption threads unless the suite sets consume_thread_min (the Node.js
# wrapper lets as many listener calls work at once)
POP_CONSUME_THREADS = 4
CPP_CONSUME_THREADS = 2  # the C++ consumer's threads unless the suite sets consume_thread_min
BOOTSTRAP = "./scripts/bootstrap.sh (scripts/mqlab runs it)"
MIXED_SUFFIX = "+" + MQLAB  # `cpp+mqlab`: a group of real clients and mqlab consumers


# Checks that replay what mqlab's own consumers journal and a real client does not: they step aside
# for a run with real consumers (mixed groups too: a replay that misses some members' state would
# fail them for it), with the reason in the run's verdict, instead of ending it "unknown".
CHECKS_SET_ASIDE: dict[str, str] = {
    "rebalance": "real RocketMQ clients journal only what their callbacks saw (deliveries): no route or "
                 "rebalance events, so which consumer owned which queue cannot be replayed; an orderly "
                 "group's queue holders are judged from the broker's lock grants by lock-exclusivity and "
                 "takeover",
}


# A RocketMQ 5 client consumes by POP: the broker picks the queue and offset of every receive, the
# client commits no offsets, owns no queue and never reads from a slave. Checks about pull offsets,
# queue ownership and read routing have nothing of it to judge.
POP_CHECKS_SET_ASIDE: dict[str, str] = {
    "rebalance": "a RocketMQ 5 (POP) client owns no queues: the broker picks the queue of every receive, so "
                 "there is no rebalance to replay",
    "read-routing": "a RocketMQ 5 (POP) client reads from masters only and is never told to read from a slave: "
                    "there is no read routing to judge; while a master is down its queues wait for it",
    "offset-resync": "a RocketMQ 5 (POP) client commits no consumer offsets (it acks each message, and the broker "
                     "moves the group's offset): there is no client commit to resync",
    "order": "order judges pull-offset discipline per queue ownership epoch; POP consumers share every queue "
             "and get redeliveries through the retry queue after an invisible time, so there are no epochs",
    "lock-exclusivity": "a RocketMQ 5 (POP) FIFO group takes no queue locks: the broker hands one batch of a queue "
                        "out at a time, which pop-fifo judges",
    "takeover": "a RocketMQ 5 (POP) FIFO group takes no queue locks: a batch its holder never acks comes back "
                "after its invisible time, which pop-redelivery bounds and pop-fifo orders",
}
# What a POP client's run is judged by instead: the brokers' pop events and the clients' acks
# (chaos.checker.checks.pop); pop-fifo only where the group is FIFO (an orderly suite).
POP_CHECKS = ("pop-ack", "pop-redelivery")
POP_FIFO_CHECK = "pop-fifo"


def checks_set_aside(checks: tuple[str, ...], client: str) -> dict[str, str]:
    """The checks of `checks` that a run with `client` as its consumers cannot judge, with why."""
    if client == MQLAB:
        return {}
    known = CLIENTS.get(client.removesuffix(MIXED_SUFFIX))
    aside = POP_CHECKS_SET_ASIDE if known is not None and known.pop else CHECKS_SET_ASIDE
    return {name: aside[name] for name in checks if name in aside}


def checks_added(client: str, orderly: bool) -> tuple[str, ...]:
    """The checks a run with `client` as its consumers gets beyond its suite's: a POP client's."""
    known = CLIENTS.get(client.removesuffix(MIXED_SUFFIX)) if client != MQLAB else None
    if known is None or not known.pop:
        return ()
    return (*POP_CHECKS, POP_FIFO_CHECK) if orderly else POP_CHECKS


class RealClientError(Exception):
    """A real client cannot run this suite, or is not installed (the message says what to do)."""


def node5_version() -> str:
    """The rocketmq-client-nodejs version node5/package.json pins."""
    return str(json.loads((NODE5_DIR / "package.json").read_text())["dependencies"][NODE5_PACKAGE_NAME])


def _node5_installed() -> str:
    """node, once the pinned Node.js 5.x client is installed beside the wrapper; RealClientError otherwise."""
    node = shutil.which("node")
    if node is None:
        raise RealClientError(f"no node on PATH for the RocketMQ 5 Node.js client: apt-get install -y nodejs npm, "
                              f"then run {BOOTSTRAP}")
    if not NODE5_PACKAGE.exists():
        raise RealClientError(f"{NODE5_PACKAGE_NAME} is not installed under {NODE5_DIR}: run {BOOTSTRAP}, "
                              f"or cd {NODE5_DIR} && npm ci")
    version, pinned = json.loads(NODE5_PACKAGE.read_text())["version"], node5_version()
    if version != pinned:
        raise RealClientError(f"{NODE5_PACKAGE_NAME} {version} is installed, mqlab pins {pinned}: run {BOOTSTRAP}")
    return node


@dataclass(frozen=True)
class RealClient:
    name: str
    summary: str
    orderly: bool  # has an orderly push consumer (broker queue locks)
    script: Path
    pop: bool = False  # consumes through RocketMQ 5's gRPC API (receive and ack), not by pulling
    extra_args: tuple[str, ...] = ()  # appended to the wrapper's command (a mode of a wrapper shared by two clients)

    def check_installed(self) -> str:
        """The interpreter to run the wrapper with; raises RealClientError with the install hint."""
        if self.name == "cpp":
            if importlib.util.find_spec("rocketmq") is None:
                raise RealClientError(f"the C++ RocketMQ client is not installed in {sys.prefix}: run {BOOTSTRAP}, "
                                      f"or {sys.executable} -m pip install rocketmq=={CPP_VERSION}")
            return sys.executable
        if self.name in (PY5, PY5_SIMPLE):
            if not PY5_PYTHON.exists():
                raise RealClientError(f"the RocketMQ 5 Python client's venv {PY5_PYTHON.parents[1]} does not exist: "
                                      f"run {BOOTSTRAP}")
            return str(PY5_PYTHON)
        if self.name == NODE5:
            return _node5_installed()
        node = shutil.which("node")
        if node is None:
            raise RealClientError(f"no node on PATH for ali-ons: apt-get install -y nodejs npm, then run {BOOTSTRAP}")
        if not ONS_PACKAGE.exists():
            raise RealClientError(f"ali-ons is not installed under {ONS_PACKAGE.parents[2]}: run {BOOTSTRAP}, "
                                  f"or cd {ONS_PACKAGE.parents[2]} && npm ci")
        version = json.loads(ONS_PACKAGE.read_text())["version"]
        if version != ONS_VERSION:
            raise RealClientError(f"ali-ons {version} is installed, mqlab pins {ONS_VERSION}: run {BOOTSTRAP}")
        return node

    def check_suite(self, suite_name: str, orderly: bool, topology: str = "single") -> None:
        if self.pop:
            # the receipt handle names each message's broker: any number of broker groups; an orderly
            # suite makes the group FIFO, whose queue holders are the clients with a batch in flight
            return
        if topology != "single":
            # the C++ binding does not say which broker group a message came from: one group only
            raise RealClientError(f"--client {self.name} runs on the single topology only, not {topology}; "
                                  "drop --topology")
        if orderly and not self.orderly:
            raise RealClientError(f"suite {suite_name} consumes orderly and the {self.name} client has no orderly "
                                  f"consumer; run it with --client cpp, or pick a suite without orderly consumption")


CLIENTS: dict[str, RealClient] = {cl.name: cl for cl in (
    RealClient("cpp", "Apache's C++ client 1.2.3 (PyPI rocketmq 0.4.4): concurrent and orderly push consumer",
               orderly=True, script=HERE / "cpp_consumer.py"),
    RealClient("ons", "ali-ons 3.12.0 (npm, JavaScript under node): concurrent push consumer", orderly=False,
               script=HERE / "ons_consumer.js"),
    RealClient(PY5, f"Apache's RocketMQ 5 Python client {PY5_VERSION} (gRPC, .venv-py5): PushConsumer over POP",
               orderly=False, script=HERE / "py5" / "consumer.py", pop=True),
    RealClient(PY5_SIMPLE, f"Apache's RocketMQ 5 Python client {PY5_VERSION} (gRPC, .venv-py5): SimpleConsumer "
               "loops over POP, a fixed invisible time and no renewal, each ack's outcome journalled",
               orderly=False, script=HERE / "py5" / "consumer.py", pop=True, extra_args=("--mode", "simple")),
    RealClient(NODE5, f"Apache's RocketMQ 5 Node.js client ({NODE5_PACKAGE_NAME} {node5_version()}, gRPC, under node): "
               "PushConsumer over POP", orderly=False, script=NODE5_DIR / "consumer.js", pop=True),
)}




def real_client(name: str) -> RealClient | None:
    """None for mqlab's own consumer; the real client of `NAME` or `NAME+mqlab` (a mixed group);
    raises RealClientError for an unknown name."""
    if name == MQLAB:
        return None
    try:
        return CLIENTS[name.removesuffix(MIXED_SUFFIX)]
    except KeyError:
        known = [MQLAB, *CLIENTS, *(f"{n}{MIXED_SUFFIX}" for n in CLIENTS)]
        raise RealClientError(f"no client {name!r}; clients are {', '.join(known)}") from None


def client_for_suite(name: str, suite: Any, topology: str = "single") -> RealClient | None:
    """`real_client(name)` once it is known to run `suite` (a chaos.suites.Suite) on `topology`;
    raises RealClientError saying why not."""
    client = real_client(name)
    if client is None:
        return None
    if suite.clock_control:
        raise RealClientError(f"{suite.name} moves the consumers' clocks through mqlab's own Clock, which a real "
                              f"client does not read: run it with the mqlab consumers (no --client)")
    client.check_suite(suite.name, suite.orderly, topology)
    if client.pop and is_mixed(name):
        raise RealClientError(f"--client {name}: a RocketMQ 5 (POP) client and mqlab's pulling consumers in one "
                              f"group would share queues two ways at once; run --client {client.name}")
    return client


def is_mixed(name: str) -> bool:
    """`NAME+mqlab`: every other consumer node (consumer-1, consumer-3, ...) stays mqlab's own."""
    return name.endswith(MIXED_SUFFIX)


def spec_for(spec: ClusterSpec, client: RealClient) -> ClusterSpec:
    """The suite's cluster at real scale with the client's own timers in every node's Timing."""
    timers = {**dict(spec.timing), **REAL_CLIENT_TIMERS_MS[client.name]}
    return dataclasses.replace(spec, time_scale=REAL_CLIENT_TIME_SCALE, timing=timers)


def wire(cluster: LocalCluster, client: RealClient, *, group: str, topic: str, orderly: bool,
         consumer_options: Mapping[str, Any], mixed: bool = False) -> dict[str, list[str]]:
    """Make every consumer node of the (not yet started) cluster a `client` process behind its links;
    with `mixed`, only every other one (consumer-0, consumer-2, ...): the rest stay mqlab's.

    Returns node id -> the command it runs (also in the run dir's `real-clients.json`).
    """
    links = cluster.links
    if links is None:
        raise RealClientError("real clients need the cluster's link proxies (LocalCluster(..., links=True))")
    exe = client.check_installed()
    if client.pop:
        commands = _wire_pop(cluster, client, exe, group=group, topic=topic, consumer_options=consumer_options)
        _write_commands(cluster, client, commands, mixed=False)
        return commands
    namesrvs = cluster.spec.namesrv_nodes()
    brokers = cluster.spec.broker_nodes()
    broker_names = sorted({b.broker_name or "" for b in brokers})
    if len(broker_names) != 1:
        # the C++ binding does not say which broker a message came from: one broker group only
        raise RealClientError(f"real-client runs need exactly one broker group, the spec has {broker_names}")
    commands: dict[str, list[str]] = {}
    for index, node in enumerate(cluster.spec.consumer_nodes()):
        if mixed and index % 2:
            continue
        proc = cluster.node(node.id)
        broker_links = {}
        for b in brokers:
            remoting = cluster.node(b.id).remoting_addr
            links.proxy.retarget(node.id, b.id, remoting)
            broker_links[remoting] = f"{LOCALHOST}:{links.proxy.port_of(node.id, b.id)}"
        ns = namesrvs[0]
        links.proxy.retarget(node.id, ns.id, cluster.node(ns.id).remoting_addr,
                             backward_filter=rewriter_factory(broker_links))
        argv = [exe, str(client.script), "--namesrv", f"{LOCALHOST}:{links.proxy.port_of(node.id, ns.id)}",
                "--group", group, "--topic", topic, "--node-id", node.id, "--port", str(proc.port),
                "--run-dir", str(proc.run_dir), "--instance", node.id, "--broker-name", broker_names[0],
                "--sleep-ms", str(int(consumer_options.get("sleep_ms", 0) or 0)),
                "--sharding-key-property", c.PROPERTY_WORKLOAD_SHARDING_KEY,
                "--seq-property", c.PROPERTY_WORKLOAD_SEQ]
        if orderly:
            argv.append("--orderly")
        if client.name == "cpp":  # ali-ons consumes one message at a time (parallelConsumeLimit 1)
            argv += ["--threads", str(int(consumer_options.get("consume_thread_min", 0) or CPP_CONSUME_THREADS))]
        proc.set_command(argv)
        commands[node.id] = argv
    _write_commands(cluster, client, commands, mixed=mixed)
    return commands


def _wire_pop(cluster: LocalCluster, client: RealClient, exe: str, *, group: str, topic: str,
              consumer_options: Mapping[str, Any]) -> dict[str, list[str]]:
    """A RocketMQ 5 client's links: each consumer node's link to each broker points at that broker's
    rocketmq5 port and rewrites every broker's rocketmq5 endpoint in the answers to this node's own
    link to it (`harness.grpc_rewrite`); the client is given those links as its endpoints."""
    links = cluster.links
    assert links is not None
    brokers = cluster.spec.broker_nodes()
    commands: dict[str, list[str]] = {}
    for node in cluster.spec.consumer_nodes():
        proc = cluster.node(node.id)
        own = {cluster.node(b.id).rocketmq5_addr: f"{LOCALHOST}:{links.proxy.port_of(node.id, b.id)}" for b in brokers}
        try:
            rewrite = endpoint_rewriter_factory(own)
        except ValueError as exc:
            raise RealClientError(f"the {client.name} client's links cannot carry its traffic: {exc}") from exc
        for b in brokers:
            links.proxy.retarget(node.id, b.id, cluster.node(b.id).rocketmq5_addr, backward_filter=rewrite)
        masters = [own[cluster.node(b.id).rocketmq5_addr] for b in brokers if b.is_master]
        others = [own[cluster.node(b.id).rocketmq5_addr] for b in brokers if not b.is_master]
        argv = [exe, str(client.script), "--endpoints", ";".join(masters + others), "--group", group,
                "--topic", topic, "--node-id", node.id, "--port", str(proc.port), "--run-dir", str(proc.run_dir),
                "--sleep-ms", str(int(consumer_options.get("sleep_ms", 0) or 0)),
                "--threads", str(int(consumer_options.get("consume_thread_min", 0) or POP_CONSUME_THREADS)),
                "--sharding-key-property", c.PROPERTY_WORKLOAD_SHARDING_KEY,
                "--seq-property", c.PROPERTY_WORKLOAD_SEQ, *client.extra_args]
        proc.set_command(argv)
        commands[node.id] = argv
    return commands


def _write_commands(cluster: LocalCluster, client: RealClient, commands: dict[str, list[str]], *, mixed: bool) -> None:
    (cluster.run_dir / "real-clients.json").write_text(json.dumps(
        {"client": client.name, "mixed": mixed, "summary": client.summary, "commands": commands}, indent=1))
