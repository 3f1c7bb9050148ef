"""nodes.client: the RocketMQ-style client library (DESIGN §5, §8).

Synchronous public API; a background asyncio loop inside (`instance.ClientInstance`).
"""

from nodes.client.producer import Producer
from nodes.client.pull_consumer import PullConsumer
from nodes.common.types import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    Message,
    MessageExt,
    MessageModel,
    MessageQueue,
    PullResult,
    PullStatus,
    SendResult,
    SendStatus,
)

__all__ = [
    "ConsumeConcurrentlyStatus",
    "ConsumeFromWhere",
    "ConsumeOrderlyStatus",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "SendResult",
    "SendStatus",
]
