"""Allocation strategies against RocketMQ 4.9's results, edge cases included.

Expected lists are worked out by hand from the strategies' formulas; the consistent-hash ones from
the MD5 ring values written next to them.
"""

from __future__ import annotations

import hashlib
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples

from nodes.client.allocate import (
    AllocateAveragely,
    AllocateAveragelyByCircle,
    AllocateByConfig,
    AllocateByMachineRoom,
    AllocateConsistentHash,
    AllocateMachineRoomNearby,
    HashRing,
    md5_hash,
)
from nodes.common.errors import ClientError, InvalidArgumentError
from nodes.common.types import MessageQueue


def qs(n: int, broker: str = "b", topic: str = "T") -> list[MessageQueue]:
    return [MessageQueue(topic, broker, i) for i in range(n)]


def owners(strategy, mq_all, cid_all) -> dict[str, list[MessageQueue]]:
    return {cid: strategy.allocate("G", cid, mq_all, cid_all) for cid in cid_all}


CHECKED = [AllocateAveragely(), AllocateAveragelyByCircle(), AllocateConsistentHash(),
           AllocateByMachineRoom(["idc1"])]


# --- names --------------------------------------------------------------------------------

def test_names_are_rocketmqs():
    assert AllocateAveragely().name == "AVG"
    assert AllocateAveragelyByCircle().name == "AVG_BY_CIRCLE"
    assert AllocateConsistentHash().name == "CONSISTENT_HASH"
    assert AllocateByConfig([]).name == "CONFIG"
    assert AllocateByMachineRoom(["idc1"]).name == "MACHINE_ROOM"
    assert AllocateMachineRoomNearby(AllocateAveragely(), RoomByPrefix()).name == "MACHINE_ROOM_NEARBY-AVG"
    assert AllocateMachineRoomNearby(AllocateConsistentHash(), RoomByPrefix()).name == \
        "MACHINE_ROOM_NEARBY-CONSISTENT_HASH"


# --- check() ------------------------------------------------------------------------------

@pytest.mark.parametrize("strategy", CHECKED, ids=lambda s: s.name)
@pytest.mark.parametrize(("cid", "mq_all", "cid_all", "what"), [
    ("", qs(2), ["a"], "current_cid"),
    (None, qs(2), ["a"], "current_cid"),
    ("a", [], ["a"], "mq_all"),
    ("a", qs(2), [], "cid_all"),
])
def test_check_rejects_empty_inputs(strategy, cid, mq_all, cid_all, what):
    with pytest.raises(InvalidArgumentError, match=what) as err:
        strategy.allocate("G", cid, mq_all, cid_all)
    assert isinstance(err.value, ValueError) and isinstance(err.value, ClientError)


@pytest.mark.parametrize("strategy", CHECKED, ids=lambda s: s.name)
def test_unknown_current_cid_gets_nothing(strategy):
    mq_all = qs(4, "idc1@b")
    assert strategy.allocate("G", "stranger", mq_all, ["a", "b"]) == []


def test_nearby_unknown_current_cid_gets_nothing():
    nearby = AllocateMachineRoomNearby(AllocateAveragely(), RoomByPrefix())
    assert nearby.allocate("G", "r1:x", qs(2, "r1@b"), ["r1:a"]) == []


# --- AVG ----------------------------------------------------------------------------------

def test_avg_first_mod_consumers_get_one_more_in_contiguous_blocks():
    q = qs(8)
    assert owners(AllocateAveragely(), q, ["a", "b", "c"]) == {
        "a": q[0:3],  # mod = 2, idx 0 < 2: size 3, start 0
        "b": q[3:6],  # idx 1 < 2: size 3, start 3
        "c": q[6:8],  # size 2, start 2*2 + 2 = 6
    }


def test_avg_even_split():
    q = qs(6)
    assert owners(AllocateAveragely(), q, ["a", "b", "c"]) == {"a": q[0:2], "b": q[2:4], "c": q[4:6]}


def test_avg_more_consumers_than_queues_leaves_surplus_empty():
    q = qs(3)
    assert owners(AllocateAveragely(), q, ["a", "b", "c", "d", "e"]) == {
        "a": [q[0]], "b": [q[1]], "c": [q[2]],
        "d": [], "e": [],  # start = idx + mod = 6, 7: range < 0
    }


