"""ClusterSpec: TOML and default topology, overrides, validation messages, rendered configs."""

from __future__ import annotations

import dataclasses

import pytest

from harness.errors import SpecError
from harness.spec import DEFAULT_NODES, ClusterSpec, NodeSpec
from nodes.common.config import BrokerConfig, NamesrvConfig, Timing, load_node_config, save_node_config
from nodes.common.errors import ConfigError

PORTS = {"namesrv-0": 20100, "broker-a-0": 20101, "broker-a-1": 20102}

FULL_TOML = """
time_scale = 0.05
cluster_name = "LabCluster"

[timing]
broker_expiry_ms = 2000

[defaults.broker]
default_topic_queue_nums = 4

[[nodes]]
id = "namesrv-0"
role = "namesrv"

[[nodes]]
id = "broker-a-0"
role = "broker"
broker_name = "broker-a"
broker_id = 0

[[nodes]]
id = "broker-a-1"
role = "broker"
broker_name = "broker-a"
broker_id = 1

[broker-a-0]
auto_create_topic_enable = false

[broker-a-0.store]
commitlog_segment_bytes = 4194304
message_body_bytes_max = 1048576   # a segment must hold two maximum-size messages
"""


def test_default_topology_is_namesrv_master_and_slave():
    spec = ClusterSpec.default()
    assert [n.id for n in spec.nodes] == ["namesrv-0", "broker-a-0", "broker-a-1"]
    assert spec.nodes == DEFAULT_NODES
    assert spec.time_scale == 1.0
    master, slave = spec.node("broker-a-0"), spec.node("broker-a-1")
    assert (master.broker_name, master.broker_id, master.is_master) == ("broker-a", 0, True)
    assert (slave.broker_name, slave.broker_id, slave.is_master) == ("broker-a", 1, False)


def test_default_render_wires_ports_addresses_and_run_dirs(tmp_path):
    spec = ClusterSpec.default(time_scale=0.05)
    configs = spec.render_all(ports=PORTS, run_dir=tmp_path)
    namesrv, broker = configs["namesrv-0"], configs["broker-a-0"]
    assert isinstance(namesrv, NamesrvConfig) and isinstance(broker, BrokerConfig)
    assert (namesrv.port, namesrv.listen_host, namesrv.run_dir) == (20100, "127.0.0.1", str(tmp_path / "namesrv-0"))
    assert broker.namesrv_addrs == ("127.0.0.1:20100",)
    assert (broker.broker_name, broker.broker_id, broker.port) == ("broker-a", 0, 20101)
    assert broker.run_dir == str(tmp_path / "broker-a-0")
    assert namesrv.timing == broker.timing == Timing().scaled(0.05)


def test_full_toml_applies_time_scale_timing_defaults_and_node_overrides(tmp_path):
    spec = ClusterSpec.from_toml_text(FULL_TOML)
    assert spec.time_scale == 0.05 and spec.cluster_name == "LabCluster"
    assert [[n.id for n in tier] for tier in spec.tiers()] == [["namesrv-0"], ["broker-a-0"], ["broker-a-1"]]
    configs = spec.render_all(ports=PORTS, run_dir=tmp_path)
    master, slave = configs["broker-a-0"], configs["broker-a-1"]
    assert master.auto_create_topic_enable is False and slave.auto_create_topic_enable is True
    assert master.store.commitlog_segment_bytes == 4 * 1024 * 1024
    assert slave.store.commitlog_segment_bytes == BrokerConfig().store.commitlog_segment_bytes
    assert master.default_topic_queue_nums == slave.default_topic_queue_nums == 4
    assert master.cluster_name == "LabCluster"
    assert master.timing.broker_expiry_ms == 2000  # absolute, after scaling
    assert master.timing.register_interval_ms == Timing().scaled(0.05).register_interval_ms
    assert (slave.broker_id, slave.is_master) == (1, False)


def test_toml_without_nodes_overrides_the_default_topology(tmp_path):
    spec = ClusterSpec.from_toml_text(
        "[broker-a-0.store]\ncommitlog_segment_bytes = 4194304\nmessage_body_bytes_max = 1048576\n")
    assert [n.id for n in spec.nodes] == ["namesrv-0", "broker-a-0", "broker-a-1"]
    broker = spec.render("broker-a-0", ports=PORTS, run_dir=tmp_path)
    assert broker.store.commitlog_segment_bytes == 4194304


def test_spec_file_is_read_from_disk(tmp_path):
    path = tmp_path / "spec.toml"
    path.write_text(FULL_TOML)
    assert ClusterSpec.from_toml(path) == ClusterSpec.from_toml_text(FULL_TOML)


def test_rendered_configs_round_trip_through_the_node_loader(tmp_path):
    spec = ClusterSpec.from_toml_text(FULL_TOML)
    for node_id, config in spec.render_all(ports=PORTS, run_dir=tmp_path).items():
        path = tmp_path / f"{node_id}.json"
        save_node_config(path, spec.node(node_id).role, config)
        role, loaded = load_node_config(path)
        assert role == spec.node(node_id).role
        assert loaded == config


