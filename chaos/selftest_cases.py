"""The selftest cases: every test-only fault switch, the suite that must catch it, and the check that fails.

A check that cannot fail on a broken build proves nothing; `mqlab chaos selftest` runs each case
on a real cluster with its switch on and expects the named check to fail. A row is
(suite, role, switch, check, masters_only, mode, client): `role` is the kind of node the switch is set on
(broker | consumer | producer: the in-harness workload), `masters_only` keeps it off slaves, `mode` is a durability mode for suites
run per mode (None: the suite's default), `client` the consumers (mqlab's own, or a real client: a
POP switch needs a RocketMQ 5 client, whose runs are at real time scale).

`NEEDED_FAULT` names, per suite, the fault its switched bug needs to show, as (op, symbolic target)
and optionally a piece of the op's one-line description (`wall`, `stall`, `to 100%`: a gray op's
kind or size); the selftest runs the first seed whose schedule draws it within the short fault
phase (`NEEDED_LAST`, per switch: as the schedule's last fault).
"""

from __future__ import annotations

from typing import NamedTuple

from chaos.bounds import REAL_CLIENT_TIME_SCALE
from chaos.real_clients import MQLAB
from nodes.common import constants as c


class SelftestCase(NamedTuple):
    suite: str
    role: str  # broker | consumer | producer
    switch: str
    check: str
    masters_only: bool = False
    mode: str | None = None
    client: str = MQLAB

    @property
    def name(self) -> str:
        return (f"{self.suite}/{self.switch}" + (f"/{self.mode}" if self.mode else "")
                + (f"/{self.client}" if self.client != MQLAB else ""))

    def time_scale(self, selftest_time_scale: float) -> float:
        """A real client's timers are not scaled: its case runs at real scale."""
        return selftest_time_scale if self.client == MQLAB else REAL_CLIENT_TIME_SCALE

    def switch_map(self) -> dict[str, tuple[str, ...]]:
        """The `fault_switches` argument of a run (see `chaos.suites.Suite.spec`)."""
        out: dict[str, tuple[str, ...]] = {self.role: (self.switch,)}
        if self.masters_only:
            out["broker-masters-only"] = ("yes",)
        return out


SELFTEST_CASES: tuple[SelftestCase, ...] = (
    SelftestCase("lock-takeover", "broker", c.FAULT_LOCK_NO_EXCLUSION, "lock-exclusivity", masters_only=True),
    SelftestCase("lock-takeover", "broker", c.FAULT_LOCK_SLOW_TAKEOVER, "takeover", masters_only=True),
    SelftestCase("lock-takeover", "consumer", c.FAULT_ORDERLY_TAKE_NEWEST, "order"),
    SelftestCase("offset-resync", "consumer", c.FAULT_COMMIT_PULLED_OFFSET, "offset-resync"),
    SelftestCase("read-routing", "consumer", c.FAULT_IGNORE_PULL_SUGGESTION, "read-routing"),
    SelftestCase("failover", "consumer", c.FAULT_ACK_UNHANDED_REQUEST, "lost"),
    # the master's slave gives the cut bytes back (acknowledged messages survive), but a kill that
    # leaves a torn tail is a store error no kill explains
    SelftestCase("failover", "broker", c.FAULT_RECOVERY_TRUST_CHECKPOINT, "store-health", masters_only=True),
    SelftestCase("failover", "consumer", c.FAULT_REDELIVER_CONSUMED_BATCH, "duplicates"),
    SelftestCase("mixed", "broker", c.FAULT_LOCK_NO_EXCLUSION, "lock-exclusivity", masters_only=True),
    SelftestCase("durability", "broker", c.FAULT_REPLICA_SKIP_CHUNK, "replication", masters_only=True),
    SelftestCase("durability", "broker", c.FAULT_RECOVERY_KEEP_TORN_TAIL, "store-health", masters_only=True),
    SelftestCase("durability", "broker", c.FAULT_SYNC_FLUSH_ACK_EARLY, "durability", masters_only=True,
                 mode="sync-flush"),
    # the corrupted record, served unchecked, reads back with a body that differs from the one sent
    SelftestCase("durability", "broker", c.FAULT_READ_SKIP_CRC, "replication", masters_only=True),
    # only a slave's answers are flipped: the suite whose consumers are sent to the slave by a backlog
    # past the master's memory budget reads them (in failover the consumers have drained the queues by
    # the master's kill and read nothing from the slave)
    SelftestCase("read-routing", "broker", c.FAULT_PULL_FLIP_BODY_BYTE, "integrity"),
    # the producer keeps choosing the group it cannot reach: every other send fails for the whole cut
    SelftestCase("broker-loss", "producer", c.FAULT_PRODUCER_LATENCY_FAULT_OFF, "availability"),
    # a group killed past the route expiry comes back, and no consumer takes its queues again
    SelftestCase("broker-loss", "consumer", c.FAULT_REBALANCE_IGNORE_RETURNED, "rebalance"),
    # leases on the wall clock: a step forward (or the way back from a step back) ends live leases
    # before the ends the broker recorded
    SelftestCase("gray", "broker", c.FAULT_LEASE_WALL_CLOCK, "lock-exclusivity", masters_only=True),
    # a holder whose renewal timed out once under a stalled link never renews again: once the link is
    # back its client lease lapses again and again with no fault to explain it
    SelftestCase("gray", "consumer", c.FAULT_RENEW_GIVES_UP, "lock-exclusivity"),
    # segments mapped sparse: the master's first write into a page a full disk cannot back is SIGBUS
    SelftestCase("disk-full", "broker", c.FAULT_SPARSE_SEGMENTS, "deaths", masters_only=True),
    # the guard off: a master filled past 90 % goes on acknowledging sends
    SelftestCase("disk-full", "broker", c.FAULT_IGNORE_DISK_FULL, "disk-full", masters_only=True),
    # the master answers a consumer's offset update success and does not store it: the consumer's link
    # journalled the answer, and the broker's offset history never shows the value
    SelftestCase("offset-resync", "broker", c.FAULT_OFFSET_COMMIT_DROP, "requests", masters_only=True),
    # POP (RocketMQ 5 clients). A killed SimpleConsumer's hand-outs expire after its invisible time
    # (no renewal): the revive pass must bring them back
    SelftestCase("offset-resync", "broker", c.FAULT_POP_NEVER_REVIVE, "pop-redelivery", masters_only=True,
                 client="py5-simple"),
    # a SimpleConsumer paused mid-batch past its invisible time acks the rest of the batch late: the
    # broker must refuse those handles (their messages were revived)
    SelftestCase("read-routing", "broker", c.FAULT_POP_ACCEPT_STALE_HANDLE, "pop-ack", masters_only=True,
                 client="py5-simple"),
    # a FIFO group's PushConsumers receive from every queue: a queue not blocked by its batch in
    # flight hands the next batch to another client at once
    SelftestCase("lock-takeover", "broker", c.FAULT_POP_FIFO_NO_BLOCK, "pop-fifo", masters_only=True, client="py5"),
)