def test_avg_as_many_consumers_as_queues():
    q = qs(3)
    assert owners(AllocateAveragely(), q, ["a", "b", "c"]) == {"a": [q[0]], "b": [q[1]], "c": [q[2]]}


def test_avg_duplicate_cid_uses_first_index_and_leaves_queues_unowned():
    q = qs(6)
    cids = ["a", "b", "a"]  # c = 3: size 2; "a" is index 0 both times
    assert AllocateAveragely().allocate("G", "a", q, cids) == q[0:2]
    assert AllocateAveragely().allocate("G", "b", q, cids) == q[2:4]
    # q[4], q[5] belong to index 2, which no distinct client holds


def test_avg_duplicate_cid_with_remainder():
    q = qs(5)
    cids = ["a", "b", "a"]  # mod = 2: indexes 0 and 1 get 2 each, index 2 would get q[4]
    assert AllocateAveragely().allocate("G", "a", q, cids) == q[0:2]
    assert AllocateAveragely().allocate("G", "b", q, cids) == q[2:4]


def test_avg_does_not_sort_its_inputs():
    q0, q1, q2, q3 = qs(4)
    mq_all = [q3, q1, q2, q0]
    cids = ["b", "a"]  # "a" is index 1
    assert AllocateAveragely().allocate("G", "a", mq_all, cids) == [q2, q0]
    assert AllocateAveragely().allocate("G", "b", mq_all, cids) == [q3, q1]


def test_avg_single_consumer_gets_everything_in_order():
    q = [MessageQueue("T", "b", 2), MessageQueue("T", "a", 9), MessageQueue("T", "a", 1)]
    assert AllocateAveragely().allocate("G", "only", q, ["only"]) == q


# --- AVG_BY_CIRCLE ------------------------------------------------------------------------

def test_circle_stripes_round_robin():
    q = qs(8)
    assert owners(AllocateAveragelyByCircle(), q, ["a", "b", "c"]) == {
        "a": [q[0], q[3], q[6]], "b": [q[1], q[4], q[7]], "c": [q[2], q[5]]}


def test_circle_surplus_consumer_gets_nothing():
    q = qs(2)
    assert owners(AllocateAveragelyByCircle(), q, ["a", "b", "c"]) == {"a": [q[0]], "b": [q[1]], "c": []}


def test_circle_duplicate_cid_uses_first_index():
    q = qs(6)
    cids = ["a", "b", "a"]
    assert AllocateAveragelyByCircle().allocate("G", "a", q, cids) == [q[0], q[3]]
    assert AllocateAveragelyByCircle().allocate("G", "b", q, cids) == [q[1], q[4]]
    # q[2], q[5] (index 2) are unowned


def test_circle_does_not_sort_its_inputs():
    q0, q1, q2, q3 = qs(4)
    mq_all = [q3, q1, q2, q0]
    assert AllocateAveragelyByCircle().allocate("G", "a", mq_all, ["b", "a"]) == [q1, q0]
    assert AllocateAveragelyByCircle().allocate("G", "b", mq_all, ["b", "a"]) == [q3, q2]


# --- CONSISTENT_HASH ----------------------------------------------------------------------

# MD5 ring values (first 4 digest bytes, big-endian) of the keys used below:
#   str(qs(8)[i]) -> 562732085, 3803073317, 1979679239, 434191955,
#                    4287528942, 3805727012, 2710626515, 657851999
#   "10.0.0.1@1-0" 2998294157   "10.0.0.1@1-1" 423482019    "10.0.0.1@1-2" 4287384098
#   "10.0.0.2@2-0" 1858185370   "10.0.0.2@2-1" 3626932150   "10.0.0.2@2-2" 4120314938
C1, C2 = "10.0.0.1@1", "10.0.0.2@2"
MQ_HASHES = [562732085, 3803073317, 1979679239, 434191955, 4287528942, 3805727012, 2710626515, 657851999]


