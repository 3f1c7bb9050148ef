import dataclasses
import json

import pytest

from nodes.common import constants as c
from nodes.common.config import (
    BrokerConfig,
    ConsumerConfig,
    NamesrvConfig,
    StoreConfig,
    Timing,
    load_node_config,
    save_node_config,
)
from nodes.common.errors import ConfigError


def test_scaled_multiplies_timers_and_keeps_rpc_deadlines():
    t = Timing().scaled(0.05)
    assert t.register_interval_ms == 1_500
    assert t.broker_expiry_ms == 6_000
    assert t.send_timeout_ms == c.SEND_TIMEOUT_MS
    assert t.broker_suspend_max_ms < t.consumer_timeout_when_suspend_ms


def test_scaled_clamps_to_the_floor():
    t = Timing().scaled(0.001)
    assert min(getattr(t, f.name) for f in dataclasses.fields(t)) >= c.TIMING_FLOOR_MS


def test_scaled_rejects_non_positive_factor():
    with pytest.raises(ConfigError):
        Timing().scaled(0)


def test_round_trip_through_a_file(tmp_path):
    cfg = BrokerConfig(node_id="broker-a-0", namesrv_addrs=("127.0.0.1:1",), timing=Timing().scaled(0.1),
                       store=StoreConfig(commitlog_segment_bytes=4 * 1024 * 1024,
                                         message_body_bytes_max=1024 * 1024))
    path = tmp_path / "config.json"
    save_node_config(path, "broker", cfg)
    role, loaded = load_node_config(path)
    assert role == "broker" and loaded == cfg


@pytest.mark.parametrize("content, message", [
    ("not json", "unreadable"),
    ("{}", "role"),
    (json.dumps({"role": "wizard"}), "unknown role"),
    (json.dumps({"role": "broker", "namesrv_addrs": ["x:1"], "bogus": 1}), "unknown keys"),
    (json.dumps({"role": "broker"}), "namesrv_addrs"),
])
def test_bad_config_files_say_what_is_wrong(tmp_path, content, message):
    path = tmp_path / "config.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load_node_config(path)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_node_config(tmp_path / "nope.json")


def test_store_segment_must_hold_two_max_messages():
    with pytest.raises(ConfigError):
        StoreConfig(commitlog_segment_bytes=1024 * 1024).validate()


def test_fault_switches_are_validated_against_the_known_names():
    base = BrokerConfig(namesrv_addrs=("127.0.0.1:1",))
    dataclasses.replace(base, fault_switches=tuple(c.BROKER_FAULT_SWITCHES)).validate()
    with pytest.raises(ConfigError, match=r"unknown broker fault switch\(es\) \['nope'\]; known: \[.*'lock-no-exclusion'"):
        dataclasses.replace(base, fault_switches=("nope",)).validate()
    with pytest.raises(ConfigError, match="fault_switches"):  # only through the switch list
        dataclasses.replace(base, store=StoreConfig(recovery_trust_checkpoint=True)).validate()
    consumer = ConsumerConfig(namesrv_addrs=("127.0.0.1:1",), subscriptions={"T": "*"})
    dataclasses.replace(consumer, fault_switches=tuple(c.CONSUMER_FAULT_SWITCHES)).validate()
    with pytest.raises(ConfigError, match=r"known: .*ignore-pull-suggestion"):
        dataclasses.replace(consumer, fault_switches=("lock-no-exclusion",)).validate()


def test_every_fault_switch_has_a_description():
    switches = {**c.BROKER_FAULT_SWITCHES, **c.CONSUMER_FAULT_SWITCHES, **c.PRODUCER_FAULT_SWITCHES}
    names = {v for k, v in vars(c).items() if k.startswith("FAULT_") and isinstance(v, str)}
    assert set(switches) == names and len(switches) >= 4  # every switch name is registered for a role
    assert all(text.strip() for text in switches.values())


def test_clock_control_takes_one_of_its_modes():
    base = BrokerConfig(namesrv_addrs=("127.0.0.1:1",))
    assert base.clock_control == ""  # off unless a test asks
    for mode in c.CLOCK_CONTROL_MODES:
        dataclasses.replace(base, clock_control=mode).validate()
    with pytest.raises(ConfigError, match="clock_control must be one of"):
        dataclasses.replace(base, clock_control="fast").validate()
    with pytest.raises(ConfigError, match="clock_control"):
        NamesrvConfig(clock_control=True).validate()  # type: ignore[arg-type]
