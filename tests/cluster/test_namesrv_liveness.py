"""Broker registration, expiry and unregistration against a real name server process."""

import time

import grpc
import pytest

from nodes.common.config import Timing
from proto import namesrv_pb2, namesrv_pb2_grpc

pytestmark = pytest.mark.cluster


def _live_addrs(namesrv_addr):
    with grpc.insecure_channel(namesrv_addr) as channel:
        info = namesrv_pb2_grpc.NameServerStub(channel).GetClusterInfo(namesrv_pb2.GetClusterInfoRequest(), timeout=5)
    return {live.broker_addr for live in info.live}


def _wait_for(predicate, budget_s, what):
    deadline = time.monotonic() + budget_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {budget_s:.1f} s waiting for {what}"
        time.sleep(0.05)
    return time.monotonic()


def test_paused_broker_expires_and_returns_after_resume(local_cluster, time_scale):
    timing = Timing().scaled(time_scale)
    broker = local_cluster.node("broker-a-0")
    assert broker.addr in _live_addrs(local_cluster.namesrv_addr)
    local_cluster.pause("broker-a-0")
    paused_at = time.monotonic()
    budget_s = (timing.broker_expiry_ms + timing.broker_expiry_scan_ms + timing.register_interval_ms) / 1000 + 2
    expired_at = _wait_for(lambda: broker.addr not in _live_addrs(local_cluster.namesrv_addr), budget_s,
                           "the name server to expire the paused broker")
    # never before the expiry time: silence must last longer than broker_expiry_ms
    assert expired_at - paused_at >= timing.broker_expiry_ms / 1000 - timing.register_interval_ms / 1000
    local_cluster.resume("broker-a-0")
    _wait_for(lambda: broker.addr in _live_addrs(local_cluster.namesrv_addr),
              timing.register_interval_ms / 1000 + 5, "the resumed broker to register again")


def test_clean_stop_unregisters_at_once(local_cluster):
    broker = local_cluster.node("broker-a-0")
    local_cluster.stop("broker-a-0")
    assert broker.addr not in _live_addrs(local_cluster.namesrv_addr)
    local_cluster.restart("broker-a-0")
    local_cluster.wait_until_routable()
    assert broker.addr in _live_addrs(local_cluster.namesrv_addr)
