from proto import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SubscriptionData(_message.Message):
    __slots__ = ("topic", "expression", "sub_version")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    SUB_VERSION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    expression: str
    sub_version: int
    def __init__(self, topic: _Optional[str] = ..., expression: _Optional[str] = ..., sub_version: _Optional[int] = ...) -> None: ...

class ConsumerData(_message.Message):
    __slots__ = ("group", "consume_type", "message_model", "consume_from_where", "subscriptions", "unit_mode")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    CONSUME_TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_MODEL_FIELD_NUMBER: _ClassVar[int]
    CONSUME_FROM_WHERE_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    UNIT_MODE_FIELD_NUMBER: _ClassVar[int]
    group: str
    consume_type: str
    message_model: str
    consume_from_where: str
    subscriptions: _containers.RepeatedCompositeFieldContainer[SubscriptionData]
    unit_mode: bool
    def __init__(self, group: _Optional[str] = ..., consume_type: _Optional[str] = ..., message_model: _Optional[str] = ..., consume_from_where: _Optional[str] = ..., subscriptions: _Optional[_Iterable[_Union[SubscriptionData, _Mapping]]] = ..., unit_mode: _Optional[bool] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("client_id", "consumers", "producer_groups")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUPS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    consumers: _containers.RepeatedCompositeFieldContainer[ConsumerData]
    producer_groups: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, client_id: _Optional[str] = ..., consumers: _Optional[_Iterable[_Union[ConsumerData, _Mapping]]] = ..., producer_groups: _Optional[_Iterable[str]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("code", "remark")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    remark: str
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., remark: _Optional[str] = ...) -> None: ...

class UnregisterClientRequest(_message.Message):
    __slots__ = ("client_id", "consumer_group", "producer_group")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    consumer_group: str
    producer_group: str
    def __init__(self, client_id: _Optional[str] = ..., consumer_group: _Optional[str] = ..., producer_group: _Optional[str] = ...) -> None: ...

class UnregisterClientResponse(_message.Message):
    __slots__ = ("code", "remark")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    remark: str
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., remark: _Optional[str] = ...) -> None: ...

class GetConsumerListRequest(_message.Message):
    __slots__ = ("consumer_group",)
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    def __init__(self, consumer_group: _Optional[str] = ...) -> None: ...

class GetConsumerListResponse(_message.Message):
    __slots__ = ("code", "remark", "client_ids")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    CLIENT_IDS_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    remark: str
    client_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., remark: _Optional[str] = ..., client_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class NotificationsRequest(_message.Message):
    __slots__ = ("client_id",)
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    def __init__(self, client_id: _Optional[str] = ...) -> None: ...

class ConsumerNotification(_message.Message):
    __slots__ = ("consumer_group", "reset")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    reset: ResetOffsetNotice
    def __init__(self, consumer_group: _Optional[str] = ..., reset: _Optional[_Union[ResetOffsetNotice, _Mapping]] = ...) -> None: ...

class ConsumerSendMsgBackRequest(_message.Message):
    __slots__ = ("consumer_group", "phys_offset", "delay_level", "origin_msg_id", "origin_topic", "max_reconsume_times")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    PHYS_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DELAY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_MSG_ID_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_TOPIC_FIELD_NUMBER: _ClassVar[int]
    MAX_RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    phys_offset: int
    delay_level: int
    origin_msg_id: str
    origin_topic: str
    max_reconsume_times: int
    def __init__(self, consumer_group: _Optional[str] = ..., phys_offset: _Optional[int] = ..., delay_level: _Optional[int] = ..., origin_msg_id: _Optional[str] = ..., origin_topic: _Optional[str] = ..., max_reconsume_times: _Optional[int] = ...) -> None: ...

class ConsumerSendMsgBackResponse(_message.Message):
    __slots__ = ("code", "remark")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    remark: str
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., remark: _Optional[str] = ...) -> None: ...

class LockBatchRequest(_message.Message):
    __slots__ = ("consumer_group", "client_id", "queues")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    client_id: str
    queues: _containers.RepeatedCompositeFieldContainer[_common_pb2.MessageQueue]
    def __init__(self, consumer_group: _Optional[str] = ..., client_id: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[_common_pb2.MessageQueue, _Mapping]]] = ...) -> None: ...

class LockBatchResponse(_message.Message):
    __slots__ = ("code", "remark", "locked")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    LOCKED_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    remark: str
    locked: _containers.RepeatedCompositeFieldContainer[_common_pb2.MessageQueue]
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., remark: _Optional[str] = ..., locked: _Optional[_Iterable[_Union[_common_pb2.MessageQueue, _Mapping]]] = ...) -> None: ...

class UnlockBatchRequest(_message.Message):
    __slots__ = ("consumer_group", "client_id", "queues")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    client_id: str
    queues: _containers.RepeatedCompositeFieldContainer[_common_pb2.MessageQueue]
    def __init__(self, consumer_group: _Optional[str] = ..., client_id: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[_common_pb2.MessageQueue, _Mapping]]] = ...) -> None: ...

class UnlockBatchResponse(_message.Message):
    __slots__ = ("code", "remark")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    remark: str
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., remark: _Optional[str] = ...) -> None: ...

class ResetOffsetNotice(_message.Message):
    __slots__ = ("consumer_group", "topic", "timestamp_ms", "offsets")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    timestamp_ms: int
    offsets: _containers.RepeatedCompositeFieldContainer[QueueOffset]
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., timestamp_ms: _Optional[int] = ..., offsets: _Optional[_Iterable[_Union[QueueOffset, _Mapping]]] = ...) -> None: ...

class QueueOffset(_message.Message):
    __slots__ = ("queue", "queue_offset")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    queue: _common_pb2.MessageQueue
    queue_offset: int
    def __init__(self, queue: _Optional[_Union[_common_pb2.MessageQueue, _Mapping]] = ..., queue_offset: _Optional[int] = ...) -> None: ...
