"""ClientInstance: the loop thread, run/submit from sync code, clean close. No RPC is made."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest

from nodes.client.instance import ClientInstance, parse_namesrv_addrs, validate_group
from nodes.client.rpc.grpc_errors import never_sent
from nodes.common.config import Timing
from nodes.common.errors import (
    ClientStateError,
    InvalidArgumentError,
    OutcomeUnknownError,
    RemoteError,
    RequestTimeoutError,
    TransportError,
)


def loop_threads():
    return [t for t in threading.enumerate() if t.name.startswith("mqlab-") and t.is_alive()]


def test_start_runs_a_named_daemon_loop_thread_and_close_joins_it():
    before = len(loop_threads())
    inst = ClientInstance("127.0.0.1:9876", name="t")
    inst.start()
    (thread,) = [t for t in loop_threads() if inst.name in t.name]
    assert thread.daemon and inst.running
    inst.close()
    assert not thread.is_alive() and len(loop_threads()) == before
    inst.close()  # idempotent


def test_run_returns_results_and_raises_the_coroutines_errors(instance):
    async def ok():
        return threading.current_thread().name

    async def fails():
        raise RemoteError("nope", code="SYSTEM_BUSY")

    assert instance.run(ok(), 1).startswith("mqlab-")
    with pytest.raises(RemoteError, match="SYSTEM_BUSY"):
        instance.run(fails(), 1)


def test_run_timeout_cancels_the_coroutine_and_is_indeterminate(instance):
    cancelled = threading.Event()

    async def hangs():
        try:
            await asyncio.sleep(10)
        finally:
            cancelled.set()

    with pytest.raises(RequestTimeoutError) as info:
        instance.run(hangs(), 0.05, "hang")
    assert info.value.indeterminate
    assert cancelled.wait(2)


def test_a_coroutines_own_timeout_error_is_not_mistaken_for_ours(instance):
    async def own_timeout():
        raise TimeoutError("inner")

    with pytest.raises(TimeoutError, match="inner"):
        instance.run(own_timeout(), 1)


def test_blocking_call_from_the_loop_thread_is_refused(instance):
    async def reenter():
        inner = asyncio.sleep(0)
        with pytest.raises(ClientStateError, match="deadlock"):
            instance.run(inner, 1)
        return True

    assert instance.run(reenter(), 1)


def test_submit_returns_a_concurrent_future(instance):
    async def value():
        return 7

    assert instance.submit(value()).result(1) == 7


def test_calls_before_start_and_after_close_are_refused():
    inst = ClientInstance("127.0.0.1:9876")
    with pytest.raises(ClientStateError, match="start"):
        inst.run(asyncio.sleep(0), 1)
    inst.start()
    inst.close()
    with pytest.raises(ClientStateError):
        inst.run(asyncio.sleep(0), 1)
    with pytest.raises(ClientStateError, match="already started"):
        inst.start()


def test_close_before_start_is_fine():
    ClientInstance("127.0.0.1:9876").close()


def test_channels_and_stubs_are_cached_per_address_and_closed(instance):
    async def lookups():
        a1, a2 = instance.api.channel("127.0.0.1:1"), instance.api.channel("127.0.0.1:1")
        s1, s2 = instance.api.broker_stub("127.0.0.1:1"), instance.api.broker_stub("127.0.0.1:1")
        p1, p2 = instance.api.pull_stream("127.0.0.1:1"), instance.api.pull_stream("127.0.0.1:1")
        n1, n2 = instance.api.namesrv_stub("127.0.0.1:1"), instance.api.namesrv_stub("127.0.0.1:1")
        c1, c2 = instance.api.consumer_stub("127.0.0.1:1"), instance.api.consumer_stub("127.0.0.1:1")
        kinds = {type(s1).__name__, type(n1).__name__, type(c1).__name__}
        return (a1 is a2 and s1 is s2 and p1 is p2 and n1 is n2 and c1 is c2
                and kinds == {"BrokerStub", "NameServerStub", "ConsumerManagerStub"}
                and instance.api.broker_stub("127.0.0.1:2") is not s1 and instance.api.channel("127.0.0.1:2") is not a1)

    assert instance.run(lookups(), 1)
    instance.close()
    assert instance.api._channels == {} and instance.api._pull_streams == {} and instance.api._stubs == {}


def test_timing_is_validated():
    with pytest.raises(Exception, match="broker_suspend_max_ms"):
        ClientInstance("127.0.0.1:9876", timing=Timing(broker_suspend_max_ms=40_000))


@pytest.mark.parametrize(("text", "addrs"), [
    ("127.0.0.1:9876", ["127.0.0.1:9876"]),
    (" a:1 ; b:2 ;", ["a:1", "b:2"]),
])
def test_parse_namesrv_addrs(text, addrs):
    assert parse_namesrv_addrs(text) == addrs


@pytest.mark.parametrize("text", ["", ";", "host", "host:port", ":1", None])
def test_parse_namesrv_addrs_rejects(text):
    with pytest.raises(InvalidArgumentError):
        parse_namesrv_addrs(text)


@pytest.mark.parametrize("group", ["", "  ", "a b", "x" * 256, None])
def test_validate_group_rejects(group):
    with pytest.raises(InvalidArgumentError):
        validate_group(group, "consumer")


def test_validate_group_accepts_rocketmq_names():
    validate_group("%RETRY%my_group-1", "consumer")


class FakeRpcError(grpc.RpcError):
    def __init__(self, code, details):
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


REFUSED = "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Connection refused"


@pytest.mark.parametrize(("code", "details", "side_effects", "expected", "indeterminate"), [
    (grpc.StatusCode.UNAVAILABLE, REFUSED, True, TransportError, False),
    (grpc.StatusCode.UNAVAILABLE, "Socket closed", True, OutcomeUnknownError, True),
    (grpc.StatusCode.CANCELLED, "Cancelled", True, OutcomeUnknownError, True),
    (grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded", True, RequestTimeoutError, True),
    (grpc.StatusCode.UNAVAILABLE, "Socket closed", False, TransportError, False),
])
def test_unary_maps_grpc_failures_and_flags_possible_side_effects(instance, code, details, side_effects,
                                                                  expected, indeterminate):
    async def method(request, timeout=None):
        raise FakeRpcError(code, details)

    with pytest.raises(expected) as info:
        instance.run(instance.api.unary(method, None, 1000, "call", side_effects=side_effects), 1)
    assert info.value.indeterminate is indeterminate


def test_never_sent_only_for_connection_failures():
    assert never_sent(FakeRpcError(grpc.StatusCode.UNAVAILABLE, REFUSED))
    assert not never_sent(FakeRpcError(grpc.StatusCode.UNAVAILABLE, "Connection reset by peer"))
    assert not never_sent(FakeRpcError(grpc.StatusCode.INTERNAL, REFUSED))


# --- one instance per client id -------------------------------------------------------------------

def test_facades_with_one_client_id_share_one_instance_until_the_last_shuts_down():
    from nodes.client import Producer, PullConsumer

    producer = Producer("127.0.0.1:9876", "ga", instance_name="shared-x")
    consumer = PullConsumer("127.0.0.1:9876", "gb", instance_name="shared-x")
    inst = producer._instance
    assert consumer._instance is inst and producer.client_id == consumer.client_id == inst.client_id
    assert producer.client_id.endswith("@shared-x")
    assert Producer("127.0.0.1:9876", "gc")._instance is not inst  # the default name is unique
    producer.start()
    consumer.start()
    assert len([t for t in loop_threads() if inst.name in t.name]) == 1
    producer.shutdown()
    assert inst.running
    with pytest.raises(ClientStateError, match="not running"):
        consumer_alone = PullConsumer("127.0.0.1:9876", "gd", instance_name="shared-x")
        consumer_alone.fetch_queues("T")  # not started, although its instance runs
    consumer.shutdown()
    assert not inst.running
    again = Producer("127.0.0.1:9876", "ga", instance_name="shared-x")
    assert again._instance is not inst
    again.shutdown()


def test_one_client_id_has_one_set_of_settings_and_one_facade_per_group_and_role():
    from nodes.client import Producer

    first = Producer("127.0.0.1:9876", "g", instance_name="shared-y")
    with pytest.raises(InvalidArgumentError, match="other settings"):
        Producer("127.0.0.1:9876", "g2", instance_name="shared-y", dial_overrides={"a:1": "b:1"})
    twin = Producer("127.0.0.1:9876", "g", instance_name="shared-y")
    first.start()
    with pytest.raises(ClientStateError, match="already uses client"):
        twin.start()
    assert first._instance.running
    first.shutdown()
    assert not first._instance.running
