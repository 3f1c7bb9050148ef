"""Producer: validation, UNIQ_KEY, queue choice, retries and statuses, no sockets.

The producer runs for real (its loop thread, run/submit), over a `WiredInstance` whose name
server and broker are functions.
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from nodes.client import Message, Producer, SendStatus
from nodes.client.msg_id import UniqIdGenerator
from nodes.client.producer import validate_batch
from nodes.client.queue_selector import QueueSelector, select_by_hash
from nodes.client.rpc.api import send_result_from_response
from nodes.common import constants as c
from nodes.common import errors
from nodes.common.errors import ClientStateError, InvalidArgumentError, OutcomeUnknownError
from nodes.common.types import MessageQueue
from proto import broker_pb2, common_pb2


@pytest.fixture
def make_producer(fakes, wired_instance_factory, no_network):
    made: list[Producer] = []

    def make(handler, routes=None, start=True, warm=False, **kw):
        """`warm`: the route of T is cached before the test's sends (no request made), so their
        first attempts are made in the caller's thread; otherwise the loop fetches it first."""
        kw.setdefault("id_generator", UniqIdGenerator(ip="10.0.0.1", pid=1, salt=1))
        kw.setdefault("selector", None)
        producer = Producer("127.0.0.1:9876", "pg", **kw)
        inst = wired_instance_factory({"T": fakes.two_broker_route()} if routes is None else routes, handler)
        producer._instance = inst
        made.append(producer)
        if start:
            producer.start()
        if warm:
            inst.run(inst.routes.publish_info("T"), 5)
        return producer, inst

    yield make
    for producer in made:
        producer.shutdown()


def scripted(fakes, *codes):
    """A broker answering SendMessage with `codes` in turn (exceptions are raised), then SUCCESS."""
    script = list(codes)

    def handler(addr, method, request):
        assert method == "SendMessage"
        step = script.pop(0) if script else common_pb2.SUCCESS
        if isinstance(step, BaseException):
            return step
        return fakes.send_ok(request, code=step)

    return handler


def sent(inst):
    return [(addr, req) for addr, method, req in inst.calls if method == "SendMessage"]


@pytest.fixture(params=[False, True], ids=["first-attempt-on-the-loop", "first-attempt-in-the-callers-thread"])
def warm(request):
    """Each send test twice: the topic's first send (its route fetched on the loop, every attempt
    made there), and a send with the route cached (its first attempt in the caller's thread, the
    rest on the loop)."""
    return request.param


BROKER_OF = {"a0:1": "broker-a", "b0:1": "broker-b"}


# --- a plain send -------------------------------------------------------------------------------
def test_send_ok_result_and_request(make_producer, fakes):
    producer, inst = make_producer(scripted(fakes))
    msg = Message("T", b"hello", tags="TagA", keys=["k1", "k2"], properties={"p": "v"})
    result = producer.send(msg)
    ((addr, req),) = sent(inst)
    uid = msg.properties[c.PROPERTY_UNIQ_KEY]
    assert result.status is SendStatus.SEND_OK
    assert result.msg_id == uid and result.msg_ids == (uid,)
    assert result.message_queue == MessageQueue("T", BROKER_OF[addr], req.queue_id)
    assert result.queue_offset == 0 and result.offset_msg_id == f"{0:032X}"
    assert (req.producer_group, req.topic, req.default_topic_queue_nums, req.born_host) == ("pg", "T", 4, "10.0.0.1:0")
    (out,) = req.messages
    assert out.body == b"hello" and out.born_timestamp_ms > 0
    assert dict(out.properties) == {"p": "v", "TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": uid}


def test_uniq_key_is_kept_when_the_same_message_is_sent_again(make_producer, fakes):
    producer, _ = make_producer(scripted(fakes))
    msg = Message("T", b"x")
    first, again = producer.send(msg), producer.send(msg)
    other = producer.send(Message("T", b"x"))
    assert first.msg_id == again.msg_id != other.msg_id


def test_messages_built_from_one_properties_dict_get_their_own_ids(make_producer, fakes):
    producer, _ = make_producer(scripted(fakes))
    shared = {"p": "v"}
    first = producer.send(Message("T", b"a", properties=shared))
    second = producer.send(Message("T", b"b", properties=shared))
    assert first.msg_id != second.msg_id
    assert shared == {"p": "v"}  # the caller's dict is left as it was


