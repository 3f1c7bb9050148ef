"""protobuf <-> the POP engine's values (nodes/broker/pop/values.py), for the Broker servicer's
PopMessage, AckPopMessage, ChangePopInvisibleTime and ForwardPopToDeadLetter."""

from __future__ import annotations

from nodes.broker.pop import (
    AckResult,
    ChangeInvisibleRequest,
    ChangeInvisibleResult,
    PopAckRequest,
    PoppedMessage,
    PopRequest,
    PopResult,
)
from proto import broker_pb2, common_pb2


def pop_request_from_pb(pb: broker_pb2.PopMessageRequest) -> PopRequest:
    return PopRequest(group=pb.group, topic=pb.topic, max_nums=pb.max_nums, invisible_ms=pb.invisible_ms,
                      poll_timeout_ms=pb.poll_timeout_ms, fifo=pb.fifo if pb.HasField("fifo") else None,
                      attempt_id=pb.attempt_id, tag_expression=pb.tag_expression or "*", client_id=pb.client_id)


def _host(host: tuple[str, int]) -> str:
    return f"{host[0]}:{host[1]}"


def _message_to_pb(m: PoppedMessage) -> broker_pb2.PoppedMessage:
    return broker_pb2.PoppedMessage(
        topic=m.topic, queue_topic=m.queue_topic, broker_name=m.broker_name, queue_id=m.queue_id,
        queue_offset=m.queue_offset, phys_offset=m.phys_offset, body=m.body, properties=m.properties, msg_id=m.msg_id,
        born_timestamp_ms=m.born_timestamp_ms, born_host=_host(m.born_host), store_timestamp_ms=m.store_timestamp_ms,
        store_host=_host(m.store_host), reconsume_times=m.reconsume_times, delivery_attempt=m.delivery_attempt,
        receipt_handle=m.receipt_handle, invisible_deadline_wall_ms=m.invisible_deadline_wall_ms)


def pop_result_to_pb(result: PopResult) -> broker_pb2.PopMessageResponse:
    return broker_pb2.PopMessageResponse(code=common_pb2.SUCCESS, remark=result.remark, pop_code=result.code.name,
                                         messages=[_message_to_pb(m) for m in result.messages])


def ack_request_from_pb(pb: broker_pb2.AckPopMessageRequest) -> PopAckRequest:
    return PopAckRequest(group=pb.group, topic=pb.topic, receipt_handle=pb.receipt_handle)


def ack_result_to_pb(result: AckResult) -> broker_pb2.AckPopMessageResponse:
    return broker_pb2.AckPopMessageResponse(code=common_pb2.SUCCESS, remark=result.remark, pop_code=result.code.name)


def change_request_from_pb(pb: broker_pb2.ChangePopInvisibleTimeRequest) -> ChangeInvisibleRequest:
    return ChangeInvisibleRequest(group=pb.group, topic=pb.topic, receipt_handle=pb.receipt_handle,
                                  invisible_ms=pb.invisible_ms)


def change_result_to_pb(result: ChangeInvisibleResult) -> broker_pb2.ChangePopInvisibleTimeResponse:
    return broker_pb2.ChangePopInvisibleTimeResponse(
        code=common_pb2.SUCCESS, remark=result.remark, pop_code=result.code.name,
        receipt_handle=result.receipt_handle, invisible_deadline_wall_ms=result.invisible_deadline_wall_ms)
