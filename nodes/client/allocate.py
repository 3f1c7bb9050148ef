"""Queue allocation strategies: which of a topic's queues one consumer of a group owns.

Pure: owns RocketMQ 4.9's `AllocateMessageQueueStrategy` family and nothing
else. Does not sort, fetch routes or consumer lists, or keep state between calls; rebalance
passes `mq_all` and `cid_all` already sorted, and every strategy here keeps
whatever order it is given, so unsorted input is passed straight through as in RocketMQ.

All strategies except `AllocateByConfig` first run `_check` (RocketMQ's
`AbstractAllocateMessageQueueStrategy#check`): an empty current id, queue list or client id
list is a caller bug (`InvalidArgumentError`); a current id not in `cid_all` gets nothing.
A client id listed twice keeps the index of its first occurrence (Java's `indexOf`).
"""

from __future__ import annotations

import hashlib
import logging
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import ClassVar, Protocol

from nodes.common.errors import InvalidArgumentError
from nodes.common.types import MessageQueue

log = logging.getLogger(__name__)

CONSISTENT_HASH_VIRTUAL_NODES = 10  # AllocateMessageQueueConsistentHash() default virtualNodeCnt
MACHINE_ROOM_SEPARATOR = "@"  # broker names are "<idc>@<broker>" for the machine-room strategy
MACHINE_ROOM_NEARBY_NAME_PREFIX = "MACHINE_ROOM_NEARBY-"  # + the inner strategy's name


class AllocateStrategy(Protocol):
    """What rebalance calls: RocketMQ's AllocateMessageQueueStrategy."""

    @property
    def name(self) -> str: ...

    def allocate(self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]: ...


def _check(consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue],
           cid_all: Sequence[str]) -> bool:
    """RocketMQ's check(): raise on empty inputs; False (allocate nothing) for an unknown id."""
    if not current_cid:
        raise InvalidArgumentError("current_cid is empty; pass this consumer's client id")
    if not mq_all:
        raise InvalidArgumentError("mq_all is empty; allocate only when the topic has queues")
    if not cid_all:
        raise InvalidArgumentError("cid_all is empty; it must contain at least the current client id")
    if current_cid not in cid_all:
        log.info("[BUG] group %s: consumer id %s is not in cid_all %s", consumer_group, current_cid, cid_all)
        return False
    return True