@pytest.mark.parametrize(("code", "status"), [
    (common_pb2.FLUSH_DISK_TIMEOUT, SendStatus.FLUSH_DISK_TIMEOUT),
    (common_pb2.FLUSH_SLAVE_TIMEOUT, SendStatus.FLUSH_SLAVE_TIMEOUT),
    (common_pb2.SLAVE_NOT_AVAILABLE, SendStatus.SLAVE_NOT_AVAILABLE),
])
def test_stored_but_not_ok_codes_are_returned_not_retried(make_producer, fakes, warm, code, status):
    producer, inst = make_producer(scripted(fakes, code), warm=warm)
    assert producer.send(Message("T", b"x")).status is status
    assert len(sent(inst)) == 1


# --- retries ------------------------------------------------------------------------------------
@pytest.mark.parametrize("code", [common_pb2.SYSTEM_ERROR, common_pb2.SERVICE_NOT_AVAILABLE,
                                  common_pb2.TOPIC_NOT_EXIST, common_pb2.NO_PERMISSION])
def test_retriable_codes_are_retried_on_another_broker(make_producer, fakes, warm, code):
    producer, inst = make_producer(scripted(fakes, code, code), warm=warm)
    assert producer.send(Message("T", b"x")).status is SendStatus.SEND_OK
    brokers = [BROKER_OF[addr] for addr, _ in sent(inst)]
    assert len(brokers) == 3
    assert brokers[0] != brokers[1] != brokers[2]


def test_retries_give_up_after_one_plus_retry_times_with_the_last_error(make_producer, fakes, warm):
    producer, inst = make_producer(scripted(fakes, *[common_pb2.SYSTEM_ERROR] * 2, common_pb2.SERVICE_NOT_AVAILABLE), warm=warm)
    with pytest.raises(errors.ServiceNotAvailableError):
        producer.send(Message("T", b"x"))
    assert len(sent(inst)) == 3


def test_retry_times_zero_means_one_attempt(make_producer, fakes, warm):
    producer, inst = make_producer(scripted(fakes, common_pb2.SYSTEM_ERROR), retry_times=0, warm=warm)
    with pytest.raises(errors.SystemError_):
        producer.send(Message("T", b"x"))
    assert len(sent(inst)) == 1


@pytest.mark.parametrize(("code", "exc"), [(common_pb2.MESSAGE_ILLEGAL, errors.MessageIllegalError),
                                           (common_pb2.SYSTEM_BUSY, errors.RemoteError)])
def test_other_codes_raise_at_once(make_producer, fakes, warm, code, exc):
    producer, inst = make_producer(scripted(fakes, code), warm=warm)
    with pytest.raises(exc):
        producer.send(Message("T", b"x"))
    assert len(sent(inst)) == 1


def test_transport_errors_are_retried_and_refresh_the_route(make_producer, fakes, warm):
    producer, inst = make_producer(scripted(fakes, errors.TransportError("connection refused")), warm=warm)
    assert producer.send(Message("T", b"x")).status is SendStatus.SEND_OK
    assert len(sent(inst)) == 2
    assert inst.fetches == ["T", "T"]  # the first lookup, then a refresh after the failure


def test_a_timed_out_attempt_makes_a_later_failure_indeterminate(make_producer, fakes, warm):
    producer, inst = make_producer(scripted(fakes, errors.RequestTimeoutError("deadline exceeded"),
                                            common_pb2.SERVICE_NOT_AVAILABLE, common_pb2.SERVICE_NOT_AVAILABLE))
    with pytest.raises(errors.RequestTimeoutError) as info:
        producer.send(Message("T", b"x"))
    assert info.value.indeterminate
    assert isinstance(info.value.__cause__, errors.ServiceNotAvailableError)
    assert len(sent(inst)) == 3


def test_a_possibly_stored_attempt_makes_the_final_error_indeterminate(make_producer, fakes, warm):
    producer, inst = make_producer(scripted(fakes, OutcomeUnknownError("connection reset"),
                                            errors.TransportError("refused"), errors.TransportError("refused")))
    with pytest.raises(OutcomeUnknownError) as info:
        producer.send(Message("T", b"x"))
    assert info.value.indeterminate and isinstance(info.value, errors.RequestTimeoutError)
    assert len(sent(inst)) == 3


def test_a_refusal_after_a_possibly_stored_attempt_is_indeterminate(make_producer, fakes, warm):
    producer, inst = make_producer(scripted(fakes, OutcomeUnknownError("reset"), common_pb2.MESSAGE_ILLEGAL), warm=warm)
    with pytest.raises(OutcomeUnknownError) as info:
        producer.send(Message("T", b"x"))
    assert isinstance(info.value.__cause__, errors.MessageIllegalError)
    assert len(sent(inst)) == 2


