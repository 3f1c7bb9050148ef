"""POP consumption through an in-process broker over its Broker gRPC API: the controller's
wiring (request table, arrival notices shared with held pulls, the revive service, state loaded
at start) in a few seconds."""

from __future__ import annotations

import threading
import time

from support.rpc import broker_stub, create_topic

from proto import broker_pb2, common_pb2

G, TOPIC = "pop-int-g", "PopInt"


def _send(stub, *bodies: bytes, queue_id: int = 0) -> None:
    r = stub.SendMessage(broker_pb2.SendMessageRequest(topic=TOPIC, queue_id=queue_id, messages=[
        broker_pb2.OutgoingMessage(body=b, properties={"TAGS": "a"}) for b in bodies]), timeout=10)
    assert r.code == common_pb2.SUCCESS, r.remark


def _pop(stub, **fields) -> broker_pb2.PopMessageResponse:
    fields.setdefault("max_nums", 32)
    fields.setdefault("invisible_ms", 60_000)
    return stub.PopMessage(broker_pb2.PopMessageRequest(group=G, topic=TOPIC, **fields),
                           timeout=fields.get("poll_timeout_ms", 0) / 1000 + 10)


def _ack(stub, handle: str) -> str:
    return stub.AckPopMessage(broker_pb2.AckPopMessageRequest(group=G, topic=TOPIC, receipt_handle=handle),
                              timeout=10).pop_code


def test_pop_ack_change_and_dlq_over_grpc_and_the_state_across_a_restart(cluster):
    create_topic(cluster, TOPIC, 2)
    channel, stub = broker_stub(cluster.broker_addr)
    with channel:
        _send(stub, b"a", b"b", b"c")
        popped = _pop(stub, tag_expression="a")
        assert popped.pop_code == "OK" and sorted(m.body for m in popped.messages) == [b"a", b"b", b"c"]
        first = popped.messages[0]
        assert first.properties["TAGS"] == "a" and first.delivery_attempt == 1 and first.born_host
        assert _ack(stub, first.receipt_handle) == "OK"
        assert _ack(stub, "garbage") == "ILLEGAL_ARGUMENT"
        changed = stub.ChangePopInvisibleTime(broker_pb2.ChangePopInvisibleTimeRequest(
            group=G, topic=TOPIC, receipt_handle=popped.messages[1].receipt_handle, invisible_ms=120_000), timeout=10)
        assert changed.pop_code == "OK" and changed.receipt_handle
        assert _ack(stub, popped.messages[1].receipt_handle) == "INVALID_RECEIPT_HANDLE"
        dead = stub.ForwardPopToDeadLetter(broker_pb2.AckPopMessageRequest(
            group=G, topic=TOPIC, receipt_handle=popped.messages[2].receipt_handle), timeout=10)
        assert dead.pop_code == "OK"
        assert _pop(stub).pop_code == "NOT_FOUND"

        # a held pop is woken by a send (the store's arrivals reach held pulls and pops alike)
        answers = []
        waiter = threading.Thread(target=lambda: answers.append(_pop(stub, poll_timeout_ms=10_000)))
        waiter.start()
        time.sleep(0.3)
        started = time.monotonic()
        _send(stub, b"d", queue_id=1)
        waiter.join(15)
        assert [m.body for m in answers[0].messages] == [b"d"] and time.monotonic() - started < 5
        late = answers[0].messages[0]

    status = cluster.call(cluster.broker.status).details["pop"]
    assert status["in_flight"] == 2  # the changed one and d

    cluster.stop_broker()
    cluster.start_broker()
    channel, stub = broker_stub(cluster.broker_addr)
    with channel:
        assert _pop(stub).pop_code == "NOT_FOUND"  # still in flight after the restart
        assert _ack(stub, late.receipt_handle) == "OK"
        assert _ack(stub, changed.receipt_handle) == "OK"
