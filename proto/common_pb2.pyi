from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class Code(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CODE_UNSPECIFIED: _ClassVar[Code]
    SUCCESS: _ClassVar[Code]
    SYSTEM_ERROR: _ClassVar[Code]
    SYSTEM_BUSY: _ClassVar[Code]
    FLUSH_DISK_TIMEOUT: _ClassVar[Code]
    SLAVE_NOT_AVAILABLE: _ClassVar[Code]
    FLUSH_SLAVE_TIMEOUT: _ClassVar[Code]
    MESSAGE_ILLEGAL: _ClassVar[Code]
    SERVICE_NOT_AVAILABLE: _ClassVar[Code]
    NO_PERMISSION: _ClassVar[Code]
    TOPIC_NOT_EXIST: _ClassVar[Code]
    PULL_NOT_FOUND: _ClassVar[Code]
    PULL_RETRY_IMMEDIATELY: _ClassVar[Code]
    PULL_OFFSET_MOVED: _ClassVar[Code]
    QUERY_NOT_FOUND: _ClassVar[Code]
    SUBSCRIPTION_NOT_EXIST: _ClassVar[Code]
    SUBSCRIPTION_NOT_LATEST: _ClassVar[Code]
    SUBSCRIPTION_GROUP_NOT_EXIST: _ClassVar[Code]
    TOPIC_ROUTE_NOT_EXIST: _ClassVar[Code]
    INVALID_ARGUMENT: _ClassVar[Code]
    CONSUMER_NOT_ONLINE: _ClassVar[Code]
CODE_UNSPECIFIED: Code
SUCCESS: Code
SYSTEM_ERROR: Code
SYSTEM_BUSY: Code
FLUSH_DISK_TIMEOUT: Code
SLAVE_NOT_AVAILABLE: Code
FLUSH_SLAVE_TIMEOUT: Code
MESSAGE_ILLEGAL: Code
SERVICE_NOT_AVAILABLE: Code
NO_PERMISSION: Code
TOPIC_NOT_EXIST: Code
PULL_NOT_FOUND: Code
PULL_RETRY_IMMEDIATELY: Code
PULL_OFFSET_MOVED: Code
QUERY_NOT_FOUND: Code
SUBSCRIPTION_NOT_EXIST: Code
SUBSCRIPTION_NOT_LATEST: Code
SUBSCRIPTION_GROUP_NOT_EXIST: Code
TOPIC_ROUTE_NOT_EXIST: Code
INVALID_ARGUMENT: Code
CONSUMER_NOT_ONLINE: Code

class MessageQueue(_message.Message):
    __slots__ = ("topic", "broker_name", "queue_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    broker_name: str
    queue_id: int
    def __init__(self, topic: _Optional[str] = ..., broker_name: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...

class TopicConfig(_message.Message):
    __slots__ = ("topic", "read_queue_nums", "write_queue_nums", "perm", "topic_sys_flag", "order", "message_type")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    TOPIC_SYS_FLAG_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int
    order: bool
    message_type: str
    def __init__(self, topic: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ..., topic_sys_flag: _Optional[int] = ..., order: _Optional[bool] = ..., message_type: _Optional[str] = ...) -> None: ...
