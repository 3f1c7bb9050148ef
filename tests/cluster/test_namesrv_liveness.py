"""Broker registration, expiry, unregistration and channel close against a real name server process.

A broker's route goes when it unregisters (clean stop), when its channel to the name server
closes or resets (SIGKILL, a REJECT partition: at once, RocketMQ's onChannelDestroy), and
after broker_expiry_ms of silence (SIGSTOP, a DROP partition: nothing closes).
"""

import logging
import time

import grpc
import pytest

from harness import LocalCluster
from harness.spec import ClusterSpec
from nodes.client import Producer
from nodes.common.config import Timing
from nodes.common.types import Message, SendStatus
from proto import common_pb2, namesrv_pb2, namesrv_pb2_grpc

pytestmark = pytest.mark.cluster
log = logging.getLogger(__name__)


def _cluster_info(namesrv_addr):
    with grpc.insecure_channel(namesrv_addr) as channel:
        return namesrv_pb2_grpc.NameServerStub(channel).GetClusterInfo(namesrv_pb2.GetClusterInfoRequest(), timeout=5)


def _live_addrs(namesrv_addr):
    return {live.broker_addr for live in _cluster_info(namesrv_addr).live}


def _route_addrs(namesrv_addr, topic):
    """broker_id -> address of every broker in the topic's route ({} without a route)."""
    with grpc.insecure_channel(namesrv_addr) as channel:
        resp = namesrv_pb2_grpc.NameServerStub(channel).GetRouteInfo(
            namesrv_pb2.GetRouteInfoRequest(topic=topic), timeout=5)
    if resp.code != common_pb2.SUCCESS:
        return {}
    return {bid: addr for b in resp.route.broker_datas for bid, addr in b.broker_addrs.items()}


def _open_channels(cluster):
    return cluster.node("namesrv-0").describe()["details"]["open_channels"]


def _create_topic(cluster, topic):
    with Producer(cluster.namesrv_addr) as producer:
        assert producer.send(Message(topic, b"x")).status is SendStatus.SEND_OK
    cluster.wait_until_routable(topic)


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


def _not_expiry_budget_s(timing):
    """Expiry cannot remove a broker sooner than this after its last sign of life (it registered
    at most register_interval_ms earlier): a removal faster than this came from its channel."""
    return (timing.broker_expiry_ms - timing.register_interval_ms) / 1000


def test_killed_master_leaves_the_route_at_once_and_the_slave_keeps_it(local_cluster, time_scale):
    timing = Timing().scaled(time_scale)
    master, slave = local_cluster.node("broker-a-0"), local_cluster.node("broker-a-1")
    _create_topic(local_cluster, "Gone")
    _wait_for(lambda: _open_channels(local_cluster) == 2, 10, "both brokers' channels")
    assert _route_addrs(local_cluster.namesrv_addr, "Gone") == {0: master.addr, 1: slave.addr}
    killed_at = time.monotonic()
    local_cluster.kill("broker-a-0")
    gone_at = _wait_for(lambda: master.addr not in _live_addrs(local_cluster.namesrv_addr),
                        timing.broker_failover_budget_ms() / 1000 + 2, "the killed master's route to go")
    took_s = gone_at - killed_at
    log.info("SIGKILL to route removal: %.0f ms (expiry could not remove it before %.0f ms)",
             took_s * 1000, _not_expiry_budget_s(timing) * 1000)
    assert took_s < _not_expiry_budget_s(timing), f"removed after {took_s:.2f} s: that was expiry, not the channel"
    # clients fail over: the route names only the slave, whose queue data stays visible
    assert _route_addrs(local_cluster.namesrv_addr, "Gone") == {1: slave.addr}
    assert _open_channels(local_cluster) == 1
    local_cluster.restart("broker-a-0")
    local_cluster.wait_until_routable("Gone")


def test_broker_restarted_at_once_at_the_same_address_stays_registered(local_cluster, time_scale):
    timing = Timing().scaled(time_scale)
    master = local_cluster.node("broker-a-0")
    _create_topic(local_cluster, "Again")
    local_cluster.restart("broker-a-0", kill=True)
    # two channels: the slave's and the new master's; the killed master's has ended by then, and
    # its end did not take the new registration with it (the deterministic ordering where the old
    # end arrives last is in tests/integration/test_namesrv_channel.py)
    _wait_for(lambda: master.addr in _live_addrs(local_cluster.namesrv_addr) and _open_channels(local_cluster) == 2,
              timing.register_interval_ms / 1000 + 10, "the restarted master's registration and channel")
    # it stays: through several registrations and expiry scans, nothing removes it
    deadline = time.monotonic() + 2 * timing.register_interval_ms / 1000
    while time.monotonic() < deadline:
        assert 0 in _route_addrs(local_cluster.namesrv_addr, "Again")
        time.sleep(0.05)


def test_a_silent_partition_keeps_the_channel_and_a_reject_ends_it(tmp_path, time_scale):
    timing = Timing().scaled(time_scale)
    with LocalCluster(ClusterSpec.default(time_scale=time_scale), run_dir=tmp_path / "run", links=True) as cluster:
        master = cluster.node("broker-a-0")
        _wait_for(lambda: _open_channels(cluster) == 2, 10, "both brokers' channels")
        dropped_at = time.monotonic()
        cluster.partition(["broker-a-0"], ["namesrv-0"])  # DROP both ways
        # silence closes nothing: the channel and the registration stay (until expiry would act)
        deadline = dropped_at + (timing.register_interval_ms + timing.broker_expiry_scan_ms) / 1000
        while time.monotonic() < deadline:
            assert _open_channels(cluster) == 2 and master.addr in _live_addrs(cluster.namesrv_addr)
            time.sleep(0.05)
        cluster.partition(["broker-a-0"], ["namesrv-0"], mode="REJECT")  # resets the live connection
        gone_at = _wait_for(lambda: master.addr not in _live_addrs(cluster.namesrv_addr), 10,
                            "the reset channel to remove the master")
        # nothing from the master arrived since the DROP began: expiry could not have removed it yet
        assert gone_at - dropped_at < _not_expiry_budget_s(timing)
        cluster.heal()
        _wait_for(lambda: master.addr in _live_addrs(cluster.namesrv_addr) and _open_channels(cluster) == 2,
                  timing.register_interval_ms / 1000 + 10, "the master to register again and reopen its channel")
        assert not cluster.unexpected_exits