def test_md5_hash_is_first_four_digest_bytes_big_endian_unsigned():
    key = "MessageQueue [topic=T, brokerName=b, queueId=0]"
    digest = hashlib.md5(b"MessageQueue [topic=T, brokerName=b, queueId=0]").digest()
    assert digest.hex()[:8] == "218a9c35"
    assert md5_hash(key) == 0x218A9C35 == 562732085 == int.from_bytes(digest[:4], "big")
    assert md5_hash(str(MessageQueue("T", "b", 0))) == 562732085  # the key is MessageQueue#toString
    assert [md5_hash(str(mq)) for mq in qs(8)] == MQ_HASHES
    assert md5_hash("10.0.0.1@1-0") == 2998294157 > 2**31  # unsigned: no sign flip above 2^31


def test_consistent_hash_zero_virtual_nodes_gives_nobody_anything():
    q = qs(8)
    assert owners(AllocateConsistentHash(0), q, [C1, C2]) == {C1: [], C2: []}


def test_consistent_hash_one_virtual_node():
    # ring: 1858185370 -> C2, 2998294157 -> C1; hashes above 2998294157 wrap to C2
    q = qs(8)
    assert owners(AllocateConsistentHash(1), q, [C1, C2]) == {
        C1: [q[2], q[6]],
        C2: [q[0], q[1], q[3], q[4], q[5], q[7]],
    }


def test_consistent_hash_three_virtual_nodes():
    # ring: 423482019 C1, 1858185370 C2, 2998294157 C1, 3626932150 C2, 4120314938 C2, 4287384098 C1
    # q[4] (4287528942) is above every key and wraps to 423482019 (C1)
    q = qs(8)
    assert owners(AllocateConsistentHash(3), q, [C1, C2]) == {
        C1: [q[2], q[4], q[6]],
        C2: [q[0], q[1], q[3], q[5], q[7]],
    }


def test_consistent_hash_duplicate_cid_continues_replica_numbers():
    # [C1, C2, C1] with 1 virtual node: keys C1-0, C2-0, then C1-1 (one existing replica)
    # ring: 423482019 C1, 1858185370 C2, 2998294157 C1
    q = qs(8)
    cids = [C1, C2, C1]
    assert AllocateConsistentHash(1).allocate("G", C1, q, cids) == [q[1], q[2], q[4], q[5], q[6]]
    assert AllocateConsistentHash(1).allocate("G", C2, q, cids) == [q[0], q[3], q[7]]


def test_consistent_hash_default_is_ten_virtual_nodes():
    ring = HashRing([C1, C2], 10)
    assert len(ring) == 20
    assert AllocateConsistentHash().virtual_node_count == 10


def test_consistent_hash_ring_key_is_ge_and_wraps():
    table = {"a-0": 100, "b-0": 200}
    mq_hash = {str(mq): h for mq, h in zip(qs(4), [100, 150, 200, 250], strict=True)}
    hash_fn = {**table, **mq_hash}.__getitem__
    q = qs(4)
    got = owners(AllocateConsistentHash(1, hash_function=hash_fn), q, ["a", "b"])
    assert got == {"a": [q[0], q[3]],  # 100 hits its own key (>=); 250 wraps to 100
                   "b": [q[1], q[2]]}


def test_consistent_hash_collision_later_put_wins_and_replicas_count_ring_entries():
    q = qs(2)
    mq_hash = {str(mq): 50 for mq in q}
    # "a-0" and "b-0" collide: b overwrites a, so the ring is {100: b}
    hash_fn = {"a-0": 100, "b-0": 100, **mq_hash}.__getitem__
    assert owners(AllocateConsistentHash(1, hash_function=hash_fn), q, ["a", "b"]) == {"a": [], "b": q}
    # a duplicated "a" owns no ring entry any more, so it starts again at "a-0" and wins it back
    assert AllocateConsistentHash(1, hash_function=hash_fn).allocate("G", "a", q, ["a", "b", "a"]) == q


def test_consistent_hash_refuses_negative_virtual_nodes():
    with pytest.raises(InvalidArgumentError, match="virtual_node_count"):
        AllocateConsistentHash(-1)


def test_consistent_hash_keeps_mq_all_order_without_sorting():
    q = qs(8)
    shuffled = [q[5], q[2], q[7], q[0], q[6], q[1], q[4], q[3]]
    assert AllocateConsistentHash(3).allocate("G", C1, shuffled, [C2, C1]) == [q[2], q[6], q[4]]


