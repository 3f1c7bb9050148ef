"""protobuf (apache.rocketmq.v2) <-> the RocketMQ 5 handlers' plain values, in one place.

Also the settings merge: a Telemetry settings answer is the client's own settings with the
server's values written over them (a producer's body limit and retry policy, a consumer's long
polling, batch, FIFO flag and redelivery backoff), and `metric.on` false so no client starts
exporting metrics to an endpoint that is not there.
"""

from __future__ import annotations

from google.protobuf import duration_pb2, timestamp_pb2

from nodes.broker.rmq5.clients import CallContext
from nodes.broker.rmq5.codes import Status
from nodes.broker.rmq5.route import RouteQueue
from nodes.broker.rmq5.send import Rmq5Message
from nodes.broker.rmq5.settings import ServerSettings
from proto import rmq5_definition_pb2 as d

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
