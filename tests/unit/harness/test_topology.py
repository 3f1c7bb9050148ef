"""Named topologies: the 2x2 node set, every broker and consumer given every name server, and
bad names refused with the choices."""

from __future__ import annotations

import pytest

from harness.errors import SpecError
from harness.spec import ClusterSpec
from harness.topology import TOPOLOGIES, broker_groups, topology_spec


def test_single_is_the_default_topology():
    assert topology_spec("single") == ClusterSpec.default()
    assert broker_groups(topology_spec("single")) == ["broker-a"]


def test_two_by_two_has_two_name_servers_and_two_groups_of_master_and_slave():
    spec = topology_spec("2x2", time_scale=0.05)
    assert [n.id for n in spec.namesrv_nodes()] == ["namesrv-0", "namesrv-1"]
    assert broker_groups(spec) == ["broker-a", "broker-b"]
    assert {(n.id, n.broker_name, n.broker_id) for n in spec.broker_nodes()} == {
        ("broker-a-0", "broker-a", 0), ("broker-a-1", "broker-a", 1),
        ("broker-b-0", "broker-b", 0), ("broker-b-1", "broker-b", 1)}
    assert spec.time_scale == 0.05


def test_every_broker_and_consumer_is_given_every_name_server():
    spec = topology_spec("2x2").with_consumers(1, group="g", subscriptions={"T": "*"})
    ports = {n.id: 9000 + i for i, n in enumerate(spec.nodes)}
    want = (f"127.0.0.1:{ports['namesrv-0']}", f"127.0.0.1:{ports['namesrv-1']}")
    for node_id in ("broker-a-0", "broker-b-1", "consumer-0"):
        assert spec.render(node_id, ports=ports, run_dir="/tmp/x").namesrv_addrs == want


def test_an_unknown_topology_names_the_choices():
    with pytest.raises(SpecError, match="topologies are " + ", ".join(TOPOLOGIES)):
        topology_spec("3x3")
