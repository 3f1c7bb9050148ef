from proto import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OffsetKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OFFSET_KIND_UNSPECIFIED: _ClassVar[OffsetKind]
    MIN: _ClassVar[OffsetKind]
    MAX: _ClassVar[OffsetKind]
    BY_TIMESTAMP: _ClassVar[OffsetKind]
OFFSET_KIND_UNSPECIFIED: OffsetKind
MIN: OffsetKind
MAX: OffsetKind
BY_TIMESTAMP: OffsetKind

class OutgoingMessage(_message.Message):
    __slots__ = ("body", "flag", "properties", "born_timestamp_ms")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    BODY_FIELD_NUMBER: _ClassVar[int]
    FLAG_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    body: bytes
    flag: int
    properties: _containers.ScalarMap[str, str]
    born_timestamp_ms: int
    def __init__(self, body: _Optional[bytes] = ..., flag: _Optional[int] = ..., properties: _Optional[_Mapping[str, str]] = ..., born_timestamp_ms: _Optional[int] = ...) -> None: ...

class SendMessageRequest(_message.Message):
    __slots__ = ("producer_group", "topic", "queue_id", "messages", "default_topic_queue_nums", "born_host", "sys_flag", "reconsume_times", "batch_body", "born_timestamp_ms", "request_id")
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_TOPIC_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    BORN_HOST_FIELD_NUMBER: _ClassVar[int]
    SYS_FLAG_FIELD_NUMBER: _ClassVar[int]
    RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    BATCH_BODY_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    topic: str
    queue_id: int
    messages: _containers.RepeatedCompositeFieldContainer[OutgoingMessage]
    default_topic_queue_nums: int
    born_host: str
    sys_flag: int
    reconsume_times: int
    batch_body: bytes
    born_timestamp_ms: int
    request_id: int
    def __init__(self, producer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[OutgoingMessage, _Mapping]]] = ..., default_topic_queue_nums: _Optional[int] = ..., born_host: _Optional[str] = ..., sys_flag: _Optional[int] = ..., reconsume_times: _Optional[int] = ..., batch_body: _Optional[bytes] = ..., born_timestamp_ms: _Optional[int] = ..., request_id: _Optional[int] = ...) -> None: ...

class SendEntry(_message.Message):
    __slots__ = ("offset_msg_id", "queue_offset", "phys_offset")
    OFFSET_MSG_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PHYS_OFFSET_FIELD_NUMBER: _ClassVar[int]
    offset_msg_id: str
    queue_offset: int
    phys_offset: int
    def __init__(self, offset_msg_id: _Optional[str] = ..., queue_offset: _Optional[int] = ..., phys_offset: _Optional[int] = ...) -> None: ...

class SendMessageResponse(_message.Message):
    __slots__ = ("code", "remark", "queue_id", "entries", "first_queue_offset", "phys_offsets", "offset_msg_id_prefix", "request_id")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    FIRST_QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PHYS_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_MSG_ID_PREFIX_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    remark: str
    queue_id: int
    entries: _containers.RepeatedCompositeFieldContainer[SendEntry]
    first_queue_offset: int
    phys_offsets: _containers.RepeatedScalarFieldContainer[int]
    offset_msg_id_prefix: str
    request_id: int
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., remark: _Optional[str] = ..., queue_id: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[SendEntry, _Mapping]]] = ..., first_queue_offset: _Optional[int] = ..., phys_offsets: _Optional[_Iterable[int]] = ..., offset_msg_id_prefix: _Optional[str] = ..., request_id: _Optional[int] = ...) -> None: ...

class PullRequest(_message.Message):
    __slots__ = ("request_id", "consumer_group", "topic", "queue_id", "queue_offset", "max_msg_nums", "suspend", "suspend_timeout_ms", "commit_offset", "commit_offset_value", "has_subscription", "subscription_expression", "sub_version", "client_id", "commit_seq")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_MSG_NUMS_FIELD_NUMBER: _ClassVar[int]
    SUSPEND_FIELD_NUMBER: _ClassVar[int]
    SUSPEND_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMIT_OFFSET_VALUE_FIELD_NUMBER: _ClassVar[int]
    HAS_SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    SUB_VERSION_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_SEQ_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    suspend: bool
    suspend_timeout_ms: int
    commit_offset: bool
    commit_offset_value: int
    has_subscription: bool
    subscription_expression: str
    sub_version: int
    client_id: str
    commit_seq: int
    def __init__(self, request_id: _Optional[int] = ..., consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., max_msg_nums: _Optional[int] = ..., suspend: _Optional[bool] = ..., suspend_timeout_ms: _Optional[int] = ..., commit_offset: _Optional[bool] = ..., commit_offset_value: _Optional[int] = ..., has_subscription: _Optional[bool] = ..., subscription_expression: _Optional[str] = ..., sub_version: _Optional[int] = ..., client_id: _Optional[str] = ..., commit_seq: _Optional[int] = ...) -> None: ...

