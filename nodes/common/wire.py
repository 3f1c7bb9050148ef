"""The only converters between protobuf messages and domain types."""

from __future__ import annotations

from nodes.common.types import MessageQueue, TopicConfig
from proto import common_pb2


def code_name(code: int) -> str:
    """The name of a response code; `CODE_<n>` for one this build does not know (a newer peer)."""
    try:
        return common_pb2.Code.Name(code)
    except ValueError:
        return f"CODE_{code}"


def mq_to_pb(mq: MessageQueue) -> common_pb2.MessageQueue:
    return common_pb2.MessageQueue(topic=mq.topic, broker_name=mq.broker_name, queue_id=mq.queue_id)


def mq_from_pb(pb: common_pb2.MessageQueue) -> MessageQueue:
    return MessageQueue(pb.topic, pb.broker_name, pb.queue_id)


def topic_config_to_pb(cfg: TopicConfig) -> common_pb2.TopicConfig:
    return common_pb2.TopicConfig(
        topic=cfg.topic, read_queue_nums=cfg.read_queue_nums, write_queue_nums=cfg.write_queue_nums,
        perm=cfg.perm, topic_sys_flag=cfg.topic_sys_flag, order=cfg.order, message_type=cfg.message_type)


def topic_config_from_pb(pb: common_pb2.TopicConfig) -> TopicConfig:
    return TopicConfig(topic=pb.topic, read_queue_nums=pb.read_queue_nums,
                       write_queue_nums=pb.write_queue_nums, perm=pb.perm,
                       topic_sys_flag=pb.topic_sys_flag, order=pb.order, message_type=pb.message_type)


def parse_host_port(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    try:
        return host or "127.0.0.1", int(port)
    except ValueError:
        return "127.0.0.1", 0
