"""The shape of a send request and the offsets read back from either answer form."""

import pytest

from nodes.client.rpc.send_wire import (
    Outgoing,
    answered_offsets,
    build_request,
    may_overflow_properties,
    request_message_count,
)
from nodes.common.errors import InvalidMessageError
from nodes.store import message_batch
from nodes.store.record import USER_PROPERTIES_BYTES_MAX
from proto import broker_pb2

OUTS = [Outgoing(b"a", 1, {"UNIQ_KEY": "A"}, 111), Outgoing(bytearray(b"bb"), 0, {"UNIQ_KEY": "B", "TAGS": "t"}, 222)]


def test_one_message_goes_as_an_outgoing_message():
    req = build_request(OUTS[:1], topic="T", queue_id=3)
    assert not req.batch_body and (req.topic, req.queue_id) == ("T", 3)
    (out,) = req.messages
    assert (out.body, out.flag, dict(out.properties), out.born_timestamp_ms) == (b"a", 1, {"UNIQ_KEY": "A"}, 111)


def test_several_go_as_one_batch_body_born_with_the_first():
    req = build_request(OUTS, topic="T", queue_id=3)
    assert not req.messages and req.born_timestamp_ms == 111
    assert message_batch.decode(req.batch_body) == [(b"a", 1, {"UNIQ_KEY": "A"}),
                                                   (b"bb", 0, {"UNIQ_KEY": "B", "TAGS": "t"})]


def test_both_answer_forms_give_the_same_offsets():
    entries = broker_pb2.SendMessageResponse(entries=[
        broker_pb2.SendEntry(offset_msg_id="7F00000100002A9F00000000000004D2", queue_offset=9, phys_offset=1234),
        broker_pb2.SendEntry(offset_msg_id="7F00000100002A9F00000000000004E0", queue_offset=10, phys_offset=1248)])
    compact = broker_pb2.SendMessageResponse(first_queue_offset=9, phys_offsets=[1234, 1248],
                                             offset_msg_id_prefix="7F00000100002A9F")
    assert answered_offsets(entries) == answered_offsets(compact) == (
        (9, 10), ["7F00000100002A9F00000000000004D2", "7F00000100002A9F00000000000004E0"])


def test_message_count_of_either_request_form():
    assert request_message_count(build_request(OUTS[:1])) == 1
    assert request_message_count(build_request(OUTS * 3)) == 6
    assert request_message_count(broker_pb2.SendMessageRequest()) == 0


def test_a_batch_with_properties_too_large_for_their_length_is_invalid():
    huge = Outgoing(b"x", 0, {"k": "v" * 40_000}, 1)
    with pytest.raises(InvalidMessageError, match="cannot be sent"):
        build_request([OUTS[0], huge])
    build_request([huge])  # alone it goes as an OutgoingMessage; the broker judges it


def test_properties_that_might_not_fit_a_record_are_told_cheaply():
    assert not may_overflow_properties({"UNIQ_KEY": "0" * 32, "TAGS": "a"})
    assert not may_overflow_properties({"k": "v" * 8000})
    assert may_overflow_properties({"k": "v" * (USER_PROPERTIES_BYTES_MAX // 4)})