class PullResponse(_message.Message):
    __slots__ = ("request_id", "code", "remark", "next_begin_offset", "min_offset", "max_offset", "suggest_which_broker_id", "records", "record_count")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    NEXT_BEGIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SUGGEST_WHICH_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    RECORD_COUNT_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    code: _common_pb2.Code
    remark: str
    next_begin_offset: int
    min_offset: int
    max_offset: int
    suggest_which_broker_id: int
    records: bytes
    record_count: int
    def __init__(self, request_id: _Optional[int] = ..., code: _Optional[_Union[_common_pb2.Code, str]] = ..., remark: _Optional[str] = ..., next_begin_offset: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., suggest_which_broker_id: _Optional[int] = ..., records: _Optional[bytes] = ..., record_count: _Optional[int] = ...) -> None: ...

class PullRequestBatch(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[PullRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[PullRequest, _Mapping]]] = ...) -> None: ...

class PullResponseBatch(_message.Message):
    __slots__ = ("responses",)
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    responses: _containers.RepeatedCompositeFieldContainer[PullResponse]
    def __init__(self, responses: _Optional[_Iterable[_Union[PullResponse, _Mapping]]] = ...) -> None: ...

class QueryConsumerOffsetRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_id")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...

class QueryConsumerOffsetResponse(_message.Message):
    __slots__ = ("code", "remark", "offset")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    remark: str
    offset: int
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., remark: _Optional[str] = ..., offset: _Optional[int] = ...) -> None: ...

class UpdateConsumerOffsetRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_id", "offset", "client_id", "commit_seq")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_SEQ_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    offset: int
    client_id: str
    commit_seq: int
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., client_id: _Optional[str] = ..., commit_seq: _Optional[int] = ...) -> None: ...

class UpdateConsumerOffsetResponse(_message.Message):
    __slots__ = ("code", "remark")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    remark: str
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., remark: _Optional[str] = ...) -> None: ...

class GetQueueOffsetRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "kind", "timestamp_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    kind: OffsetKind
    timestamp_ms: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., kind: _Optional[_Union[OffsetKind, str]] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class GetQueueOffsetResponse(_message.Message):
    __slots__ = ("code", "remark", "offset")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    remark: str
    offset: int
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., remark: _Optional[str] = ..., offset: _Optional[int] = ...) -> None: ...

class CreateTopicRequest(_message.Message):
    __slots__ = ("config", "update")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    UPDATE_FIELD_NUMBER: _ClassVar[int]
    config: _common_pb2.TopicConfig
    update: bool
    def __init__(self, config: _Optional[_Union[_common_pb2.TopicConfig, _Mapping]] = ..., update: _Optional[bool] = ...) -> None: ...

class CreateTopicResponse(_message.Message):
    __slots__ = ("code", "remark")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    remark: str
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., remark: _Optional[str] = ...) -> None: ...

class UpdateSubscriptionGroupRequest(_message.Message):
    __slots__ = ("group", "consume_message_orderly", "retry_max_times")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    CONSUME_MESSAGE_ORDERLY_FIELD_NUMBER: _ClassVar[int]
    RETRY_MAX_TIMES_FIELD_NUMBER: _ClassVar[int]
    group: str
    consume_message_orderly: bool
    retry_max_times: int
    def __init__(self, group: _Optional[str] = ..., consume_message_orderly: _Optional[bool] = ..., retry_max_times: _Optional[int] = ...) -> None: ...