class AllocateAveragely:
    """AVG: contiguous blocks; the first `n % c` consumers get one queue more."""

    name: ClassVar[str] = "AVG"

    def allocate(self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        if not _check(consumer_group, current_cid, mq_all, cid_all):
            return []
        n, c = len(mq_all), len(cid_all)
        idx = cid_all.index(current_cid)
        mod = n % c
        gets_extra = mod > 0 and idx < mod
        size = 1 if n <= c else n // c + int(gets_extra)
        start = idx * size if gets_extra else idx * size + mod
        count = min(size, n - start)  # <= 0 for consumers beyond the queue count
        return [mq_all[(start + i) % n] for i in range(count)]


class AllocateAveragelyByCircle:
    """AVG_BY_CIRCLE: round-robin striping, queue i to consumer i % c."""

    name: ClassVar[str] = "AVG_BY_CIRCLE"

    def allocate(self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        if not _check(consumer_group, current_cid, mq_all, cid_all):
            return []
        idx = cid_all.index(current_cid)
        return [mq_all[i] for i in range(idx, len(mq_all), len(cid_all))]


def md5_hash(key: str) -> int:
    """ConsistentHashRouter.MD5Hash: the first 4 MD5 digest bytes, big-endian, unsigned."""
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


class HashRing:
    """ConsistentHashRouter: virtual nodes `<cid>-<replica>` on a ring of hash values.

    A later put on the same hash overwrites the earlier one (TreeMap#put), and a duplicated
    physical node continues its replica numbers from the entries it already owns on the ring.
    """

    def __init__(self, nodes: Iterable[str], virtual_node_count: int,
                 hash_function: Callable[[str], int] = md5_hash) -> None:
        if virtual_node_count < 0:
            raise InvalidArgumentError(f"virtual node count must be >= 0, got {virtual_node_count}")
        self._hash = hash_function
        self._owner_by_hash: dict[int, str] = {}
        self._entries_by_owner: Counter[str] = Counter()
        self._sorted_hashes: list[int] = []
        for node in nodes:
            self.add_node(node, virtual_node_count)

    def add_node(self, node: str, virtual_node_count: int) -> None:
        existing_replicas = self._entries_by_owner[node]  # only non-zero for a duplicated node
        for i in range(virtual_node_count):
            ring_hash = self._hash(f"{node}-{i + existing_replicas}")
            previous = self._owner_by_hash.get(ring_hash)
            if previous is not None:
                self._entries_by_owner[previous] -= 1  # collision: the later put wins
            self._owner_by_hash[ring_hash] = node
            self._entries_by_owner[node] += 1
        self._sorted_hashes = sorted(self._owner_by_hash)

    def __len__(self) -> int:
        return len(self._owner_by_hash)

    def route(self, key: str) -> str | None:
        """The node owning the first ring entry >= hash(key), wrapping; None on an empty ring."""
        if not self._sorted_hashes:
            return None
        i = bisect_left(self._sorted_hashes, self._hash(key))
        return self._owner_by_hash[self._sorted_hashes[i % len(self._sorted_hashes)]]


class AllocateConsistentHash:
    """CONSISTENT_HASH: each queue goes to the ring node after `hash(str(mq))`."""

    name: ClassVar[str] = "CONSISTENT_HASH"

    def __init__(self, virtual_node_count: int = CONSISTENT_HASH_VIRTUAL_NODES,
                 hash_function: Callable[[str], int] | None = None) -> None:
        if isinstance(virtual_node_count, bool) or not isinstance(virtual_node_count, int):
            raise InvalidArgumentError(f"virtual_node_count must be an int, got {virtual_node_count!r}")
        if virtual_node_count < 0:
            raise InvalidArgumentError(f"illegal virtual_node_count {virtual_node_count}; pass 0 or more")
        self.virtual_node_count = virtual_node_count
        self._hash = hash_function or md5_hash

    def allocate(self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        if not _check(consumer_group, current_cid, mq_all, cid_all):
            return []
        ring = HashRing(cid_all, self.virtual_node_count, self._hash)
        # str(mq) is exactly RocketMQ's MessageQueue#toString, which is what Java hashes.
        return [mq for mq in mq_all if ring.route(str(mq)) == current_cid]


class AllocateByConfig:
    """CONFIG: the configured queues, whoever asks; no check(), inputs ignored."""

    name: ClassVar[str] = "CONFIG"

    def __init__(self, queues: Sequence[MessageQueue]) -> None:
        self.queues = queues  # kept by reference, as Java keeps the configured list object

    def allocate(self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        # Java returns the configured list object itself; a copy keeps callers from editing the config.
        return list(self.queues)


def _java_split(text: str, separator: str) -> list[str]:
    """Java's String#split(separator) for a literal: trailing empty strings are dropped."""
    parts = text.split(separator)
    if len(parts) == 1:
        return parts  # no match: Java returns the whole string, even when it is empty
    while parts and parts[-1] == "":
        parts.pop()
    return parts


class AllocateByMachineRoom:
    """MACHINE_ROOM: share the queues of brokers named `<idc>@<name>` in `consumer_idcs`.

    Queues are split in equal blocks of `len(premq) // c`; the leftover `len(premq) % c` go one
    each to the first consumers, taken from the tail (RocketMQ's layout, not AVG's).
    """

    name: ClassVar[str] = "MACHINE_ROOM"

    def __init__(self, consumer_idcs: Iterable[str]) -> None:
        if isinstance(consumer_idcs, str):
            raise InvalidArgumentError(f"consumer_idcs must be a collection of idc names, not the string "
                                       f"{consumer_idcs!r}; pass [{consumer_idcs!r}]")
        self.consumer_idcs = frozenset(consumer_idcs)

    def allocate(self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        if not _check(consumer_group, current_cid, mq_all, cid_all):
            return []
        idx = cid_all.index(current_cid)
        premq = [mq for mq in mq_all if self._in_my_idcs(mq.broker_name)]
        c = len(cid_all)
        per_consumer, rem = divmod(len(premq), c)
        result = premq[per_consumer * idx: per_consumer * idx + per_consumer]
        if rem > idx:
            result.append(premq[idx + per_consumer * c])
        return result

    def _in_my_idcs(self, broker_name: str) -> bool:
        parts = _java_split(broker_name, MACHINE_ROOM_SEPARATOR)
        return len(parts) == 2 and parts[0] in self.consumer_idcs


class MachineRoomResolver(Protocol):
    """Which machine room a broker's queue or a consumer is in; never empty."""

    def broker_deploy_in(self, mq: MessageQueue) -> str: ...

    def consumer_deploy_in(self, cid: str) -> str: ...


def _java_string_order(text: str) -> bytes:
    """Sort key matching Java's String#compareTo (UTF-16 code units), as a TreeMap orders rooms."""
    return text.encode("utf-16-be", "surrogatepass")


class AllocateMachineRoomNearby:
    """MACHINE_ROOM_NEARBY-<inner>: my room's queues among my room's consumers, then the queues
    of every room without consumers among all consumers, rooms in sorted order."""

    def __init__(self, inner: AllocateStrategy, resolver: MachineRoomResolver) -> None:
        if inner is None:
            raise InvalidArgumentError("inner allocation strategy is None; pass e.g. AllocateAveragely()")
        if resolver is None:
            raise InvalidArgumentError("machine room resolver is None")
        self.inner = inner
        self.resolver = resolver

    @property
    def name(self) -> str:
        return MACHINE_ROOM_NEARBY_NAME_PREFIX + self.inner.name

    def allocate(self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        if not _check(consumer_group, current_cid, mq_all, cid_all):
            return []
        mqs_by_room: dict[str, list[MessageQueue]] = {}
        for mq in mq_all:
            room = self.resolver.broker_deploy_in(mq)
            if not room:
                raise InvalidArgumentError(f"machine room is empty for {mq}; the resolver must name one")
            mqs_by_room.setdefault(room, []).append(mq)
        cids_by_room: dict[str, list[str]] = {}
        for cid in cid_all:
            room = self.resolver.consumer_deploy_in(cid)
            if not room:
                raise InvalidArgumentError(f"machine room is empty for consumer id {cid}; the resolver must name one")
            cids_by_room.setdefault(room, []).append(cid)

        result: list[MessageQueue] = []
        my_room = self.resolver.consumer_deploy_in(current_cid)
        my_room_mqs = mqs_by_room.pop(my_room, None)
        if my_room_mqs:
            result += self.inner.allocate(consumer_group, current_cid, my_room_mqs, cids_by_room[my_room])
        for room in sorted(mqs_by_room, key=_java_string_order):
            if room not in cids_by_room:  # nobody lives there: every consumer shares its queues
                result += self.inner.allocate(consumer_group, current_cid, mqs_by_room[room], cid_all)
        return result
