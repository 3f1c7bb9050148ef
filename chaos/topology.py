"""Placing a drawn schedule on a topology with several broker groups.

A suite's faults name symbolic targets written for one broker group: "master", "slave",
"lock-holder", a consumer cut from "the master". On a topology with several groups, each
entry is pinned to one group, drawn from its own seeded stream (`random.Random` seeded by the
run's seed and a fixed tag): `master` becomes `master:<group>` (also `slave`, `group`: the
whole group), a partition's peer the same group's master or slave, `lock-holder`
`lock-holder:<group>:` (a holder of a lock on that group's queues); with several name servers
`namesrv` becomes `namesrv:<n>`. The pinned targets are what `schedule.json` holds, so a replay hits the same
groups. With one group, nothing changes: a single-topology schedule is exactly what the suite
draws.
"""

from __future__ import annotations

import dataclasses
import random

from chaos.nemesis_ops import Op, Partition
from chaos.schedule import Entry, Schedule

# what a partition kind's peer is when the op names none (chaos.nemesis._plan_partition)
_DEFAULT_PEER = {"master-slave": "slave", "consumer-master": "master", "one-way": "master", "from-group": "group"}
_GROUP_SYMBOLS = ("master", "slave", "group")


def group_rng(seed: int) -> random.Random:
    """The stream that picks broker groups: apart from the schedule's, so adding groups never
    shifts what the schedule itself draws."""
    return random.Random(f"broker-group/{seed}")


def pin_target(target: str, group: str, namesrv: int = 0) -> str:
    """`master` -> `master:<group>`; `lock-holder` -> `lock-holder:<group>:`; `namesrv` ->
    `namesrv:<namesrv>`; anything already naming a group, a consumer or a node id stays as it is."""
    name, sep, arg = target.partition(":")
    if name == "namesrv" and not sep:
        return f"namesrv:{namesrv}"
    if name in _GROUP_SYMBOLS and not sep:
        return f"{name}:{group}"
    if name == "lock-holder" and not arg:
        return f"lock-holder:{group}:"
    return target


def pin_op(op: Op, group: str, namesrv: int = 0) -> Op:
    target = pin_target(op.target, group, namesrv)
    if isinstance(op, Partition):
        peer = op.peer if op.peer is not None else _DEFAULT_PEER.get(op.kind)
        return dataclasses.replace(op, target=target, peer=pin_target(peer, group, namesrv) if peer else None)
    if target == op.target:
        return op
    return dataclasses.replace(op, target=target)


def place_schedule(schedule: Schedule, groups: list[str], seed: int, namesrv_count: int = 1) -> Schedule:
    """Pin every entry to one of `groups` and one of the name servers (drawn per entry,
    replayably); unchanged for one group and one name server."""
    if len(groups) <= 1 and namesrv_count <= 1:
        return schedule
    rng = group_rng(seed)
    entries = []
    for e in schedule.entries:
        group, namesrv = rng.choice(groups), rng.randrange(namesrv_count)
        entries.append(Entry(e.at_ms, pin_op(e.op, group, namesrv), e.note))
    meta = {**schedule.meta, "broker_groups": list(groups), "namesrv_count": namesrv_count}
    return dataclasses.replace(schedule, entries=tuple(entries), meta=meta)
