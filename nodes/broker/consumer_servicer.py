"""The ConsumerManager gRPC servicer (RocketMQ ClientManageProcessor, the consumer parts of
ConsumerManageProcessor, DefaultConsumerIdsChangeListener and the send-back request).

Owns: turning heartbeats into registry registrations (and creating `%RETRY%<group>` on the
way), the per-client Notifications streams and pushing a group's CHANGE to every member that
has one, treating a stream's end as the client's channel closing, GetConsumerList, and
handing send-backs to `SendBackProcessor`. Does not own membership rules (consumers.py) or
the retry/DLQ rules (send_back.py).

A client opens one Notifications stream per broker; notifications for a group are coalesced
while the client has not read them (RocketMQ sends them oneway and may drop them too).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
import grpc.aio

from nodes.broker.consumers import ConsumerRegistration, ConsumerRegistry, Subscription
from nodes.broker.queue_locks import QueueLockManager, lock_batch_response, unlock_batch_response
from nodes.broker.send_back import SendBackProcessor, ensure_retry_topic
from nodes.broker.topics import SubscriptionGroupManager, TopicConfigManager
from nodes.common.clock import Clock
from nodes.common.config import BrokerConfig
from nodes.common.errors import InvariantViolation
from nodes.common.node import crash_node
from proto import common_pb2, consumer_pb2, consumer_pb2_grpc

log = logging.getLogger(__name__)


class _NotificationStream:
    """The pending notifications of one open Notifications stream (group names, coalesced)."""

    def __init__(self, client_id: str, peer: str) -> None:
        self.client_id = client_id
        self.peer = peer
        self.pending: dict[str, None] = {}
        self.closed = False
        self.wakeup = asyncio.Event()

    def push(self, group: str) -> None:
        self.pending[group] = None
        self.wakeup.set()

    def close(self) -> None:
        self.closed = True
        self.wakeup.set()


def registration_from_pb(data: consumer_pb2.ConsumerData) -> ConsumerRegistration:
    return ConsumerRegistration(
        group=data.group, consume_type=data.consume_type, message_model=data.message_model,
        consume_from_where=data.consume_from_where,
        subscriptions=tuple(Subscription(s.topic, s.expression, s.sub_version) for s in data.subscriptions))


class ConsumerManagerServicer(consumer_pb2_grpc.ConsumerManagerServicer):
    def __init__(self, *, config: BrokerConfig, registry: ConsumerRegistry, groups: SubscriptionGroupManager,
                 topics: TopicConfigManager, send_back: SendBackProcessor, clock: Clock,
                 on_topics_changed: Callable[[], Awaitable[None]], locks: QueueLockManager | None = None) -> None:
        self._config = config
        self._locks = locks  # None on a slave: locks live on the master only
        self._registry = registry
        self._groups = groups
        self._topics = topics
        self._send_back = send_back
        self._clock = clock
        self._on_topics_changed = on_topics_changed
        self._streams: dict[str, list[_NotificationStream]] = {}
        self.notifications_sent = 0
        registry.on_change = self.notify_change

    # --- membership ----------------------------------------------------------------------

    async def Heartbeat(self, request: consumer_pb2.HeartbeatRequest, context: grpc.aio.ServicerContext
                        ) -> consumer_pb2.HeartbeatResponse:
        if not request.client_id:
            return consumer_pb2.HeartbeatResponse(code=common_pb2.INVALID_ARGUMENT, remark="client_id is required")
        if any(not data.group for data in request.consumers):
            return consumer_pb2.HeartbeatResponse(code=common_pb2.INVALID_ARGUMENT,
                                                  remark="every consumer entry needs a group")
        version = self._topics.data_version
        now_ms = self._clock.monotonic_ms()
        for data in request.consumers:
            group = self._groups.find(data.group)  # auto-created by default
            notify = True
            if group is not None:
                notify = group.notify_consumer_ids_changed_enable
                if self._config.is_master:  # a slave takes its topics from the master
                    ensure_retry_topic(self._topics, group, self._clock.wall_ms())
            self._registry.register(request.client_id, registration_from_pb(data), now_ms,
                                    channel_key=context.peer(), notify=notify)
        if self._topics.data_version != version:
            await self._on_topics_changed()  # the new %RETRY% topic gets a route at once
        return consumer_pb2.HeartbeatResponse(code=common_pb2.SUCCESS)

    async def UnregisterClient(self, request: consumer_pb2.UnregisterClientRequest,
                               context: grpc.aio.ServicerContext) -> consumer_pb2.UnregisterClientResponse:
        if request.consumer_group:
            group = self._groups.find(request.consumer_group)
            notify = group.notify_consumer_ids_changed_enable if group is not None else True
            self._registry.unregister(request.client_id, request.consumer_group, notify=notify)
        return consumer_pb2.UnregisterClientResponse(code=common_pb2.SUCCESS)

    async def GetConsumerList(self, request: consumer_pb2.GetConsumerListRequest,
                              context: grpc.aio.ServicerContext) -> consumer_pb2.GetConsumerListResponse:
        client_ids = self._registry.client_ids(request.consumer_group)
        if not client_ids:
            return consumer_pb2.GetConsumerListResponse(
                code=common_pb2.SYSTEM_ERROR, remark=f"no consumer for this group, {request.consumer_group}")
        return consumer_pb2.GetConsumerListResponse(code=common_pb2.SUCCESS, client_ids=client_ids)

    # --- notifications -------------------------------------------------------------------

    async def Notifications(self, request: consumer_pb2.NotificationsRequest, context: grpc.aio.ServicerContext
                            ) -> AsyncIterator[consumer_pb2.ConsumerNotification]:
        if not request.client_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "client_id is required")
        stream = _NotificationStream(request.client_id, context.peer())
        self._streams.setdefault(request.client_id, []).append(stream)
        log.info("notification stream of %s opened (%s)", request.client_id, stream.peer)
        try:
            while True:
                await stream.wakeup.wait()
                stream.wakeup.clear()
                if stream.closed:
                    return
                groups, stream.pending = list(stream.pending), {}
                for group in groups:
                    yield consumer_pb2.ConsumerNotification(consumer_group=group)
        finally:
            self._stream_ended(stream)

    def _stream_ended(self, stream: _NotificationStream) -> None:
        """The client's channel closed (it went away, or its stream was cancelled)."""
        streams = self._streams.get(stream.client_id, [])
        if stream in streams:
            streams.remove(stream)
        if streams:
            return  # another stream of this client id is still open
        self._streams.pop(stream.client_id, None)
        changed = self._registry.channel_closed(stream.client_id)
        log.info("notification stream of %s ended%s", stream.client_id,
                 f"; removed it from {changed}" if changed else "")

    def notify_change(self, group: str, client_ids: list[str]) -> None:
        """DefaultConsumerIdsChangeListener on CHANGE: tell every member of the group."""
        if not self._config.notify_consumer_ids_changed_enable:
            return
        for client_id in dict.fromkeys(client_ids):
            for stream in self._streams.get(client_id, []):
                stream.push(group)
                self.notifications_sent += 1

    def close_streams_of_expired(self, removed: list[tuple[str, str]]) -> None:
        """After the housekeeping scan: close the channel of a client that is now gone from
        every group (its stream's end then finds nothing to remove, so no CHANGE)."""
        for client_id in dict.fromkeys(cid for _, cid in removed):
            if not self._registry.has_client(client_id):
                for stream in self._streams.get(client_id, []):
                    stream.close()

    def open_streams(self) -> int:
        return sum(len(streams) for streams in self._streams.values())

    # --- send back -----------------------------------------------------------------------

    async def ConsumerSendMsgBack(self, request: consumer_pb2.ConsumerSendMsgBackRequest,
                                  context: grpc.aio.ServicerContext) -> consumer_pb2.ConsumerSendMsgBackResponse:
        version = self._topics.data_version
        try:
            response = self._send_back.process(request)
        except InvariantViolation as exc:
            crash_node(exc)
            raise
        except Exception as exc:
            log.exception("send back failed")
            return consumer_pb2.ConsumerSendMsgBackResponse(
                code=common_pb2.SYSTEM_ERROR, remark=f"send back failed on the broker: {exc!r}")
        if self._topics.data_version != version:
            await self._on_topics_changed()
        return response

    # --- queue locks (orderly consumers) ------------------------------------------------------

    async def LockBatchMQ(self, request: consumer_pb2.LockBatchRequest, context: grpc.aio.ServicerContext
                          ) -> consumer_pb2.LockBatchResponse:
        return lock_batch_response(self._locks, request, self._clock.monotonic_ms(), node_id=self._config.node_id)

    async def UnlockBatchMQ(self, request: consumer_pb2.UnlockBatchRequest, context: grpc.aio.ServicerContext
                            ) -> consumer_pb2.UnlockBatchResponse:
        return unlock_batch_response(self._locks, request, self._clock.monotonic_ms(), node_id=self._config.node_id)
