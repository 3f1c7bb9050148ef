"""nodes.client: the RocketMQ-style client library.

Synchronous public API; a background asyncio loop inside. Facades (`Producer`, `PushConsumer`,
`PullConsumer`) share one `instance.ClientInstance` per client id, which talks to brokers and
name servers only through `rpc.ClientApi` (the one module that knows gRPC and the protos). A
push consumer's subscriptions, owned queues and lock validity live in `consumer_state`.
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