# --- CONFIG -------------------------------------------------------------------------------

def test_config_returns_configured_queues_whatever_the_inputs():
    configured = [MessageQueue("X", "b", 7), MessageQueue("A", "a", 1)]  # unsorted on purpose
    strategy = AllocateByConfig(configured)
    assert strategy.allocate("G", "a", qs(3), ["a", "b"]) == configured
    assert strategy.allocate("G", "stranger", qs(3), ["a"]) == configured  # no check()
    assert strategy.allocate("G", "", [], []) == configured  # no check(), so no error either
    assert AllocateByConfig([]).allocate("G", "a", qs(1), ["a"]) == []


def test_config_result_is_a_copy_of_the_live_configured_list():
    configured = [MessageQueue("T", "b", 0)]
    strategy = AllocateByConfig(configured)
    strategy.allocate("G", "a", qs(1), ["a"]).clear()
    configured.append(MessageQueue("T", "b", 1))  # Java keeps the list object: later edits show
    assert strategy.allocate("G", "a", qs(1), ["a"]) == qs(2)


# --- MACHINE_ROOM -------------------------------------------------------------------------

@pytest.mark.parametrize(("broker_name", "included"), [
    ("broker-a", False),  # no "@": one part
    ("idc1@broker-a", True),  # one "@": two parts, idc1 listed
    ("idc2@broker-a", False),  # two parts, idc not listed
    ("idc1@x@y", False),  # two "@": three parts
    ("idc1@", False),  # Java's split drops the trailing empty part: one part
    ("idc1@x@", True),  # ... and here leaves two parts
    ("@broker-a", False),  # empty idc, not listed
])
def test_machine_room_needs_exactly_two_parts_and_a_listed_idc(broker_name, included):
    mq = MessageQueue("T", broker_name, 0)
    assert AllocateByMachineRoom(["idc1"]).allocate("G", "a", [mq], ["a"]) == ([mq] if included else [])


def test_machine_room_blocks_then_remainder_from_the_tail():
    q = qs(5, "idc1@b")
    assert owners(AllocateByMachineRoom(["idc1"]), q, ["a", "b"]) == {
        "a": [q[0], q[1], q[4]],  # mod 2, rem 1: block [0, 2) plus premq[0 + 2*2]
        "b": [q[2], q[3]],
    }


def test_machine_room_fewer_queues_than_consumers():
    q = qs(2, "idc1@b")
    assert owners(AllocateByMachineRoom(["idc1"]), q, ["a", "b", "c"]) == {"a": [q[0]], "b": [q[1]], "c": []}


def test_machine_room_filters_then_splits_in_mq_all_order():
    a = MessageQueue("T", "broker-a", 0)
    b0, b1, b2 = qs(3, "idc1@broker-b")
    x = MessageQueue("T", "idc1@x@y", 0)
    c0 = MessageQueue("T", "idc2@broker-c", 0)
    e = MessageQueue("T", "idc1@", 0)
    f = MessageQueue("T", "idc1@f@", 0)
    mq_all = [a, b0, b1, x, b2, c0, e, f]  # premq for {idc1} = [b0, b1, b2, f]
    assert owners(AllocateByMachineRoom(["idc1"]), mq_all, ["c1", "c2", "c3"]) == {
        "c1": [b0, f], "c2": [b1], "c3": [b2]}
    # with idc2 too: premq = [b0, b1, b2, c0, f]
    assert owners(AllocateByMachineRoom({"idc1", "idc2"}), mq_all, ["c1", "c2"]) == {
        "c1": [b0, b1, f], "c2": [b2, c0]}


def test_machine_room_no_matching_queue_gives_nothing():
    assert AllocateByMachineRoom(["idc9"]).allocate("G", "a", qs(3, "idc1@b"), ["a"]) == []


def test_machine_room_duplicate_cid_uses_first_index():
    q = qs(4, "idc1@b")
    cids = ["a", "b", "a"]  # mod 1, rem 1
    assert AllocateByMachineRoom(["idc1"]).allocate("G", "a", q, cids) == [q[0], q[3]]
    assert AllocateByMachineRoom(["idc1"]).allocate("G", "b", q, cids) == [q[1]]


