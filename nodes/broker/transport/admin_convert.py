"""protobuf <-> the operator queries' plain values (admin_queries, topic_admin's delete, offset_reset).

Apart from convert.py so the client-facing conversions stay in one short module; the same
rules hold: codes convert by name, every field the proto names is written.
"""

from __future__ import annotations

from nodes.broker.admin_queries import (
    BrokerRuntimeResponse,
    ConsumerConnectionsRequest,
    ConsumerConnectionsResponse,
    ConsumeStatsRequest,
    ConsumeStatsResponse,
    ListConsumerGroupsResponse,
    TopicStatsRequest,
    TopicStatsResponse,
)
from nodes.broker.group_admin import UpdateGroupRequest, UpdateGroupResponse
from nodes.broker.offset_reset import ResetOffsetRequest, ResetOffsetResponse
from nodes.broker.topic_admin import DeleteTopicRequest, DeleteTopicResponse
from nodes.common.grpc_adapter import CODE_TO_PB
from proto import broker_pb2


def update_group_from_pb(pb: broker_pb2.UpdateSubscriptionGroupRequest) -> UpdateGroupRequest:
    return UpdateGroupRequest(
        pb.group,
        consume_message_orderly=pb.consume_message_orderly if pb.HasField("consume_message_orderly") else None,
        retry_max_times=pb.retry_max_times if pb.HasField("retry_max_times") else None)


def update_group_to_pb(answer: UpdateGroupResponse) -> broker_pb2.UpdateSubscriptionGroupResponse:
    pb = broker_pb2.UpdateSubscriptionGroupResponse(code=CODE_TO_PB[answer.code], remark=answer.remark)
    if answer.config is not None:
        pb.consume_message_orderly = answer.config.consume_message_orderly
        pb.retry_max_times = answer.config.retry_max_times
    return pb


def delete_topic_from_pb(pb: broker_pb2.DeleteTopicRequest) -> DeleteTopicRequest:
    return DeleteTopicRequest(pb.topic)


def delete_topic_to_pb(answer: DeleteTopicResponse) -> broker_pb2.DeleteTopicResponse:
    return broker_pb2.DeleteTopicResponse(code=CODE_TO_PB[answer.code], remark=answer.remark)


def topic_stats_from_pb(pb: broker_pb2.GetTopicStatsRequest) -> TopicStatsRequest:
    return TopicStatsRequest(pb.topic)


def topic_stats_to_pb(answer: TopicStatsResponse) -> broker_pb2.GetTopicStatsResponse:
    return broker_pb2.GetTopicStatsResponse(
        code=CODE_TO_PB[answer.code], remark=answer.remark, broker_name=answer.broker_name,
        broker_id=answer.broker_id, message_type=answer.message_type,
        queues=[broker_pb2.QueueStats(queue_id=q.queue_id, min_offset=q.min_offset, max_offset=q.max_offset,
                                      last_store_timestamp_ms=q.last_store_timestamp_ms) for q in answer.queues])


def consume_stats_from_pb(pb: broker_pb2.GetConsumeStatsRequest) -> ConsumeStatsRequest:
    return ConsumeStatsRequest(pb.consumer_group, pb.topic)


def consume_stats_to_pb(answer: ConsumeStatsResponse) -> broker_pb2.GetConsumeStatsResponse:
    return broker_pb2.GetConsumeStatsResponse(
        code=CODE_TO_PB[answer.code], remark=answer.remark, broker_name=answer.broker_name,
        broker_id=answer.broker_id,
        queues=[broker_pb2.QueueConsumeStats(
            topic=q.topic, queue_id=q.queue_id, broker_offset=q.broker_offset, consumer_offset=q.consumer_offset,
            last_consumed_store_timestamp_ms=q.last_consumed_store_timestamp_ms,
            last_puller_client_id=q.last_puller_client_id, last_pull_age_ms=q.last_pull_age_ms,
            lock_holder_client_id=q.lock_holder_client_id, lock_lease_left_ms=q.lock_lease_left_ms)
            for q in answer.queues])


def connections_from_pb(pb: broker_pb2.GetConsumerConnectionsRequest) -> ConsumerConnectionsRequest:
    return ConsumerConnectionsRequest(pb.consumer_group)


def connections_to_pb(answer: ConsumerConnectionsResponse) -> broker_pb2.GetConsumerConnectionsResponse:
    return broker_pb2.GetConsumerConnectionsResponse(
        code=CODE_TO_PB[answer.code], remark=answer.remark, consume_type=answer.consume_type,
        message_model=answer.message_model, consume_from_where=answer.consume_from_where,
        connections=[broker_pb2.ConsumerConnection(
            client_id=conn.client_id, peer=conn.peer, protocol=conn.protocol, language=conn.language,
            version=conn.version, last_heartbeat_age_ms=conn.last_heartbeat_age_ms) for conn in answer.connections],
        subscriptions=[broker_pb2.SubscriptionInfo(topic=s.topic, expression=s.expression, sub_version=s.sub_version)
                       for s in answer.subscriptions])


def groups_to_pb(answer: ListConsumerGroupsResponse) -> broker_pb2.ListConsumerGroupsResponse:
    return broker_pb2.ListConsumerGroupsResponse(
        code=CODE_TO_PB[answer.code], remark=answer.remark,
        groups=[broker_pb2.ConsumerGroupSummary(group=g.group, online_clients=g.online_clients, topics=g.topics,
                                                consume_type=g.consume_type, message_model=g.message_model)
                for g in answer.groups])


def runtime_to_pb(answer: BrokerRuntimeResponse) -> broker_pb2.GetBrokerRuntimeResponse:
    return broker_pb2.GetBrokerRuntimeResponse(
        code=CODE_TO_PB[answer.code], remark=answer.remark, broker_name=answer.broker_name,
        broker_id=answer.broker_id, role=answer.role, min_phys_offset=answer.min_phys_offset,
        max_phys_offset=answer.max_phys_offset, slave_lag_bytes=answer.slave_lag_bytes,
        disk_used_ratio=answer.disk_used_ratio, disk_free_bytes=answer.disk_free_bytes,
        writes_refused=answer.writes_refused, writes_refused_reason=answer.writes_refused_reason,
        time_scale=answer.time_scale, topics=answer.topics, store_errors=answer.store_errors,
        master_addr=answer.master_addr, broker_lock_lease_ms=answer.broker_lock_lease_ms,
        consumer_channel_expiry_ms=answer.consumer_channel_expiry_ms)


def reset_offset_from_pb(pb: broker_pb2.ResetConsumerOffsetRequest) -> ResetOffsetRequest:
    return ResetOffsetRequest(pb.consumer_group, pb.topic, pb.timestamp_ms)


def reset_offset_to_pb(answer: ResetOffsetResponse) -> broker_pb2.ResetConsumerOffsetResponse:
    return broker_pb2.ResetConsumerOffsetResponse(
        code=CODE_TO_PB[answer.code], remark=answer.remark, broker_name=answer.broker_name,
        broker_id=answer.broker_id, clients_told=answer.clients_told,
        queues=[broker_pb2.QueueOffsetReset(queue_id=q.queue_id, old_offset=q.old_offset, new_offset=q.new_offset)
                for q in answer.queues])
