"""QUERY_MESSAGE (12) and VIEW_MESSAGE_BY_ID (33) as raw remoting frames to a real broker's
listener: messages sent with mqlab's producer come back as the records a RocketMQ client decodes."""

from __future__ import annotations

from support.namesrv_remoting import connect, request

from nodes.client import Message, Producer
from nodes.common.types import SendStatus
from nodes.remoting.command import RequestCode
from nodes.store.record import iter_records, parse_offset_msg_id

TOPIC = "LookupT"


def test_query_by_key_and_unique_key_then_view_by_offset(cluster):
    with Producer(cluster.namesrv_addr) as producer:
        sent = [producer.send(Message(TOPIC, f"body-{i}".encode(), tags="T", keys=f"order-{i} shared"))
                for i in range(4)]
    assert all(r.status is SendStatus.SEND_OK for r in sent)
    sock = connect(cluster.call(lambda: cluster.broker.remoting_addr))
    try:
        by_key = request(sock, RequestCode.QUERY_MESSAGE, {
            "topic": TOPIC, "key": "order-2", "maxNum": "32", "beginTimestamp": "0", "endTimestamp": str(2**62)})
        assert by_key.code == 0, by_key.remark
        [record] = iter_records(by_key.body)
        assert (record.body, record.properties["UNIQ_KEY"]) == (b"body-2", sent[2].msg_id)
        assert int(by_key.ext["indexLastUpdatePhyoffset"]) >= record.phys_offset

        shared = request(sock, RequestCode.QUERY_MESSAGE, {
            "topic": TOPIC, "key": "shared", "maxNum": "3", "beginTimestamp": "0", "endTimestamp": str(2**62)})
        assert len(list(iter_records(shared.body))) == 3  # maxNum caps the answer

        by_uniq = request(sock, RequestCode.QUERY_MESSAGE, {
            "topic": TOPIC, "key": sent[1].msg_id, "maxNum": "1", "beginTimestamp": "0",
            "endTimestamp": str(2**62), "_UNIQUE_KEY_QUERY": "true"})
        assert [r.body for r in iter_records(by_uniq.body)] == [b"body-1"]

        _host, _port, phys_offset = parse_offset_msg_id(sent[3].offset_msg_id)
        viewed = request(sock, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(phys_offset)})
        assert viewed.code == 0, viewed.remark
        [record] = iter_records(viewed.body)
        assert (record.body, record.offset_msg_id) == (b"body-3", sent[3].offset_msg_id)

        missing = request(sock, RequestCode.QUERY_MESSAGE, {
            "topic": TOPIC, "key": "nope", "maxNum": "32", "beginTimestamp": "0", "endTimestamp": str(2**62)})
        assert missing.code == 22 and "nope" in missing.remark  # QUERY_NOT_FOUND
        nowhere = request(sock, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(phys_offset + 3)})
        assert nowhere.code == 1 and "can not find message by the offset" in nowhere.remark
    finally:
        sock.close()
