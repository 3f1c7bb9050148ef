"""Committed offsets on a real master: names validated as RocketMQ does, keys that cannot
collide whatever the names, nothing stored for what does not exist or lies beyond a queue's
end, and old `topic@group` keys on disk migrated at start."""

from __future__ import annotations

import json

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.examples import examples
from support.local_cluster import master_stub, module_cluster

from harness.admin import credential_of
from nodes.common.credential import call_metadata
from proto import broker_pb2, broker_pb2_grpc, common_pb2, replication_pb2, replication_pb2_grpc

TIMEOUT_S = 10.0
TOPICS = ("SurfOffA", "SurfOffA_B", "%RETRY%SurfOffA")
MESSAGES = 40  # per queue 0 of each topic: commits up to this are in range
NAME_CHARS = "abXY09%|_-"


cluster = module_cluster("surface-offsets")
pytestmark = pytest.mark.xdist_group("surface-offsets")  # one worker starts the module's cluster once


@pytest.fixture(scope="module")
def broker(cluster):
    with master_stub(cluster) as stub:
        for topic in TOPICS:
            answer = stub.SendMessage(broker_pb2.SendMessageRequest(
                topic=topic, queue_id=0, default_topic_queue_nums=4,
                messages=[broker_pb2.OutgoingMessage(body=b"m") for _ in range(MESSAGES)]), timeout=TIMEOUT_S)
            assert answer.code == common_pb2.SUCCESS, answer.remark
        yield stub


def _commit(broker, topic: str, group: str, offset: int, queue_id: int = 0):
    return broker.UpdateConsumerOffset(broker_pb2.UpdateConsumerOffsetRequest(
        consumer_group=group, topic=topic, queue_id=queue_id, offset=offset), timeout=TIMEOUT_S)


def _query(broker, topic: str, group: str, queue_id: int = 0):
    return broker.QueryConsumerOffset(broker_pb2.QueryConsumerOffsetRequest(
        consumer_group=group, topic=topic, queue_id=queue_id), timeout=TIMEOUT_S)


def test_names_with_an_at_sign_are_refused_so_the_probe_pair_cannot_collide(broker):
    assert _commit(broker, "X@Y", "Z", 1).code == common_pb2.INVALID_ARGUMENT
    assert _commit(broker, "SurfOffA", "Y@Z", 1).code == common_pb2.INVALID_ARGUMENT
    assert _query(broker, "X@Y", "Z").code == common_pb2.INVALID_ARGUMENT


@pytest.mark.parametrize("topic, group", [
    ("bad topic", "g"), ("SurfOffA", "bad group"), ("x" * 128, "g"), ("SurfOffA", "g" * 256), ("", "g"),
    ("SurfOffA", ""), ("SurfOffA", "naïve"),
])
def test_names_outside_rocketmq_rules_are_refused(broker, topic, group):
    answer = _commit(broker, topic, group, 0)
    assert answer.code == common_pb2.INVALID_ARGUMENT and answer.remark


def test_the_longest_names_rocketmq_allows_are_accepted(broker):
    group = "g" * 255
    assert _commit(broker, "SurfOffA", group, 3).code == common_pb2.SUCCESS
    assert _query(broker, "SurfOffA", group).offset == 3


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(commits=st.dictionaries(
    keys=st.tuples(st.sampled_from(TOPICS), st.text(NAME_CHARS, min_size=1, max_size=12)),
    values=st.integers(0, MESSAGES), min_size=1, max_size=6))
def test_every_topic_and_group_pair_keeps_its_own_offset(broker, commits):
    for (topic, group), offset in commits.items():
        assert _commit(broker, topic, group, offset).code == common_pb2.SUCCESS
    for (topic, group), offset in commits.items():
        assert _query(broker, topic, group).offset == offset, (topic, group)


