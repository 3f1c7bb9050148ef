from proto import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DataVersion(_message.Message):
    __slots__ = ("timestamp_ms", "counter")
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    COUNTER_FIELD_NUMBER: _ClassVar[int]
    timestamp_ms: int
    counter: int
    def __init__(self, timestamp_ms: _Optional[int] = ..., counter: _Optional[int] = ...) -> None: ...

class RegisterBrokerRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_id", "broker_addr", "ha_server_addr", "topic_configs", "data_version", "node_id", "channel_token", "remoting_addr", "rocketmq5_addr")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    HA_SERVER_ADDR_FIELD_NUMBER: _ClassVar[int]
    TOPIC_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REMOTING_ADDR_FIELD_NUMBER: _ClassVar[int]
    ROCKETMQ5_ADDR_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    ha_server_addr: str
    topic_configs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicConfig]
    data_version: DataVersion
    node_id: str
    channel_token: str
    remoting_addr: str
    rocketmq5_addr: str
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., broker_addr: _Optional[str] = ..., ha_server_addr: _Optional[str] = ..., topic_configs: _Optional[_Iterable[_Union[_common_pb2.TopicConfig, _Mapping]]] = ..., data_version: _Optional[_Union[DataVersion, _Mapping]] = ..., node_id: _Optional[str] = ..., channel_token: _Optional[str] = ..., remoting_addr: _Optional[str] = ..., rocketmq5_addr: _Optional[str] = ...) -> None: ...

class RegisterBrokerResponse(_message.Message):
    __slots__ = ("code", "remark", "master_addr", "ha_server_addr")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    HA_SERVER_ADDR_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    remark: str
    master_addr: str
    ha_server_addr: str
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., remark: _Optional[str] = ..., master_addr: _Optional[str] = ..., ha_server_addr: _Optional[str] = ...) -> None: ...

class UnregisterBrokerRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_id", "broker_addr")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., broker_addr: _Optional[str] = ...) -> None: ...

class UnregisterBrokerResponse(_message.Message):
    __slots__ = ("code", "remark")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    remark: str
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., remark: _Optional[str] = ...) -> None: ...

class WatchChannelRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_id", "broker_addr", "channel_token")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_TOKEN_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    channel_token: str
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., broker_addr: _Optional[str] = ..., channel_token: _Optional[str] = ...) -> None: ...

class WatchChannelEvent(_message.Message):
    __slots__ = ("registered",)
    REGISTERED_FIELD_NUMBER: _ClassVar[int]
    registered: bool
    def __init__(self, registered: _Optional[bool] = ...) -> None: ...

class QueueData(_message.Message):
    __slots__ = ("broker_name", "read_queue_nums", "write_queue_nums", "perm", "topic_sys_flag")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    TOPIC_SYS_FLAG_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int
    def __init__(self, broker_name: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ..., topic_sys_flag: _Optional[int] = ...) -> None: ...

class BrokerData(_message.Message):
    __slots__ = ("cluster", "broker_name", "broker_addrs", "remoting_addrs", "rocketmq5_addrs")
    class BrokerAddrsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: str
        def __init__(self, key: _Optional[int] = ..., value: _Optional[str] = ...) -> None: ...
    class RemotingAddrsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: str
        def __init__(self, key: _Optional[int] = ..., value: _Optional[str] = ...) -> None: ...
    class Rocketmq5AddrsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: str
        def __init__(self, key: _Optional[int] = ..., value: _Optional[str] = ...) -> None: ...
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDRS_FIELD_NUMBER: _ClassVar[int]
    REMOTING_ADDRS_FIELD_NUMBER: _ClassVar[int]
    ROCKETMQ5_ADDRS_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    broker_name: str
    broker_addrs: _containers.ScalarMap[int, str]
    remoting_addrs: _containers.ScalarMap[int, str]
    rocketmq5_addrs: _containers.ScalarMap[int, str]
    def __init__(self, cluster: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_addrs: _Optional[_Mapping[int, str]] = ..., remoting_addrs: _Optional[_Mapping[int, str]] = ..., rocketmq5_addrs: _Optional[_Mapping[int, str]] = ...) -> None: ...

class TopicRouteData(_message.Message):
    __slots__ = ("queue_datas", "broker_datas", "order_topic_conf")
    QUEUE_DATAS_FIELD_NUMBER: _ClassVar[int]
    BROKER_DATAS_FIELD_NUMBER: _ClassVar[int]
    ORDER_TOPIC_CONF_FIELD_NUMBER: _ClassVar[int]
    queue_datas: _containers.RepeatedCompositeFieldContainer[QueueData]
    broker_datas: _containers.RepeatedCompositeFieldContainer[BrokerData]
    order_topic_conf: str
    def __init__(self, queue_datas: _Optional[_Iterable[_Union[QueueData, _Mapping]]] = ..., broker_datas: _Optional[_Iterable[_Union[BrokerData, _Mapping]]] = ..., order_topic_conf: _Optional[str] = ...) -> None: ...

class GetRouteInfoRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class GetRouteInfoResponse(_message.Message):
    __slots__ = ("code", "remark", "route")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    remark: str
    route: TopicRouteData
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., remark: _Optional[str] = ..., route: _Optional[_Union[TopicRouteData, _Mapping]] = ...) -> None: ...

class GetClusterInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BrokerLiveInfo(_message.Message):
    __slots__ = ("broker_addr", "last_update_timestamp_ms", "node_id")
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    LAST_UPDATE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    broker_addr: str
    last_update_timestamp_ms: int
    node_id: str
    def __init__(self, broker_addr: _Optional[str] = ..., last_update_timestamp_ms: _Optional[int] = ..., node_id: _Optional[str] = ...) -> None: ...

class GetClusterInfoResponse(_message.Message):
    __slots__ = ("code", "brokers", "live", "topics", "time_scale")
    CODE_FIELD_NUMBER: _ClassVar[int]
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    LIVE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    TIME_SCALE_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    brokers: _containers.RepeatedCompositeFieldContainer[BrokerData]
    live: _containers.RepeatedCompositeFieldContainer[BrokerLiveInfo]
    topics: _containers.RepeatedScalarFieldContainer[str]
    time_scale: float
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., brokers: _Optional[_Iterable[_Union[BrokerData, _Mapping]]] = ..., live: _Optional[_Iterable[_Union[BrokerLiveInfo, _Mapping]]] = ..., topics: _Optional[_Iterable[str]] = ..., time_scale: _Optional[float] = ...) -> None: ...

class GetTopicListRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetTopicListResponse(_message.Message):
    __slots__ = ("code", "remark", "topics", "time_scale")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    TIME_SCALE_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.Code
    remark: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    time_scale: float
    def __init__(self, code: _Optional[_Union[_common_pb2.Code, str]] = ..., remark: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ..., time_scale: _Optional[float] = ...) -> None: ...
