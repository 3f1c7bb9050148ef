"""ClientApi: every call a client makes to a broker or a name server (RocketMQ's MQClientAPIImpl).

Owns the channels and stubs (one channel per peer address), the pipelined pull streams and
the send streams (one of each per broker address, opened lazily), the building of every
request, and the reading of every answer: an answer code becomes a status (a send's
SendStatus, a pull's PullStatus) or a project error (`for_code`), and a gRPC failure becomes a
TransportError, RequestTimeoutError or OutcomeUnknownError in one function,
`grpc_errors.rpc_error`. Callers pass and get plain values (MessageQueue, SendResult, PullResult...) and
branch on the errors' attributes. Does not choose addresses, retry, or keep any state beyond
connections: the producer, consumers and their services do that.

Loop-confined: every method runs on the client instance's event loop.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import grpc
import grpc.aio

from nodes.client.pull_decode import MessageBatch, decode_messages
from nodes.client.routes import BrokerData, QueueData, RouteSnapshot
from nodes.client.rpc.blocking_pull import BlockingPulls
from nodes.client.rpc.blocking_send import BlockingSends
from nodes.client.rpc.grpc_errors import rpc_error
from nodes.client.rpc.pull_stream import PullStream
from nodes.client.rpc.send_stream import SendStream
from nodes.client.rpc.send_wire import Outgoing, answered_offsets, build_request
from nodes.common import rpc, wire
from nodes.common.errors import InvariantViolation, for_code
from nodes.common.types import MessageExt, MessageQueue, PullResult, PullStatus, SendResult, SendStatus
from proto import (
    broker_pb2,
    broker_pb2_grpc,
    common_pb2,
    consumer_pb2,
    consumer_pb2_grpc,
    namesrv_pb2,
    namesrv_pb2_grpc,
)

T = TypeVar("T")
S = TypeVar("S")  # a generated gRPC stub class

# processSendResponse: these codes mean "stored on the master"; any other is an error.
SEND_STATUS_BY_CODE: dict[int, SendStatus] = {
    common_pb2.SUCCESS: SendStatus.SEND_OK,
    common_pb2.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    common_pb2.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    common_pb2.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}

# processPullResponse: every other code is an error (MQBrokerException)
PULL_STATUS_BY_CODE: dict[int, PullStatus] = {
    common_pb2.SUCCESS: PullStatus.FOUND,
    common_pb2.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    common_pb2.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    common_pb2.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


class OffsetKind(enum.Enum):
    """Which queue offset GetQueueOffset asks for (MQAdminImpl minOffset / maxOffset / searchOffset)."""

    MIN = broker_pb2.MIN
    MAX = broker_pb2.MAX
    BY_TIMESTAMP = broker_pb2.BY_TIMESTAMP


@dataclass(frozen=True, slots=True)
class ConsumerData:
    """One consumer group of a heartbeat: subscriptions are (topic, expression, sub_version)."""

    group: str
    consume_type: str
    message_model: str
    consume_from_where: str
    subscriptions: Sequence[tuple[str, str, int]]


@dataclass(frozen=True, slots=True)
class OffsetReset:
    """RESET_CONSUMER_CLIENT_OFFSET from a broker: the group's offsets of these queues were reset."""

    group: str
    topic: str
    timestamp_ms: int
    offsets: Mapping[MessageQueue, int]


def notice_from_pb(note: consumer_pb2.ConsumerNotification) -> str | OffsetReset:
    """A group whose consumer ids changed, or an offset reset."""
    if note.HasField("reset"):
        r = note.reset
        return OffsetReset(r.consumer_group, r.topic, r.timestamp_ms,
                           {wire.mq_from_pb(q.queue): q.queue_offset for q in r.offsets})
    return note.consumer_group


def _raise_unless_success(resp: Any) -> None:
    if resp.code != common_pb2.SUCCESS:
        raise for_code(wire.code_name(resp.code), resp.remark)


# --- answers to values (pure) -------------------------------------------------------------------