class UpdateSubscriptionGroupResponse(_message.Message):
    __slots__ = ("code", "remark", "consume_message_orderly", "retry_max_times")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    CONSUME_MESSAGE_ORDERLY_FIELD_NUMBER: _ClassVar[int]
    RETRY_MAX_TIMES_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    remark: str
    consume_message_orderly: bool
    retry_max_times: int
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., remark: _Optional[str] = ..., consume_message_orderly: _Optional[bool] = ..., retry_max_times: _Optional[int] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ("code", "remark")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    remark: str
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., remark: _Optional[str] = ...) -> None: ...

class GetTopicStatsRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class QueueStats(_message.Message):
    __slots__ = ("queue_id", "min_offset", "max_offset", "last_store_timestamp_ms")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_STORE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    min_offset: int
    max_offset: int
    last_store_timestamp_ms: int
    def __init__(self, queue_id: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., last_store_timestamp_ms: _Optional[int] = ...) -> None: ...

class GetTopicStatsResponse(_message.Message):
    __slots__ = ("code", "remark", "broker_name", "broker_id", "queues", "message_type")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    remark: str
    broker_name: str
    broker_id: int
    queues: _containers.RepeatedCompositeFieldContainer[QueueStats]
    message_type: str
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., remark: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., queues: _Optional[_Iterable[_Union[QueueStats, _Mapping]]] = ..., message_type: _Optional[str] = ...) -> None: ...

class GetConsumeStatsRequest(_message.Message):
    __slots__ = ("consumer_group", "topic")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ...) -> None: ...

class QueueConsumeStats(_message.Message):
    __slots__ = ("topic", "queue_id", "broker_offset", "consumer_offset", "last_consumed_store_timestamp_ms", "last_puller_client_id", "last_pull_age_ms", "lock_holder_client_id", "lock_lease_left_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_CONSUMED_STORE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_PULLER_CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_PULL_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    LOCK_HOLDER_CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    LOCK_LEASE_LEFT_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    last_consumed_store_timestamp_ms: int
    last_puller_client_id: str
    last_pull_age_ms: int
    lock_holder_client_id: str
    lock_lease_left_ms: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., broker_offset: _Optional[int] = ..., consumer_offset: _Optional[int] = ..., last_consumed_store_timestamp_ms: _Optional[int] = ..., last_puller_client_id: _Optional[str] = ..., last_pull_age_ms: _Optional[int] = ..., lock_holder_client_id: _Optional[str] = ..., lock_lease_left_ms: _Optional[int] = ...) -> None: ...

class GetConsumeStatsResponse(_message.Message):
    __slots__ = ("code", "remark", "broker_name", "broker_id", "queues")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    remark: str
    broker_name: str
    broker_id: int
    queues: _containers.RepeatedCompositeFieldContainer[QueueConsumeStats]
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., remark: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., queues: _Optional[_Iterable[_Union[QueueConsumeStats, _Mapping]]] = ...) -> None: ...

class GetConsumerConnectionsRequest(_message.Message):
    __slots__ = ("consumer_group",)
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    def __init__(self, consumer_group: _Optional[str] = ...) -> None: ...

class ConsumerConnection(_message.Message):
    __slots__ = ("client_id", "peer", "protocol", "language", "version", "last_heartbeat_age_ms")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    peer: str
    protocol: str
    language: str
    version: int
    last_heartbeat_age_ms: int
    def __init__(self, client_id: _Optional[str] = ..., peer: _Optional[str] = ..., protocol: _Optional[str] = ..., language: _Optional[str] = ..., version: _Optional[int] = ..., last_heartbeat_age_ms: _Optional[int] = ...) -> None: ...

class SubscriptionInfo(_message.Message):
    __slots__ = ("topic", "expression", "sub_version")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    SUB_VERSION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    expression: str
    sub_version: int
    def __init__(self, topic: _Optional[str] = ..., expression: _Optional[str] = ..., sub_version: _Optional[int] = ...) -> None: ...

