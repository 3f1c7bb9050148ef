from proto import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReplicationRefusal(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REPLICATION_REFUSAL_UNSPECIFIED: _ClassVar[ReplicationRefusal]
    SLAVE_AHEAD: _ClassVar[ReplicationRefusal]
    SLAVE_DIVERGED: _ClassVar[ReplicationRefusal]
    NOT_MASTER: _ClassVar[ReplicationRefusal]
REPLICATION_REFUSAL_UNSPECIFIED: ReplicationRefusal
SLAVE_AHEAD: ReplicationRefusal
SLAVE_DIVERGED: ReplicationRefusal
NOT_MASTER: ReplicationRefusal

class SlaveReport(_message.Message):
    __slots__ = ("max_phys_offset", "slave_node_id", "broker_id", "tail_check_from", "tail_crc32", "data_phys_offset", "data", "restore_check_failed")
    MAX_PHYS_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SLAVE_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    TAIL_CHECK_FROM_FIELD_NUMBER: _ClassVar[int]
    TAIL_CRC32_FIELD_NUMBER: _ClassVar[int]
    DATA_PHYS_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    RESTORE_CHECK_FAILED_FIELD_NUMBER: _ClassVar[int]
    max_phys_offset: int
    slave_node_id: str
    broker_id: int
    tail_check_from: int
    tail_crc32: int
    data_phys_offset: int
    data: bytes
    restore_check_failed: bool
    def __init__(self, max_phys_offset: _Optional[int] = ..., slave_node_id: _Optional[str] = ..., broker_id: _Optional[int] = ..., tail_check_from: _Optional[int] = ..., tail_crc32: _Optional[int] = ..., data_phys_offset: _Optional[int] = ..., data: _Optional[bytes] = ..., restore_check_failed: _Optional[bool] = ...) -> None: ...

class LogChunk(_message.Message):
    __slots__ = ("phys_offset", "data", "master_max_phys_offset", "refusal", "remark", "truncate", "restore", "offset", "check_from", "check_crc32", "damaged")
    PHYS_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    MASTER_MAX_PHYS_OFFSET_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_FIELD_NUMBER: _ClassVar[int]
    RESTORE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    CHECK_FROM_FIELD_NUMBER: _ClassVar[int]
    CHECK_CRC32_FIELD_NUMBER: _ClassVar[int]
    DAMAGED_FIELD_NUMBER: _ClassVar[int]
    phys_offset: int
    data: bytes
    master_max_phys_offset: int
    refusal: ReplicationRefusal
    remark: str
    truncate: bool
    restore: bool
    offset: int
    check_from: int
    check_crc32: int
    damaged: bool
    def __init__(self, phys_offset: _Optional[int] = ..., data: _Optional[bytes] = ..., master_max_phys_offset: _Optional[int] = ..., refusal: _Optional[_Union[ReplicationRefusal, str]] = ..., remark: _Optional[str] = ..., truncate: _Optional[bool] = ..., restore: _Optional[bool] = ..., offset: _Optional[int] = ..., check_from: _Optional[int] = ..., check_crc32: _Optional[int] = ..., damaged: _Optional[bool] = ...) -> None: ...

class SyncMetadataRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SyncMetadataResponse(_message.Message):
    __slots__ = ("code", "topic_configs", "topics_data_version", "consumer_offsets_json", "subscription_groups_json", "delay_offsets_json")
    CODE_FIELD_NUMBER: _ClassVar[int]
    TOPIC_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_OFFSETS_JSON_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_GROUPS_JSON_FIELD_NUMBER: _ClassVar[int]
    DELAY_OFFSETS_JSON_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    topic_configs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicConfig]
    topics_data_version: str
    consumer_offsets_json: str
    subscription_groups_json: str
    delay_offsets_json: str
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., topic_configs: _Optional[_Iterable[_Union[_common_pb2.TopicConfig, _Mapping]]] = ..., topics_data_version: _Optional[str] = ..., consumer_offsets_json: _Optional[str] = ..., subscription_groups_json: _Optional[str] = ..., delay_offsets_json: _Optional[str] = ...) -> None: ...

class DigestRequest(_message.Message):
    __slots__ = ("from_phys_offset", "to_phys_offset")
    FROM_PHYS_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TO_PHYS_OFFSET_FIELD_NUMBER: _ClassVar[int]
    from_phys_offset: int
    to_phys_offset: int
    def __init__(self, from_phys_offset: _Optional[int] = ..., to_phys_offset: _Optional[int] = ...) -> None: ...

class DigestResponse(_message.Message):
    __slots__ = ("code", "remark", "from_phys_offset", "to_phys_offset", "sha256")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    FROM_PHYS_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TO_PHYS_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    remark: str
    from_phys_offset: int
    to_phys_offset: int
    sha256: str
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., remark: _Optional[str] = ..., from_phys_offset: _Optional[int] = ..., to_phys_offset: _Optional[int] = ..., sha256: _Optional[str] = ...) -> None: ...

class VerifyStoreRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class VerifyStoreResponse(_message.Message):
    __slots__ = ("units_checked", "invalid_units", "examples")
    UNITS_CHECKED_FIELD_NUMBER: _ClassVar[int]
    INVALID_UNITS_FIELD_NUMBER: _ClassVar[int]
    EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    units_checked: int
    invalid_units: int
    examples: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, units_checked: _Optional[int] = ..., invalid_units: _Optional[int] = ..., examples: _Optional[_Iterable[str]] = ...) -> None: ...
