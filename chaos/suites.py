"""The chaos suites as data: topology, workload, the faults a schedule draws from, the checks.

A suite says what it exists to guard (its checks), which faults it throws at the cluster
(op kinds with weights and symbolic targets, drawn by the seeded schedule), how the cluster
and consumers are configured for it, and which test-only fault switch breaks the rule it
guards (`breaking_switch`): a suite that cannot fail on a broken build is worthless, so the
tests run every suite once with that switch on and expect exit 1 with the named check.

A run also has a durability mode (`MODES`: flush type x replication role, `--mode` on
`mqlab chaos run`); the durability check judges loss against what that mode promises.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from chaos.bounds import Bounds
from chaos.schedule import FaultChoice, bound_ms
from harness.disk import CQ_UNITS_SMALL_DISK
from harness.spec import ClusterSpec
from harness.topology import DEFAULT_TOPOLOGY, TOPOLOGIES, TWO_BY_TWO, topology_spec
from nodes.common import constants as c

TOPIC = "ChaosTopic"
QUEUES = 8  # in all, spread evenly over the broker groups
GROUP = "chaos_group"
TOPOLOGY_NAMES = tuple(TOPOLOGIES)
PRODUCER_NODE = "producer-0"  # the in-harness producer workload (its link proxies make it partitionable)
MASTER = "broker-a-0"
SLAVE = "broker-a-1"

# the checks every suite runs: sends and deliveries, plus the end-of-run read-back of every
# replica (every suite's topology has a slave) and the brokers' store errors (no fault but a
# storage nemesis may ever produce one: a kill or a partition must leave every store healthy), and
# the broker's answers to the consumers' requests its links journalled (commits, unlocks, acks)
QUEUE_CHECKS = ("lost", "unexpected", "duplicates", "integrity", "replication", "store-health", "deaths",
                "requests")


@dataclass(frozen=True)
class Mode:
    """A run's durability mode: the flush type of every broker's store and the masters' role."""

    name: str
    flush_disk_type: str
    broker_role: str
    promise: str  # what RocketMQ promises about acknowledged messages in this mode


MODES: dict[str, Mode] = {m.name: m for m in (
    Mode("async", "ASYNC_FLUSH", "ASYNC_MASTER",
         "a power loss may lose acknowledged messages inside the unflushed window (unless a slave held them)"),
    Mode("sync-flush", "SYNC_FLUSH", "ASYNC_MASTER", "no acknowledged message lost, even to a power loss"),
    Mode("sync-master", "ASYNC_FLUSH", "SYNC_MASTER",
         "no acknowledged message lost while a slave is live (the slave holds every one)"),
    Mode("sync", "SYNC_FLUSH", "SYNC_MASTER", "no acknowledged message lost"),
)}
DEFAULT_MODE = "async"


def mode(name: str) -> Mode:
    try:
        return MODES[name]
    except KeyError:
        raise KeyError(f"no mode {name!r}; modes are {', '.join(MODES)}") from None


@dataclass(frozen=True)
class BreakingSwitch:
    """A test-only fault switch that breaks the rule a suite guards, and the check that must catch it."""

    role: str  # broker | consumer | producer (the in-harness workload): which nodes get the switch
    switch: str
    check: str
    masters_only: bool = False