def test_machine_room_refuses_a_bare_string():
    with pytest.raises(InvalidArgumentError, match="consumer_idcs"):
        AllocateByMachineRoom("idc1")


# --- MACHINE_ROOM_NEARBY ------------------------------------------------------------------

class RoomByPrefix:
    """Brokers "<room>@<name>", consumers "<room>:<name>"."""

    def broker_deploy_in(self, mq: MessageQueue) -> str:
        return mq.broker_name.split("@")[0]

    def consumer_deploy_in(self, cid: str) -> str:
        return cid.split(":")[0] if ":" in cid else ""


def test_nearby_keeps_my_room_and_shares_rooms_without_consumers():
    a = qs(2, "A@b")
    b = qs(2, "B@b")
    c = qs(2, "C@b")  # nobody consumes in room C
    cids = ["A:1", "A:2", "B:1"]
    nearby = AllocateMachineRoomNearby(AllocateAveragely(), RoomByPrefix())
    assert owners(nearby, a + b + c, cids) == {
        "A:1": [a[0], c[0]],  # AVG(a, [A:1, A:2]) + AVG(c, all cids) at index 0
        "A:2": [a[1], c[1]],
        "B:1": [b[0], b[1]],  # index 2 of 3 over 2 queues gets nothing of c
    }


def test_nearby_visits_consumerless_rooms_in_sorted_order():
    z = qs(1, "Z@b")
    c = qs(1, "C@b")
    nearby = AllocateMachineRoomNearby(AllocateAveragely(), RoomByPrefix())
    assert nearby.allocate("G", "A:1", z + c, ["A:1"]) == c + z  # my room A has no queue


def test_nearby_refuses_an_empty_room():
    nearby = AllocateMachineRoomNearby(AllocateAveragely(), RoomByPrefix())
    with pytest.raises(InvalidArgumentError, match="consumer id nowhere"):
        nearby.allocate("G", "A:1", qs(1, "A@b"), ["A:1", "nowhere"])
    with pytest.raises(InvalidArgumentError, match="machine room is empty"):
        nearby.allocate("G", "A:1", [MessageQueue("T", "@b", 0)], ["A:1"])


def test_nearby_refuses_missing_parts():
    with pytest.raises(InvalidArgumentError):
        AllocateMachineRoomNearby(None, RoomByPrefix())
    with pytest.raises(InvalidArgumentError):
        AllocateMachineRoomNearby(AllocateAveragely(), None)


# --- properties ---------------------------------------------------------------------------

queue_lists = st.lists(
    st.builds(MessageQueue, st.sampled_from(["T", "U"]), st.sampled_from(["a", "b", "c"]),
              st.integers(0, 15)),
    min_size=1, max_size=24, unique=True)
cid_lists = st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=7, unique=True)
partitioning = st.one_of(st.just(AllocateAveragely()), st.just(AllocateAveragelyByCircle()),
                         st.integers(1, 5).map(AllocateConsistentHash))


@settings(max_examples=examples(150), deadline=None)
@given(partitioning, queue_lists, cid_lists)
def test_every_queue_has_exactly_one_owner(strategy, mq_all, cid_all):
    owned = Counter(mq for cid in cid_all for mq in strategy.allocate("G", cid, mq_all, cid_all))
    assert owned == Counter(mq_all)


@settings(max_examples=examples(150), deadline=None)
@given(partitioning, queue_lists, cid_lists, st.data())
def test_results_keep_mq_all_order(strategy, mq_all, cid_all, data):
    cid = data.draw(st.sampled_from(cid_all))
    positions = [mq_all.index(mq) for mq in strategy.allocate("G", cid, mq_all, cid_all)]
    assert positions == sorted(positions)


@settings(max_examples=examples(100), deadline=None)
@given(queue_lists, cid_lists)
def test_avg_sizes_differ_by_at_most_one(mq_all, cid_all):
    sizes = [len(AllocateAveragely().allocate("G", cid, mq_all, cid_all)) for cid in cid_all]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)  # the first consumers get the extra queue
