"""The named recovery and safety paths a run can reach, as data: name -> meaning and how it is counted.

A suite proves a rule only if the rule ran, so every check run also counts, per path, the
evidence in the histories that the path was taken (`chaos.checker.coverage` computes the
counts). A suite names the paths it exists to exercise (`chaos.suites.Suite.claims`); a claimed
path counted 0 is listed in `verdict.json` as `coverage_missing` and flagged by the matrix,
never turned into an invalid verdict (the verdict is about safety only).

Paths whose events come from features that a build may not have yet (disk guard, retention,
clock skew, link toxics, CPU starvation) count 0 when the events are absent.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CoveragePath:
    name: str
    meaning: str  # one line: what taking this path means
    counted: str  # one line: which history lines are counted


PATHS: tuple[CoveragePath, ...] = (
    CoveragePath("torn-tail-cut", "recovery cut a torn, partial record off a commitlog tail",
                 "broker store-recovered with truncated_bytes > 0, or store-error torn-tail (the larger count)"),
    CoveragePath("cq-rebuilt", "recovery dropped consume-queue units past the commitlog and rebuilt them",
                 "broker store-error cq-truncated, or store-recovered with cq_units_dropped > 0 (the larger count)"),
    CoveragePath("replica-refused", "a master refused a slave whose log is ahead of or diverged from its own",
                 "master store-error replica-refused, or slave ha-refused SLAVE_DIVERGED / SLAVE_AHEAD "
                 "(the larger count)"),
    CoveragePath("replica-cut-back", "a refused slave cut its log back to the prefix it shares with the master",
                 "slave (broker id > 0) store-error replica-refused with bytes > 0 (the bytes it cut)"),
    CoveragePath("master-tail-restored", "a master that lost its unsynced tail took it back from a slave",
                 "master ha-restored"),
    CoveragePath("bad-record-skipped", "a record that failed its checks was found and never served",
                 "broker store-error bad-record"),
    CoveragePath("lock-lease-expired", "a queue lock's broker lease ran out and the lock went to another client",
                 "broker lock expired for A, then the queue's next broker grant to a client other than A"),
    CoveragePath("lock-taken-over", "an orderly queue's lock passed from one client to another",
                 "broker lock granted to B where the queue's previous broker grant went to A != B"),
    CoveragePath("client-lease-lapsed", "a consumer's own lock lease ran out or the lock was lost",
                 "client lock expired or lost"),
    CoveragePath("slave-fallback", "a consumer read from a slave while its master was down or unreachable",
                 "client pull-route answered by broker_id != 0, sent inside a fault window on that group's master "
                 "or a partition of the client (to N_r + W_p after it)"),
    CoveragePath("slave-suggested", "a master sent a consumer to a slave (backlog past its memory budget)",
                 "broker pull-suggestion with suggest_which_broker_id != 0"),
    CoveragePath("offset-resynced", "a consumer resumed a queue from the offset the broker stored",
                 "a client's first pull-route on a queue at queue_offset > 0 (after a rebalance or restart)"),
    CoveragePath("consumer-channel-expired", "a broker dropped a silent consumer's channel",
                 "broker consumer-leave with reason expired"),
    CoveragePath("rebalance-moved", "a rebalance moved a queue from one consumer to another",
                 "client rebalance adding a queue whose last owner (in an earlier rebalance) was another client"),
    CoveragePath("producer-retry", "a send failed over to another broker after a failed attempt",
                 "sends ok line with attempts > 1 (when the workload records attempts)"),
    CoveragePath("disk-guard-on", "a broker's disk guard started refusing writes", "broker disk-guard state on"),
    CoveragePath("disk-guard-off", "a broker's disk guard accepted writes again", "broker disk-guard state off"),
    CoveragePath("retention-delete", "retention deleted old commitlog files", "broker retention-delete"),
    CoveragePath("send-refused-disk-full", "a broker refused a send because its disk was full",
                 "sends fail whose status names SERVICE_NOT_AVAILABLE, code 14 or 'disk is full'"),
    CoveragePath("clock-skewed", "a node ran with a skewed clock rate", "events clock with rate != 1"),
    CoveragePath("link-toxic", "a link was slowed or degraded (a toxic, not a cut)", "nemesis link-toxic starts"),
    CoveragePath("cpu-starved", "a node was starved of CPU", "nemesis starve starts"),
)
PATH_NAMES: tuple[str, ...] = tuple(p.name for p in PATHS)
BY_NAME: dict[str, CoveragePath] = {p.name: p for p in PATHS}

# what the counts read
REFUSALS = ("SLAVE_DIVERGED", "SLAVE_AHEAD")
DISK_FULL_MARKERS = ("SERVICE_NOT_AVAILABLE", "code 14", "disk is full")
FALLBACK_OPS = ("kill", "stop", "pause", "partition")  # a power loss is a kill window


def unknown_paths(names: tuple[str, ...] | list[str]) -> list[str]:
    """The names in `names` that are no path (a suite's claims are checked against the table)."""
    return [n for n in names if n not in BY_NAME]