@dataclass(frozen=True)
class Suite:
    name: str
    summary: str
    checks: tuple[str, ...]
    faults: tuple[FaultChoice, ...]
    breaking_switch: BreakingSwitch
    consumers: int = 3
    orderly: bool = False
    consumer_options: Mapping[str, Any] = field(default_factory=dict)
    broker_options: Mapping[str, Any] = field(default_factory=dict)
    rate_per_s: float = 150.0
    keys: int = 16
    checker: Mapping[str, Any] = field(default_factory=dict)
    # the fault phase in timer units: `fault_phase_x` times the bound `fault_phase_of` (27 route
    # polls: 40.5 s at time scale 0.05), so a seed is the same run at every time scale
    fault_phase_x: float = 27.0
    fault_phase_of: str = "N_r"
    # the mean gap between one fault's end and the next fault, in timer units as the phase
    # (None: the schedule's default, one rebalance or route poll and a pull retry)
    fault_spacing_x: float | None = None
    fault_spacing_of: str = "N_r"
    default_mode: str = DEFAULT_MODE
    topologies: tuple[str, ...] = TOPOLOGY_NAMES  # the topologies it runs on (harness.topology)
    # the producer workload: send_orderly by key (True) or send() with queue selection and retries
    producer_orderly: bool = True
    # gray faults: brokers and consumers started with clock control (our Clock's rate and, with
    # the wall-clock shift, their wall clocks movable at run time), and each broker's store on a filesystem
    # of its own of this many bytes (a disk-fill op fills it)
    clock_control: bool = False
    store_fs_bytes: int | None = None
    # the recovery and safety paths (chaos.checker.coverage_paths) this suite exists to exercise: a
    # run that reached none of one shows it in its verdict's coverage_missing; the matrix flags it
    claims: tuple[str, ...] = ()
    # a composite fault every seed plays first, before its drawn faults (chaos.schedule), in the
    # durability modes named by `lead_modes` (empty: every mode)
    lead: tuple[FaultChoice, ...] = ()
    lead_modes: tuple[str, ...] = ()

    def fault_phase_ms(self, bounds: Bounds) -> int:
        """The length of the fault phase under `bounds` (a run's, or time scale 1's for timer units)."""
        return round(self.fault_phase_x * bound_ms(bounds, self.fault_phase_of))

    def lead_for(self, mode: str | None) -> tuple[FaultChoice, ...]:
        """The lead fault of a run in `mode` (None: the suite's default mode)."""
        if self.lead_modes and (mode or self.default_mode) not in self.lead_modes:
            return ()
        return self.lead

    def fault_spacing_ms(self, bounds: Bounds) -> int | None:
        """The mean gap between faults under `bounds`; None: the schedule's default."""
        if self.fault_spacing_x is None:
            return None
        return round(self.fault_spacing_x * bound_ms(bounds, self.fault_spacing_of))

    def spec(self, time_scale: float, fault_switches: Mapping[str, tuple[str, ...]] | None = None,
             mode: str | None = None, topology: str = DEFAULT_TOPOLOGY) -> ClusterSpec:
        """The cluster for this suite; `fault_switches` maps a role to switches (tests only);
        `mode` (a key of MODES; None: the suite's default) sets every broker's flush type and
        the masters' role; `topology` names the node set (harness.topology)."""
        switches = dict(fault_switches or {})
        chosen = MODES[mode or self.default_mode]
        spec = topology_spec(topology, time_scale=time_scale)
        for node in spec.broker_nodes():
            spec = spec.with_node_options(node.id, store={"flush_disk_type": chosen.flush_disk_type},
                                          broker_role=chosen.broker_role)
            options = dict(self.broker_options)
            wanted = switches.get("broker", ())
            if wanted and (node.broker_id == 0 or not switches.get("broker-masters-only")):
                options["fault_switches"] = list(wanted)
            if options:
                spec = spec.with_node_options(node.id, **options)
        consumer_options: dict[str, Any] = {
            "group": GROUP, "subscriptions": {TOPIC: "*"}, "orderly": self.orderly,
            "consume_from_where": "CONSUME_FROM_FIRST_OFFSET", **self.consumer_options}
        if switches.get("consumer"):
            consumer_options["fault_switches"] = list(switches["consumer"])
        spec = spec.with_consumers(self.consumers, **consumer_options)
        if self.clock_control:
            # our own Clock (rate and steps) on every broker and consumer; the wall-clock shift
            # (jumps) only where a jump is aimed, the masters and consumer-0: every other node's
            # wall clock stays the untouched system one
            walled = [n.id for n in spec.broker_nodes() if n.broker_id == 0] + [WALL_CLOCK_CONSUMER]
            spec = spec.with_clock_control(*walled, wall=True)
            spec = spec.with_clock_control(*(n.id for n in spec.nodes
                                             if n.role in ("broker", "consumer") and n.id not in walled))
        if self.store_fs_bytes is not None:
            spec = spec.with_store_filesystem("brokers", self.store_fs_bytes)
        return spec

    def switch_map(self) -> dict[str, tuple[str, ...]]:
        """The `fault_switches` argument that turns this suite's breaking switch on."""
        b = self.breaking_switch
        out: dict[str, tuple[str, ...]] = {b.role: (b.switch,)}
        if b.masters_only:
            out["broker-masters-only"] = ("yes",)
        return out


