"""LocalCluster with stand-in nodes: start order, cluster.json, restarts, exits, teardown."""

from __future__ import annotations

import json
import os
import signal

import pytest

from harness.cluster import LocalCluster
from harness.errors import HarnessError, NodeStartError
from harness.pids import pid_alive
from harness.process import NodeState
from harness.run_dir import make_run_dir, read_cluster_json
from harness.spec import ClusterSpec
from harness.waiting import WaitTimeout, wait_until


@pytest.fixture
def standin_cluster(tmp_path, standin_cmd):
    """`standin_cluster(mode_by_id=..., spec=..., **kwargs)` -> an unstarted LocalCluster of stand-ins."""
    made = []

    def make(modes=None, *, spec=None, **kwargs):
        modes = modes or {}
        kwargs.setdefault("run_dir", tmp_path / "run")
        cluster = LocalCluster(spec, start=False,
                               command=lambda n, cfg: standin_cmd(modes.get(n.id, "grpc"), config=cfg), **kwargs)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.close(graceful=False)
        assert all(not n.live_pids() for n in cluster.nodes())


def _json(cluster):
    return json.loads((cluster.run_dir / "cluster.json").read_text())


def test_cluster_json_matches_the_contract(standin_cluster):
    cluster = standin_cluster().start()
    data = _json(cluster)
    assert set(data) == {"namesrv", "namesrv_remoting", "rocketmq5_endpoints", "time_scale", "nodes"}
    assert data["time_scale"] == cluster.spec.time_scale == 1.0
    assert data["namesrv"] == cluster.namesrv_addr == cluster.node("namesrv-0").addr
    assert data["namesrv_remoting"] == cluster.namesrv_remoting_addr == cluster.node("namesrv-0").remoting_addr
    # a 5.x client's endpoints: the masters' RocketMQ 5 endpoints only
    assert data["rocketmq5_endpoints"] == cluster.rocketmq5_endpoints == cluster.node("broker-a-0").rocketmq5_addr
    assert [n["id"] for n in data["nodes"]] == ["namesrv-0", "broker-a-0", "broker-a-1"]
    for entry, proc in zip(data["nodes"], cluster.nodes(), strict=True):
        rmq5 = {"rocketmq5_addr": f"127.0.0.1:{proc.rocketmq5_port}"} if proc.role == "broker" else {}
        assert entry == {"id": proc.node_id, "role": proc.role, "addr": proc.addr, "pid": proc.pid,
                         "remoting_addr": f"127.0.0.1:{proc.remoting_port}",
                         "run_dir": str(cluster.run_dir / proc.node_id), **rmq5}
    assert read_cluster_json(cluster.run_dir) == data


def test_name_servers_and_brokers_get_a_fixed_remoting_port_of_their_own(standin_cluster):
    spec = ClusterSpec.from_toml_text(
        '[[nodes]]\nid = "namesrv-0"\nrole = "namesrv"\n[[nodes]]\nid = "namesrv-1"\nrole = "namesrv"\n'
        '[[nodes]]\nid = "broker-a-0"\nrole = "broker"\nbroker_name = "broker-a"\nbroker_id = 0\n')
    cluster = standin_cluster(spec=spec).start()
    procs = cluster.nodes()
    ports = [p.port for p in procs] + [p.remoting_port for p in procs]
    assert all(ports) and len(set(ports)) == len(ports)
    for proc in procs:  # in the node's config, and announced back in its READY line
        assert json.loads(proc.config_path.read_text())["remoting_port"] == proc.remoting_port
        assert proc.ready is not None and proc.ready.extra["remoting_addr"] == proc.remoting_addr
    namesrvs = [cluster.node("namesrv-0"), cluster.node("namesrv-1")]
    assert cluster.namesrv_remoting_addr == ";".join(p.remoting_addr for p in namesrvs)
    assert _json(cluster)["namesrv_remoting"] == cluster.namesrv_remoting_addr
    rows = {r["id"]: r for r in cluster.describe()}
    assert rows["broker-a-0"]["remoting_addr"] == cluster.node("broker-a-0").remoting_addr

    broker = cluster.node("broker-a-0")
    remoting_addr = broker.remoting_addr
    cluster.kill("broker-a-0")
    cluster.restart("broker-a-0")  # a restarted master keeps its remoting address too
    assert broker.remoting_addr == remoting_addr and broker.ready.extra["remoting_addr"] == remoting_addr
    assert _json(cluster)["nodes"][2]["remoting_addr"] == remoting_addr


