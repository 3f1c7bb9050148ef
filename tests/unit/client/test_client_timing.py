"""Every client timer comes from the one time-scale knob: a client built with `Timing.scaled(f)`
holds no unscaled default anywhere, and its services run at the scaled intervals."""

from __future__ import annotations

import dataclasses
import time

from nodes.client import ConsumeOrderlyStatus, Producer, PullConsumer, PushConsumer
from nodes.client.lock_service import LockRenewalService
from nodes.client.offset_store import ConsumerOffsetPersistService
from nodes.client.rebalance import RebalanceService
from nodes.common import constants as c
from nodes.common.config import Timing
from nodes.common.errors import TransportError
from proto import broker_pb2, common_pb2, consumer_pb2

SCALED = Timing().scaled(0.01)
# default values of the timers scaling changes, which a scaled client must not hold (unless the
# same number is also a scaled value: 5 000 ms scaled is the 50 ms flow-control default)
UNSCALED_DEFAULTS = ({getattr(Timing(), f.name) for f in dataclasses.fields(Timing)
                      if getattr(Timing(), f.name) != getattr(SCALED, f.name)}
                     - {getattr(SCALED, f.name) for f in dataclasses.fields(Timing)})


CLIENT_IDS: list[str] = []


def answer(addr, method, request):
    if method == "Heartbeat":
        return consumer_pb2.HeartbeatResponse(code=common_pb2.SUCCESS)
    if method == "GetConsumerList":
        return consumer_pb2.GetConsumerListResponse(code=common_pb2.SUCCESS, client_ids=CLIENT_IDS)
    if method == "QueryConsumerOffset":
        return broker_pb2.QueryConsumerOffsetResponse(code=common_pb2.SUCCESS, offset=0)
    if method == "LockBatchMQ":
        return consumer_pb2.LockBatchResponse(code=common_pb2.SUCCESS, locked=list(request.queues))
    if method in ("UnlockBatchMQ", "UnregisterClient", "UpdateConsumerOffset"):
        return getattr(consumer_pb2 if method != "UpdateConsumerOffset" else broker_pb2,
                       f"{method.removesuffix('MQ')}Response")(code=common_pb2.SUCCESS)
    return TransportError(f"{method}: not answered in this test")


def ms_attributes(obj, seen: set[int], path: str = "") -> list[tuple[str, int]]:
    """Every int attribute named *_ms reachable from `obj` through client objects."""
    if id(obj) in seen or not type(obj).__module__.startswith("nodes.client"):
        return []
    seen.add(id(obj))
    found: list[tuple[str, int]] = []
    values = vars(obj) if hasattr(obj, "__dict__") else {}
    for name, value in values.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, int) and name.endswith("_ms"):
            found.append((f"{path}.{name}", value))
        elif isinstance(value, (list, tuple, set)):
            for i, item in enumerate(value):
                found += ms_attributes(item, seen, f"{path}.{name}[{i}]")
        elif isinstance(value, dict):
            for key, item in value.items():
                found += ms_attributes(item, seen, f"{path}.{name}[{key!r}]")
        else:
            found += ms_attributes(value, seen, f"{path}.{name}")
    return found


def timers_of(obj) -> list[tuple[str, int]]:
    """The *_ms attributes that are timers: not timestamps, not transport deadlines (unscaled by design)."""
    return [(name, value) for name, value in ms_attributes(obj, set())
            if "timeout" not in name and "timestamp" not in name and not name.endswith("_mono_ms")]


def test_a_scaled_push_consumer_runs_every_timer_scaled(fakes, wired_instance_factory):
    assert SCALED.client_heartbeat_ms < Timing().client_heartbeat_ms and UNSCALED_DEFAULTS
    consumer = PushConsumer("127.0.0.1:9876", "g", timing=SCALED, instance_name="scaled")
    consumer.register_orderly_listener(lambda msgs, ctx: ConsumeOrderlyStatus.SUCCESS)
    consumer.subscribe("T")
    CLIENT_IDS[:] = [consumer.client_id]
    route = fakes.make_route(("broker-a", 2, 2, c.PERM_DEFAULT, {0: "a0:1"}))
    inst = consumer._instance = wired_instance_factory({"T": route}, answer, timing=SCALED, client_id=consumer.client_id)
    consumer.start()
    try:
        deadline = time.monotonic() + 5
        while not consumer.owned_queues() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert consumer.owned_queues()  # rebalanced, locked and pulling: every part is built
        services = {type(s): s for s in consumer._services}
        assert inst._route_service.interval_ms == SCALED.route_poll_ms
        assert inst._route_service._initial_delay_ms == SCALED.route_poll_first_ms
        assert inst.heartbeat.interval_ms == SCALED.client_heartbeat_ms
        assert services[RebalanceService].interval_ms == SCALED.rebalance_interval_ms
        assert services[ConsumerOffsetPersistService].interval_ms == SCALED.consumer_offset_persist_ms
        assert services[ConsumerOffsetPersistService]._initial_delay_ms == SCALED.consumer_offset_persist_first_ms
        assert services[LockRenewalService].interval_ms == SCALED.lock_renew_interval_ms
        assert services[LockRenewalService]._initial_delay_ms == SCALED.lock_renew_first_ms
        assert consumer._state.client_lock_lease_ms == SCALED.client_lock_lease_ms
        assert consumer._rebalance.unlock_delay_ms == SCALED.unlock_delay_ms
        assert consumer._consume.suspend_ms == SCALED.suspend_current_queue_ms
        timers = timers_of(consumer) + timers_of(inst)
        assert len(timers) > 15
        assert [(name, value) for name, value in timers if value in UNSCALED_DEFAULTS] == []
    finally:
        consumer.shutdown()


def test_scaled_producer_and_pull_consumer_hold_no_unscaled_timer():
    producer = Producer("127.0.0.1:9876", "p", timing=SCALED)
    consumer = PullConsumer("127.0.0.1:9876", "c", timing=SCALED)
    for client in (producer, consumer):
        assert client._instance.timing == SCALED
        assert [(n, v) for n, v in timers_of(client) if v in UNSCALED_DEFAULTS] == []
    producer.shutdown()
    consumer.shutdown()
