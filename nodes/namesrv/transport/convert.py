"""protobuf <-> the name-server handlers' plain values, in one place."""

from __future__ import annotations

from nodes.common import wire
from nodes.common.grpc_adapter import CODE_TO_PB
from nodes.namesrv.handlers import (
    BrokerRef,
    ClusterInfo,
    RegisterBrokerRequest,
    RegisterBrokerResponse,
    TopicList,
)
from nodes.namesrv.route_table import BrokerData, TopicRoute
from proto import common_pb2, namesrv_pb2


def register_from_pb(pb: namesrv_pb2.RegisterBrokerRequest) -> RegisterBrokerRequest:
    return RegisterBrokerRequest(
        cluster_name=pb.cluster_name, broker_name=pb.broker_name, broker_id=pb.broker_id,
        broker_addr=pb.broker_addr, ha_server_addr=pb.ha_server_addr,
        topic_configs=tuple(wire.topic_config_from_pb(t) for t in pb.topic_configs),
        data_version=(pb.data_version.timestamp_ms, pb.data_version.counter), node_id=pb.node_id,
        channel_token=pb.channel_token, remoting_addr=pb.remoting_addr, rocketmq5_addr=pb.rocketmq5_addr)


def register_to_pb(answer: RegisterBrokerResponse) -> namesrv_pb2.RegisterBrokerResponse:
    return namesrv_pb2.RegisterBrokerResponse(code=CODE_TO_PB[answer.code], remark=answer.remark,
                                              master_addr=answer.master_addr, ha_server_addr=answer.ha_server_addr)


def broker_ref_from_pb(pb: namesrv_pb2.UnregisterBrokerRequest | namesrv_pb2.WatchChannelRequest) -> BrokerRef:
    token = pb.channel_token if isinstance(pb, namesrv_pb2.WatchChannelRequest) else ""
    return BrokerRef(broker_name=pb.broker_name, broker_id=pb.broker_id, broker_addr=pb.broker_addr,
                     cluster_name=pb.cluster_name, channel_token=token)


def _broker_data_to_pb(b: BrokerData) -> namesrv_pb2.BrokerData:
    return namesrv_pb2.BrokerData(cluster=b.cluster, broker_name=b.broker_name, broker_addrs=b.broker_addrs,
                                  remoting_addrs=b.remoting_addrs, rocketmq5_addrs=b.rocketmq5_addrs)


def route_to_pb(route: TopicRoute) -> namesrv_pb2.TopicRouteData:
    return namesrv_pb2.TopicRouteData(
        queue_datas=[namesrv_pb2.QueueData(broker_name=q.broker_name, read_queue_nums=q.read_queue_nums,
                                           write_queue_nums=q.write_queue_nums, perm=q.perm,
                                           topic_sys_flag=q.topic_sys_flag) for q in route.queue_datas],
        broker_datas=[_broker_data_to_pb(b) for b in route.broker_datas])


def cluster_info_to_pb(info: ClusterInfo) -> namesrv_pb2.GetClusterInfoResponse:
    return namesrv_pb2.GetClusterInfoResponse(
        code=common_pb2.SUCCESS, brokers=[_broker_data_to_pb(b) for b in info.brokers],
        live=[namesrv_pb2.BrokerLiveInfo(broker_addr=live.broker_addr, node_id=live.node_id,
                                         last_update_timestamp_ms=live.last_update_timestamp_ms)
              for live in info.live],
        topics=info.topics, time_scale=info.time_scale)


def topic_list_to_pb(answer: TopicList) -> namesrv_pb2.GetTopicListResponse:
    return namesrv_pb2.GetTopicListResponse(code=common_pb2.SUCCESS, topics=answer.topics,
                                            time_scale=answer.time_scale)
