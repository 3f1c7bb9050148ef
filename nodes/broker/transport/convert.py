"""protobuf <-> the broker handlers' plain values, both directions, in one place.

Codes convert by name (`ResponseCode` members are named after the wire enum `Code`); the
tables are built once. Per message or record nothing is added beyond what the wire needs:
a send's messages become the store-input tuples directly, a pull's records stay one blob.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from nodes.broker.client_manage import ConsumerListRequest, HeartbeatRequest, Notice, UnregisterClientRequest
from nodes.broker.consumers import ClientConnection, ConsumerRegistration, Subscription
from nodes.broker.ha_master import LogChunk, Refusal, SlaveReport
from nodes.broker.master_sync import DigestRequest, DigestResponse, VerifyStoreResponse
from nodes.broker.offset_requests import (
    GetQueueOffsetRequest,
    OffsetKind,
    OffsetResponse,
    QueryConsumerOffsetRequest,
    UpdateConsumerOffsetRequest,
)
from nodes.broker.pull import PullAnswer, PullRequest
from nodes.broker.queue_locks import LockBatchRequest
from nodes.broker.registrar import BrokerIdentity, BrokerRegistration, RegisterResult
from nodes.broker.send import SendRequest, SendResponse
from nodes.broker.send_back import SendBackRequest
from nodes.broker.slave_sync import MetadataSnapshot
from nodes.broker.topic_admin import CreateTopicRequest
from nodes.common import wire
from nodes.common.grpc_adapter import CODE_TO_PB, code_from_pb
from nodes.common.types import MessageQueue
from proto import broker_pb2, common_pb2, consumer_pb2, namesrv_pb2, replication_pb2

_OFFSET_KIND_FROM_PB = {broker_pb2.MIN: OffsetKind.MIN, broker_pb2.MAX: OffsetKind.MAX,
                        broker_pb2.BY_TIMESTAMP: OffsetKind.BY_TIMESTAMP}
_REFUSAL_TO_PB = {r: replication_pb2.ReplicationRefusal.Value(r.name) for r in Refusal}
_REFUSAL_FROM_PB = {pb: r for r, pb in _REFUSAL_TO_PB.items()}


# --- shared types (TopicConfig and MessageQueue convert in nodes.common.wire, shared with the client)

def mqs_to_pb(mqs: Iterable[MessageQueue]) -> list[common_pb2.MessageQueue]:
    return [wire.mq_to_pb(mq) for mq in mqs]


# --- send ---------------------------------------------------------------------------------------

def send_request_from_pb(pb: broker_pb2.SendMessageRequest) -> SendRequest:
    return SendRequest(
        topic=pb.topic, queue_id=pb.queue_id,
        messages=[(m.body, m.flag, dict(m.properties), m.born_timestamp_ms) for m in pb.messages],
        batch_body=pb.batch_body, born_timestamp_ms=pb.born_timestamp_ms,
        default_topic_queue_nums=pb.default_topic_queue_nums,
        born_host=wire.parse_host_port(pb.born_host) if pb.born_host else ("127.0.0.1", 0),
        sys_flag=pb.sys_flag, reconsume_times=pb.reconsume_times)


def send_response_to_pb(response: SendResponse) -> broker_pb2.SendMessageResponse:
    code = CODE_TO_PB[response.code]
    appended = response.appended
    if not appended:
        return broker_pb2.SendMessageResponse(code=code, remark=response.remark, queue_id=response.queue_id)
    if response.compact:
        return broker_pb2.SendMessageResponse(
            code=code, remark=response.remark, queue_id=response.queue_id,
            first_queue_offset=appended[0].queue_offset, phys_offsets=response.phys_offsets,
            offset_msg_id_prefix=response.offset_msg_id_prefix)
    return broker_pb2.SendMessageResponse(
        code=code, remark=response.remark, queue_id=response.queue_id,
        entries=[broker_pb2.SendEntry(offset_msg_id=a.offset_msg_id, queue_offset=a.queue_offset,
                                      phys_offset=a.phys_offset) for a in appended])


# --- pull ---------------------------------------------------------------------------------------

def pull_request_from_pb(pb: broker_pb2.PullRequest) -> PullRequest:
    return PullRequest(
        consumer_group=pb.consumer_group, topic=pb.topic, queue_id=pb.queue_id, queue_offset=pb.queue_offset,
        max_msg_nums=pb.max_msg_nums, request_id=pb.request_id, suspend=pb.suspend,
        suspend_timeout_ms=pb.suspend_timeout_ms, commit_offset=pb.commit_offset,
        commit_offset_value=pb.commit_offset_value, has_subscription=pb.has_subscription,
        subscription_expression=pb.subscription_expression, sub_version=pb.sub_version, client_id=pb.client_id,
        commit_seq=pb.commit_seq)


def fill_pull_response(pb: broker_pb2.PullResponse, answer: PullAnswer) -> None:
    """Write `answer` into `pb` (a fresh message, or a batch's new entry): records copied once."""
    pb.request_id = answer.request_id
    pb.code = CODE_TO_PB[answer.code]
    pb.remark = answer.remark
    pb.next_begin_offset = answer.next_begin_offset
    pb.min_offset = answer.min_offset
    pb.max_offset = answer.max_offset
    pb.suggest_which_broker_id = answer.suggest_which_broker_id
    if answer.record_count:
        pb.record_count = answer.record_count
        pb.records = answer.records


# --- offsets and topics -------------------------------------------------------------------------

def query_offset_from_pb(pb: broker_pb2.QueryConsumerOffsetRequest) -> QueryConsumerOffsetRequest:
    return QueryConsumerOffsetRequest(pb.consumer_group, pb.topic, pb.queue_id)


def update_offset_from_pb(pb: broker_pb2.UpdateConsumerOffsetRequest) -> UpdateConsumerOffsetRequest:
    return UpdateConsumerOffsetRequest(pb.consumer_group, pb.topic, pb.queue_id, pb.offset, client_id=pb.client_id,
                                       commit_seq=pb.commit_seq)


def queue_offset_from_pb(pb: broker_pb2.GetQueueOffsetRequest) -> GetQueueOffsetRequest:
    return GetQueueOffsetRequest(pb.topic, pb.queue_id, _OFFSET_KIND_FROM_PB.get(pb.kind), pb.timestamp_ms)


def offset_answer_fields(response: OffsetResponse) -> dict[str, object]:
    return {"code": CODE_TO_PB[response.code], "remark": response.remark, "offset": response.offset}


def create_topic_from_pb(pb: broker_pb2.CreateTopicRequest) -> CreateTopicRequest:
    return CreateTopicRequest(wire.topic_config_from_pb(pb.config), update=pb.update)


# --- consumer management ------------------------------------------------------------------------

def registration_from_pb(data: consumer_pb2.ConsumerData) -> ConsumerRegistration:
    return ConsumerRegistration(
        group=data.group, consume_type=data.consume_type, message_model=data.message_model,
        consume_from_where=data.consume_from_where,
        subscriptions=tuple(Subscription(s.topic, s.expression, s.sub_version) for s in data.subscriptions))


def heartbeat_from_pb(pb: consumer_pb2.HeartbeatRequest, peer: str) -> HeartbeatRequest:
    """`peer` (gRPC's "ipv4:host:port") keys the connection as it is; operators see the address alone."""
    return HeartbeatRequest(pb.client_id, tuple(registration_from_pb(d) for d in pb.consumers), channel_key=peer,
                            connection=ClientConnection(peer=peer_address(peer)))


def peer_address(peer: str) -> str:
    """gRPC's peer name without its scheme: "ipv4:127.0.0.1:5000" -> "127.0.0.1:5000"."""
    scheme, sep, address = peer.partition(":")
    return address if sep and scheme in ("ipv4", "ipv6", "unix") else peer


def unregister_from_pb(pb: consumer_pb2.UnregisterClientRequest) -> UnregisterClientRequest:
    return UnregisterClientRequest(pb.client_id, pb.consumer_group)


def consumer_list_from_pb(pb: consumer_pb2.GetConsumerListRequest) -> ConsumerListRequest:
    return ConsumerListRequest(pb.consumer_group)


def send_back_from_pb(pb: consumer_pb2.ConsumerSendMsgBackRequest) -> SendBackRequest:
    return SendBackRequest(consumer_group=pb.consumer_group, phys_offset=pb.phys_offset, delay_level=pb.delay_level,
                           origin_msg_id=pb.origin_msg_id, origin_topic=pb.origin_topic,
                           max_reconsume_times=pb.max_reconsume_times)


def lock_batch_from_pb(pb: consumer_pb2.LockBatchRequest | consumer_pb2.UnlockBatchRequest) -> LockBatchRequest:
    return LockBatchRequest(pb.consumer_group, pb.client_id, tuple(wire.mq_from_pb(q) for q in pb.queues))


# --- replication and metadata -------------------------------------------------------------------

def slave_report_from_pb(pb: replication_pb2.SlaveReport) -> SlaveReport:
    return SlaveReport(pb.max_phys_offset, pb.slave_node_id, pb.broker_id, pb.tail_check_from, pb.tail_crc32,
                       pb.data_phys_offset, pb.data, pb.restore_check_failed)


def slave_report_to_pb(report: SlaveReport) -> replication_pb2.SlaveReport:
    return replication_pb2.SlaveReport(max_phys_offset=report.max_phys_offset, slave_node_id=report.slave_node_id,
                                       broker_id=report.broker_id, tail_check_from=report.tail_check_from,
                                       tail_crc32=report.tail_crc32, data_phys_offset=report.data_phys_offset,
                                       data=report.data, restore_check_failed=report.restore_check_failed)


def log_chunk_to_pb(chunk: LogChunk) -> replication_pb2.LogChunk:
    return replication_pb2.LogChunk(
        phys_offset=chunk.phys_offset, data=chunk.data, master_max_phys_offset=chunk.master_max_phys_offset,
        refusal=_REFUSAL_TO_PB[chunk.refusal] if chunk.refusal is not None else 0, remark=chunk.remark,
        truncate=chunk.truncate, restore=chunk.restore, offset=chunk.offset, check_from=chunk.check_from,
        check_crc32=chunk.check_crc32, damaged=chunk.damaged)


def log_chunk_from_pb(pb: replication_pb2.LogChunk) -> LogChunk:
    return LogChunk(phys_offset=pb.phys_offset, data=pb.data, master_max_phys_offset=pb.master_max_phys_offset,
                    refusal=_REFUSAL_FROM_PB.get(pb.refusal), remark=pb.remark, truncate=pb.truncate,
                    restore=pb.restore, offset=pb.offset, check_from=pb.check_from, check_crc32=pb.check_crc32,
                    damaged=pb.damaged)


def metadata_to_pb(snapshot: MetadataSnapshot) -> replication_pb2.SyncMetadataResponse:
    millis, counter = snapshot.topics_data_version
    return replication_pb2.SyncMetadataResponse(
        code=common_pb2.SUCCESS, topic_configs=[wire.topic_config_to_pb(t) for t in snapshot.topic_configs],
        topics_data_version=f"{millis}:{counter}", consumer_offsets_json=json.dumps(snapshot.consumer_offsets),
        subscription_groups_json=json.dumps(snapshot.subscription_groups),
        delay_offsets_json=json.dumps(snapshot.delay_offsets))


def metadata_from_pb(pb: replication_pb2.SyncMetadataResponse) -> MetadataSnapshot:
    millis, _, counter = pb.topics_data_version.partition(":")
    return MetadataSnapshot(
        topic_configs=tuple(wire.topic_config_from_pb(t) for t in pb.topic_configs),
        topics_data_version=(int(millis or 0), int(counter or 0)),
        consumer_offsets=json.loads(pb.consumer_offsets_json or "{}"),
        subscription_groups=json.loads(pb.subscription_groups_json or "{}"),
        delay_offsets=json.loads(pb.delay_offsets_json or "{}"))


def digest_from_pb(pb: replication_pb2.DigestRequest) -> DigestRequest:
    return DigestRequest(pb.from_phys_offset, pb.to_phys_offset)


def digest_to_pb(response: DigestResponse) -> replication_pb2.DigestResponse:
    return replication_pb2.DigestResponse(code=CODE_TO_PB[response.code], remark=response.remark,
                                          from_phys_offset=response.from_phys_offset,
                                          to_phys_offset=response.to_phys_offset, sha256=response.sha256)


def verify_to_pb(response: VerifyStoreResponse) -> replication_pb2.VerifyStoreResponse:
    return replication_pb2.VerifyStoreResponse(units_checked=response.units_checked,
                                               invalid_units=response.invalid_units, examples=response.examples)


# --- to the name server -------------------------------------------------------------------------

def registration_to_pb(reg: BrokerRegistration) -> namesrv_pb2.RegisterBrokerRequest:
    return namesrv_pb2.RegisterBrokerRequest(
        cluster_name=reg.cluster_name, broker_name=reg.broker_name, broker_id=reg.broker_id,
        broker_addr=reg.broker_addr, ha_server_addr=reg.ha_server_addr,
        topic_configs=[wire.topic_config_to_pb(t) for t in reg.topic_configs],
        data_version=namesrv_pb2.DataVersion(timestamp_ms=reg.data_version[0], counter=reg.data_version[1]),
        node_id=reg.node_id, channel_token=reg.channel_token, remoting_addr=reg.remoting_addr,
        rocketmq5_addr=reg.rocketmq5_addr)


def register_result_from_pb(pb: namesrv_pb2.RegisterBrokerResponse) -> RegisterResult:
    return RegisterResult(code_from_pb(pb.code), pb.remark, pb.master_addr)


def watch_channel_to_pb(broker: BrokerIdentity, channel_token: str) -> namesrv_pb2.WatchChannelRequest:
    return namesrv_pb2.WatchChannelRequest(cluster_name=broker.cluster_name, broker_name=broker.broker_name,
                                           broker_id=broker.broker_id, broker_addr=broker.broker_addr,
                                           channel_token=channel_token)


def unregister_broker_to_pb(broker: BrokerIdentity) -> namesrv_pb2.UnregisterBrokerRequest:
    return namesrv_pb2.UnregisterBrokerRequest(cluster_name=broker.cluster_name, broker_name=broker.broker_name,
                                               broker_id=broker.broker_id, broker_addr=broker.broker_addr)


def notice_to_pb(notice: Notice) -> consumer_pb2.ConsumerNotification:
    """A group name -> NOTIFY_CONSUMER_IDS_CHANGED; a reset -> RESET_CONSUMER_CLIENT_OFFSET."""
    if isinstance(notice, str):
        return consumer_pb2.ConsumerNotification(consumer_group=notice)
    return consumer_pb2.ConsumerNotification(reset=consumer_pb2.ResetOffsetNotice(
        consumer_group=notice.group, topic=notice.topic, timestamp_ms=notice.timestamp_ms,
        offsets=[consumer_pb2.QueueOffset(queue=wire.mq_to_pb(MessageQueue(notice.topic, notice.broker_name, queue_id)),
                                          queue_offset=queue_offset)
                 for queue_id, queue_offset in notice.offsets]))
