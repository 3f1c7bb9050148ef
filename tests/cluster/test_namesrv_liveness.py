"""Broker registration, expiry, unregistration and channel close against a real name server process.

A broker's route goes when it unregisters (clean stop), when its channel to the name server
closes or resets (SIGKILL, a REJECT partition: at once, RocketMQ's onChannelDestroy), and
after broker_expiry_ms of silence (SIGSTOP, a DROP partition: nothing closes).
"""

import logging
import time

import grpc
import pytest
from support.timing import within_s

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


def _removal_causes(cluster, broker_addr):
    """How the name server says it removed `broker_addr`, in order: "channel" or "expiry" per removal."""
    causes = []
    for line in cluster.node("namesrv-0").node_log.read_text(errors="replace").splitlines():
        if f" at {broker_addr} channel closed: route removed" in line:
            causes.append("channel")
        elif f"broker at {broker_addr} expired" in line:
            causes.append("expiry")
    return causes


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
    budget_s = within_s(timing.broker_expiry_ms + timing.broker_expiry_scan_ms + timing.register_interval_ms)
    expired_at = _wait_for(lambda: broker.addr not in _live_addrs(local_cluster.namesrv_addr), budget_s,
                           "the name server to expire the paused broker")
    assert _removal_causes(local_cluster, broker.addr) == ["expiry"]  # a paused process closes nothing
    # never before the expiry time: silence must last longer than broker_expiry_ms
    assert expired_at - paused_at >= timing.broker_expiry_ms / 1000 - timing.register_interval_ms / 1000
    local_cluster.resume("broker-a-0")
    _wait_for(lambda: broker.addr in _live_addrs(local_cluster.namesrv_addr),
              within_s(timing.register_interval_ms), "the resumed broker to register again")


def test_clean_stop_unregisters_at_once(local_cluster):
    broker = local_cluster.node("broker-a-0")
    local_cluster.stop("broker-a-0")
    assert broker.addr not in _live_addrs(local_cluster.namesrv_addr)
    local_cluster.restart("broker-a-0")
    local_cluster.wait_until_routable()
    assert broker.addr in _live_addrs(local_cluster.namesrv_addr)


def test_killed_master_leaves_the_route_at_once_and_the_slave_keeps_it(local_cluster, time_scale):
    timing = Timing().scaled(time_scale)
    master, slave = local_cluster.node("broker-a-0"), local_cluster.node("broker-a-1")
    _create_topic(local_cluster, "Gone")
    _wait_for(lambda: _open_channels(local_cluster) == 2, within_s(), "both brokers' channels")
    assert _route_addrs(local_cluster.namesrv_addr, "Gone") == {0: master.addr, 1: slave.addr}
    killed_at = time.monotonic()
    local_cluster.kill("broker-a-0")
    gone_at = _wait_for(lambda: master.addr not in _live_addrs(local_cluster.namesrv_addr),
                        within_s(timing.broker_failover_budget_ms()), "the killed master's route to go")
    log.info("SIGKILL to route removal: %.0f ms", (gone_at - killed_at) * 1000)
    # the name server removed it because its channel ended, not because it fell silent; its own
    # log names the cause, so a slow machine cannot pass an expiry off as a channel close
    assert _removal_causes(local_cluster, master.addr) == ["channel"]
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
              within_s(timing.register_interval_ms), "the restarted master's registration and channel")
    # it stays: through several registrations and expiry scans, nothing removes it
    deadline = time.monotonic() + 2 * timing.register_interval_ms / 1000
    while time.monotonic() < deadline:
        assert 0 in _route_addrs(local_cluster.namesrv_addr, "Again")
        time.sleep(0.05)


def test_a_silent_partition_keeps_the_channel_and_a_reject_ends_it(tmp_path, time_scale):
    timing = Timing().scaled(time_scale)
    with LocalCluster(ClusterSpec.default(time_scale=time_scale), run_dir=tmp_path / "run", links=True) as cluster:
        master = cluster.node("broker-a-0")
        _wait_for(lambda: _open_channels(cluster) == 2, within_s(), "both brokers' channels")
        dropped_at = time.monotonic()
        cluster.partition(["broker-a-0"], ["namesrv-0"])  # DROP both ways
        # silence closes nothing: the channel and the registration stay (until expiry would act)
        deadline = dropped_at + (timing.register_interval_ms + timing.broker_expiry_scan_ms) / 1000
        while time.monotonic() < deadline:
            assert _open_channels(cluster) == 2 and master.addr in _live_addrs(cluster.namesrv_addr)
            time.sleep(0.05)
        cluster.partition(["broker-a-0"], ["namesrv-0"], mode="REJECT")  # resets the live connection
        _wait_for(lambda: master.addr not in _live_addrs(cluster.namesrv_addr), within_s(timing.broker_expiry_ms),
                  "the reset channel to remove the master")
        # the reset ended the channel; the name server's log says so (an expiry would say "expired")
        assert _removal_causes(cluster, master.addr) == ["channel"]
        cluster.heal()
        _wait_for(lambda: master.addr in _live_addrs(cluster.namesrv_addr) and _open_channels(cluster) == 2,
                  within_s(timing.register_interval_ms), "the master to register again and reopen its channel")
        assert not cluster.unexpected_exits
