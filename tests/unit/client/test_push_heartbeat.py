"""Client ids, heartbeats to every broker of the topics, notification streams, unregistering."""

from __future__ import annotations

import asyncio
from typing import Any

from nodes.client.heartbeat import HeartbeatService, RegisteredConsumer
from nodes.client.instance import make_client_id
from nodes.client.rpc.api import ConsumerData
from nodes.common import constants as c
from nodes.common.errors import TransportError
from nodes.common.types import MessageModel
from proto import common_pb2, consumer_pb2


def test_clustering_replaces_the_default_instance_name_by_pid_and_nanos():
    cid = make_client_id("DEFAULT", MessageModel.CLUSTERING, ip="10.0.0.7", pid=42, nanos=123456789)
    assert cid == "10.0.0.7@42#123456789"


def test_broadcasting_and_named_instances_keep_their_name():
    assert make_client_id("DEFAULT", MessageModel.BROADCASTING, ip="10.0.0.7") == "10.0.0.7@DEFAULT"
    assert make_client_id("consumer-3", MessageModel.CLUSTERING, ip="10.0.0.7") == "10.0.0.7@consumer-3"


def test_two_clustering_ids_in_one_process_differ():
    assert make_client_id("DEFAULT", MessageModel.CLUSTERING) != make_client_id("DEFAULT", MessageModel.CLUSTERING)


class _Notifications:
    """An async iterator standing in for a server stream; `end()` finishes it."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[str | None] = asyncio.Queue()
        self.cancelled = False

    def push(self, group: str | None) -> None:
        self.queue.put_nowait(group)

    def __aiter__(self) -> _Notifications:
        return self

    async def __anext__(self) -> consumer_pb2.ConsumerNotification:
        group = await self.queue.get()
        if group is None:
            raise StopAsyncIteration
        return consumer_pb2.ConsumerNotification(consumer_group=group)

    def cancel(self) -> None:
        self.cancelled = True


class ConsumerStub:
    def __init__(self, owner: Any, addr: str) -> None:
        self._owner = owner
        self._addr = addr

    async def Heartbeat(self, request, timeout=None):
        return self._owner.answer(self._addr, "Heartbeat", request)

    async def UnregisterClient(self, request, timeout=None):
        return self._owner.answer(self._addr, "UnregisterClient", request)

    def Notifications(self, request):
        stream = _Notifications()
        self._owner.streams.setdefault(self._addr, []).append(stream)
        return stream


def make_service(fakes, handler, notified):
    route = fakes.make_route(("broker-a", 4, 4, c.PERM_DEFAULT, {0: "a0:1", 1: "a1:1"}),
                             ("broker-b", 4, 4, c.PERM_DEFAULT, {0: "b0:1"}))
    inst = fakes.FakeInstance({"T": route}, handler)
    inst.streams = {}
    inst.api.consumer_stub = lambda addr: ConsumerStub(inst, addr)
    data = ConsumerData(group="g", consume_type=c.CONSUME_TYPE_PASSIVELY, message_model="", consume_from_where="",
                        subscriptions=())
    svc = HeartbeatService(inst.api, inst.routes, "cid", interval_ms=1000, timeout_ms=1000)
    svc.register("g", RegisteredConsumer(consumer_data=lambda: data, topics=lambda: ["T", "%RETRY%g"],
                                         on_notification=lambda: notified.append("g")))
    return inst, svc


def ok(addr, method, request):
    return consumer_pb2.HeartbeatResponse(code=common_pb2.SUCCESS)


def test_heartbeat_goes_to_masters_and_slaves_of_every_topic_broker(fakes):
    notified: list[str] = []

    async def run():
        inst, svc = make_service(fakes, ok, notified)
        await inst.routes.update_topic("T")
        assert await svc.send_heartbeat_to_all_brokers() == 3
        assert sorted(a for a, m, _ in inst.calls) == ["a0:1", "a1:1", "b0:1"]
        request = inst.calls[0][2]
        assert request.client_id == "cid" and request.consumers[0].group == "g"
        assert svc.open_streams == ["a0:1", "a1:1", "b0:1"]
        await svc.close_notifications()
        return inst

    inst = asyncio.run(run())
    assert all(s.cancelled for streams in inst.streams.values() for s in streams)


def test_a_notification_for_the_group_is_passed_on_and_a_closed_stream_reopens(fakes):
    notified: list[str] = []

    async def run():
        inst, svc = make_service(fakes, ok, notified)
        await inst.routes.update_topic("T")
        await svc.send_heartbeat_to_all_brokers()
        inst.streams["a0:1"][0].push("g")
        inst.streams["a0:1"][0].push(None)  # the broker ends the stream
        for _ in range(20):
            await asyncio.sleep(0)
        assert "a0:1" not in svc.open_streams
        await svc.send_heartbeat_to_all_brokers()
        assert len(inst.streams["a0:1"]) == 2 and len(inst.streams["b0:1"]) == 1
        await svc.close_notifications()

    asyncio.run(run())
    assert notified == ["g"]


def test_failed_heartbeats_are_counted_and_open_no_stream(fakes):
    def handler(addr, method, request):
        if addr == "b0:1":
            return TransportError("down")
        if addr == "a1:1":
            return consumer_pb2.HeartbeatResponse(code=common_pb2.SYSTEM_ERROR, remark="nope")
        return ok(addr, method, request)

    async def run():
        inst, svc = make_service(fakes, handler, [])
        await inst.routes.update_topic("T")
        assert await svc.send_heartbeat_to_all_brokers() == 1
        assert svc.heartbeats_failed == 2 and svc.open_streams == ["a0:1"]
        await svc.close_notifications()

    asyncio.run(run())


def test_unregister_tells_every_broker_and_tolerates_failures(fakes):
    def handler(addr, method, request):
        if addr == "a1:1":
            return TransportError("down")
        return consumer_pb2.UnregisterClientResponse(code=common_pb2.SUCCESS)

    async def run():
        inst, svc = make_service(fakes, handler, [])
        await inst.routes.update_topic("T")
        await svc.unregister("g", ["T", "%RETRY%g"])
        return inst

    inst = asyncio.run(run())
    calls = sorted((a, m, r.client_id, r.consumer_group) for a, m, r in inst.calls)
    assert calls == [(a, "UnregisterClient", "cid", "g") for a in ("a0:1", "a1:1", "b0:1")]


def test_one_heartbeat_carries_every_group_of_the_instance_and_notifications_reach_their_group(fakes):
    notified: list[str] = []

    async def run():
        inst, svc = make_service(fakes, ok, notified)
        other = ConsumerData(group="h", consume_type=c.CONSUME_TYPE_PASSIVELY, message_model="",
                             consume_from_where="", subscriptions=(("T", "*", 1),))
        svc.register("h", RegisteredConsumer(consumer_data=lambda: other, topics=lambda: ["T"],
                                             on_notification=lambda: notified.append("h")))
        await inst.routes.update_topic("T")
        assert await svc.send_heartbeat_to_all_brokers() == 3
        assert {tuple(d.group for d in r.consumers) for _, _, r in inst.calls} == {("g", "h")}
        inst.streams["a0:1"][0].push("h")
        for _ in range(20):
            await asyncio.sleep(0)
        svc.forget("h")
        inst.calls.clear()
        await svc.send_heartbeat_to_all_brokers()
        assert {tuple(d.group for d in r.consumers) for _, _, r in inst.calls} == {("g",)}
        await svc.close_notifications()

    asyncio.run(run())
    assert notified == ["h"]