def test_determinate_failures_stay_determinate(make_producer, fakes, warm):
    producer, _ = make_producer(scripted(fakes, *[errors.TransportError("refused")] * 3), warm=warm)
    with pytest.raises(errors.TransportError) as info:
        producer.send(Message("T", b"x"))
    assert not info.value.indeterminate


def test_no_retry_once_the_send_timeout_has_passed(make_producer, fakes, warm):
    def slow_failure(addr, method, request):
        time.sleep(0.25)
        return fakes.send_ok(request, code=common_pb2.SYSTEM_ERROR)

    producer, inst = make_producer(slow_failure, send_timeout_ms=200, warm=warm)
    with pytest.raises(errors.SystemError_):
        producer.send(Message("T", b"x"))
    assert len(sent(inst)) == 1


def test_a_topics_first_send_goes_through_the_loop_and_later_sends_answer_in_the_callers_thread(make_producer, fakes):
    threads: list[threading.Thread] = []

    def handler(addr, method, request):
        threads.append(threading.current_thread())
        return fakes.send_ok(request)

    producer, _ = make_producer(handler)
    producer.send(Message("T", b"first"))  # the route is fetched on the loop, and the send made there
    producer.send(Message("T", b"second"))
    producer.send_batch([Message("T", b"third"), Message("T", b"fourth")])
    me = threading.current_thread()
    assert threads[0] is not me and threads[1:] == [me, me]


def test_the_loop_goes_on_from_a_failed_attempt_in_the_callers_thread(make_producer, fakes):
    """The attempts the caller's thread made count: 1 + retry_times in all, each retry on the
    other broker, and a possibly stored first attempt makes the send's error indeterminate."""
    threads: list[threading.Thread] = []
    handler = scripted(fakes, OutcomeUnknownError("reset"), common_pb2.SYSTEM_ERROR, common_pb2.SYSTEM_ERROR)

    def recording(addr, method, request):
        threads.append(threading.current_thread())
        return handler(addr, method, request)

    producer, inst = make_producer(recording, warm=True)
    with pytest.raises(OutcomeUnknownError) as info:
        producer.send(Message("T", b"x"))
    assert isinstance(info.value.__cause__, errors.SystemError_)
    brokers = [BROKER_OF[addr] for addr, _ in sent(inst)]
    assert len(brokers) == 3 and brokers[0] != brokers[1] != brokers[2]
    me = threading.current_thread()
    assert threads[0] is me and me not in threads[1:]


# --- routes -------------------------------------------------------------------------------------
def test_unknown_topic_uses_the_tbw102_route(make_producer, fakes):
    tbw = fakes.make_route(("broker-a", 8, 8, 7, {0: "a0:1"}))
    producer, inst = make_producer(scripted(fakes), routes={c.AUTO_CREATE_TOPIC_KEY: tbw})
    result = producer.send(Message("NEW", b"x"))
    assert result.message_queue.topic == "NEW" and result.message_queue.queue_id < c.PRODUCER_DEFAULT_TOPIC_QUEUE_NUMS
    assert inst.fetches == ["NEW", c.AUTO_CREATE_TOPIC_KEY]


def test_no_route_at_all_raises_and_sends_nothing(make_producer, fakes):
    producer, inst = make_producer(scripted(fakes), routes={})
    with pytest.raises(errors.RouteNotFoundError):
        producer.send(Message("NEW", b"x"))
    assert sent(inst) == []


# --- orderly ------------------------------------------------------------------------------------
def test_send_orderly_picks_the_hash_queue_of_the_publish_list(make_producer, fakes):
    producer, _ = make_producer(scripted(fakes))
    publish = [MessageQueue("T", b, i) for b in ("broker-a", "broker-b") for i in range(2)]
    for key in ("hello", "order-17", 42):
        result = producer.send_orderly(Message("T", b"x"), key)
        assert result.message_queue == select_by_hash(publish, key)


def test_send_orderly_makes_one_attempt_only(make_producer, fakes):
    producer, inst = make_producer(scripted(fakes, common_pb2.SYSTEM_ERROR))
    with pytest.raises(errors.SystemError_):
        producer.send_orderly(Message("T", b"x"), "k")
    assert len(sent(inst)) == 1


# --- batch --------------------------------------------------------------------------------------
def test_send_batch_is_one_request_with_ids_and_offsets_per_message(make_producer, fakes):
    producer, inst = make_producer(lambda addr, m, req: fakes.send_ok(req, first_offset=10))
    msgs = [Message("T", f"m{i}".encode()) for i in range(3)]
    result = producer.send_batch(msgs)
    ((_, req),) = sent(inst)
    uids = tuple(m.properties[c.PROPERTY_UNIQ_KEY] for m in msgs)
    assert [m.body for m in fakes.sent_messages(req)] == [b"m0", b"m1", b"m2"]
    assert result.msg_ids == uids and result.msg_id == ",".join(uids)
    assert result.queue_offsets == (10, 11, 12) and result.queue_offset == 10
    assert len(set(uids)) == 3


