"""RocketMQ 5's wire values: who called, the settings a Telemetry answer carries, and a sent
message as the handlers see it."""

from __future__ import annotations

from google.protobuf import timestamp_pb2

from nodes.broker.rmq5.settings import ServerSettings
from nodes.broker.transport import rmq5_convert as conv
from proto import rmq5_definition_pb2 as d


def test_a_call_needs_a_client_id_and_reads_the_other_headers() -> None:
    assert conv.call_context([("x-mq-language", "PYTHON")], "ipv4:127.0.0.1:1") is None
    assert conv.call_context([("x-mq-client-id", "  ")], "ipv4:127.0.0.1:1") is None
    ctx = conv.call_context([("x-mq-client-id", "h@1@0@x"), ("x-mq-language", "PYTHON"),
                             ("x-mq-client-version", "5.1.2"), ("authorization", "MQv2-HMAC-SHA1 Credential=, ..."),
                             ("trace-bin", b"\x00")], "ipv4:127.0.0.1:5000")
    assert ctx is not None and (ctx.client_id, ctx.language, ctx.version) == ("h@1@0@x", "PYTHON", "5.1.2")
    assert conv.peer_host(ctx.peer) == "127.0.0.1" and conv.peer_host("unix:/tmp/s") == ""


def test_a_producer_s_settings_come_back_with_the_body_limit_retries_and_metrics_off() -> None:
    client = d.Settings(client_type=d.PRODUCER, request_timeout={"seconds": 3},
                        publishing=d.Publishing(topics=[d.Resource(name="T")], max_body_size=128 << 20,
                                                validate_message_type=True),
                        metric=d.Metric(on=True, endpoints=d.Endpoints(scheme=d.IPv4)))
    merged = conv.merged_settings(client, ServerSettings(max_body_bytes=4 << 20))
    assert merged.publishing.max_body_size == 4 << 20 and merged.publishing.validate_message_type
    assert [t.name for t in merged.publishing.topics] == ["T"] and merged.request_timeout.seconds == 3
    policy = merged.backoff_policy
    assert policy.max_attempts == 3 and policy.WhichOneof("strategy") == "exponential_backoff"
    assert (policy.exponential_backoff.initial.nanos, policy.exponential_backoff.max.seconds) == (10_000_000, 1)
    assert not merged.metric.on and not merged.metric.HasField("endpoints")
    assert conv.settings_identity(client) == ("PRODUCER", "", ("T",))


def test_a_push_consumer_s_settings_come_back_with_long_polling_batch_fifo_and_backoff() -> None:
    client = d.Settings(client_type=d.PUSH_CONSUMER, subscription=d.Subscription(
        group=d.Resource(name="G"), subscriptions=[d.SubscriptionEntry(topic=d.Resource(name="T"))]))
    merged = conv.merged_settings(client, ServerSettings(max_body_bytes=4 << 20))
    sub = merged.subscription
    assert (sub.group.name, sub.long_polling_timeout.seconds, sub.receive_batch_size) == ("G", 20, 32)
    assert sub.HasField("fifo") and not sub.fifo
    policy = merged.backoff_policy
    assert policy.max_attempts == 17 and [n.seconds for n in policy.customized_backoff.next][:4] == [1, 5, 10, 30]
    assert conv.settings_identity(client) == ("PUSH_CONSUMER", "G", ("T",))


def test_a_sent_message_keeps_its_optional_fields_absent_when_unset() -> None:
    born = timestamp_pb2.Timestamp(seconds=1_700_000_000)
    plain = conv.message_from_pb(d.Message(topic=d.Resource(name="T"), body=b"b", system_properties=d.SystemProperties(
        message_id="ID", body_encoding=d.IDENTITY, message_type=d.NORMAL, born_timestamp=born, born_host="10.0.0.1")))
    assert (plain.tag, plain.message_group, plain.delivery_timestamp_ms) == (None, None, None)
    assert (plain.message_type, plain.body_encoding, plain.born_timestamp_ms) == ("NORMAL", "IDENTITY", 1_700_000_000_000)
    delayed = conv.message_from_pb(d.Message(topic=d.Resource(name="T"), body=b"b", system_properties=d.SystemProperties(
        message_id="ID", message_type=d.DELAY, tag="", delivery_timestamp=timestamp_pb2.Timestamp(seconds=5, nanos=7_000_000))))
    assert (delayed.tag, delayed.delivery_timestamp_ms, delayed.message_type) == ("", 5_007, "DELAY")


def test_a_check_carries_the_half_message_under_its_real_topic_and_the_transaction_id() -> None:
    from nodes.broker.transaction import CheckRequest
    from nodes.store.record import Record

    props = {"UNIQ_KEY": "0102AB", "KEYS": "k1 k2", "TAGS": "TagA", "REAL_TOPIC": "T", "REAL_QID": "3",
             "TRAN_MSG": "true", "color": "blue"}
    record = Record(total_size=0, body_crc=0, queue_id=0, flag=0, queue_offset=7, phys_offset=99, sys_flag=0,
                    born_timestamp_ms=1_000, born_host=("10.0.0.1", 5), store_timestamp_ms=2_000,
                    store_host=("127.0.0.1", 10911), reconsume_times=0, prepared_transaction_offset=0, body=b"pay",
                    topic="RMQ_SYS_TRANS_HALF_TOPIC", properties=props)
    command = conv.check_command(CheckRequest(record, "T", "", "7F00000100002AA00000000000000063", 1))
    assert command.WhichOneof("command") == "recover_orphaned_transaction_command"
    check = command.recover_orphaned_transaction_command
    assert check.transaction_id == "7F00000100002AA00000000000000063"
    m = check.message
    assert (m.topic.name, m.body, dict(m.user_properties)) == ("T", b"pay", {"color": "blue"})
    sp = m.system_properties
    assert (sp.message_id, list(sp.keys), sp.tag, sp.queue_id) == ("0102AB", ["k1", "k2"], "TagA", 3)
    assert sp.message_type == d.TRANSACTION and sp.body_encoding == d.IDENTITY and sp.body_digest.checksum