def test_an_added_broker_gets_a_remoting_port_and_an_added_consumer_none(standin_cluster):
    from harness.spec import NodeSpec

    cluster = standin_cluster().start()
    taken = {p.remoting_port for p in cluster.nodes()} | {p.port for p in cluster.nodes()}
    broker = cluster.add_node(NodeSpec("broker-a-2", "broker", broker_name="broker-a", broker_id=2), start=False)
    consumer = cluster.add_node(NodeSpec("consumer-0", "consumer", options={"group": "g", "subscriptions": {"T": "*"}}),
                                start=False)
    assert broker.remoting_port and broker.remoting_port not in taken and broker.remoting_port != broker.port
    assert consumer.remoting_port == 0 and consumer.remoting_addr == ""
    entries = {n["id"]: n for n in _json(cluster)["nodes"]}
    assert entries["broker-a-2"]["remoting_addr"] == broker.remoting_addr
    assert "remoting_addr" not in entries["consumer-0"]


def test_a_node_announcing_another_remoting_address_fails_to_start(standin_cluster):
    cluster = standin_cluster({"broker-a-0": "bad-remoting"})
    with pytest.raises(NodeStartError, match="remoting listener"):
        cluster.start()


def test_cluster_json_records_the_time_scale_from_construction_to_close(tmp_path, standin_cmd):
    cluster = LocalCluster(time_scale=0.05, run_dir=tmp_path / "run", start=False)  # real node configs
    try:
        assert _json(cluster)["time_scale"] == 0.05
    finally:
        cluster.close(graceful=False)
    assert read_cluster_json(cluster.run_dir)["time_scale"] == 0.05

    spec = ClusterSpec.default().with_time_scale(0.2)
    started = LocalCluster(spec, run_dir=tmp_path / "started",
                           command=lambda n, cfg: standin_cmd("grpc", config=cfg))
    try:
        assert _json(started)["time_scale"] == 0.2
        started.restart("broker-a-0")
        assert _json(started)["time_scale"] == 0.2
    finally:
        started.close()


def test_start_waits_until_brokers_are_routable_and_describe_reports_admin(standin_cluster):
    cluster = standin_cluster().start()  # the stand-in broker registers with the stand-in namesrv
    rows = {r["id"]: r for r in cluster.describe()}
    assert rows["broker-a-0"]["state"] == "RUNNING"
    assert rows["broker-a-0"]["status_line"] == "broker-a-0 stand-in RUNNING"
    assert rows["broker-a-0"]["details"] == {"standin": True}
    assert rows["namesrv-0"]["alive"] and rows["namesrv-0"]["process"] == "RUNNING"
    assert cluster.node("broker-a-0").describe()["pid"] == cluster.node("broker-a-0").pid


def test_restart_keeps_address_and_updates_cluster_json(standin_cluster):
    cluster = standin_cluster().start()
    broker = cluster.node("broker-a-0")
    addr, pid = broker.addr, broker.pid
    cluster.kill("broker-a-0")
    assert _json(cluster)["nodes"][1]["pid"] is None
    cluster.restart("broker-a-0")
    assert broker.addr == addr and broker.pid != pid
    assert _json(cluster)["nodes"][1]["pid"] == broker.pid
    cluster.wait_until_routable(budget_ms=5_000)
    cluster.stop("broker-a-0")
    assert _json(cluster)["nodes"][1]["pid"] is None
    assert cluster.unexpected_exits == []


def test_pause_and_resume_by_node_id(standin_cluster):
    cluster = standin_cluster().start()
    cluster.pause("broker-a-0")
    assert cluster.node("broker-a-0").state is NodeState.PAUSED
    assert {r["id"]: r["state"] for r in cluster.describe()}["broker-a-0"] == "PAUSED"
    cluster.resume("broker-a-0")
    assert cluster.node("broker-a-0").state is NodeState.RUNNING


