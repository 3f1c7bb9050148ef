"""Where a broker's RocketMQ 5 endpoint gets its routes: GetRouteInfo from the name servers (the
first one that answers), turned into each broker name's queues and its master's rocketmq5
endpoint. One channel per name server, dialled through `dial_overrides` like the broker's other
name-server traffic (so a partition cuts it too)."""

from __future__ import annotations

import grpc

from nodes.broker.rmq5.route import BrokerQueues
from nodes.common import constants as c
from nodes.common.codes import ResponseCode
from nodes.common.config import BrokerConfig
from nodes.common.errors import MqError
from nodes.common.grpc_adapter import code_from_pb
from nodes.common.rpc import make_channel, map_rpc_error, timeout_s
from proto import namesrv_pb2, namesrv_pb2_grpc


class NamesrvRoutes:
    def __init__(self, config: BrokerConfig) -> None:
        self._channels = [make_channel(addr, config.dial_overrides) for addr in config.namesrv_addrs]
        self._stubs = [namesrv_pb2_grpc.NameServerStub(ch) for ch in self._channels]
        self._timeout_ms = config.timing.rpc_timeout_ms

    async def __call__(self, topic: str) -> list[BrokerQueues] | None:
        """The topic's queues per broker name; None when the name servers route no such topic.

        Raises:
            MqError: no name server answered (the caller answers INTERNAL_SERVER_ERROR).
        """
        failure: MqError | None = None
        for stub in self._stubs:
            try:
                answer = await stub.GetRouteInfo(namesrv_pb2.GetRouteInfoRequest(topic=topic),
                                                 timeout=timeout_s(self._timeout_ms))
            except grpc.RpcError as exc:
                failure = map_rpc_error(exc, "route query to the name server")
                continue
            code = code_from_pb(answer.code)
            if code == ResponseCode.SUCCESS:
                return routed_queues(answer.route)
            if code == ResponseCode.TOPIC_ROUTE_NOT_EXIST:
                return None
            failure = MqError(f"the name server answered {code.name}: {answer.remark}")
        raise failure or MqError("this broker has no name server to ask for routes")

    async def close(self) -> None:
        for channel in self._channels:
            await channel.close()


def routed_queues(route: namesrv_pb2.TopicRouteData) -> list[BrokerQueues]:
    endpoints = {b.broker_name: b.rocketmq5_addrs.get(c.MASTER_ID, "") for b in route.broker_datas}
    return [BrokerQueues(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm, endpoints.get(q.broker_name, ""))
            for q in route.queue_datas]
