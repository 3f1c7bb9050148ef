"""nodes.client: the RocketMQ-style client library (DESIGN §5, §8).

Synchronous public API; a background asyncio loop inside (`instance.ClientInstance`).
"""

from nodes.client.allocate import (
    AllocateAveragely,
    AllocateAveragelyByCircle,
    AllocateByConfig,
    AllocateByMachineRoom,
    AllocateConsistentHash,
    AllocateMachineRoomNearby,
)
from nodes.client.consume_concurrently import ConsumeConcurrentlyContext
from nodes.client.consume_orderly import ConsumeOrderlyContext
from nodes.client.process_queue import ProcessQueue
from nodes.client.producer import Producer
from nodes.client.pull_consumer import PullConsumer
from nodes.client.push_consumer import PushConsumer
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
    "AllocateAveragely",
    "AllocateAveragelyByCircle",
    "AllocateByConfig",
    "AllocateByMachineRoom",
    "AllocateConsistentHash",
    "AllocateMachineRoomNearby",
    "ConsumeConcurrentlyContext",
    "ConsumeConcurrentlyStatus",
    "ConsumeFromWhere",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "ProcessQueue",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "SendResult",
    "SendStatus",
]