def test_unexpected_exits_are_exposed_and_written(standin_cluster):
    cluster = standin_cluster().start()
    os.kill(cluster.node("broker-a-0").pid, signal.SIGKILL)
    wait_until(lambda: cluster.unexpected_exits, 5_000, "the exit to be recorded")
    [record] = cluster.unexpected_exits
    assert record.node_id == "broker-a-0" and record.exit_code == -signal.SIGKILL
    wait_until(lambda: _json(cluster)["nodes"][1]["pid"] is None, 2_000, "cluster.json to drop the pid")
    with pytest.raises(AssertionError, match="1 node\\(s\\) exited unexpectedly"):
        cluster.assert_no_unexpected_exits()


def test_start_order_is_namesrv_masters_slaves(standin_cluster):
    spec = ClusterSpec.default()
    cluster = standin_cluster(spec=spec).start()
    assert [n.node_id for n in cluster.nodes()] == ["namesrv-0", "broker-a-0", "broker-a-1"]
    spawned = [n.started_wall_ms for n in cluster.nodes()]
    assert spawned == sorted(spawned)
    assert [n.node_id for n in cluster.nodes("broker")] == ["broker-a-0", "broker-a-1"]


def test_a_failed_start_kills_what_already_runs(standin_cluster):
    cluster = standin_cluster({"broker-a-0": "crash"})
    with pytest.raises(NodeStartError, match="broker-a-0 exited before it was ready") as info:
        cluster.start()
    assert info.value.exit_code == 70
    namesrv = cluster.node("namesrv-0")
    assert not namesrv.alive and namesrv.live_pids() == []
    assert all(n["pid"] is None for n in _json(cluster)["nodes"])


def test_wait_until_routable_times_out_naming_the_missing_broker(standin_cluster):
    cluster = standin_cluster({"broker-a-0": "ready"})  # READY, but never registers
    cluster.start(wait_routable=False)
    with pytest.raises(WaitTimeout, match="broker-a-0 not registered"):
        cluster.wait_until_routable(budget_ms=300)


def test_wait_until_routable_reports_a_silent_name_server(standin_cluster):
    cluster = standin_cluster().start()
    cluster.pause("namesrv-0")
    try:
        with pytest.raises(WaitTimeout, match=r"name server \S+ did not answer GetClusterInfo"):
            cluster.wait_until_routable(budget_ms=300)
    finally:
        cluster.resume("namesrv-0")


def test_close_stops_everything_and_is_idempotent(standin_cluster):
    cluster = standin_cluster().start()
    pids = [n.pid for n in cluster.nodes()]
    cluster.close()
    assert not any(pid_alive(p) for p in pids)
    assert all(n.state is NodeState.STOPPED for n in cluster.nodes())
    assert all(n["pid"] is None for n in _json(cluster)["nodes"])
    cluster.close()


def test_context_manager_closes_on_exceptions(tmp_path, standin_cmd):
    with pytest.raises(RuntimeError), LocalCluster(
            run_dir=tmp_path / "run", command=lambda n, cfg: standin_cmd("grpc", config=cfg)) as cluster:
        pids = [n.pid for n in cluster.nodes()]
        raise RuntimeError("test body failed")
    assert not any(pid_alive(p) for p in pids)


def test_unknown_node_ids_list_the_known_ones(standin_cluster):
    cluster = standin_cluster()
    with pytest.raises(HarnessError, match="no node 'broker-z-0' in this cluster; nodes are namesrv-0, broker-a-0"):
        cluster.kill("broker-z-0")


def test_time_scale_argument_overrides_the_spec(standin_cluster):
    cluster = standin_cluster(spec=ClusterSpec.default(time_scale=0.5), time_scale=0.05)
    assert cluster.spec.time_scale == 0.05
    assert cluster.node("broker-a-0").config.timing == cluster.timing


def test_default_run_dir_is_fresh_under_runs_with_a_latest_link(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = make_run_dir(None)
    second = make_run_dir(None)
    assert first != second
    assert first.parent == second.parent == (tmp_path / "runs")
    assert first.name.endswith(f"-{os.getpid()}") and second.name.endswith(f"-{os.getpid()}-2")
    assert (tmp_path / "runs" / "latest").resolve() == second