def test_send_batch_keeps_the_ids_messages_already_carry_and_stamps_the_rest(make_producer, fakes):
    producer, inst = make_producer(lambda addr, m, req: fakes.send_ok(req, first_offset=0))
    msgs = [Message("T", b"a"), Message("T", b"b", properties={c.PROPERTY_UNIQ_KEY: "KEPT"}), Message("T", b"c")]
    result = producer.send_batch(msgs)
    ((_, req),) = sent(inst)
    uids = [m.properties[c.PROPERTY_UNIQ_KEY] for m in msgs]
    assert uids[1] == "KEPT" and uids[0] < uids[2]
    assert [m.properties[c.PROPERTY_UNIQ_KEY] for m in fakes.sent_messages(req)] == uids
    assert result.msg_ids == tuple(uids)


@pytest.mark.parametrize(("msgs", "match"), [
    ([], "empty"),
    ([Message("T", b"a"), Message("U", b"b")], "one topic"),
    ([Message("%RETRY%g", b"a")], "retry"),
    ([Message("T", b"a", properties={"DELAY": "3"})], "delayed"),
    ([Message("T", b"a"), Message("T", b"")], "empty"),
    ([Message("T", b"x" * 600), Message("T", b"x" * 600)], "split the batch"),
    (Message("T", b"a"), "list"),
])
def test_send_batch_validation_sends_nothing(make_producer, fakes, msgs, match):
    producer, inst = make_producer(scripted(fakes), body_bytes_max=1000)
    with pytest.raises(errors.InvalidMessageError, match=match):
        producer.send_batch(msgs)
    assert inst.calls == []


# --- validation -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("msg", "match"), [
    (Message("T", b""), "empty"),
    (Message("", b"x"), "empty"),
    (Message("bad topic!", b"x"), "characters"),
    (Message("x" * 128, b"x"), "longer"),
    (Message(c.AUTO_CREATE_TOPIC_KEY, b"x"), "reserved"),
    (Message("T", "text"), "bytes"),  # type: ignore[arg-type]
    (Message("T", b"x" * 1001), "limit"),
    ("not a message", "Message"),
])
def test_invalid_messages_raise_and_send_nothing(make_producer, fakes, msg, match):
    producer, inst = make_producer(scripted(fakes), body_bytes_max=1000)
    for send in (producer.send, producer.send_async, lambda m: producer.send_orderly(m, "k")):
        with pytest.raises(errors.InvalidMessageError, match=match):
            send(msg)
    assert inst.calls == []


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"retry_times": -1}, "retry_times"),
    ({"send_timeout_ms": 0}, "send_timeout_ms"),
    ({"async_window": 0}, "async_window"),
    ({"group": ""}, "empty"),
    ({"group": "bad group"}, "characters"),
    ({"namesrv_addr": "nohost"}, "host:port"),
    ({"namesrv_addr": ""}, "names no address"),
])
def test_constructor_rejects_bad_arguments(kwargs, match):
    args = {"namesrv_addr": "127.0.0.1:9876", **kwargs}
    with pytest.raises(InvalidArgumentError, match=match):
        Producer(**args)


def test_send_before_start_and_after_shutdown_is_refused(make_producer, fakes):
    producer, _ = make_producer(scripted(fakes), start=False, id_generator=None)
    with pytest.raises(ClientStateError, match="start"):
        producer.send(Message("T", b"x"))
    producer.start()
    producer.send(Message("T", b"x"))
    producer.shutdown()
    with pytest.raises(ClientStateError):
        producer.send(Message("T", b"x"))


def test_context_manager_starts_and_shuts_down(fakes, wired_instance_factory, no_network):
    producer = Producer("127.0.0.1:9876")
    producer._instance = inst = wired_instance_factory({"T": fakes.two_broker_route()}, scripted(fakes))
    with producer as p:
        assert p.send(Message("T", b"x")).status is SendStatus.SEND_OK
    assert not inst.running
    assert not any(t.name.startswith("mqlab-") and t.is_alive() for t in threading.enumerate())