def route_from_pb(pb: namesrv_pb2.TopicRouteData) -> RouteSnapshot:
    return RouteSnapshot(
        queue_datas=tuple(
            QueueData(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm, q.topic_sys_flag)
            for q in pb.queue_datas),
        broker_datas=tuple(
            BrokerData(b.broker_name, dict(b.broker_addrs), b.cluster) for b in pb.broker_datas),
        order_topic_conf=pb.order_topic_conf,
    )


def _send_request(outs: Sequence[Outgoing], mq: MessageQueue, group: str, default_topic_queue_nums: int,
                  born_host: str) -> broker_pb2.SendMessageRequest:
    return build_request(outs, producer_group=group, topic=mq.topic, queue_id=mq.queue_id,
                         default_topic_queue_nums=default_topic_queue_nums, born_host=born_host)


def send_result_from_response(resp: broker_pb2.SendMessageResponse, topic: str, broker_name: str,
                              uniq_ids: Sequence[str]) -> SendResult:
    """processSendResponse: a SendResult for a storing code, else the code's RemoteError.

    A batch's `msg_id` is the comma-joined ids as in RocketMQ's MessageBatch; `msg_ids` and
    `queue_offsets` list them one per message, in send order.
    """
    status = SEND_STATUS_BY_CODE.get(resp.code)
    if status is None:
        raise for_code(wire.code_name(resp.code), resp.remark)
    queue_offsets, offset_msg_ids = answered_offsets(resp)
    if len(queue_offsets) != len(uniq_ids):
        raise InvariantViolation(
            f"broker answered {status.name} for {len(uniq_ids)} messages to {topic} with {len(queue_offsets)} entries")
    return SendResult(
        status=status,
        msg_id=",".join(uniq_ids),
        message_queue=MessageQueue(topic, broker_name, resp.queue_id),
        queue_offset=queue_offsets[0],
        offset_msg_id=",".join(offset_msg_ids),
        msg_ids=tuple(uniq_ids),
        queue_offsets=queue_offsets,
    )


def pull_status_for_code(code: int, remark: str = "") -> PullStatus:
    """The PullStatus of a response code; any other code raises its RemoteError."""
    status = PULL_STATUS_BY_CODE.get(code)
    if status is None:
        raise for_code(wire.code_name(code), remark)
    return status


def process_pull_response(resp: broker_pb2.PullResponse, mq: MessageQueue,
                          tags: frozenset[str] | None, *, lazy: bool = False) -> PullResult:
    """processPullResponse + processPullResult: status, decoded and filtered messages.

    With `lazy` (and no tag filter), `messages` is a MessageBatch decoded on first use.

    Raises:
        RemoteError: the code is not one of the four pull outcomes.
    """
    status = pull_status_for_code(resp.code, resp.remark)
    messages: list[MessageExt] | MessageBatch = []
    # read once: every read of a protobuf bytes field copies it (~1.2 MB at batch 1024)
    records = resp.records if status is PullStatus.FOUND else b""
    if records:
        broker_name, min_offset, max_offset = mq.broker_name, resp.min_offset, resp.max_offset
        if lazy and tags is None and resp.record_count > 0:
            messages = MessageBatch(resp.record_count, lambda: decode_messages(
                records, broker_name=broker_name, min_offset=min_offset, max_offset=max_offset, tags=None))
        else:
            messages = decode_messages(records, broker_name=broker_name, min_offset=min_offset,
                                       max_offset=max_offset, tags=tags)
    return PullResult(status=status, next_begin_offset=resp.next_begin_offset, min_offset=resp.min_offset,
                      max_offset=resp.max_offset, messages=messages,
                      suggest_which_broker_id=resp.suggest_which_broker_id, store_status=resp.remark)


