"""The broker's request table: request kind -> handler (RocketMQ's registerProcessor shape).

The controller fills one table; every transport adapter takes its handlers from it, so a
request kind is handled by the same code whatever protocol carried it. Each kind's handler
has one calling shape, given beside the kind below; requests and answers are the handlers'
plain values.

Why plain values and not the protobuf messages: the RocketMQ remoting protocol carries the
same requests as JSON headers with string fields, and a second adapter must reach the same
handlers without building protobuf first; frozen dataclasses also make a handler testable
with no transport at all, and keep wire details (field presence, enum numbering, batching
of pull answers) in the adapter that owns that wire.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any


class RequestKind(enum.Enum):
    # kind                        handler shape
    SEND_MESSAGE = "send"  # async (SendRequest) -> SendResponse; batches too
    PULL_MESSAGE = "pull"  # (respond) -> PullSession, one per client connection
    QUERY_CONSUMER_OFFSET = "query-consumer-offset"  # (QueryConsumerOffsetRequest) -> OffsetResponse
    UPDATE_CONSUMER_OFFSET = "update-consumer-offset"  # (UpdateConsumerOffsetRequest) -> OffsetResponse
    GET_QUEUE_OFFSET = "get-queue-offset"  # (GetQueueOffsetRequest) -> OffsetResponse: min, max, by time
    CREATE_TOPIC = "create-topic"  # async (CreateTopicRequest) -> CreateTopicResponse
    HEART_BEAT = "heartbeat"  # async (HeartbeatRequest) -> ClientManageResponse
    UNREGISTER_CLIENT = "unregister-client"  # (UnregisterClientRequest) -> ClientManageResponse
    GET_CONSUMER_LIST_BY_GROUP = "consumer-list"  # (ConsumerListRequest) -> ClientManageResponse
    NOTIFY_CONSUMER_IDS_CHANGED = "notifications"  # (client_id, peer) -> NotificationChannel
    CONSUMER_SEND_MSG_BACK = "send-back"  # async (SendBackRequest) -> SendBackResponse
    LOCK_BATCH_MQ = "lock-batch"  # (LockBatchRequest) -> LockBatchResponse
    UNLOCK_BATCH_MQ = "unlock-batch"  # (LockBatchRequest) -> LockBatchResponse
    REPLICATE = "replicate"  # (AsyncIterator[SlaveReport]) -> AsyncIterator[LogChunk]
    SYNC_METADATA = "sync-metadata"  # () -> MetadataSnapshot
    DIGEST = "digest"  # async (DigestRequest) -> DigestResponse
    VERIFY_STORE = "verify-store"  # () -> VerifyStoreResponse
    # operator queries (admin_queries, topic_admin)
    DELETE_TOPIC = "delete-topic"  # async (DeleteTopicRequest) -> DeleteTopicResponse
    TOPIC_STATS = "topic-stats"  # (TopicStatsRequest) -> TopicStatsResponse
    CONSUME_STATS = "consume-stats"  # (ConsumeStatsRequest) -> ConsumeStatsResponse
    CONSUMER_CONNECTIONS = "consumer-connections"  # (ConsumerConnectionsRequest) -> ConsumerConnectionsResponse
    LIST_CONSUMER_GROUPS = "list-consumer-groups"  # (ListConsumerGroupsRequest) -> ListConsumerGroupsResponse
    BROKER_RUNTIME = "broker-runtime"  # (BrokerRuntimeRequest) -> BrokerRuntimeResponse
    # message lookups (message_lookup)
    QUERY_MESSAGE = "query-message"  # (QueryMessageRequest) -> MessageLookupResponse: by key
    VIEW_MESSAGE = "view-message"  # (ViewMessageRequest) -> MessageLookupResponse: by id or phys offset
    VIEW_QUEUE_MESSAGE = "view-queue-message"  # (QueueMessageRequest) -> MessageLookupResponse
    UPDATE_SUBSCRIPTION_GROUP = "update-group"  # (UpdateGroupRequest) -> UpdateGroupResponse (group_admin)
    # POP consumption (nodes/broker/pop), masters only
    POP_MESSAGE = "pop"  # async (PopRequest) -> PopResult
    POP_ACK = "pop-ack"  # async (PopAckRequest) -> AckResult
    POP_CHANGE_INVISIBLE = "pop-change-invisible"  # async (ChangeInvisibleRequest) -> ChangeInvisibleResult
    POP_FORWARD_TO_DLQ = "pop-forward-to-dlq"  # async (PopAckRequest) -> AckResult
    RESET_CONSUMER_OFFSET = "reset-consumer-offset"  # (ResetOffsetRequest) -> ResetOffsetResponse
    END_TRANSACTION = "end-transaction"  # async (EndTransactionRequest) -> EndOutcome (nodes/broker/transaction)


class RequestNotSupportedError(Exception):
    """A request of a kind this broker has no handler for (RocketMQ REQUEST_CODE_NOT_SUPPORTED)."""


class RequestTable:
    """Filled once at start; a kind registered twice is a wiring bug. A kind with no handler
    gets one that raises RequestNotSupportedError, so adapters can bind every kind up front."""

    def __init__(self) -> None:
        self._handlers: dict[RequestKind, Callable[..., Any]] = {}

    def register(self, kind: RequestKind, handler: Callable[..., Any]) -> None:
        if kind in self._handlers:
            raise ValueError(f"{kind.name} already has a handler")
        self._handlers[kind] = handler

    def __getitem__(self, kind: RequestKind) -> Callable[..., Any]:
        handler = self._handlers.get(kind)
        if handler is None:
            def not_supported(*_args: Any) -> Any:
                raise RequestNotSupportedError(f"no handler for {kind.name} on this broker")
            return not_supported
        return handler

    def describe(self) -> dict[str, str]:
        return {kind.name: getattr(handler, "__qualname__", repr(handler)) for kind, handler in self._handlers.items()}