def test_adding_a_second_slave_is_one_node_spec(tmp_path):
    spec = ClusterSpec.default().with_nodes(NodeSpec("broker-a-2", "broker", broker_name="broker-a", broker_id=2))
    assert [n.id for n in spec.start_order()] == ["namesrv-0", "broker-a-0", "broker-a-1", "broker-a-2"]
    assert spec.render("broker-a-2", ports={**PORTS, "broker-a-2": 20103}, run_dir=tmp_path).broker_id == 2


def test_with_node_options_deep_merges(tmp_path):
    spec = (ClusterSpec.default()
            .with_node_options("broker-a-0", store={"commitlog_segment_bytes": 1 << 22, "message_body_bytes_max": 1 << 20})
            .with_node_options("broker-a-0", store={"cq_units_per_file": 1000}, auto_create_topic_enable=False))
    broker = spec.render("broker-a-0", ports=PORTS, run_dir=tmp_path)
    assert broker.store.commitlog_segment_bytes == 1 << 22 and broker.store.cq_units_per_file == 1000
    assert broker.auto_create_topic_enable is False


def test_time_scale_changes_every_timer():
    fast = ClusterSpec.default().with_time_scale(0.1).scaled_timing()
    assert fast == Timing().scaled(0.1)


def test_every_node_is_told_its_time_scale_and_a_nonsense_one_is_refused(tmp_path):
    spec = ClusterSpec.default().with_time_scale(0.05)
    for node_id, config in spec.render_all(ports=PORTS, run_dir=tmp_path).items():
        assert config.time_scale == 0.05, node_id
    for bad in (0, -1.0, "fast"):
        with pytest.raises(ConfigError, match="time_scale must be a positive number"):
            dataclasses.replace(BrokerConfig(), time_scale=bad).validate()


def test_render_needs_a_port_for_every_node(tmp_path):
    with pytest.raises(SpecError, match="no port for broker-a-0"):
        ClusterSpec.default().render("namesrv-0", ports={"namesrv-0": 1}, run_dir=tmp_path)


def test_render_puts_remoting_ports_on_name_servers_and_brokers_only(tmp_path):
    spec = ClusterSpec.default().with_consumers(1, group="g", subscriptions={"T": "*"})
    ports = {n.id: 20_000 + i for i, n in enumerate(spec.nodes)}
    remoting = {n.id: 21_000 + i for i, n in enumerate(spec.remoting_nodes())}
    assert [n.id for n in spec.remoting_nodes()] == ["namesrv-0", "broker-a-0", "broker-a-1"]
    configs = spec.render_all(ports=ports, run_dir=tmp_path, remoting_ports=remoting)
    assert {node_id: getattr(cfg, "remoting_port", None) for node_id, cfg in configs.items()} == {
        "namesrv-0": 21_000, "broker-a-0": 21_001, "broker-a-1": 21_002, "consumer-0": None}
    assert spec.render("broker-a-0", ports=ports, run_dir=tmp_path).remoting_port == 0  # none given: any port
    with pytest.raises(SpecError, match="no remoting port for broker-a-1"):
        spec.render("broker-a-1", ports=ports, run_dir=tmp_path, remoting_ports={"namesrv-0": 1})


def _toml_error(text: str) -> str:
    with pytest.raises(SpecError) as info:
        ClusterSpec.from_toml_text(text, source="spec.toml")
    return str(info.value)