class ClientApi:
    """The broker and name-server calls of one client instance, over its channels."""

    def __init__(self, dial_overrides: Mapping[str, str] | None = None) -> None:
        self.dial_overrides = dict(dial_overrides or {})
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[tuple[type, str], Any] = {}  # (stub class, addr) -> stub over that addr's channel
        self._pull_streams: dict[str, PullStream] = {}
        self._send_streams: dict[str, SendStream] = {}
        # synchronous pulls and sends made in their caller's thread (the calls not made on the loop)
        self.blocking_pulls = BlockingPulls(self._sync_channel)
        self.blocking_sends = BlockingSends(self._sync_channel)

    # --- connections -----------------------------------------------------------------------
    def _sync_channel(self, addr: str) -> grpc.Channel:
        return rpc.make_sync_channel(addr, self.dial_overrides)

    def channel(self, addr: str) -> grpc.aio.Channel:
        channel = self._channels.get(addr)
        if channel is None:
            channel = rpc.make_channel(addr, self.dial_overrides)
            self._channels[addr] = channel
        return channel

    def _stub(self, kind: type[S], addr: str) -> S:
        stub = self._stubs.get((kind, addr))
        if stub is None:
            stub = self._stubs[kind, addr] = kind(self.channel(addr))
        return cast(S, stub)

    def broker_stub(self, addr: str) -> broker_pb2_grpc.BrokerStub:
        return self._stub(broker_pb2_grpc.BrokerStub, addr)

    def namesrv_stub(self, addr: str) -> namesrv_pb2_grpc.NameServerStub:
        return self._stub(namesrv_pb2_grpc.NameServerStub, addr)

    def consumer_stub(self, addr: str) -> consumer_pb2_grpc.ConsumerManagerStub:
        return self._stub(consumer_pb2_grpc.ConsumerManagerStub, addr)

    def pull_stream(self, addr: str) -> PullStream:
        stream = self._pull_streams.get(addr)
        if stream is None:
            stream = PullStream(addr, lambda: self.broker_stub(addr).PullBatch)
            self._pull_streams[addr] = stream
        return stream

    def send_stream(self, addr: str) -> SendStream:
        stream = self._send_streams.get(addr)
        if stream is None:
            stream = SendStream(addr, lambda: self.broker_stub(addr).SendStream)
            self._send_streams[addr] = stream
        return stream

    async def close_streams(self) -> None:
        """Close the pull and send streams (what waits on them fails); the next pull or send
        opens a new one."""
        streams: dict[str, PullStream] | dict[str, SendStream]
        for streams in (self._pull_streams, self._send_streams):
            for stream in list(streams.values()):
                await stream.close()
            streams.clear()
        self.blocking_pulls.close_calls()
        self.blocking_sends.close_calls()

    async def close(self) -> None:
        """Close the streams and every channel."""
        await self.close_streams()
        self.blocking_pulls.close()
        self.blocking_sends.close()
        for channel in list(self._channels.values()):
            await channel.close()
        self._channels.clear()
        self._stubs.clear()

    async def unary(self, method: Callable[..., Awaitable[T]], request: Any, timeout_ms: int, what: str, *,
                    side_effects: bool = False) -> T:
        """One unary call with a deadline; a gRPC failure comes out as `rpc_error` maps it."""
        try:
            return await method(request, timeout=rpc.timeout_s(timeout_ms))
        except grpc.RpcError as exc:
            raise rpc_error(exc, what, side_effects=side_effects) from None

    async def _checked(self, method: Callable[..., Awaitable[T]], request: Any, timeout_ms: int, what: str) -> T:
        """`unary`, and an answer code other than SUCCESS raised as its error."""
        resp = await self.unary(method, request, timeout_ms, what)
        _raise_unless_success(resp)
        return resp

    # --- name server -------------------------------------------------------------------------
    async def get_route(self, addr: str, topic: str, timeout_ms: int) -> RouteSnapshot | None:
        """GetRouteInfo: the topic's route, or None if the name server has none."""
        resp = await self.unary(self.namesrv_stub(addr).GetRouteInfo, namesrv_pb2.GetRouteInfoRequest(topic=topic),
                                timeout_ms, f"GetRouteInfo({topic}) at {addr}")
        if resp.code == common_pb2.TOPIC_ROUTE_NOT_EXIST:
            return None
        _raise_unless_success(resp)
        return route_from_pb(resp.route)

    async def cluster_time_scale(self, addr: str, timeout_ms: int) -> float:
        """GetClusterInfo's time scale: what the cluster's timers are multiplied by (1: RocketMQ's)."""
        resp = await self.unary(self.namesrv_stub(addr).GetClusterInfo, namesrv_pb2.GetClusterInfoRequest(),
                                timeout_ms, f"GetClusterInfo at {addr}")
        _raise_unless_success(resp)
        return resp.time_scale or 1.0  # a name server that predates the field runs unscaled timers

    # --- sending ------------------------------------------------------------------------------
    async def send(self, addr: str, mq: MessageQueue, outs: Sequence[Outgoing], uids: Sequence[str], *,
                   group: str, default_topic_queue_nums: int, born_host: str, timeout_ms: int,
                   what: str) -> SendResult:
        """SendMessage of one message or one batch to `mq` on the master at `addr`, over the
        broker's send stream (several sends may be in flight on it).

        Raises:
            RemoteError: the broker refused (`retriable` / `refresh_route` say what may help).
            TransportError, or OutcomeUnknownError when the request may have been stored.
        """
        request = _send_request(outs, mq, group, default_topic_queue_nums, born_host)
        resp = await self.send_stream(addr).send(request, timeout_ms, what)
        return send_result_from_response(resp, mq.topic, mq.broker_name, uids)

    def send_blocking(self, addr: str, mq: MessageQueue, outs: Sequence[Outgoing], uids: Sequence[str], *,
                      group: str, default_topic_queue_nums: int, born_host: str, timeout_ms: int,
                      what: str) -> SendResult:
        """`send` in the caller's thread, over `blocking_sends` (one send in flight per thread and
        address). Same request, same answers, same errors."""
        request = _send_request(outs, mq, group, default_topic_queue_nums, born_host)
        resp = self.blocking_sends.send(addr, request, timeout_ms, what)
        return send_result_from_response(resp, mq.topic, mq.broker_name, uids)

    async def send_back(self, addr: str, group: str, msg: MessageExt, *, delay_level: int,
                        max_reconsume_times: int, timeout_ms: int) -> None:
        """ConsumerSendMsgBack: the broker re-queues `msg` (read back by its commitlog offset)."""
        request = consumer_pb2.ConsumerSendMsgBackRequest(
            consumer_group=group, phys_offset=msg.commitlog_offset, delay_level=delay_level,
            origin_msg_id=msg.msg_id, origin_topic=msg.topic, max_reconsume_times=max_reconsume_times)
        await self._checked(self.consumer_stub(addr).ConsumerSendMsgBack, request, timeout_ms,
                            f"send back {msg.msg_id} to {addr}")

    # --- pulling ------------------------------------------------------------------------------
    async def pull(self, addr: str, mq: MessageQueue, fields: dict[str, Any], timeout_ms: int, *,
                   tags: frozenset[str] | None, lazy: bool) -> PullResult:
        """One pull on the broker's pipelined stream (`fields`: the PullRequest's, without its id).

        Raises:
            RequestTimeoutError / TransportError: no answer.
            RemoteError: the answer is not one of the four pull outcomes.
        """
        resp = await self.pull_stream(addr).pull(fields, timeout_ms)
        return process_pull_response(resp, mq, tags, lazy=lazy)

    # --- offsets ------------------------------------------------------------------------------
    async def query_consumer_offset(self, addr: str, group: str, mq: MessageQueue, timeout_ms: int) -> int | None:
        """QueryConsumerOffset: the group's committed offset, or None if the broker has none."""
        request = broker_pb2.QueryConsumerOffsetRequest(consumer_group=group, topic=mq.topic, queue_id=mq.queue_id)
        resp = await self.unary(self.broker_stub(addr).QueryConsumerOffset, request, timeout_ms,
                                f"query offset {mq} at {addr}")
        if resp.code == common_pb2.QUERY_NOT_FOUND:
            return None
        _raise_unless_success(resp)
        return resp.offset

    async def update_consumer_offset(self, addr: str, group: str, mq: MessageQueue, offset: int, timeout_ms: int, *,
                                     client_id: str = "", commit_seq: int = 0) -> None:
        """UpdateConsumerOffset (`commit_seq` lets the broker drop a commit overtaken by a later one)."""
        request = broker_pb2.UpdateConsumerOffsetRequest(consumer_group=group, topic=mq.topic, queue_id=mq.queue_id,
                                                         offset=offset, client_id=client_id, commit_seq=commit_seq)
        await self._checked(self.broker_stub(addr).UpdateConsumerOffset, request, timeout_ms,
                            f"update offset {mq} at {addr}")

    async def queue_offset(self, addr: str, mq: MessageQueue, kind: OffsetKind, timeout_ms: int, *,
                           timestamp_ms: int = 0) -> int:
        """GetQueueOffset: the queue's min or max offset, or the first at `timestamp_ms`."""
        request = broker_pb2.GetQueueOffsetRequest(topic=mq.topic, queue_id=mq.queue_id, kind=kind.value,
                                                   timestamp_ms=timestamp_ms)
        resp = await self._checked(self.broker_stub(addr).GetQueueOffset, request, timeout_ms,
                                   f"{kind.name.lower()} offset of {mq} at {addr}")
        return resp.offset

    # --- consumer membership and locks --------------------------------------------------------
    async def heartbeat(self, addr: str, client_id: str, consumers: Sequence[ConsumerData], timeout_ms: int) -> None:
        request = consumer_pb2.HeartbeatRequest(client_id=client_id, consumers=[
            consumer_pb2.ConsumerData(
                group=d.group, consume_type=d.consume_type, message_model=d.message_model,
                consume_from_where=d.consume_from_where,
                subscriptions=[consumer_pb2.SubscriptionData(topic=topic, expression=expression, sub_version=version)
                               for topic, expression, version in d.subscriptions])
            for d in consumers])
        await self._checked(self.consumer_stub(addr).Heartbeat, request, timeout_ms, f"heartbeat to {addr}")

    async def unregister(self, addr: str, client_id: str, group: str, timeout_ms: int) -> None:
        request = consumer_pb2.UnregisterClientRequest(client_id=client_id, consumer_group=group)
        await self._checked(self.consumer_stub(addr).UnregisterClient, request, timeout_ms, f"unregister at {addr}")

    async def consumer_list(self, addr: str, group: str, timeout_ms: int) -> list[str]:
        """GetConsumerList: the client ids of the group's consumers the broker knows."""
        resp = await self._checked(self.consumer_stub(addr).GetConsumerList,
                                   consumer_pb2.GetConsumerListRequest(consumer_group=group), timeout_ms,
                                   f"consumer list of {group} at {addr}")
        return list(resp.client_ids)

    async def notifications(self, addr: str, client_id: str) -> AsyncIterator[str | OffsetReset]:
        """The broker's notices until the stream ends: a group's name for its
        NOTIFY_CONSUMER_IDS_CHANGED, an OffsetReset for a RESET_CONSUMER_CLIENT_OFFSET.

        Raises:
            TransportError: the stream broke.
        """
        call: Any = self.consumer_stub(addr).Notifications(consumer_pb2.NotificationsRequest(client_id=client_id))
        try:
            async for note in call:
                yield notice_from_pb(note)
        except grpc.RpcError as exc:
            raise rpc_error(exc, f"notifications from {addr}") from None
        finally:
            call.cancel()

    async def lock_batch(self, addr: str, group: str, client_id: str, mqs: Sequence[MessageQueue],
                         timeout_ms: int) -> set[MessageQueue]:
        """LockBatchMQ: the queues of `mqs` this client holds now."""
        request = consumer_pb2.LockBatchRequest(consumer_group=group, client_id=client_id,
                                                queues=[wire.mq_to_pb(mq) for mq in mqs])
        resp = await self._checked(self.consumer_stub(addr).LockBatchMQ, request, timeout_ms,
                                   f"lock {len(mqs)} queues at {addr}")
        return {wire.mq_from_pb(q) for q in resp.locked}

    async def unlock_batch(self, addr: str, group: str, client_id: str, mqs: Sequence[MessageQueue],
                           timeout_ms: int) -> None:
        request = consumer_pb2.UnlockBatchRequest(consumer_group=group, client_id=client_id,
                                                  queues=[wire.mq_to_pb(mq) for mq in mqs])
        await self._checked(self.consumer_stub(addr).UnlockBatchMQ, request, timeout_ms,
                            f"unlock {len(mqs)} queues at {addr}")