# the fault (op, symbolic target) a suite's switched bug needs to show
NEEDED_FAULT: dict[str, tuple[str, ...]] = {
    "lock-takeover": ("kill", "lock-holder"), "offset-resync": ("kill", "random-consumer"),
    "read-routing": ("pause", "all-consumers"), "failover": ("kill", "master"), "mixed": ("kill", "lock-holder"),
    "durability": ("power-loss", "master"), "broker-loss": ("partition", "producer-0"),
    "gray": ("clock", "master", "wall"), "disk-full": ("disk-fill", "master", "to 95%"),
}
# switches whose bug needs another fault than their suite's (a corrupted record read back unchecked,
# an acknowledged record no replica kept, a broker group's queues leaving the route and coming back)
NEEDED_SWITCH_FAULT: dict[str, tuple[str, ...]] = {
    c.FAULT_READ_SKIP_CRC: ("corrupt", "master"),
    # a master-only power loss gets its cut tail back from the slave: only a rack's loses it
    c.FAULT_SYNC_FLUSH_ACK_EARLY: ("power-loss", "group"),
    c.FAULT_REBALANCE_IGNORE_RETURNED: ("kill", "group"),
    c.FAULT_RENEW_GIVES_UP: ("link-toxic", "lock-holder", "stall"),
    c.FAULT_SPARSE_SEGMENTS: ("disk-fill", "master", "to 100%"),
}
# switches whose bug shows only when nothing follows the needed fault: a later fault's recovery pushes the
# bound out (a slow takeover after a kill hides behind a consumer restarted after it)
NEEDED_LAST: dict[str, tuple[str, str]] = {c.FAULT_LOCK_SLOW_TAKEOVER: ("kill", "lock-holder")}
# a selftest run's fault phase: long enough for the needed fault and its recovery, short enough for many cases
SELFTEST_FAULT_PHASE_S = 12.0
# switches whose needed fault outlasts that phase get at least this long a one (s): a group killed past
# the route expiry (1.5 x group_loss_ms, 12 s at time scale 0.05) must be back, and taking sends, for a
# while before the phase ends (a loaded machine takes up to 5 s to restart it), so its queues wait
NEEDED_PHASE_S: dict[str, float] = {
    c.FAULT_REBALANCE_IGNORE_RETURNED: 32.0,
    # real scale: a killed consumer's hand-outs expire 15 s after their receive, a paused one's acks
    # come once the 90 s pause (3 x N_r) ends; FIFO receives need the clients past their start
    c.FAULT_POP_NEVER_REVIVE: 60.0, c.FAULT_POP_ACCEPT_STALE_HANDLE: 120.0, c.FAULT_POP_FIFO_NO_BLOCK: 60.0,
}
SEEDS_TRIED = 50