# --- async --------------------------------------------------------------------------------------
def test_send_async_returns_futures_of_results(make_producer, fakes):
    producer, inst = make_producer(scripted(fakes))
    msgs = [Message("T", f"m{i}".encode()) for i in range(20)]
    futures = [producer.send_async(m) for m in msgs]
    results = [f.result(5) for f in futures]
    assert all(r.status is SendStatus.SEND_OK for r in results)
    # every message went exactly once, possibly coalesced with others into one request
    bodies = [m.body for _, req in sent(inst) for m in fakes.sent_messages(req)]
    assert sorted(bodies) == sorted(m.body for m in msgs)
    # each future carries its own message's id and queue offset (the fake numbers entries from 0)
    position = {m.properties[c.PROPERTY_UNIQ_KEY]: i for _, req in sent(inst)
                for i, m in enumerate(fakes.sent_messages(req))}
    for msg, result in zip(msgs, results, strict=True):
        assert result.msg_id == msg.properties[c.PROPERTY_UNIQ_KEY]
        assert result.queue_offset == position[result.msg_id]
        assert result.offset_msg_id == f"{position[result.msg_id] * 100:032X}"


def test_send_async_retries_transport_failures_but_not_broker_refusals(make_producer, fakes):
    producer, inst = make_producer(scripted(fakes, errors.TransportError("down"), common_pb2.SUCCESS,
                                            common_pb2.SYSTEM_ERROR))
    assert producer.send_async(Message("T", b"x")).result(5).status is SendStatus.SEND_OK
    with pytest.raises(errors.SystemError_):
        producer.send_async(Message("T", b"y")).result(5)
    assert len(sent(inst)) == 3


def test_send_async_blocks_the_caller_when_the_window_is_full(make_producer, fakes):
    gate = threading.Event()

    def gated(addr, method, request):
        gate.wait(5)  # holds the client loop: the first send stays in flight
        return fakes.send_ok(request)

    producer, _ = make_producer(gated, async_window=1)
    first = producer.send_async(Message("T", b"1"))
    second: list = []
    caller = threading.Thread(target=lambda: second.append(producer.send_async(Message("T", b"2"))))
    caller.start()
    time.sleep(0.2)
    assert caller.is_alive() and not second  # blocked on the window
    gate.set()
    caller.join(5)
    assert first.result(5).status is SendStatus.SEND_OK
    assert second[0].result(5).status is SendStatus.SEND_OK


# --- response mapping (pure) ----------------------------------------------------------------------
def test_send_result_refuses_entry_count_mismatch():
    resp = broker_pb2.SendMessageResponse(code=common_pb2.SUCCESS, queue_id=1, entries=[])
    with pytest.raises(errors.InvariantViolation):
        send_result_from_response(resp, "T", "broker-a", ["ID"])


def test_send_result_error_code_raises_for_code():
    resp = broker_pb2.SendMessageResponse(code=common_pb2.NO_PERMISSION, remark="read only")
    with pytest.raises(errors.NoPermissionError, match="read only"):
        send_result_from_response(resp, "T", "broker-a", ["ID"])


def test_validate_batch_returns_the_topic():
    assert validate_batch([Message("T", b"a"), Message("T", b"b")]) == "T"


def test_selector_seed_is_random_by_default():
    starts = {Producer("127.0.0.1:9876")._selector._index for _ in range(5)}
    assert len(starts) > 1
    random.seed()  # keep other tests unaffected by any seeding here


# --- latency fault tolerance ------------------------------------------------------------------
def test_with_latency_fault_on_a_failed_broker_is_avoided_by_later_sends(make_producer, fakes):
    producer, inst = make_producer(scripted(fakes, errors.TransportError("connection refused")),
                                   latency_fault_enable=True, selector=QueueSelector(random.Random(2)))
    for _ in range(8):
        assert producer.send(Message("T", b"x")).status is SendStatus.SEND_OK
    brokers = [BROKER_OF[addr] for addr, _ in sent(inst)]
    failed = brokers[0]
    assert brokers[1] != failed  # the retry went to the other broker
    assert failed not in brokers[2:]  # and every later send stayed away from the failed one
    assert producer.latency_faults is not None
    assert producer.latency_faults.snapshot(producer._clock.monotonic_ms())[failed]["unavailable_for_ms"] > 0


def test_with_latency_fault_off_sends_keep_going_round_robin_after_a_failure(make_producer, fakes):
    producer, inst = make_producer(scripted(fakes, errors.TransportError("connection refused")),
                                   selector=QueueSelector(random.Random(2)))
    for _ in range(8):
        producer.send(Message("T", b"x"))
    assert producer.latency_faults is None
    assert {BROKER_OF[addr] for addr, _ in sent(inst)[2:]} == {"broker-a", "broker-b"}