class GetConsumerConnectionsResponse(_message.Message):
    __slots__ = ("code", "remark", "consume_type", "message_model", "consume_from_where", "connections", "subscriptions")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    CONSUME_TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_MODEL_FIELD_NUMBER: _ClassVar[int]
    CONSUME_FROM_WHERE_FIELD_NUMBER: _ClassVar[int]
    CONNECTIONS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    remark: str
    consume_type: str
    message_model: str
    consume_from_where: str
    connections: _containers.RepeatedCompositeFieldContainer[ConsumerConnection]
    subscriptions: _containers.RepeatedCompositeFieldContainer[SubscriptionInfo]
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., remark: _Optional[str] = ..., consume_type: _Optional[str] = ..., message_model: _Optional[str] = ..., consume_from_where: _Optional[str] = ..., connections: _Optional[_Iterable[_Union[ConsumerConnection, _Mapping]]] = ..., subscriptions: _Optional[_Iterable[_Union[SubscriptionInfo, _Mapping]]] = ...) -> None: ...

class ListConsumerGroupsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ConsumerGroupSummary(_message.Message):
    __slots__ = ("group", "online_clients", "topics", "consume_type", "message_model")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    ONLINE_CLIENTS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    CONSUME_TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_MODEL_FIELD_NUMBER: _ClassVar[int]
    group: str
    online_clients: int
    topics: _containers.RepeatedScalarFieldContainer[str]
    consume_type: str
    message_model: str
    def __init__(self, group: _Optional[str] = ..., online_clients: _Optional[int] = ..., topics: _Optional[_Iterable[str]] = ..., consume_type: _Optional[str] = ..., message_model: _Optional[str] = ...) -> None: ...

class ListConsumerGroupsResponse(_message.Message):
    __slots__ = ("code", "remark", "groups")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    remark: str
    groups: _containers.RepeatedCompositeFieldContainer[ConsumerGroupSummary]
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., remark: _Optional[str] = ..., groups: _Optional[_Iterable[_Union[ConsumerGroupSummary, _Mapping]]] = ...) -> None: ...

class GetBrokerRuntimeRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetBrokerRuntimeResponse(_message.Message):
    __slots__ = ("code", "remark", "broker_name", "broker_id", "role", "min_phys_offset", "max_phys_offset", "slave_lag_bytes", "disk_used_ratio", "disk_free_bytes", "writes_refused", "writes_refused_reason", "time_scale", "topics", "store_errors", "master_addr", "broker_lock_lease_ms", "consumer_channel_expiry_ms")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    MIN_PHYS_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_PHYS_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SLAVE_LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_USED_RATIO_FIELD_NUMBER: _ClassVar[int]
    DISK_FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    WRITES_REFUSED_FIELD_NUMBER: _ClassVar[int]
    WRITES_REFUSED_REASON_FIELD_NUMBER: _ClassVar[int]
    TIME_SCALE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    STORE_ERRORS_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    BROKER_LOCK_LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_CHANNEL_EXPIRY_MS_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    remark: str
    broker_name: str
    broker_id: int
    role: str
    min_phys_offset: int
    max_phys_offset: int
    slave_lag_bytes: int
    disk_used_ratio: float
    disk_free_bytes: int
    writes_refused: bool
    writes_refused_reason: str
    time_scale: float
    topics: int
    store_errors: int
    master_addr: str
    broker_lock_lease_ms: int
    consumer_channel_expiry_ms: int
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., remark: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., role: _Optional[str] = ..., min_phys_offset: _Optional[int] = ..., max_phys_offset: _Optional[int] = ..., slave_lag_bytes: _Optional[int] = ..., disk_used_ratio: _Optional[float] = ..., disk_free_bytes: _Optional[int] = ..., writes_refused: _Optional[bool] = ..., writes_refused_reason: _Optional[str] = ..., time_scale: _Optional[float] = ..., topics: _Optional[int] = ..., store_errors: _Optional[int] = ..., master_addr: _Optional[str] = ..., broker_lock_lease_ms: _Optional[int] = ..., consumer_channel_expiry_ms: _Optional[int] = ...) -> None: ...

class QueryMessageRequest(_message.Message):
    __slots__ = ("topic", "key", "max_count", "begin_timestamp_ms", "end_timestamp_ms", "unique_key")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    MAX_COUNT_FIELD_NUMBER: _ClassVar[int]
    BEGIN_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    END_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_KEY_FIELD_NUMBER: _ClassVar[int]
    topic: str
    key: str
    max_count: int
    begin_timestamp_ms: int
    end_timestamp_ms: int
    unique_key: bool
    def __init__(self, topic: _Optional[str] = ..., key: _Optional[str] = ..., max_count: _Optional[int] = ..., begin_timestamp_ms: _Optional[int] = ..., end_timestamp_ms: _Optional[int] = ..., unique_key: _Optional[bool] = ...) -> None: ...