_ORDERLY_CONSUMER = {"sleep_ms": 2}
WALL_CLOCK_CONSUMER = "consumer-0"  # the consumer whose wall clock gray faults step (harness/_wall_shift.c)
_LATENCY = {"kind": "latency", "latency_ms": ("L_c", 0.1), "jitter_ms": ("L_c", 0.05)}

# The gray faults: every process stays up and every link connected, only worse. Sizes are given in
# bounds so each keeps its place against the protocol's margins at every time scale. A latency of
# 0.1 x L_c (+ 0.05 jitter) keeps 2 delta far below L_c - R_l (the renewal's slack) and T_s: nothing
# may move. A stall is a silent holder (the partition's bounds). Clock rates stay inside RocketMQ's
# margin: a client lease of L_c at rate r_c against a broker lease of L_b at rate r_b stays exclusive
# while r_c / r_b > L_c / L_b (0.5) plus the longest batch; 1.5 (a fast holder) and 1 / 0.75 (a slow
# master) both do. Wall-clock steps move store timestamps only: leases run on the monotonic clock.
GRAY_FAULTS: tuple[FaultChoice, ...] = (
    FaultChoice("link-toxic", "lock-holder", 1.0, "X_c", 1.5, partition="consumer-master",
                params={"toxic": _LATENCY}),
    FaultChoice("link-toxic", "lock-holder", 1.0, "X_c", 1.5, partition="consumer-master",
                params={"toxic": {"kind": "stall"}}),
    # lossy replication and a lossy consumer link: stalls of RTO x 2^k, never a lost byte
    FaultChoice("link-toxic", "master", 0.5, "N_r", 2.0, partition="master-slave",
                params={"toxic": {"kind": "loss_like", "probability": 0.3, "rto_ms": ("W_p", 2.0)}}),
    FaultChoice("link-toxic", "random-consumer", 0.5, "N_r", 2.0, partition="consumer-master",
                params={"toxic": {"kind": "loss_like", "probability": 0.2, "rto_ms": ("W_p", 2.0)}}),
    FaultChoice("link-toxic", "random-consumer", 0.5, "N_r", 2.0, partition="consumer-master",
                params={"toxic": {"kind": "bandwidth", "rate_bytes_per_s": 32 * 1024}}),
    # connections cut mid-message, again and again while it lasts
    FaultChoice("link-toxic", "random-consumer", 0.5, "N_r", 2.0, partition="consumer-master",
                params={"toxic": {"kind": "reset_peer_after_bytes", "bytes": 16 * 1024}}),
    FaultChoice("clock", "master", 1.0, "L_b", 1.5, params={"jump_ms": ("L_b", -2.0)}),
    FaultChoice("clock", "master", 0.5, "L_b", 1.5, params={"jump_ms": ("X_c", 2.0)}),
    FaultChoice("clock", WALL_CLOCK_CONSUMER, 0.5, "L_b", 1.5, params={"jump_ms": ("L_b", -2.0)}),
    FaultChoice("clock", "lock-holder", 1.0, "L_b", 1.5, params={"rate": 1.5}),
    FaultChoice("clock", "master", 1.0, "L_b", 1.5, params={"rate": 0.75}),
    # alive on a tenth of a core: a holder's renewals and batches run late; a master answers late
    FaultChoice("starve", "lock-holder", 1.0, "L_c", 2.0, params={"share": 0.1}),
    FaultChoice("starve", "master", 0.5, "N_r", 2.0, params={"share": 0.2}),
)
_DISK_FULL_SEGMENT_BYTES = 256 * 1024
_DISK_FULL_STORE_BYTES = 48 * 1024 * 1024
_DURABILITY_SEGMENT_BYTES = 256 * 1024
_SLAVE_READS = {"slave_read_enable": True}

