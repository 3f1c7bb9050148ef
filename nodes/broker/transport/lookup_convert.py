"""protobuf <-> the message lookups' plain values (message_lookup).

Beside admin_convert.py with the same rules: codes convert by name, every field the proto names
is written. A found message carries a preview of its body (INDEX_BODY_PREVIEW_BYTES), not all
of it: an operator reads what a message is, a consumer pulls it.
"""

from __future__ import annotations

from nodes.broker.message_lookup import (
    FoundMessage,
    MessageLookupResponse,
    QueryMessageRequest,
    QueueMessageRequest,
    ViewMessageRequest,
)
from nodes.common import constants as c
from nodes.common.grpc_adapter import CODE_TO_PB
from proto import broker_pb2


def query_from_pb(pb: broker_pb2.QueryMessageRequest) -> QueryMessageRequest:
    return QueryMessageRequest(pb.topic, pb.key, pb.max_count, pb.begin_timestamp_ms, pb.end_timestamp_ms,
                               pb.unique_key)


def view_from_pb(pb: broker_pb2.ViewMessageRequest) -> ViewMessageRequest:
    return ViewMessageRequest(msg_id=pb.msg_id, topic=pb.topic)


def queue_view_from_pb(pb: broker_pb2.ViewQueueMessageRequest) -> QueueMessageRequest:
    return QueueMessageRequest(pb.topic, pb.queue_id, pb.queue_offset)


def lookup_to_pb(answer: MessageLookupResponse) -> broker_pb2.MessageLookupResponse:
    return broker_pb2.MessageLookupResponse(
        code=CODE_TO_PB[answer.code], remark=answer.remark, broker_name=answer.broker_name,
        broker_id=answer.broker_id, messages=[found_to_pb(m) for m in answer.messages])


def found_to_pb(found: FoundMessage) -> broker_pb2.FoundMessage:
    r = found.record
    return broker_pb2.FoundMessage(
        topic=r.topic, queue_id=r.queue_id, queue_offset=r.queue_offset, phys_offset=r.phys_offset,
        offset_msg_id=r.offset_msg_id, msg_id=r.properties.get(c.PROPERTY_UNIQ_KEY, ""), tags=r.tags or "",
        keys=r.keys or "", properties=r.properties, born_host=f"{r.born_host[0]}:{r.born_host[1]}",
        born_timestamp_ms=r.born_timestamp_ms, store_host=f"{r.store_host[0]}:{r.store_host[1]}",
        store_timestamp_ms=r.store_timestamp_ms, reconsume_times=r.reconsume_times, body_size=len(r.body),
        body_preview=r.body[:c.INDEX_BODY_PREVIEW_BYTES], flag=r.flag, sys_flag=r.sys_flag,
        progress=[broker_pb2.GroupProgress(group=p.group, consumer_offset=p.consumer_offset, consumed=p.consumed)
                  for p in found.progress])