class ViewMessageRequest(_message.Message):
    __slots__ = ("msg_id", "topic")
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    msg_id: str
    topic: str
    def __init__(self, msg_id: _Optional[str] = ..., topic: _Optional[str] = ...) -> None: ...

class ViewQueueMessageRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "queue_offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    queue_offset: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ...) -> None: ...

class GroupProgress(_message.Message):
    __slots__ = ("group", "consumer_offset", "consumed")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONSUMED_FIELD_NUMBER: _ClassVar[int]
    group: str
    consumer_offset: int
    consumed: bool
    def __init__(self, group: _Optional[str] = ..., consumer_offset: _Optional[int] = ..., consumed: _Optional[bool] = ...) -> None: ...

class FoundMessage(_message.Message):
    __slots__ = ("topic", "queue_id", "queue_offset", "phys_offset", "offset_msg_id", "msg_id", "tags", "keys", "properties", "born_host", "born_timestamp_ms", "store_host", "store_timestamp_ms", "reconsume_times", "body_size", "body_preview", "flag", "sys_flag", "progress")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PHYS_OFFSET_FIELD_NUMBER: _ClassVar[int]
    OFFSET_MSG_ID_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    BORN_HOST_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    STORE_HOST_FIELD_NUMBER: _ClassVar[int]
    STORE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    BODY_SIZE_FIELD_NUMBER: _ClassVar[int]
    BODY_PREVIEW_FIELD_NUMBER: _ClassVar[int]
    FLAG_FIELD_NUMBER: _ClassVar[int]
    SYS_FLAG_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    queue_offset: int
    phys_offset: int
    offset_msg_id: str
    msg_id: str
    tags: str
    keys: str
    properties: _containers.ScalarMap[str, str]
    born_host: str
    born_timestamp_ms: int
    store_host: str
    store_timestamp_ms: int
    reconsume_times: int
    body_size: int
    body_preview: bytes
    flag: int
    sys_flag: int
    progress: _containers.RepeatedCompositeFieldContainer[GroupProgress]
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., phys_offset: _Optional[int] = ..., offset_msg_id: _Optional[str] = ..., msg_id: _Optional[str] = ..., tags: _Optional[str] = ..., keys: _Optional[str] = ..., properties: _Optional[_Mapping[str, str]] = ..., born_host: _Optional[str] = ..., born_timestamp_ms: _Optional[int] = ..., store_host: _Optional[str] = ..., store_timestamp_ms: _Optional[int] = ..., reconsume_times: _Optional[int] = ..., body_size: _Optional[int] = ..., body_preview: _Optional[bytes] = ..., flag: _Optional[int] = ..., sys_flag: _Optional[int] = ..., progress: _Optional[_Iterable[_Union[GroupProgress, _Mapping]]] = ...) -> None: ...

class MessageLookupResponse(_message.Message):
    __slots__ = ("code", "remark", "broker_name", "broker_id", "messages")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    remark: str
    broker_name: str
    broker_id: int
    messages: _containers.RepeatedCompositeFieldContainer[FoundMessage]
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., remark: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[FoundMessage, _Mapping]]] = ...) -> None: ...

class PopMessageRequest(_message.Message):
    __slots__ = ("group", "topic", "max_nums", "invisible_ms", "poll_timeout_ms", "fifo", "attempt_id", "tag_expression", "client_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MAX_NUMS_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_MS_FIELD_NUMBER: _ClassVar[int]
    POLL_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    FIFO_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    TAG_EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    max_nums: int
    invisible_ms: int
    poll_timeout_ms: int
    fifo: bool
    attempt_id: str
    tag_expression: str
    client_id: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., max_nums: _Optional[int] = ..., invisible_ms: _Optional[int] = ..., poll_timeout_ms: _Optional[int] = ..., fifo: _Optional[bool] = ..., attempt_id: _Optional[str] = ..., tag_expression: _Optional[str] = ..., client_id: _Optional[str] = ...) -> None: ...

