"""protobuf (apache.rocketmq.v2) <-> the RocketMQ 5 handlers' plain values, in one place.

Also the settings merge: a Telemetry settings answer is the client's own settings with the
server's values written over them (a producer's body limit and retry policy, a consumer's long
polling, batch, FIFO flag and redelivery backoff), and `metric.on` false so no client starts
exporting metrics to an endpoint that is not there.
"""

from __future__ import annotations

import hashlib

from google.protobuf import duration_pb2, timestamp_pb2
from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper

from nodes.broker.pop.values import PoppedMessage
from nodes.broker.rmq5.clients import CallContext
from nodes.broker.rmq5.codes import Status
from nodes.broker.rmq5.consume import ReceiveRequest
from nodes.broker.rmq5.route import RouteQueue
from nodes.broker.rmq5.send import RESERVED_PROPERTIES, Rmq5Message
from nodes.broker.rmq5.settings import ServerSettings
from nodes.broker.transaction import CheckRequest
from nodes.common import constants as c
from proto import rmq5_definition_pb2 as d
from proto import rmq5_service_pb2 as s

_PERMISSION = {(True, True): d.READ_WRITE, (True, False): d.READ, (False, True): d.WRITE, (False, False): d.NONE}


def call_context(metadata: object, peer: str) -> CallContext | None:
    """The caller from its metadata; None without an `x-mq-client-id` (CLIENT_ID_REQUIRED)."""
    headers: dict[str, str] = {}
    for key, value in metadata or ():  # type: ignore[attr-defined]
        if isinstance(value, bytes):
            continue  # binary headers (-bin) carry nothing we read
        headers[key.lower()] = value
    client_id = headers.get("x-mq-client-id", "").strip()
    if not client_id:
        return None
    return CallContext(client_id=client_id, language=headers.get("x-mq-language", ""),
                       version=headers.get("x-mq-client-version", ""), namespace=headers.get("x-mq-namespace", ""),
                       peer=peer)


def peer_host(peer: str) -> str:
    """`ipv4:127.0.0.1:5000` -> `127.0.0.1` (other forms -> "")."""
    if peer.startswith("ipv4:"):
        return peer[5:].rpartition(":")[0]
    return ""


def status_to_pb(status: Status) -> d.Status:
    return d.Status(code=int(status.code), message=status.message)


def _endpoints(host: str, port: int) -> d.Endpoints:
    return d.Endpoints(scheme=d.IPv4, addresses=[d.Address(host=host, port=port)])


def queue_to_pb(topic: d.Resource, q: RouteQueue) -> d.MessageQueue:
    return d.MessageQueue(
        topic=topic, id=q.queue_id, permission=_PERMISSION[(q.readable, q.writable)],
        broker=d.Broker(name=q.broker_name, id=0, endpoints=_endpoints(q.host, q.port)),
        accept_message_types=[d.MessageType.Value(t) for t in q.accept_types])


def _timestamp_ms(ts: timestamp_pb2.Timestamp) -> int:
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def message_from_pb(pb: d.Message) -> Rmq5Message:
    sp = pb.system_properties
    return Rmq5Message(
        topic=pb.topic.name, body=pb.body, message_id=sp.message_id,
        message_type=d.MessageType.Name(sp.message_type) if sp.message_type in d.MessageType.values() else "",
        tag=sp.tag if sp.HasField("tag") else None, keys=tuple(sp.keys), user_properties=dict(pb.user_properties),
        born_timestamp_ms=_timestamp_ms(sp.born_timestamp), born_host=sp.born_host,
        delivery_timestamp_ms=_timestamp_ms(sp.delivery_timestamp) if sp.HasField("delivery_timestamp") else None,
        message_group=sp.message_group if sp.HasField("message_group") else None,
        body_encoding=d.Encoding.Name(sp.body_encoding) if sp.body_encoding in d.Encoding.values() else "")


