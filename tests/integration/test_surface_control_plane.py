"""The control plane needs the cluster credential; the data plane stays open.

Against a real `LocalCluster` (name server, master, slave as processes): anonymous or wrongly
credentialed Admin, registration, channel-watch and replication calls are refused with
UNAUTHENTICATED and change nothing, while the harness (which holds the credential) still
describes every node and a plain client still sends and pulls. The secret is in each node's
config file and nowhere the harness publishes (cluster.json, command lines, logs, Describe).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from support.cluster_rpc import wait_for
from support.local_cluster import TIME_SCALE, module_cluster

from harness.admin import credential_of
from harness.spec import ClusterSpec
from nodes.client import Producer
from nodes.common.credential import METADATA_KEY
from nodes.common.types import Message, SendStatus
from proto import (
    admin_pb2,
    admin_pb2_grpc,
    common_pb2,
    namesrv_pb2,
    namesrv_pb2_grpc,
    replication_pb2,
    replication_pb2_grpc,
)

TIMEOUT_S = 10.0
DEAD_ADDR = "127.0.0.1:9"  # the discard port: nothing answers there


cluster = module_cluster("surface-control", ClusterSpec.default(time_scale=TIME_SCALE).with_node_options(
    "broker-a-0", broker_role="SYNC_MASTER"))
pytestmark = pytest.mark.xdist_group("surface-control")  # one worker starts the module's cluster once


def _credential(cluster) -> str:
    return credential_of(cluster.node("namesrv-0").run_dir)


def _unauthenticated(call, *args, **kwargs) -> None:
    with pytest.raises(grpc.RpcError) as info:
        result = call(*args, timeout=TIMEOUT_S, **kwargs)
        if hasattr(result, "__iter__") and not isinstance(result, bytes | str):
            list(result)
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED, info.value


def _wrong() -> tuple[tuple[str, str], ...]:
    return ((METADATA_KEY, "0" * 64),)


def test_the_harness_generates_a_credential_and_publishes_it_nowhere(cluster):
    secret = _credential(cluster)
    assert len(secret) == 64  # 32 random bytes, hex
    assert {credential_of(node.run_dir) for node in cluster.nodes()} == {secret}
    for node in cluster.nodes():
        assert stat.S_IMODE(os.stat(node.config_path).st_mode) == 0o600
        cmdline = Path(f"/proc/{node.pid}/cmdline").read_bytes()
        assert secret.encode() not in cmdline
        assert secret not in node.node_log.read_text()
        assert secret not in json.dumps(node.describe())
    assert secret not in (cluster.run_dir / "cluster.json").read_text()


def test_describe_hides_the_name_server_channel_token(cluster):
    channels = cluster.node("broker-a-0").describe()["details"]["namesrv_channels"]
    assert channels and all("token" not in channel for channel in channels)
    assert all(channel["channel_open"] for channel in channels)


def test_admin_calls_need_the_credential(cluster):
    slave = cluster.node("broker-a-1")
    with grpc.insecure_channel(slave.addr) as channel:
        admin = admin_pb2_grpc.AdminStub(channel)
        _unauthenticated(admin.Shutdown, admin_pb2.ShutdownRequest())
        _unauthenticated(admin.Shutdown, admin_pb2.ShutdownRequest(), metadata=_wrong())
        _unauthenticated(admin.Describe, admin_pb2.DescribeRequest())
    # the slave is still up and the harness, which has the credential, still reaches it
    assert slave.alive and slave.describe()["state"] == "RUNNING"


def test_the_status_command_reads_the_credential_from_the_node_configs(cluster):
    out = subprocess.run([sys.executable, "-m", "harness.cli", "status", "--run-dir", str(cluster.run_dir)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "UNREACHABLE" not in out.stdout  # exit 0 already says every node answered Admin.Describe


def _route_addrs(cluster) -> dict[int, str]:
    with grpc.insecure_channel(cluster.namesrv_addr) as channel:
        info = namesrv_pb2_grpc.NameServerStub(channel).GetClusterInfo(namesrv_pb2.GetClusterInfoRequest(),
                                                                        timeout=TIMEOUT_S)
    return {bid: addr for b in info.brokers if b.broker_name == "broker-a" for bid, addr in b.broker_addrs.items()}


def test_registration_unregistration_and_channel_watch_need_the_credential(cluster):
    master = cluster.node("broker-a-0")
    before = _route_addrs(cluster)
    assert before[0] == master.addr
    namesrv_log = cluster.node("namesrv-0").node_log
    log_before = namesrv_log.read_text()
    with grpc.insecure_channel(cluster.namesrv_addr) as channel:
        namesrv = namesrv_pb2_grpc.NameServerStub(channel)
        _unauthenticated(namesrv.UnregisterBroker, namesrv_pb2.UnregisterBrokerRequest(
            cluster_name="DefaultCluster", broker_name="broker-a", broker_id=0, broker_addr=master.addr))
        _unauthenticated(namesrv.RegisterBroker, namesrv_pb2.RegisterBrokerRequest(
            cluster_name="DefaultCluster", broker_name="broker-a", broker_id=0, broker_addr=DEAD_ADDR,
            topic_configs=[common_pb2.TopicConfig(topic="T", read_queue_nums=4, write_queue_nums=4, perm=6)],
            data_version=namesrv_pb2.DataVersion(timestamp_ms=1, counter=0), channel_token="fake-0"),
            metadata=_wrong())
        _unauthenticated(namesrv.WatchChannel, namesrv_pb2.WatchChannelRequest(
            cluster_name="DefaultCluster", broker_name="broker-a", broker_id=0, broker_addr=master.addr,
            channel_token="guessed-0"))
        # routes stay readable by anyone: the data plane is open
        route = namesrv.GetRouteInfo(namesrv_pb2.GetRouteInfoRequest(topic="TBW102"), timeout=TIMEOUT_S)
        assert route.code == common_pb2.SUCCESS
    assert _route_addrs(cluster) == before
    new_log = namesrv_log.read_text()[len(log_before):]
    assert "Traceback" not in new_log and "needs the cluster credential" not in new_log
    assert any("no or a wrong cluster credential" in line for line in new_log.splitlines())


def test_a_fake_slave_cannot_read_the_log_nor_count_as_a_replica(cluster):
    master = cluster.node("broker-a-0")
    with grpc.insecure_channel(master.addr) as channel:
        replication = replication_pb2_grpc.ReplicationStub(channel)
        report = replication_pb2.SlaveReport(max_phys_offset=-1, slave_node_id="fake", broker_id=1)
        _unauthenticated(replication.Replicate, iter([report]))
        _unauthenticated(replication.Replicate, iter([report]), metadata=_wrong())
        _unauthenticated(replication.SyncMetadata, replication_pb2.SyncMetadataRequest())
    # With the real slave stopped, a SYNC_MASTER has no replica: the fake one did not join.
    cluster.stop("broker-a-1")
    try:
        wait_for(lambda: master.describe()["details"]["slaves"] == [], what="the master to drop its slave")
        with Producer(cluster.namesrv_addr, retry_times=0) as producer:
            result = producer.send(Message("SurfaceSync", b"x"))
        assert result.status == SendStatus.SLAVE_NOT_AVAILABLE
    finally:
        cluster.restart("broker-a-1")
