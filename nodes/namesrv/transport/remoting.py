"""The name server's RocketMQ 4.x remoting adapter: request codes -> NameServerHandler.

Real 4.x clients ask the name server one thing, GET_ROUTEINFO_BY_TOPIC (105); an admin tool also
asks GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206, RocketMQ's TopicList body); everything else is
answered REQUEST_CODE_NOT_SUPPORTED, with a remark naming the code. Broker registration
stays on gRPC: mqlab's brokers register there, carrying their remoting address.

A route answered here lists the brokers' *remoting* addresses (a remoting client dials those,
not the gRPC ones); a broker that registered none is left out of `brokerAddrs`, so a client
never dials a port that does not speak its protocol.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from nodes.common.codes import ResponseCode
from nodes.namesrv.handlers import NameServerHandler
from nodes.namesrv.route_table import TopicRoute
from nodes.remoting.command import RemotingCommand, RequestCode
from nodes.remoting.server import Channel

log = logging.getLogger(__name__)


class NamesrvRemoting:
    """The `dispatch` of the name server's RemotingServer."""

    def __init__(self, handler: NameServerHandler) -> None:
        self._handler = handler

    async def dispatch(self, cmd: RemotingCommand, channel: Channel) -> RemotingCommand:
        if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            return self._route(cmd)
        if cmd.code == RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER:
            return self._topic_list(cmd)
        log.info("namesrv remoting: request code %d from %r is not supported", cmd.code, channel)
        return cmd.answer(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                          f"request code {cmd.code} is not supported by this name server")

    def _route(self, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.ext_str("topic")
        answer = self._handler.route(topic)
        if answer.route is None:
            # RocketMQ has one code for "no route"; the clients expect it, not mqlab's own.
            return cmd.answer(ResponseCode.TOPIC_NOT_EXIST, answer.remark)
        return cmd.answer(ResponseCode.SUCCESS, body=topic_route_json(answer.route).encode())


    def _topic_list(self, cmd: RemotingCommand) -> RemotingCommand:
        """TopicList as fastjson writes it ({"topicList":[...]}, no brokerAddr: it is null)."""
        topics = self._handler.topic_list().topics
        return cmd.answer(ResponseCode.SUCCESS, body=_object({"topicList": list(topics)}).encode())


def topic_route_json(route: TopicRoute) -> str:
    """TopicRouteData as fastjson writes it: keys in its order, `brokerAddrs` keyed by the bare
    (unquoted) broker id, and an empty `filterServerTable`. Both real clients parse the unquoted
    keys (and quoted ones too); Java's client is written against exactly this text."""
    brokers = ",".join(
        "{" + f'"brokerAddrs":{_int_keyed(b.remoting_addrs)},"brokerName":{_text(b.broker_name)},'
        f'"cluster":{_text(b.cluster)}' + "}"
        for b in route.broker_datas)
    queues = ",".join(
        _object({"brokerName": q.broker_name, "perm": q.perm, "readQueueNums": q.read_queue_nums,
                 "writeQueueNums": q.write_queue_nums, "topicSysFlag": q.topic_sys_flag})
        for q in route.queue_datas)
    return f'{{"brokerDatas":[{brokers}],"filterServerTable":{{}},"queueDatas":[{queues}]}}'


def _int_keyed(addrs: dict[int, str]) -> str:
    return "{" + ",".join(f"{int(broker_id)}:{_text(addr)}" for broker_id, addr in sorted(addrs.items())) + "}"


def _object(fields: dict[str, Any]) -> str:
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=False)


def _text(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)