@pytest.mark.parametrize(("text", "expected"), [
    ("time_scale = 0", "time_scale must be a number in (0, 100]"),
    ("time_scale = -1.0", "time_scale must be a number"),
    ("time_scale = 'fast'", "time_scale must be a number"),
    ("time_scale = true", "time_scale must be a number"),
    ("bogus = 1", "unknown top-level setting 'bogus'"),
    ("[broker-b-0]\nauto_create_topic_enable = false", "table [broker-b-0] names no node; nodes are namesrv-0, broker-a-0"),
    ("[broker-a-0]\nno_such = 1", "[broker-a-0]: unknown setting 'no_such' for a BrokerConfig"),
    ("[broker-a-0]\nauto_create_topic_enable = 1", "[broker-a-0]: auto_create_topic_enable must be a bool"),
    ("[broker-a-0]\ndefault_topic_queue_nums = 'eight'", "default_topic_queue_nums must be a int"),
    ("[broker-a-0]\nport = 1234", "'port' cannot be overridden (ports are allocated by the harness)"),
    ("[namesrv-0]\nremoting_port = 9876", "'remoting_port' cannot be overridden (remoting ports are allocated"),
    ("[broker-a-0]\nbroker_id = 3", "set broker_id in the node's [[nodes]] entry"),
    ("[broker-a-0.timing]\nbroker_expiry_ms = 5", "timing is cluster-wide: put it in the top-level [timing] table"),
    ("[broker-a-0.store]\nbogus = 1", "[broker-a-0.store]: unknown setting 'bogus' for a StoreConfig"),
    ("[broker-a-0.store]\ncommitlog_segment_bytes = 1024",
     "node broker-a-0: store.commitlog_segment_bytes must be at least 64 KiB; fix the [broker-a-0]"),
    ("[broker-a-0.store]\ncommitlog_segment_bytes = 4194304",
     "node broker-a-0: store.commitlog_segment_bytes must hold two maximum-size messages"),
    ("[timing]\nno_such_ms = 5", "[timing]: unknown field 'no_such_ms'"),
    ("[timing]\nbroker_expiry_ms = -5", "[timing] broker_expiry_ms must be a positive integer"),
    ("[timing]\nregister_interval_ms = 999999999", "register_interval_ms must be below broker_expiry_ms"),
    ("[defaults.producer]\nx = 1", "[defaults.producer]: unknown role"),
    ("[[nodes]]\nid = 'namesrv-0'\nrole = 'namesrv'\nport = 1", "has unknown keys ['port']"),
    ("[[nodes]]\nid = 'x'", "needs an id and a role"),
    ("[[nodes]]\nid = 'n'\nrole = 'gateway'", "unknown role 'gateway'; use one of namesrv, broker"),
    ("[[nodes]]\nid = 'Bad Id'\nrole = 'namesrv'", "node id 'Bad Id' must match"),
    ("[[nodes]]\nid = 'b-0'\nrole = 'broker'\nbroker_name = 'b'\nbroker_id = 0",
     "the spec has no namesrv node; add one"),
    ("[[nodes]]\nid = 'n'\nrole = 'namesrv'\n[[nodes]]\nid = 'n'\nrole = 'namesrv'", "node id 'n' appears twice"),
    ("[[nodes]]\nid = 'n'\nrole = 'namesrv'\nbroker_id = 0", "a namesrv takes no broker_name/broker_id"),
    ("[[nodes]]\nid = 'n'\nrole = 'namesrv'\n[[nodes]]\nid = 'b'\nrole = 'broker'\nbroker_id = 0",
     "node b: a broker needs broker_name"),
    ("[[nodes]]\nid = 'n'\nrole = 'namesrv'\n[[nodes]]\nid = 'b-1'\nrole = 'broker'\nbroker_name = 'b'\nbroker_id = 1",
     "broker group b has no master; add a node with broker_name = 'b' and broker_id = 0"),
    ("[[nodes]]\nid = 'n'\nrole = 'namesrv'\n[[nodes]]\nid = 'b-0'\nrole = 'broker'\nbroker_name = 'b'\nbroker_id = 0\n"
     "[[nodes]]\nid = 'b-1'\nrole = 'broker'\nbroker_name = 'b'\nbroker_id = 0",
     "broker group b has two nodes with broker_id 0"),
    ("nodes = []", "'nodes' must be a non-empty array"),
    ("this is = not toml =", "not valid TOML"),
])
def test_invalid_specs_say_what_to_fix(text, expected):
    message = _toml_error(text)
    assert message.startswith("spec.toml: ")
    assert expected in message


def test_missing_spec_file_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError, match=r"cannot read spec file .*nope\.toml"):
        ClusterSpec.from_toml(tmp_path / "nope.toml")


def test_specs_built_in_code_validate_too():
    with pytest.raises(SpecError, match="no namesrv node"):
        ClusterSpec(nodes=(NodeSpec("b-0", "broker", broker_name="b", broker_id=0),))
    with pytest.raises(SpecError, match="unknown setting 'nope'"):
        ClusterSpec.default().with_node_options("broker-a-0", nope=1)
    with pytest.raises(SpecError, match="no node 'broker-z-0'"):
        ClusterSpec.default().with_node_options("broker-z-0", auto_create_topic_enable=False)


def test_specs_are_immutable_values():
    spec = ClusterSpec.default()
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.time_scale = 2.0  # type: ignore[misc]
    assert ClusterSpec.default() == spec


def test_fault_switches_are_set_per_node_from_toml_and_survive_the_config_file(tmp_path):
    spec = ClusterSpec.from_toml_text(
        '[broker-a-0]\nfault_switches = ["lock-no-exclusion", "recovery-trust-checkpoint"]\n')
    broker = spec.render("broker-a-0", ports=PORTS, run_dir=tmp_path)
    assert broker.fault_switches == ("lock-no-exclusion", "recovery-trust-checkpoint")
    assert spec.render("broker-a-1", ports=PORTS, run_dir=tmp_path).fault_switches == ()
    path = tmp_path / "broker.json"
    save_node_config(path, "broker", broker)
    assert load_node_config(path)[1].fault_switches == broker.fault_switches  # JSON list -> tuple


def test_an_unknown_or_misplaced_fault_switch_is_a_spec_error():
    with pytest.raises(SpecError, match=r"known: .*lock-no-exclusion"):
        ClusterSpec.from_toml_text('[broker-a-0]\nfault_switches = ["lock-no-exlusion"]\n')
    with pytest.raises(SpecError, match="unknown broker fault switch"):  # a consumer's switch on a broker
        ClusterSpec.from_toml_text('[broker-a-0]\nfault_switches = ["commit-pulled-offset"]\n')