@pytest.mark.parametrize("topic, queue_id, offset, code", [
    ("SurfOffA", 0, 2**63 - 1, common_pb2.INVALID_ARGUMENT),
    ("SurfOffA", 0, 10**15, common_pb2.INVALID_ARGUMENT),
    ("SurfOffA", 0, MESSAGES + 1, common_pb2.INVALID_ARGUMENT),
    ("SurfOffA", 0, -1, common_pb2.INVALID_ARGUMENT),
    ("SurfOffA", -1, 0, common_pb2.INVALID_ARGUMENT),
    ("SurfOffA", 999, 0, common_pb2.INVALID_ARGUMENT),
    ("SurfOffNope", 0, 0, common_pb2.TOPIC_NOT_EXIST),
])
def test_offsets_for_what_does_not_exist_are_refused(cluster, broker, topic, queue_id, offset, code):
    group = "SurfOffRefused"
    assert _commit(broker, topic, group, offset, queue_id).code == code
    assert not [key for key in _stored_offsets(cluster) if group in key]


def _stored_offsets(cluster) -> dict[str, dict[str, int]]:
    """The master's offset table as its slaves copy it (SyncMetadata, with the credential)."""
    master = cluster.node("broker-a-0")
    with grpc.insecure_channel(master.addr) as channel:
        answer = replication_pb2_grpc.ReplicationStub(channel).SyncMetadata(
            replication_pb2.SyncMetadataRequest(), timeout=TIMEOUT_S,
            metadata=call_metadata(credential_of(master.run_dir)))
    return json.loads(answer.consumer_offsets_json)


def test_a_piggy_backed_commit_beyond_the_queue_is_not_stored(broker):
    group = "SurfOffPiggy"
    assert _commit(broker, "SurfOffA", group, 5).code == common_pb2.SUCCESS
    request = broker_pb2.PullRequest(
        request_id=1, consumer_group=group, topic="SurfOffA", queue_id=0, queue_offset=5, max_msg_nums=1,
        commit_offset=True, commit_offset_value=10**15, has_subscription=True, subscription_expression="*")
    answer = next(iter(broker.Pull(iter([request]), timeout=TIMEOUT_S)))
    assert answer.code == common_pb2.SUCCESS  # the pull itself is answered as usual
    assert _query(broker, "SurfOffA", group).offset == 5
    request.commit_offset_value = 6  # a commit in range still rides on the pull
    next(iter(broker.Pull(iter([request]), timeout=TIMEOUT_S)))
    assert _query(broker, "SurfOffA", group).offset == 6


def test_old_topic_at_group_keys_are_migrated_at_start(cluster, broker):
    from nodes.store.metadata import MetadataStore

    master = cluster.node("broker-a-0")
    cluster.stop("broker-a-0")
    metadata = MetadataStore(master.run_dir / "store" / "metadata")
    try:
        metadata.put("consumer_offsets", "SurfOffA@legacy_group", {"0": 7})
    finally:
        metadata.close()
    cluster.restart("broker-a-0")
    with grpc.insecure_channel(master.addr) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        assert _query(stub, "SurfOffA", "legacy_group").offset == 7
    cluster.stop("broker-a-0")
    metadata = MetadataStore(master.run_dir / "store" / "metadata")
    try:
        keys = set(metadata.get_all("consumer_offsets"))
    finally:
        metadata.close()
    cluster.restart("broker-a-0")
    assert "SurfOffA@legacy_group" not in keys and '["SurfOffA","legacy_group"]' in keys
    assert _stored_offsets(cluster)['["SurfOffA","legacy_group"]'] == {"0": 7}


@given(topic=st.text(max_size=30), group=st.text(max_size=30))
def test_a_stored_key_reads_back_as_its_pair_whatever_the_names(topic, group):
    from nodes.broker.offsets import decode_key, encode_key, is_old_key

    key = encode_key((topic, group))
    assert decode_key(key) == (topic, group) and not is_old_key(key)


def test_an_entry_under_its_new_key_wins_over_a_leftover_old_one(tmp_path):
    from nodes.broker.offsets import OFFSETS_TABLE, ConsumerOffsetTable
    from nodes.store.metadata import MetadataStore

    metadata = MetadataStore(tmp_path / "metadata")
    try:
        metadata.put_many(OFFSETS_TABLE, {"T@g": {"0": 1}, '["T","g"]': {"0": 2}, "X@Y@Z": {"0": 3}})
        table = ConsumerOffsetTable(metadata)
        assert table.query("g", "T", 0) == 2
        assert table.query("Y@Z", "X", 0) == 3  # an old key reads as it always did: split at the first '@'
        assert set(metadata.get_all(OFFSETS_TABLE)) == {'["T","g"]', '["X","Y@Z"]'}
    finally:
        metadata.close()