def _ms_timestamp(ms: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def duration_ms(pb: duration_pb2.Duration) -> int:
    return pb.seconds * 1000 + pb.nanos // 1_000_000


def receive_request_from_pb(req: s.ReceiveMessageRequest, remaining_s: float | None) -> ReceiveRequest:
    """A ReceiveMessageRequest as plain values; `remaining_s` is the call's deadline left (gRPC's
    time_remaining()). The request's queue is not kept: a receive pops the whole broker."""
    fe = req.filter_expression
    return ReceiveRequest(
        group=req.group.name, topic=req.message_queue.topic.name, batch_size=req.batch_size,
        invisible_ms=duration_ms(req.invisible_duration) if req.HasField("invisible_duration") else None,
        auto_renew=req.auto_renew,
        long_polling_ms=duration_ms(req.long_polling_timeout) if req.HasField("long_polling_timeout") else None,
        attempt_id=req.attempt_id, filter_type=d.FilterType.Name(fe.type) if fe.type in (d.TAG, d.SQL) else "",
        filter_expression=fe.expression or "*",
        remaining_ms=None if remaining_s is None else int(remaining_s * 1000))


# properties that are the message's system properties (or broker bookkeeping), never a user's
_NOT_USER_PROPERTIES = RESERVED_PROPERTIES | {c.PROPERTY_POP_RETRY_GROUP}


def _message_type(props: dict[str, str]) -> int:
    """The proxy's inference: a transaction's, a delayed one's, a FIFO one's, else NORMAL."""
    if props.get("TRAN_MSG") == "true":
        return d.TRANSACTION
    if any(k in props for k in (c.PROPERTY_DELAY, "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS",
                                "__STARTDELIVERTIME")):
        return d.DELAY
    if c.RMQ5_PROPERTY_SHARDING_KEY in props:
        return d.FIFO
    return d.NORMAL


def popped_to_pb(m: PoppedMessage) -> d.Message:
    """One popped message as a 5.x client reads it: IDENTITY encoding and an MD5 digest (a missing
    encoding fails the client's whole receive), delivery_attempt >= 1 (a PushConsumer's nack
    computes its backoff from it), the receipt handle, the stored tag, keys and group."""
    props = m.properties
    sp = d.SystemProperties(
        keys=(m.keys or props.get(c.PROPERTY_KEYS, "")).split(),
        message_id=props.get(c.PROPERTY_UNIQ_KEY) or m.msg_id,
        body_digest=d.Digest(type=d.MD5, checksum=hashlib.md5(m.body).hexdigest().upper()),
        body_encoding=d.IDENTITY, message_type=_message_type(props),
        born_timestamp=_ms_timestamp(m.born_timestamp_ms), born_host=m.born_host[0],
        store_timestamp=_ms_timestamp(m.store_timestamp_ms), store_host=f"{m.store_host[0]}:{m.store_host[1]}",
        receipt_handle=m.receipt_handle, queue_id=m.queue_id, queue_offset=m.queue_offset,
        delivery_attempt=max(1, m.delivery_attempt))
    tag = m.tags if m.tags is not None else props.get(c.PROPERTY_TAGS)
    if tag:
        sp.tag = tag
    if group := props.get(c.RMQ5_PROPERTY_SHARDING_KEY):
        sp.message_group = group
    user = {k: v for k, v in props.items() if k not in _NOT_USER_PROPERTIES}
    return d.Message(topic=d.Resource(name=m.topic), user_properties=user, system_properties=sp, body=m.body)


def check_command(check: CheckRequest) -> s.TelemetryCommand:
    """A half message's check as the producer's checker reads it: the message under its real topic
    and queue, its message id (UNIQ_KEY), and the transaction id to end it with."""
    record = check.record
    props = record.properties
    sp = d.SystemProperties(
        keys=props.get(c.PROPERTY_KEYS, "").split(), message_id=props.get(c.PROPERTY_UNIQ_KEY) or record.msg_id,
        body_digest=d.Digest(type=d.MD5, checksum=hashlib.md5(record.body).hexdigest().upper()),
        body_encoding=d.IDENTITY, message_type=d.TRANSACTION,
        born_timestamp=_ms_timestamp(record.born_timestamp_ms), born_host=record.born_host[0],
        store_timestamp=_ms_timestamp(record.store_timestamp_ms),
        store_host=f"{record.store_host[0]}:{record.store_host[1]}",
        queue_id=int(props.get(c.PROPERTY_REAL_QUEUE_ID, "0") or 0))
    if tag := props.get(c.PROPERTY_TAGS):
        sp.tag = tag
    user = {k: v for k, v in props.items() if k not in _NOT_USER_PROPERTIES}
    message = d.Message(topic=d.Resource(name=check.real_topic), user_properties=user, system_properties=sp,
                        body=record.body)
    return s.TelemetryCommand(recover_orphaned_transaction_command=s.RecoverOrphanedTransactionCommand(
        message=message, transaction_id=check.transaction_id))


def enum_name(enum: EnumTypeWrapper, value: int) -> str:
    """A proto enum value's name; "" for a number this version does not know."""
    return enum.Name(value) if value in enum.values() else ""


def _duration(ms: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def merged_settings(client: d.Settings, server: ServerSettings) -> d.Settings:
    """The client's settings with the server's values over them (what the answer carries)."""
    merged = d.Settings()
    merged.CopyFrom(client)
    merged.metric.Clear()
    merged.metric.on = False
    if client.HasField("publishing") or client.client_type == d.PRODUCER:
        merged.publishing.max_body_size = server.max_body_bytes
        merged.publishing.validate_message_type = server.validate_message_type
        merged.backoff_policy.max_attempts = server.producer_max_attempts
        backoff = merged.backoff_policy.exponential_backoff
        backoff.initial.CopyFrom(_duration(server.producer_backoff_initial_ms))
        backoff.max.CopyFrom(_duration(server.producer_backoff_max_ms))
        backoff.multiplier = server.producer_backoff_multiplier
    elif client.HasField("subscription"):
        sub = merged.subscription
        sub.fifo = server.fifo
        sub.receive_batch_size = server.receive_batch_size
        sub.long_polling_timeout.CopyFrom(_duration(server.long_polling_timeout_ms))
        merged.backoff_policy.max_attempts = server.consumer_max_attempts
        merged.backoff_policy.customized_backoff.next.extend(_duration(ms) for ms in server.consumer_backoff_ms)
    return merged


def settings_identity(settings: d.Settings) -> tuple[str, str, tuple[str, ...]]:
    """(client type, group, topics) a settings command says the client is."""
    client_type = d.ClientType.Name(settings.client_type) if settings.client_type in d.ClientType.values() else ""
    if settings.HasField("publishing"):
        return client_type, "", tuple(t.name for t in settings.publishing.topics)
    if settings.HasField("subscription"):
        sub = settings.subscription
        return client_type, sub.group.name, tuple(e.topic.name for e in sub.subscriptions)
    return client_type, "", ()


def client_type_name(value: int) -> str:
    return d.ClientType.Name(value) if value in d.ClientType.values() else ""