SUITES: dict[str, Suite] = {s.name: s for s in (
    Suite(
        name="lock-takeover",
        summary="orderly group; kill, pause and partition the holders of queue locks",
        checks=(*QUEUE_CHECKS, "order", "lock-exclusivity", "takeover", "rebalance"),
        faults=(
            FaultChoice("kill", "lock-holder", 2.0, "L_b", 0.5),
            FaultChoice("pause", "lock-holder", 1.0, "L_c", 0.5),  # below the client lease: nothing moves
            FaultChoice("pause", "lock-holder", 1.0, "L_b", 1.5),  # past both leases: takeover, expected overlap
            FaultChoice("partition", "lock-holder", 1.0, "X_c", 1.5, partition="consumer-master"),
            FaultChoice("stop", "lock-holder", 1.0, "L_b", 0.5),
        ),
        breaking_switch=BreakingSwitch("broker", "lock-no-exclusion", "lock-exclusivity", masters_only=True),
        orderly=True, consumer_options=_ORDERLY_CONSUMER,
        claims=("lock-lease-expired", "lock-taken-over", "rebalance-moved"),
    ),
    Suite(
        name="offset-resync",
        summary="kill and restart consumers and the master around offset commits",
        checks=(*QUEUE_CHECKS, "order", "offset-resync"),
        faults=(
            FaultChoice("kill", "random-consumer", 3.0, "P_c", 4.0),
            FaultChoice("stop", "random-consumer", 1.0, "P_c", 4.0),
            FaultChoice("kill", "master", 1.0, "S_s", 1.0),
        ),
        breaking_switch=BreakingSwitch("consumer", "commit-pulled-offset", "offset-resync"),
        # one consume thread at 15 ms a message: about a third of headroom over the send rate, so a
        # fault builds a backlog that the pull path caches ahead of consumption (what a commit must
        # not cover)
        consumer_options={"sleep_ms": 15, "consume_thread_min": 1}, broker_options=_SLAVE_READS,
        claims=("offset-resynced", "rebalance-moved"),
    ),
    Suite(
        name="read-routing",
        summary="backlog past the memory budget, master kill and restart, a consumer cut from the master",
        checks=(*QUEUE_CHECKS, "read-routing"),
        faults=(
            FaultChoice("kill", "master", 1.0, "N_r", 2.0),
            FaultChoice("partition", "random-consumer", 1.0, "N_r", 2.0, partition="consumer-master"),
            # consumers paused while the producer runs on: a backlog past the memory budget (cold reads)
            FaultChoice("pause", "all-consumers", 2.0, "N_r", 3.0),
        ),
        breaking_switch=BreakingSwitch("consumer", "ignore-pull-suggestion", "read-routing"),
        consumers=2, consumer_options={"sleep_ms": 1},
        # 128 KiB: a pause of 3 × N_r needs half the backlog of 256 KiB to send the consumers to the
        # slave, so a producer slowed by a busy machine still gets the suite its cold reads (at 256 KiB a
        # switched run once stayed valid at load average ~10: no slave was ever suggested)
        broker_options={**_SLAVE_READS, "store": {"memory_budget_bytes": 128 * 1024}},
        rate_per_s=300.0,
        claims=("slave-suggested", "slave-fallback"),
    ),
    Suite(
        name="failover",
        summary="kill or partition the master under send and consume load; consumers read on from the slave "
                "while it is down; nothing acknowledged lost, every replica converges",
        checks=(*QUEUE_CHECKS, "read-routing"),
        faults=(
            # down for three failover bounds: the consumers fall back to the slave within one and read
            # from it for the other two, so a broken fall-back fails read-routing here too
            FaultChoice("kill", "master", 2.0, "failover_read_kill_ms", 3.0),
            FaultChoice("partition", "master", 1.0, "N_r", 2.0, partition="isolate"),
            FaultChoice("partition", "master", 1.0, "N_r", 2.0, partition="master-slave"),
        ),
        breaking_switch=BreakingSwitch("broker", "recovery-trust-checkpoint", "lost", masters_only=True),
        consumers=2, consumer_options={"sleep_ms": 4}, broker_options=_SLAVE_READS, rate_per_s=250.0,
        claims=("slave-fallback",),
    ),
    Suite(
        name="mixed",
        summary="random nemeses from every other suite, orderly group, slave reads on",
        checks=(*QUEUE_CHECKS, "order", "lock-exclusivity", "takeover", "offset-resync", "read-routing"),
        faults=(
            FaultChoice("kill", "lock-holder", 1.0, "L_b", 0.5),
            FaultChoice("pause", "lock-holder", 1.0, "L_b", 1.5),
            FaultChoice("partition", "random-consumer", 1.0, "X_c", 1.5, partition="consumer-master"),
            FaultChoice("kill", "random-consumer", 1.0, "P_c", 4.0),
            FaultChoice("kill", "master", 1.0, "N_r", 2.0),
            FaultChoice("partition", "master", 0.5, "N_r", 2.0, partition="master-slave"),
        ),
        breaking_switch=BreakingSwitch("broker", "lock-no-exclusion", "lock-exclusivity", masters_only=True),
        orderly=True, consumer_options=_ORDERLY_CONSUMER, broker_options=_SLAVE_READS,
        claims=("lock-taken-over", "rebalance-moved"),
    ),
    Suite(
        name="broker-loss",
        summary="2x2 only: a whole broker group killed until routes expire, a master paused, the producer cut "
                "from a group, a group cut from the name servers, a name server killed, paused or isolated; "
                "sends keep landing on the other group",
        checks=(*QUEUE_CHECKS, "availability", "rebalance"),
        faults=(
            # down past the route expiry: clients drop the group, then it comes back
            FaultChoice("kill", "group", 2.0, "group_loss_ms", 1.5),
            # silent to the producer: only latency fault tolerance keeps sends off it
            FaultChoice("pause", "master", 1.0, "group_loss_ms", 1.0),
            FaultChoice("partition", PRODUCER_NODE, 2.0, "group_loss_ms", 1.0, partition="from-group"),
            FaultChoice("partition", "group", 1.0, "group_loss_ms", 1.5, partition="from-namesrv"),
            FaultChoice("kill", "namesrv", 1.0, "group_loss_ms", 1.0),
            FaultChoice("pause", "namesrv", 0.5, "group_loss_ms", 1.0),
            FaultChoice("partition", "namesrv", 0.5, "group_loss_ms", 1.0, partition="isolate"),
        ),
        breaking_switch=BreakingSwitch("producer", c.FAULT_PRODUCER_LATENCY_FAULT_OFF, "availability"),
        consumers=2, consumer_options={"sleep_ms": 1}, producer_orderly=False, topologies=(TWO_BY_TWO,),
        fault_phase_x=40.0,
        # no claims: its paths (a queue moved by a route change, a send retried on the other group)
        # are opened only by some of its draws, and the workload does not record send attempts
    ),
    Suite(
        name="durability",
        summary="power loss on master, slave or both at once (a rack), a corrupted sealed record, a kill; "
                "run it under each --mode",
        checks=(*QUEUE_CHECKS, "durability"),
        faults=(
            FaultChoice("power-loss", "master", 2.0, "N_r", 2.0),
            FaultChoice("power-loss", "slave", 1.0, "N_r", 2.0),
            # the whole group at once: no slave gives the master's cut tail back, so only the
            # master's own fsyncs keep what it acknowledged (SYNC_FLUSH's promise)
            FaultChoice("power-loss", "group", 1.5, "N_r", 2.0),
            FaultChoice("corrupt", "master", 1.0, "N_r", 1.0),
            FaultChoice("kill", "master", 1.0, "N_r", 2.0),
        ),
        breaking_switch=BreakingSwitch("broker", "replica-skip-chunk", "replication", masters_only=True),
        consumers=2, consumer_options={"sleep_ms": 2},
        # a broker restarted after a power loss replays its store and takes 5-11 s to serve again on
        # a loaded machine (4-7 route polls at time scale 0.05): gaps of 5-15 route polls after each
        # fault leave a phase with both replicas up before the next one, and a longer phase keeps
        # three or four faults in a run
        fault_spacing_x=10.0, fault_phase_x=50.0,
        # small segments: the corrupt nemesis needs a sealed one within seconds of load
        broker_options={"store": {"commitlog_segment_bytes": _DURABILITY_SEGMENT_BYTES,
                                  "message_body_bytes_max": 64 * 1024}},
        rate_per_s=200.0,
        claims=("torn-tail-cut", "cq-rebuilt", "replica-refused", "replica-cut-back"),
        # every async seed first loses the master's unsynced tail while its slave, which holds
        # that tail, is cut off from it until the restarted master has written again (its wait
        # for a slave to give the tail back: register + 2 reconnects, 1.5 x N_r, after a restart
        # of 5-11 s on a loaded machine): the slave returns diverged, is refused and cut back.
        # Async only: under SYNC_MASTER the tail the slave held was acknowledged, so cutting it
        # away loses acknowledged messages (see docs/chaos.md, Coverage); under SYNC_FLUSH the
        # master loses no acknowledged tail, so there is no divergence to find.
        lead=(FaultChoice("power-loss", "master", 1.0, "N_r", 2.0),
              FaultChoice("partition", "master", 1.0, "N_r", 12.0, partition="master-slave")),
        lead_modes=("async",),
    ),
    Suite(
        name="gray",
        summary="slow, stalled, lossy and cut-mid-message links on lock holders and the master, wall-clock "
                "jumps and clock skew on brokers and consumers, starved nodes: nothing stops, nothing is cut",
        checks=(*QUEUE_CHECKS, "order", "lock-exclusivity", "takeover", "offset-resync", "read-routing"),
        faults=GRAY_FAULTS,
        # every seed opens with a skewed lock holder and a starved master at once, so each run reaches
        # the clock and CPU paths whatever it draws after (every seed draws a link toxic)
        lead=(FaultChoice("clock", "lock-holder", 1.0, "L_b", 1.0, params={"rate": 1.5}),
              FaultChoice("starve", "master", 1.0, "L_b", 1.0, params={"share": 0.2})),
        claims=("link-toxic", "clock-skewed", "cpu-starved"),
        breaking_switch=BreakingSwitch("broker", c.FAULT_LEASE_WALL_CLOCK, "lock-exclusivity", masters_only=True),
        orderly=True, consumer_options=_ORDERLY_CONSUMER, broker_options=_SLAVE_READS, clock_control=True,
    ),
    Suite(
        name="disk-full",
        summary="the store filesystem of the master, the slave or both filled past the disk guard, or to the "
                "last byte, then freed: writes refused with the disk-full answer, reads go on, nothing dies",
        checks=(*QUEUE_CHECKS, "disk-full"),
        faults=(
            FaultChoice("disk-fill", "master", 2.0, "N_r", 3.0, params={"ratio": 0.95}),
            FaultChoice("disk-fill", "master", 1.0, "N_r", 3.0, params={"ratio": 1.0}),
            FaultChoice("disk-fill", "slave", 1.0, "N_r", 3.0, params={"ratio": 1.0}),
            FaultChoice("disk-fill", "group", 1.0, "N_r", 3.0, params={"ratio": 0.95}),
        ),
        breaking_switch=BreakingSwitch("broker", c.FAULT_IGNORE_DISK_FULL, "disk-full", masters_only=True),
        consumers=2, consumer_options={"sleep_ms": 1},
        # small segments: a new one is allocated every second or two, so a full disk meets one soon
        broker_options={"store": {"commitlog_segment_bytes": _DISK_FULL_SEGMENT_BYTES,
                                  "message_body_bytes_max": 64 * 1024, "cq_units_per_file": CQ_UNITS_SMALL_DISK}},
        store_fs_bytes=_DISK_FULL_STORE_BYTES, fault_spacing_x=4.0,
        claims=("disk-guard-on", "disk-guard-off", "send-refused-disk-full", "retention-delete"),
    ),
)}


GRAY_SUFFIX = "+gray"


def with_gray_faults(base: Suite) -> Suite:
    """`base` with the gray faults mixed into its own (`--faults gray`): the same checks, workload and
    cluster, its nodes under clock control, and every gray fault drawn beside the suite's at half
    its weight. Named `<suite>+gray`, which `suite()` finds again (a replay or a matrix cell)."""
    if base.name.endswith(GRAY_SUFFIX):
        return base
    mixed = tuple(dataclasses.replace(ch, weight=ch.weight / 2) for ch in GRAY_FAULTS)
    return dataclasses.replace(base, name=base.name + GRAY_SUFFIX, summary=f"{base.summary}; with gray faults",
                               faults=(*base.faults, *mixed), clock_control=True)


def suite(name: str) -> Suite:
    if name.endswith(GRAY_SUFFIX) and name != GRAY_SUFFIX:
        return with_gray_faults(suite(name[: -len(GRAY_SUFFIX)]))
    try:
        return SUITES[name]
    except KeyError:
        raise KeyError(f"no suite {name!r}; suites are {', '.join(SUITES)}, each also as <suite>{GRAY_SUFFIX} "
                       "(see `mqlab chaos list`)") from None