class PoppedMessage(_message.Message):
    __slots__ = ("topic", "queue_topic", "broker_name", "queue_id", "queue_offset", "phys_offset", "body", "properties", "msg_id", "born_timestamp_ms", "born_host", "store_timestamp_ms", "store_host", "reconsume_times", "delivery_attempt", "receipt_handle", "invisible_deadline_wall_ms")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_TOPIC_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PHYS_OFFSET_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    BORN_HOST_FIELD_NUMBER: _ClassVar[int]
    STORE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    STORE_HOST_FIELD_NUMBER: _ClassVar[int]
    RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_DEADLINE_WALL_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_topic: str
    broker_name: str
    queue_id: int
    queue_offset: int
    phys_offset: int
    body: bytes
    properties: _containers.ScalarMap[str, str]
    msg_id: str
    born_timestamp_ms: int
    born_host: str
    store_timestamp_ms: int
    store_host: str
    reconsume_times: int
    delivery_attempt: int
    receipt_handle: str
    invisible_deadline_wall_ms: int
    def __init__(self, topic: _Optional[str] = ..., queue_topic: _Optional[str] = ..., broker_name: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., phys_offset: _Optional[int] = ..., body: _Optional[bytes] = ..., properties: _Optional[_Mapping[str, str]] = ..., msg_id: _Optional[str] = ..., born_timestamp_ms: _Optional[int] = ..., born_host: _Optional[str] = ..., store_timestamp_ms: _Optional[int] = ..., store_host: _Optional[str] = ..., reconsume_times: _Optional[int] = ..., delivery_attempt: _Optional[int] = ..., receipt_handle: _Optional[str] = ..., invisible_deadline_wall_ms: _Optional[int] = ...) -> None: ...

class PopMessageResponse(_message.Message):
    __slots__ = ("code", "remark", "pop_code", "messages")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    POP_CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    remark: str
    pop_code: str
    messages: _containers.RepeatedCompositeFieldContainer[PoppedMessage]
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., remark: _Optional[str] = ..., pop_code: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[PoppedMessage, _Mapping]]] = ...) -> None: ...

class AckPopMessageRequest(_message.Message):
    __slots__ = ("group", "topic", "receipt_handle")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    receipt_handle: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., receipt_handle: _Optional[str] = ...) -> None: ...

class AckPopMessageResponse(_message.Message):
    __slots__ = ("code", "remark", "pop_code")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    POP_CODE_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    remark: str
    pop_code: str
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., remark: _Optional[str] = ..., pop_code: _Optional[str] = ...) -> None: ...

class ChangePopInvisibleTimeRequest(_message.Message):
    __slots__ = ("group", "topic", "receipt_handle", "invisible_ms")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_MS_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    receipt_handle: str
    invisible_ms: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., receipt_handle: _Optional[str] = ..., invisible_ms: _Optional[int] = ...) -> None: ...

class ChangePopInvisibleTimeResponse(_message.Message):
    __slots__ = ("code", "remark", "pop_code", "receipt_handle", "invisible_deadline_wall_ms")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    POP_CODE_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_DEADLINE_WALL_MS_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    remark: str
    pop_code: str
    receipt_handle: str
    invisible_deadline_wall_ms: int
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., remark: _Optional[str] = ..., pop_code: _Optional[str] = ..., receipt_handle: _Optional[str] = ..., invisible_deadline_wall_ms: _Optional[int] = ...) -> None: ...

class ResetConsumerOffsetRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "timestamp_ms")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    timestamp_ms: int
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class QueueOffsetReset(_message.Message):
    __slots__ = ("queue_id", "old_offset", "new_offset")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OLD_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEW_OFFSET_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    old_offset: int
    new_offset: int
    def __init__(self, queue_id: _Optional[int] = ..., old_offset: _Optional[int] = ..., new_offset: _Optional[int] = ...) -> None: ...

class ResetConsumerOffsetResponse(_message.Message):
    __slots__ = ("code", "remark", "broker_name", "broker_id", "queues", "clients_told")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    CLIENTS_TOLD_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    remark: str
    broker_name: str
    broker_id: int
    queues: _containers.RepeatedCompositeFieldContainer[QueueOffsetReset]
    clients_told: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., remark: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., queues: _Optional[_Iterable[_Union[QueueOffsetReset, _Mapping]]] = ..., clients_told: _Optional[_Iterable[str]] = ...) -> None: ...
