"""The derived bounds table: how long the system may take to react to each fault, from one `Timing`.

Every fault duration a schedule picks and every wait a suite does comes from here, never
from a literal, so a run at time scale k = 1/20 and one at k = 1 exercise the same story
 (docs/chaos.md). The input is the run's *scaled* `Timing` (what the nodes
were given); symbols follow the anchors' table:

    L_b broker lock lease      L_c client lock lease      R_l lock renew period
    R_b rebalance period       P_c offset persist         F_b broker offset flush
    S_s slave metadata sync    H   client heartbeat       X_c silent-client expiry
    K_c silent-client scan     N_r route poll             X_b silent-broker expiry
    K_b silent-broker scan     G_r broker registration    W_p pull retry after an error
    U_d delayed unlock         A_h slave reconnect max

    bounds = derive_bounds(cluster.timing)
    for name, ms, formula in bounds.as_rows(): ...
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any

from nodes.common import constants as c
from nodes.common.config import Timing

# P_c << R_b: RocketMQ's own defaults keep the persist period a quarter of the rebalance period,
# so a queue moved by rebalance has had its offset persisted a few times before it moves.
PERSIST_TO_REBALANCE_MIN_RATIO = 4
# H < X_c / 3: a client may lose two heartbeats in a row before the broker drops its channel.
HEARTBEATS_PER_CHANNEL_EXPIRY_MIN = 3


@dataclass(frozen=True)
class Bounds:
    """Timers (ms) read from one scaled `Timing`; derived bounds are properties with a formula row."""

    L_b: int  # broker_lock_lease_ms
    L_c: int  # client_lock_lease_ms
    R_l: int  # lock_renew_interval_ms
    R_b: int  # rebalance_interval_ms
    P_c: int  # consumer_offset_persist_ms (client persist)
    F_b: int  # consumer_offset_persist_ms (the broker flushes its offset table on the same period)
    S_s: int  # slave_sync_interval_ms
    H: int  # client_heartbeat_ms
    X_c: int  # consumer_channel_expiry_ms
    K_c: int  # client_housekeeping_ms
    N_r: int  # route_poll_ms
    X_b: int  # broker_expiry_ms
    K_b: int  # broker_expiry_scan_ms
    G_r: int  # register_interval_ms
    W_p: int  # pull_delay_when_exception_ms
    U_d: int  # unlock_delay_ms
    A_h: int  # ha_reconnect_max_ms

    # ---- lock takeover (docs/chaos.md) ---------------------------------------------

    @property
    def takeover_after_kill_ms(self) -> int:
        """From a holder's SIGKILL: its lease (from its last renewal, at most R_l before the kill,
        plus one renew period of slack) must run out, then a rebalance or relock and a pull retry."""
        return self.L_b + max(self.R_b, self.R_l) + self.W_p + self.R_l

    @property
    def takeover_after_stop_ms(self) -> int:
        """From a holder's SIGTERM: it unlocks everything, the others rebalance and pull."""
        return self.R_b + self.W_p

    @property
    def takeover_after_partition_ms(self) -> int:
        """From a holder's partition: the broker keeps the silent channel X_c (found by a scan every
        K_c), and the lease must be over too; then a rebalance and a pull retry."""
        return max(self.L_b, self.X_c + self.K_c) + self.R_b + self.W_p

    # ---- reads across a master outage (docs/chaos.md) ------------------------------

    @property
    def failover_read_kill_ms(self) -> int:
        """Master killed (its sockets close): clients see the route without it, then retry the pull."""
        return self.N_r + self.W_p

    @property
    def failover_read_silent_ms(self) -> int:
        """Master silent (paused or partitioned): the name server expires it first."""
        return self.X_b + self.K_b + self.N_r + self.W_p

    @property
    def switch_back_ms(self) -> int:
        """After the master returns: it registers (at most G_r), clients poll routes, then pull."""
        return self.G_r + self.N_r + self.W_p

    # ---- duplicate budgets as time windows (docs/chaos.md) -----------------------

    @property
    def dup_window_consumer_kill_ms(self) -> int:
        """Consumption a killed consumer may repeat: what it processed since its last persist."""
        return self.P_c

    @property
    def dup_window_master_restart_ms(self) -> int:
        """Master killed and restarted from disk: the client persist plus the broker's offset flush."""
        return self.P_c + self.F_b

    @property
    def dup_window_failover_ms(self) -> int:
        """Failover to the slave and back: the client persist plus the slave's sync lag."""
        return self.P_c + self.S_s

    # ---- before and after the faults ---------------------------------------------------

    @property
    def warmup_ms(self) -> int:
        """From consumers starting to their first delivery: a route poll, a rebalance, a lock, a pull."""
        return self.N_r + self.R_b + self.R_l + self.W_p

    @property
    def converge_ms(self) -> int:
        """Slave offsets equal the master's once consumers are idle (docs/chaos.md)."""
        return self.S_s + self.P_c

    @property
    def drain_ms(self) -> int:
        """After heal: the slowest recovery path (a lease left by a killed holder, a master that must
        re-register, a consumer whose channel expired re-joining, a slave reconnecting), then one
        persist so the offsets reflect the drained messages."""
        rejoin_ms = self.H + self.R_b + self.W_p
        return max(self.takeover_after_kill_ms, self.switch_back_ms, rejoin_ms, self.A_h) + self.P_c

    @property
    def recovery_phase_ms(self) -> int:
        """The final heal-and-recover phase of a schedule: drain, then one slave sync to converge."""
        return self.drain_ms + self.S_s

    def dup_window_ms(self, fault: str) -> int:
        """The duplicate budget for a fault kind: `consumer-kill`, `master-restart` or `failover`."""
        windows = {"consumer-kill": self.dup_window_consumer_kill_ms,
                   "master-restart": self.dup_window_master_restart_ms,
                   "failover": self.dup_window_failover_ms}
        try:
            return windows[fault]
        except KeyError:
            raise ValueError(f"unknown fault kind {fault!r}; known: {', '.join(windows)}") from None

    # ---- presentation -------------------------------------------------------------------

    def timers(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def derived(self) -> dict[str, int]:
        return {name: getattr(self, name) for name, _ in _DERIVED}

    def as_rows(self) -> list[tuple[str, int, str]]:
        """(name, value in ms, formula or source) for every timer, then every derived bound."""
        rows = [(f.name, getattr(self, f.name), _TIMER_SOURCE[f.name]) for f in fields(self)]
        rows += [(name, getattr(self, name), formula) for name, formula in _DERIVED]
        return rows

    def to_json(self) -> dict[str, Any]:
        return {"timers": self.timers(),
                "derived": {name: {"ms": getattr(self, name), "formula": formula} for name, formula in _DERIVED}}

    def to_json_text(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=True)


# symbol -> Timing field it is read from
_TIMER_FIELD: dict[str, str] = {
    "L_b": "broker_lock_lease_ms", "L_c": "client_lock_lease_ms", "R_l": "lock_renew_interval_ms",
    "R_b": "rebalance_interval_ms", "P_c": "consumer_offset_persist_ms", "F_b": "consumer_offset_persist_ms",
    "S_s": "slave_sync_interval_ms", "H": "client_heartbeat_ms", "X_c": "consumer_channel_expiry_ms",
    "K_c": "client_housekeeping_ms", "N_r": "route_poll_ms", "X_b": "broker_expiry_ms",
    "K_b": "broker_expiry_scan_ms", "G_r": "register_interval_ms", "W_p": "pull_delay_when_exception_ms",
    "U_d": "unlock_delay_ms", "A_h": "ha_reconnect_max_ms",
}
_TIMER_SOURCE = {symbol: f"timing.{name}" for symbol, name in _TIMER_FIELD.items()}

_DERIVED: tuple[tuple[str, str], ...] = (
    ("takeover_after_kill_ms", "L_b + max(R_b, R_l) + W_p + R_l  (from the kill; last renewal <= kill, + one renew)"),
    ("takeover_after_stop_ms", "R_b + W_p  (from SIGTERM: unlockAll, rebalance, pull)"),
    ("takeover_after_partition_ms", "max(L_b, X_c + K_c) + R_b + W_p  (silent holder: channel expiry + scan)"),
    ("failover_read_kill_ms", "N_r + W_p  (master's sockets close)"),
    ("failover_read_silent_ms", "X_b + K_b + N_r + W_p  (master silent: name server expiry first)"),
    ("switch_back_ms", "G_r + N_r + W_p  (master re-registers, clients poll routes)"),
    ("dup_window_consumer_kill_ms", "P_c"),
    ("dup_window_master_restart_ms", "P_c + F_b"),
    ("dup_window_failover_ms", "P_c + S_s"),
    ("warmup_ms", "N_r + R_b + R_l + W_p  (route, rebalance, lock, first pull)"),
    ("converge_ms", "S_s + P_c  (slave offsets equal the master's)"),
    ("drain_ms", "max(takeover_after_kill, switch_back, H + R_b + W_p, A_h) + P_c"),
    ("recovery_phase_ms", "drain + S_s"),
)


def derive_bounds(timing: Timing) -> Bounds:
    """The bounds of a run whose nodes were given `timing` (already scaled)."""
    return Bounds(**{symbol: int(getattr(timing, name)) for symbol, name in _TIMER_FIELD.items()})


def check_ratios(timing: Timing) -> list[str]:
    """Warnings for every safety ratio of docs/chaos.md that `timing` breaks ([] when none)."""
    b = derive_bounds(timing)
    warnings = []
    if b.L_c >= b.L_b:
        warnings.append(f"client lock lease L_c={b.L_c} ms must be below the broker lease L_b={b.L_b} ms: "
                        "a client would consume after the broker gave its queue away")
    if b.R_l >= b.L_c:
        warnings.append(f"lock renew period R_l={b.R_l} ms must be below the client lease L_c={b.L_c} ms: "
                        "no renewal could land before the lease ends")
    if b.X_c <= b.H * HEARTBEATS_PER_CHANNEL_EXPIRY_MIN:
        warnings.append(f"heartbeat H={b.H} ms must be below X_c/{HEARTBEATS_PER_CHANNEL_EXPIRY_MIN} "
                        f"(X_c={b.X_c} ms): two lost heartbeats would drop a live consumer")
    if b.P_c * PERSIST_TO_REBALANCE_MIN_RATIO > b.R_b:
        warnings.append(f"offset persist P_c={b.P_c} ms must be at most R_b/{PERSIST_TO_REBALANCE_MIN_RATIO} "
                        f"(R_b={b.R_b} ms): a moved queue would repeat a whole rebalance period")
    floored = sorted({name for name in _TIMER_FIELD.values() if getattr(timing, name) <= c.TIMING_FLOOR_MS})
    if floored:
        warnings.append(f"timers at the {c.TIMING_FLOOR_MS} ms floor (scaled too far, their ratios are lost): "
                        + ", ".join(floored))
    return warnings
