"""Node configuration: frozen dataclasses whose defaults come from `constants`.

This is the only module that reads or writes config files. The harness renders one
complete JSON file per node (with the scaled `Timing`), and every node process loads it
with `load_node_config`. A config that cannot be used raises `ConfigError` (exit 78).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from nodes.common import constants as c
from nodes.common.errors import ConfigError


def _physical_memory_bytes() -> int:
    try:
        import os

        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 * 1024**3


@dataclass(frozen=True)
class Timing:
    """Every duration a node or client waits on. `scaled(f)` is the single time knob."""

    register_interval_ms: int = c.REGISTER_INTERVAL_MS
    broker_expiry_ms: int = c.BROKER_EXPIRY_MS
    broker_expiry_scan_ms: int = c.BROKER_EXPIRY_SCAN_MS
    route_poll_ms: int = c.ROUTE_POLL_MS
    client_heartbeat_ms: int = c.CLIENT_HEARTBEAT_MS
    consumer_offset_persist_ms: int = c.CONSUMER_OFFSET_PERSIST_MS
    flush_commitlog_ms: int = c.FLUSH_COMMITLOG_MS
    flush_commitlog_thorough_ms: int = c.FLUSH_COMMITLOG_THOROUGH_MS
    flush_consume_queue_ms: int = c.FLUSH_CONSUME_QUEUE_MS
    long_poll_scan_ms: int = c.LONG_POLL_SCAN_MS
    short_poll_ms: int = c.SHORT_POLL_MS
    broker_suspend_max_ms: int = c.BROKER_SUSPEND_MAX_MS
    consumer_timeout_when_suspend_ms: int = c.CONSUMER_TIMEOUT_WHEN_SUSPEND_MS
    send_timeout_ms: int = c.SEND_TIMEOUT_MS
    # the longest time latency fault tolerance keeps a broker out of queue selection (the last
    # entry of SEND_NOT_AVAILABLE_MS); the shorter ones scale with it
    send_not_available_max_ms: int = c.SEND_NOT_AVAILABLE_MS[-1]
    rpc_timeout_ms: int = c.RPC_TIMEOUT_MS
    query_offset_timeout_ms: int = c.QUERY_OFFSET_TIMEOUT_MS
    register_timeout_ms: int = c.REGISTER_TIMEOUT_MS
    slave_timeout_ms: int = c.SLAVE_TIMEOUT_MS
    ha_heartbeat_ms: int = c.HA_HEARTBEAT_MS
    ha_housekeeping_ms: int = c.HA_HOUSEKEEPING_MS
    ha_async_transfer_wait_ms: int = c.HA_ASYNC_TRANSFER_WAIT_MS
    ha_reconnect_min_ms: int = c.HA_RECONNECT_MIN_MS
    ha_reconnect_max_ms: int = c.HA_RECONNECT_MAX_MS
    slave_sync_interval_ms: int = c.SLAVE_SYNC_INTERVAL_MS
    slave_sync_first_ms: int = c.SLAVE_SYNC_FIRST_MS
    consumer_channel_expiry_ms: int = c.CONSUMER_CHANNEL_EXPIRY_MS
    client_housekeeping_ms: int = c.CLIENT_HOUSEKEEPING_MS
    # Every delay level is a multiple of this (level "1m" = 60 units), so it scales with the rest.
    delay_level_unit_ms: int = c.DELAY_LEVEL_UNIT_MS
    schedule_first_delay_ms: int = c.SCHEDULE_FIRST_DELAY_MS
    schedule_poll_ms: int = c.SCHEDULE_POLL_MS
    schedule_error_backoff_ms: int = c.SCHEDULE_ERROR_BACKOFF_MS
    delay_offset_persist_ms: int = c.DELAY_OFFSET_PERSIST_MS
    # push consumer
    rebalance_interval_ms: int = c.REBALANCE_INTERVAL_MS
    pull_delay_when_exception_ms: int = c.PULL_DELAY_WHEN_EXCEPTION_MS
    pull_delay_when_flow_control_ms: int = c.PULL_DELAY_WHEN_FLOW_CONTROL_MS
    pull_offset_fix_delay_ms: int = c.PULL_OFFSET_FIX_DELAY_MS
    pull_max_idle_ms: int = c.PULL_MAX_IDLE_MS
    consume_resubmit_delay_ms: int = c.CONSUME_RESUBMIT_DELAY_MS
    consume_timeout_ms: int = c.CONSUME_TIMEOUT_MS
    consumer_offset_persist_first_ms: int = c.CONSUMER_OFFSET_PERSIST_FIRST_MS
    route_poll_first_ms: int = c.ROUTE_POLL_FIRST_MS
    # orderly consumption and queue locks
    broker_lock_lease_ms: int = c.BROKER_LOCK_LEASE_MS
    client_lock_lease_ms: int = c.CLIENT_LOCK_LEASE_MS
    lock_renew_interval_ms: int = c.LOCK_RENEW_INTERVAL_MS
    lock_renew_first_ms: int = c.LOCK_RENEW_FIRST_MS
    unlock_delay_ms: int = c.UNLOCK_DELAY_MS
    consume_lock_try_ms: int = c.CONSUME_LOCK_TRY_MS
    orderly_consume_max_continuous_ms: int = c.ORDERLY_CONSUME_MAX_CONTINUOUS_MS
    suspend_current_queue_ms: int = c.SUSPEND_CURRENT_QUEUE_MS
    suspend_current_queue_min_ms: int = c.SUSPEND_CURRENT_QUEUE_MIN_MS
    suspend_current_queue_max_ms: int = c.SUSPEND_CURRENT_QUEUE_MAX_MS
    orderly_relock_first_ms: int = c.ORDERLY_RELOCK_FIRST_MS
    orderly_resubmit_ms: int = c.ORDERLY_RESUBMIT_MS
    orderly_lock_failed_retry_ms: int = c.ORDERLY_LOCK_FAILED_RETRY_MS
    broker_lock_expiry_scan_ms: int = c.BROKER_LOCK_EXPIRY_SCAN_MS
    # full disks and retention (the store's disk check and clean service)
    disk_check_interval_ms: int = c.DISK_CHECK_INTERVAL_MS
    disk_check_first_ms: int = c.DISK_CHECK_FIRST_MS
    clean_resource_interval_ms: int = c.CLEAN_RESOURCE_INTERVAL_MS
    clean_first_delay_ms: int = c.CLEAN_FIRST_DELAY_MS
    # fileReservedTime: a store rule, but a duration, so it scales with the time knob like the
    # clean service that applies it (a scaled run would otherwise never see a segment expire)
    file_reserved_time_ms: int = c.FILE_RESERVED_TIME_MS
    # POP consumption: how often expired pops are revived (PopReviveService's reviveInterval)
    pop_revive_interval_ms: int = c.POP_REVIVE_INTERVAL_MS
    # RocketMQ 5 auto-renew: how often the messages of PushConsumers' receives are renewed
    rmq5_renew_scan_ms: int = c.RMQ5_RENEW_SCAN_MS
    # transactional messages: first check of a half message, then every check interval
    transaction_timeout_ms: int = c.TRANSACTION_TIMEOUT_MS
    transaction_check_interval_ms: int = c.TRANSACTION_CHECK_INTERVAL_MS

    # RPC deadlines are transport budgets, not RocketMQ timers: scaling them down to a few
    # milliseconds would turn a loaded machine into a storm of false timeouts.
    # Flush intervals bound only how much a machine crash could lose (we never simulate one);
    # flushing every few ms would just stall writers on pages under writeback.
    _UNSCALED = frozenset({"send_timeout_ms", "rpc_timeout_ms", "query_offset_timeout_ms",
                           "register_timeout_ms", "consumer_timeout_when_suspend_ms",
                           "flush_commitlog_ms", "flush_commitlog_thorough_ms", "flush_consume_queue_ms"})

    def scaled(self, factor: float) -> Timing:
        """Multiply every timer by `factor`, clamped to TIMING_FLOOR_MS; RPC deadlines and flushes stay."""
        if factor <= 0:
            raise ConfigError(f"time scale must be positive, got {factor}")
        changes = {
            f.name: max(c.TIMING_FLOOR_MS, round(getattr(self, f.name) * factor))
            for f in fields(self)
            if f.name not in self._UNSCALED
        }
        scaled = dataclasses.replace(self, **changes)
        # A held pull must still answer inside its RPC deadline after scaling.
        if scaled.broker_suspend_max_ms >= scaled.consumer_timeout_when_suspend_ms:
            scaled = dataclasses.replace(
                scaled, consumer_timeout_when_suspend_ms=scaled.broker_suspend_max_ms * 2)
        scaled.validate()
        return scaled

    def validate(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"timing.{f.name} must be a positive integer of ms, got {value!r}")
        if self.broker_suspend_max_ms >= self.consumer_timeout_when_suspend_ms:
            raise ConfigError("timing.broker_suspend_max_ms must be below consumer_timeout_when_suspend_ms")
        if self.register_interval_ms >= self.broker_expiry_ms:
            raise ConfigError("timing.register_interval_ms must be below broker_expiry_ms")

    def broker_failover_budget_ms(self) -> int:
        """How long clients may take to notice a broker that went silent."""
        return self.broker_expiry_ms + self.broker_expiry_scan_ms + self.route_poll_ms


@dataclass(frozen=True)
class StoreConfig:
    """What the message store needs; knows nothing of the network."""

    commitlog_segment_bytes: int = c.COMMITLOG_SEGMENT_BYTES
    cq_units_per_file: int = c.CQ_UNITS_PER_FILE
    message_body_bytes_max: int = c.MESSAGE_BODY_BYTES_MAX
    # The backlog beyond which a message counts as "on disk" (40% of RAM in RocketMQ);
    # settable in bytes so tests can make it small.
    memory_budget_bytes: int = field(
        default_factory=lambda: _physical_memory_bytes() * c.MEMORY_RATIO_PERCENT // 100)
    # What one pull may carry (maxTransfer{Bytes,Count}OnMessageIn{Memory,Disk}); RocketMQ's
    # defaults cap a pull at 32 messages, so large pull batches need these raised.
    transfer_bytes_max_in_memory: int = c.TRANSFER_BYTES_MAX_IN_MEMORY
    transfer_count_max_in_memory: int = c.TRANSFER_COUNT_MAX_IN_MEMORY
    transfer_bytes_max_on_disk: int = c.TRANSFER_BYTES_MAX_ON_DISK
    transfer_count_max_on_disk: int = c.TRANSFER_COUNT_MAX_ON_DISK
    # flushDiskType (constants.FLUSH_DISK_TYPES) and, for SYNC_FLUSH, how long a send waits for its fsync
    flush_disk_type: str = "ASYNC_FLUSH"
    sync_flush_timeout_ms: int = c.SYNC_FLUSH_TIMEOUT_MS
    # Full disks (diskMaxUsedSpaceRatio, diskSpaceCleanForciblyRatio, diskSpaceWarningLevelRatio):
    # retention deletes expired segments above the first, any sealed segment above the second,
    # and puts are refused above the third.
    disk_max_used_space_ratio: float = c.DISK_MAX_USED_SPACE_RATIO
    disk_space_clean_forcibly_ratio: float = c.DISK_SPACE_CLEAN_FORCIBLY_RATIO
    disk_space_warning_level_ratio: float = c.DISK_SPACE_WARNING_LEVEL_RATIO
    # The message index (RocketMQ messageIndexEnable, maxHashSlotNum, maxIndexNum): lookups by key
    # and client message id; a file holds index_entries_per_file - 1 keys.
    message_index_enable: bool = True
    index_hash_slots: int = c.INDEX_HASH_SLOTS
    index_entries_per_file: int = c.INDEX_ENTRIES_PER_FILE
    # Test-only fault switches, set by the broker from its fault_switches (never directly):
    # recovery-trust-checkpoint, recovery-keep-torn-tail, read-skip-crc, sparse-segments,
    # ignore-disk-full.
    recovery_trust_checkpoint: bool = False
    recovery_keep_torn_tail: bool = False
    read_skip_crc: bool = False
    sparse_segments: bool = False
    ignore_disk_full: bool = False

    @property
    def sync_flush(self) -> bool:
        return self.flush_disk_type == "SYNC_FLUSH"

    def validate(self) -> None:
        if min(self.transfer_bytes_max_in_memory, self.transfer_count_max_in_memory,
               self.transfer_bytes_max_on_disk, self.transfer_count_max_on_disk) <= 0:
            raise ConfigError("store.transfer_*_max_* must be positive")
        if self.commitlog_segment_bytes < 64 * 1024:
            raise ConfigError("store.commitlog_segment_bytes must be at least 64 KiB")
        if self.message_body_bytes_max * 2 + 1024 > self.commitlog_segment_bytes:
            raise ConfigError("store.commitlog_segment_bytes must hold two maximum-size messages")
        if self.cq_units_per_file < 16:
            raise ConfigError("store.cq_units_per_file must be at least 16")
        if self.memory_budget_bytes <= 0:
            raise ConfigError("store.memory_budget_bytes must be positive")
        if self.index_hash_slots < c.INDEX_HASH_SLOTS_MIN or self.index_entries_per_file < c.INDEX_ENTRIES_PER_FILE_MIN:
            raise ConfigError(f"store.index_hash_slots must be at least {c.INDEX_HASH_SLOTS_MIN} and "
                              f"store.index_entries_per_file at least {c.INDEX_ENTRIES_PER_FILE_MIN}")
        if self.flush_disk_type not in c.FLUSH_DISK_TYPES:
            raise ConfigError(f"store.flush_disk_type must be one of {c.FLUSH_DISK_TYPES}, "
                              f"got {self.flush_disk_type!r}")
        if self.sync_flush_timeout_ms <= 0:
            raise ConfigError("store.sync_flush_timeout_ms must be positive")
        ratios = (self.disk_max_used_space_ratio, self.disk_space_clean_forcibly_ratio,
                  self.disk_space_warning_level_ratio)
        if not all(isinstance(r, (int, float)) and 0.1 <= r <= 0.99 for r in ratios) or sorted(ratios) != list(ratios):
            raise ConfigError("store.disk_max_used_space_ratio <= disk_space_clean_forcibly_ratio <= "
                              f"disk_space_warning_level_ratio, each in [0.10, 0.99]; got {ratios}")


@dataclass(frozen=True)
class NamesrvConfig:
    node_id: str = "namesrv-0"
    listen_host: str = "127.0.0.1"
    port: int = 0
    # RocketMQ 4.x remoting listener beside gRPC; 0 takes a free port (the harness fixes one per node)
    remoting_port: int = 0
    run_dir: str = "."
    timing: Timing = field(default_factory=Timing)
    # the factor `timing` was scaled by (the cluster's time knob): reported to operators and
    # clients (`mqlab admin`), never applied again here
    time_scale: float = 1.0
    # tests only (constants.CLOCK_CONTROL_MODES): "rate" runs lease and timer code on a SkewedClock
    # driven by <run_dir>/clock.json; "wall+rate" also has the harness shift its wall clock for
    # wall-clock jumps (harness.clockfault); "" (production) keeps the system clock
    clock_control: str = ""
    # the control plane's shared secret (nodes.common.credential); "" checks nothing. Never logged.
    cluster_credential: str = field(default="", repr=False)

    def validate(self) -> None:
        self.timing.validate()
        _check_time_scale(self.time_scale)
        _check_clock_control(self.clock_control)


@dataclass(frozen=True)
class BrokerConfig:
    node_id: str = "broker-a-0"
    cluster_name: str = c.DEFAULT_CLUSTER_NAME
    broker_name: str = "broker-a"
    broker_id: int = c.MASTER_ID
    listen_host: str = "127.0.0.1"
    port: int = 0
    # RocketMQ 4.x remoting listener beside gRPC; 0 takes a free port (the harness fixes one per node)
    remoting_port: int = 0
    # RocketMQ 5's gRPC MessagingService (the 5.x clients' endpoint), on its own listener; 0
    # takes a free port (the harness fixes one per broker)
    rocketmq5_port: int = 0
    run_dir: str = "."
    namesrv_addrs: tuple[str, ...] = ()
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: int = c.BROKER_DEFAULT_TOPIC_QUEUE_NUMS
    long_polling_enable: bool = True
    broker_perm: int = c.PERM_DEFAULT
    broker_role: str = "ASYNC_MASTER"  # for masters: ASYNC_MASTER or SYNC_MASTER; slaves ignore it
    slave_read_enable: bool = False
    offset_check_in_slave: bool = False
    ha_master_addr: str = ""  # a slave's master; empty: learnt from the name server
    ha_transfer_batch_bytes: int = c.HA_TRANSFER_BATCH_BYTES
    slave_fall_behind_bytes_max: int = c.SLAVE_FALL_BEHIND_BYTES_MAX
    timing: Timing = field(default_factory=Timing)
    # the factor `timing` was scaled by (the cluster's time knob): reported to operators and
    # clients (`mqlab admin`), never applied again here
    time_scale: float = 1.0
    store: StoreConfig = field(default_factory=StoreConfig)
    # peer address -> address to dial instead (harness link proxies); empty in production
    dial_overrides: dict[str, str] = field(default_factory=dict)
    message_delay_level: str = c.MESSAGE_DELAY_LEVEL  # messageDelayLevel: units s, m, h, d
    notify_consumer_ids_changed_enable: bool = True  # notifyConsumerIdsChangedEnable
    # tests only: rules to break on purpose (constants.BROKER_FAULT_SWITCHES); empty in production
    fault_switches: tuple[str, ...] = ()
    # tests only (constants.CLOCK_CONTROL_MODES): "rate" runs lease and timer code on a SkewedClock
    # driven by <run_dir>/clock.json; "wall+rate" also has the harness shift its wall clock for
    # wall-clock jumps (harness.clockfault); "" (production) keeps the system clock
    clock_control: str = ""
    # the control plane's shared secret (nodes.common.credential); "" checks nothing. Never logged.
    cluster_credential: str = field(default="", repr=False)

    @property
    def is_master(self) -> bool:
        return self.broker_id == c.MASTER_ID

    @property
    def role(self) -> str:
        return self.broker_role if self.is_master else "SLAVE"

    @property
    def is_sync_master(self) -> bool:
        return self.is_master and self.broker_role == "SYNC_MASTER"

    def validate(self) -> None:
        self.timing.validate()
        _check_time_scale(self.time_scale)
        self.store.validate()
        if self.broker_id < 0:
            raise ConfigError("broker_id must be >= 0")
        if not self.namesrv_addrs:
            raise ConfigError("namesrv_addrs is empty: a broker must know at least one name server")
        if not 1 <= self.default_topic_queue_nums <= 1024:
            raise ConfigError("default_topic_queue_nums must be in 1..1024")
        if self.broker_role not in c.BROKER_ROLES:
            raise ConfigError(f"broker_role must be one of {c.BROKER_ROLES}, got {self.broker_role!r}")
        if self.ha_transfer_batch_bytes < 1024:
            raise ConfigError("ha_transfer_batch_bytes must be at least 1024")
        _check_fault_switches(self.fault_switches, c.BROKER_FAULT_SWITCHES, "broker")
        _check_clock_control(self.clock_control)
        for field_name, switch in _STORE_FAULT_SWITCHES.items():
            if getattr(self.store, field_name):
                raise ConfigError(f"store.{field_name} is not set directly: put {switch!r} in fault_switches")


# StoreConfig's test-only fields and the broker fault switch that sets each
_STORE_FAULT_SWITCHES = {
    "recovery_trust_checkpoint": c.FAULT_RECOVERY_TRUST_CHECKPOINT,
    "recovery_keep_torn_tail": c.FAULT_RECOVERY_KEEP_TORN_TAIL,
    "read_skip_crc": c.FAULT_READ_SKIP_CRC,
    "sparse_segments": c.FAULT_SPARSE_SEGMENTS,
    "ignore_disk_full": c.FAULT_IGNORE_DISK_FULL,
}


def store_config_with_switches(store: StoreConfig, fault_switches: tuple[str, ...]) -> StoreConfig:
    """`store` with the test-only fields of the store fault switches among `fault_switches` set."""
    changes = {name: True for name, switch in _STORE_FAULT_SWITCHES.items() if switch in fault_switches}
    return dataclasses.replace(store, **changes) if changes else store


def _check_fault_switches(switches: Any, known: dict[str, str], role: str) -> None:
    if not isinstance(switches, tuple) or not all(isinstance(s, str) for s in switches):
        raise ConfigError(f"fault_switches must be a list of names, got {switches!r}")
    unknown = sorted(set(switches) - set(known))
    if unknown:
        raise ConfigError(f"unknown {role} fault switch(es) {unknown}; known: {sorted(known)}")


def _check_time_scale(time_scale: float) -> None:
    if not isinstance(time_scale, int | float) or not time_scale > 0:
        raise ConfigError(f"time_scale must be a positive number, got {time_scale!r}")


def _check_clock_control(mode: Any) -> None:
    if mode not in c.CLOCK_CONTROL_MODES:
        raise ConfigError(f"clock_control must be one of {c.CLOCK_CONTROL_MODES}, got {mode!r}")


_NESTED: dict[str, type] = {"timing": Timing, "store": StoreConfig}


def _from_dict(cls: type, data: dict[str, Any]) -> Any:
    known = {f.name: f for f in fields(cls)}
    unknown = set(data) - set(known)
    if unknown:
        raise ConfigError(f"{cls.__name__}: unknown keys {sorted(unknown)}")
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        if name in _NESTED and isinstance(value, dict):
            kwargs[name] = _from_dict(_NESTED[name], value)
        elif isinstance(value, list):
            kwargs[name] = tuple(value)
        else:
            kwargs[name] = value
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"{cls.__name__}: {exc}") from exc


ROLE_CONFIGS: dict[str, type] = {"namesrv": NamesrvConfig, "broker": BrokerConfig}


def config_to_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config)


def save_node_config(path: Path, role: str, config: Any) -> None:
    text = json.dumps({"role": role, **config_to_dict(config)}, indent=2, sort_keys=True)
    # the file may hold the cluster credential: readable by its owner only
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.chmod(path, 0o600)


def load_node_config(path: Path) -> tuple[str, Any]:
    """Read a node config file; returns (role, validated config)."""
    try:
        raw = json.loads(Path(path).read_text())
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {path} does not exist") from exc
    except (OSError, ValueError) as exc:
        raise ConfigError(f"config file {path} is unreadable: {exc}") from exc
    if not isinstance(raw, dict) or "role" not in raw:
        raise ConfigError(f"config file {path} must be a JSON object with a 'role'")
    role = raw.pop("role")
    if role not in ROLE_CONFIGS:
        raise ConfigError(f"config file {path}: unknown role {role!r} (expected one of {sorted(ROLE_CONFIGS)})")
    config = _from_dict(ROLE_CONFIGS[role], raw)
    config.validate()
    return role, config


@dataclass(frozen=True)
class ConsumerConfig:
    """A consumer process (`python -m nodes consumer`): one PushConsumer running a workload listener.

    `subscriptions` maps topic -> tag expression ("*" for all). The workload decides what the
    listener answers: `ack` always succeeds; `fail` answers RECONSUME_LATER and `raise` raises,
    each with probability `fail_probability`; `fail_keys` answers RECONSUME_LATER for messages
    whose KEYS are in `fail_keys` until each has failed `fail_times` times. `sleep_ms` (unscaled:
    it is work, not a timer) is spent on every message first.
    """

    node_id: str = "consumer-0"
    listen_host: str = "127.0.0.1"
    port: int = 0
    run_dir: str = "."
    namesrv_addrs: tuple[str, ...] = ()
    group: str = "mqlab_consumer"
    subscriptions: dict[str, str] = field(default_factory=dict)
    message_model: str = c.MESSAGE_MODEL_CLUSTERING
    allocate_strategy: str = "AVG"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    consume_thread_min: int = c.CONSUME_THREAD_MIN
    consume_message_batch_max_size: int = c.CONSUME_MESSAGE_BATCH_MAX_SIZE
    pull_batch_size: int = c.PULL_BATCH_SIZE
    max_reconsume_times: int = -1  # -1: RocketMQ's 16
    instance_name: str = c.CLIENT_INSTANCE_NAME_DEFAULT
    await_termination_ms: int = c.CONSUMER_AWAIT_TERMINATION_MS
    workload: str = "ack"
    fail_probability: float = 0.0
    fail_keys: tuple[str, ...] = ()
    fail_times: int = 1
    sleep_ms: int = 0
    seed: int = 0
    timing: Timing = field(default_factory=Timing)
    # the factor `timing` was scaled by (the cluster's time knob): reported to operators and
    # clients (`mqlab admin`), never applied again here
    time_scale: float = 1.0
    # peer address -> address to dial instead (harness link proxies); empty in production
    dial_overrides: dict[str, str] = field(default_factory=dict)
    # an orderly listener (ConsumeOrderlyStatus): `fail` / `fail_keys` answer SUSPEND_CURRENT_QUEUE_A_MOMENT,
    # `raise` raises (also a suspend); queues are locked on the master
    orderly: bool = False
    # tests only: rules to break on purpose (constants.CONSUMER_FAULT_SWITCHES); empty in production
    fault_switches: tuple[str, ...] = ()
    # tests only (constants.CLOCK_CONTROL_MODES): "rate" runs lease and timer code on a SkewedClock
    # driven by <run_dir>/clock.json; "wall+rate" also has the harness shift its wall clock for
    # wall-clock jumps (harness.clockfault); "" (production) keeps the system clock
    clock_control: str = ""
    # the control plane's shared secret (nodes.common.credential); "" checks nothing. Never logged.
    cluster_credential: str = field(default="", repr=False)

    def validate(self) -> None:
        self.timing.validate()
        _check_time_scale(self.time_scale)
        if not self.namesrv_addrs:
            raise ConfigError("namesrv_addrs is empty: a consumer must know at least one name server")
        if not self.group:
            raise ConfigError("group is empty: name the consumer group")
        if not self.subscriptions or not all(isinstance(t, str) and t and isinstance(e, str)
                                             for t, e in self.subscriptions.items()):
            raise ConfigError("subscriptions must map at least one topic to a tag expression, e.g. {\"T\": \"*\"}")
        if self.message_model not in (c.MESSAGE_MODEL_CLUSTERING, c.MESSAGE_MODEL_BROADCASTING):
            raise ConfigError(f"message_model must be {c.MESSAGE_MODEL_CLUSTERING} or "
                              f"{c.MESSAGE_MODEL_BROADCASTING}, got {self.message_model!r}")
        if self.allocate_strategy not in c.ALLOCATE_STRATEGY_NAMES:
            raise ConfigError(f"allocate_strategy must be one of {c.ALLOCATE_STRATEGY_NAMES}, "
                              f"got {self.allocate_strategy!r}")
        if self.consume_from_where not in c.CONSUME_FROM_WHERE_NAMES:
            raise ConfigError(f"consume_from_where must be one of {c.CONSUME_FROM_WHERE_NAMES}, "
                              f"got {self.consume_from_where!r}")
        if self.workload not in c.CONSUMER_WORKLOADS:
            raise ConfigError(f"workload must be one of {c.CONSUMER_WORKLOADS}, got {self.workload!r}")
        if not 1 <= self.consume_thread_min <= 1000:
            raise ConfigError("consume_thread_min must be in 1..1000")
        if not 1 <= self.consume_message_batch_max_size <= 1024:
            raise ConfigError("consume_message_batch_max_size must be in 1..1024")
        if not 1 <= self.pull_batch_size <= c.PULL_BATCH_COUNT_MAX:
            raise ConfigError(f"pull_batch_size must be in 1..{c.PULL_BATCH_COUNT_MAX}")
        if not 0.0 <= self.fail_probability <= 1.0:
            raise ConfigError("fail_probability must be in [0, 1]")
        if self.fail_times < 0 or self.sleep_ms < 0 or self.await_termination_ms < 0:
            raise ConfigError("fail_times, sleep_ms and await_termination_ms must be >= 0")
        _check_fault_switches(self.fault_switches, c.CONSUMER_FAULT_SWITCHES, "consumer")
        _check_clock_control(self.clock_control)


ROLE_CONFIGS["consumer"] = ConsumerConfig
