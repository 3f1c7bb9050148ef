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
    T_s send timeout (unscaled) I_p producer's longest broker isolation (latency fault)

    bounds = derive_bounds(cluster.timing)
    for name, ms, formula in bounds.as_rows(): ...
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from nodes.common import constants as c
from nodes.common.config import Timing

# A measured reaction is late only beyond bound + JUDGE_SLACK_MS + JUDGE_SLACK_RATIO x bound. The
# fixed part covers what no timer explains: cross-process event-log jitter, an RPC round trip and
# one scheduler delay on a loaded host; the proportional part covers timers that fire late under
# load (a bound of n timer periods collects n such delays). Both are small next to the scaled
# bounds, so a reaction that takes a timer period longer than the formula says is caught.
JUDGE_SLACK_MS = 150
JUDGE_SLACK_RATIO = 0.1

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
    T_s: int = c.SEND_TIMEOUT_MS  # send_timeout_ms (an RPC budget: never scaled)
    I_p: int = c.SEND_NOT_AVAILABLE_MS[-1]  # send_not_available_max_ms
    D_c: int = c.DISK_CHECK_INTERVAL_MS  # disk_check_interval_ms: a full disk is refused, a freed one written, within it

    # ---- lock takeover (docs/chaos.md) ---------------------------------------------

    @property
    def takeover_after_kill_ms(self) -> int:
        """From the killed holder's last lock grant or renewal t_L (the broker stamps the lease when it
        processes the request; t_L <= the kill, so measured from the kill it is an upper bound too):
        the lease runs out at t_L + L_b, then a rebalance or relock and a pull retry (docs/chaos.md)."""
        return self.L_b + max(self.R_b, self.R_l) + self.W_p

    @property
    def takeover_after_stop_ms(self) -> int:
        """From a holder's SIGTERM: it unlocks everything, the others rebalance and pull."""
        return self.R_b + self.W_p

    @property
    def takeover_after_rebalance_ms(self) -> int:
        """A queue dropped by a rebalance: the delayed unlock, the next rebalance, a pull retry."""
        return self.U_d + self.R_b + self.W_p

    @property
    def takeover_after_lost_lock_ms(self) -> int:
        """A lock lost or expired (or the master back with an empty lock table): a rebalance, a relock, a pull."""
        return self.R_b + self.R_l + self.W_p

    @property
    def takeover_after_master_return_ms(self) -> int:
        """The master back after a kill, its lock table empty and its consumer table too: clients see
        it in the route (N_r), it learns the group from their next heartbeat (H; until then it answers
        the consumer list empty and the rebalance is skipped, as RocketMQ's does), then a rebalance,
        a relock and a pull retry."""
        return self.N_r + self.H + self.R_b + self.R_l + self.W_p

    @property
    def first_consume_ms(self) -> int:
        """From a lock grant to the first orderly consumption: one relock period and a pull retry."""
        return self.R_l + self.W_p

    @property
    def expected_overlap_pause_ms(self) -> int:
        """A holder paused longer than this mid-batch may overlap the next holder by design (no fencing)."""
        return self.L_b - self.L_c

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

    # ---- a broker group lost (docs/chaos.md, availability) ---------------------------

    @property
    def group_loss_ms(self) -> int:
        """A silent broker group leaves every client's route: the name server expires it (X_b, found
        by a scan every K_b), then clients poll routes (N_r)."""
        return self.X_b + self.K_b + self.N_r

    @property
    def send_stall_ms(self) -> int:
        """The longest a producer thread waits on one send to an unresponsive broker: one send timeout
        (every attempt shares it). With latency fault tolerance that broker is then avoided for I_p."""
        return self.T_s

    # ---- rebalance convergence (docs/chaos.md, rebalance) ---------------------------

    @property
    def rebalance_after_route_ms(self) -> int:
        """A route change (a broker group's queues leave or return, a master returns) seen first by
        one client: the others poll routes within N_r; a returned master learns the group from the
        heartbeats its clients send once they know it again (H; until then its consumer list is
        short or empty); then every client rebalances (R_b)."""
        return self.N_r + self.H + self.R_b

    @property
    def rebalance_after_join_ms(self) -> int:
        """A consumer starts, resumes, stops or is killed (its connections close, the brokers notify
        the group): the brokers know the members after one heartbeat (H), then every client
        rebalances (R_b)."""
        return self.H + self.R_b

    @property
    def rebalance_after_silent_ms(self) -> int:
        """A consumer paused or cut off: the brokers drop its silent channel after X_c (found by a
        scan every K_c, with no notification), then the others' next rebalance (R_b)."""
        return self.X_c + self.K_c + self.R_b

    @property
    def rebalance_orderly_extra_ms(self) -> int:
        """On top, for an orderly group: the new owner can lock a queue once its old owner unlocked it
        (a dropped queue with cached messages: after U_d) or, the old owner dead, its lease ran out
        (L_b from its last renewal, at or before the death); then at its next rebalance (R_b)."""
        return max(self.U_d, self.L_b) + self.R_b

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
    def dup_window_broker_fault_ms(self) -> int:
        """Any broker fault (restart or failover, whichever came): the client persist plus the longer
        of the broker's offset flush and the slave's sync."""
        return self.P_c + max(self.F_b, self.S_s)

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
        return {name: getattr(self, name) for name, _ in DERIVED_FORMULAS}

    def as_rows(self) -> list[tuple[str, int, str]]:
        """(name, value in ms, formula or source) for every timer, then every derived bound."""
        rows = [(f.name, getattr(self, f.name), _TIMER_SOURCE[f.name]) for f in fields(self)]
        rows += [(name, getattr(self, name), formula) for name, formula in DERIVED_FORMULAS]
        return rows

    def to_json(self) -> dict[str, Any]:
        return {"timers": self.timers(),
                "derived": {name: {"ms": getattr(self, name), "formula": formula} for name, formula in DERIVED_FORMULAS}}

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
    "T_s": "send_timeout_ms", "I_p": "send_not_available_max_ms", "D_c": "disk_check_interval_ms",
}
# timers that are RPC budgets, not RocketMQ timers: the time scale leaves them alone
_UNSCALED_SYMBOLS = ("T_s",)
_TIMER_SOURCE = {symbol: f"timing.{name}" for symbol, name in _TIMER_FIELD.items()}

DERIVED_FORMULAS: tuple[tuple[str, str], ...] = (
    ("takeover_after_kill_ms", "L_b + max(R_b, R_l) + W_p  (from the holder's last lock grant t_L <= the kill)"),
    ("takeover_after_stop_ms", "R_b + W_p  (from SIGTERM: unlockAll, rebalance, pull)"),
    ("takeover_after_rebalance_ms", "U_d + R_b + W_p  (from the drop: delayed unlock, rebalance, pull)"),
    ("takeover_after_lost_lock_ms", "R_b + R_l + W_p  (from the loss: rebalance, relock, pull)"),
    ("takeover_after_master_return_ms",
     "N_r + H + R_b + R_l + W_p  (from the master's return: route, heartbeat, rebalance, relock, pull)"),
    ("first_consume_ms", "R_l + W_p  (from the lock grant)"),
    ("expected_overlap_pause_ms", "L_b - L_c  (a holder paused longer mid-batch may overlap by design)"),
    ("takeover_after_partition_ms", "max(L_b, X_c + K_c) + R_b + W_p  (silent holder: channel expiry + scan)"),
    ("failover_read_kill_ms", "N_r + W_p  (master's sockets close)"),
    ("failover_read_silent_ms", "X_b + K_b + N_r + W_p  (master silent: name server expiry first)"),
    ("switch_back_ms", "G_r + N_r + W_p  (master re-registers, clients poll routes)"),
    ("group_loss_ms", "X_b + K_b + N_r  (a silent broker group leaves the routes)"),
    ("send_stall_ms", "T_s  (one send to an unresponsive broker; then it is avoided for I_p)"),
    ("rebalance_after_route_ms", "N_r + H + R_b  (a route change: the others poll, a returned master learns the "
                                 "group, rebalance)"),
    ("rebalance_after_join_ms", "H + R_b  (a consumer starts, resumes, stops or dies)"),
    ("rebalance_after_silent_ms", "X_c + K_c + R_b  (a consumer paused or cut off: channel expiry + scan)"),
    ("rebalance_orderly_extra_ms", "max(U_d, L_b) + R_b  (orderly: delayed unlock or a dead holder's lease, rebalance)"),
    ("dup_window_consumer_kill_ms", "P_c"),
    ("dup_window_master_restart_ms", "P_c + F_b"),
    ("dup_window_failover_ms", "P_c + S_s"),
    ("dup_window_broker_fault_ms", "P_c + max(F_b, S_s)"),
    ("warmup_ms", "N_r + R_b + R_l + W_p  (route, rebalance, lock, first pull)"),
    ("converge_ms", "S_s + P_c  (slave offsets equal the master's)"),
    ("drain_ms", "max(takeover_after_kill, switch_back, H + R_b + W_p, A_h) + P_c"),
    ("recovery_phase_ms", "drain + S_s"),
)


def derive_bounds(timing: Timing) -> Bounds:
    """The bounds of a run whose nodes were given `timing` (already scaled)."""
    return Bounds(**{symbol: int(getattr(timing, name)) for symbol, name in _TIMER_FIELD.items()})


# older names a run's timing.json or config.json may carry a timer under (read after the current one)
_TIMER_ALIASES: dict[str, tuple[str, ...]] = {
    "L_b": ("lock_lease_broker_ms", "rebalance_lock_max_live_broker_ms"),
    "L_c": ("lock_lease_client_ms", "rebalance_lock_max_live_ms", "lock_max_live_ms"),
    "R_l": ("rebalance_lock_interval_ms", "lock_interval_ms", "lock_renew_ms"),
    "F_b": ("broker_offset_flush_ms", "consumer_offset_flush_ms"),
    "U_d": ("unlock_delay_time_ms",),
}
# the timers a run's time scale is inferred from when some timers are missing
_SCALE_SYMBOLS = ("R_b", "P_c", "H", "N_r", "X_b", "G_r", "S_s", "X_c")


@dataclass(frozen=True)
class RunBounds:
    """The bounds a run is judged with, where each timer came from, and the run's time scale.

    `derived_ms` holds what the run's own `bounds.json` recorded for its derived bounds: judging
    with them (not with today's formulas) gives an old run the verdict it had."""

    bounds: Bounds
    sources: dict[str, str]
    scale: float
    derived_ms: dict[str, int]

    def ms(self, name: str) -> int:
        """A derived bound (or a timer) by name, as the run recorded it when it did."""
        if name in self.derived_ms:
            return self.derived_ms[name]
        return int(getattr(self.bounds, name))


def bounds_from_timing_fields(timing: Mapping[str, Any] | None, origin: str = "timing.json") -> RunBounds:
    """Bounds from a Timing written as a dict; a timer it lacks is RocketMQ's default times the
    run's scale (the median ratio of the timers it has to their defaults)."""
    values = {k: v for k, v in (timing or {}).items() if isinstance(v, int | float) and not isinstance(v, bool) and v > 0}
    defaults = Timing()
    found: dict[str, tuple[int, str]] = {}
    for symbol, name in _TIMER_FIELD.items():
        for key in (name, *_TIMER_ALIASES.get(symbol, ())):
            if key in values:
                found[symbol] = (int(values[key]), f"{origin}:{key}")
                break
    ratios = [found[s][0] / getattr(defaults, _TIMER_FIELD[s]) for s in _SCALE_SYMBOLS if s in found]
    scale = statistics.median(ratios) if ratios else 1.0
    timers: dict[str, int] = {}
    sources: dict[str, str] = {}
    for symbol, name in _TIMER_FIELD.items():
        if symbol in found:
            timers[symbol], sources[symbol] = found[symbol]
        else:
            unscaled = symbol in _UNSCALED_SYMBOLS
            timers[symbol] = max(1, round(getattr(defaults, name) * (1.0 if unscaled else scale)))
            sources[symbol] = "default" if scale == 1.0 or unscaled else f"default x{scale:g}"
    return RunBounds(Bounds(**timers), sources, scale, {})


def bounds_from_json(data: Mapping[str, Any], origin: str = "bounds.json") -> RunBounds:
    """A run's own `bounds.json` (`Bounds.to_json`): its timers, and its derived values as recorded."""
    raw_timers = data.get("timers") if isinstance(data.get("timers"), Mapping) else {}
    known = {s: int(v) for s, v in raw_timers.items() if s in _TIMER_FIELD and isinstance(v, int | float)}
    base = bounds_from_timing_fields({_TIMER_FIELD[s]: v for s, v in known.items()}, origin)
    sources = {s: (f"{origin}:{s}" if s in known else src) for s, src in base.sources.items()}
    derived = data.get("derived") if isinstance(data.get("derived"), Mapping) else {}
    derived_ms = {name: int(v["ms"]) for name, v in derived.items()
                  if isinstance(v, Mapping) and isinstance(v.get("ms"), int | float)}
    return RunBounds(base.bounds, sources, base.scale, derived_ms)


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


# ---- real RocketMQ clients as consumers (`mqlab chaos run SUITE --client cpp|ons|py5|node5`) -------------
# A client mqlab did not write keeps its own timers: they cannot be scaled. Such a run puts every
# node at RocketMQ's real scale (the broker lock lease, channel expiry and long polling the client
# meets) and sets the client-side timers of its Timing to what that client really does, so every
# bound above describes the real client (docs/real-clients-chaos.md).
REAL_CLIENT_TIME_SCALE = 1.0
REAL_CLIENT_TIMERS_MS: dict[str, dict[str, int]] = {
    # Apache's C++ client 1.2.3: re-lock 20 s, local lock 30 s, heartbeat 30 s, rebalance 10 s, offset
    # persist 5 s, route poll 30 s. A pull in flight when its broker connection resets is retried only
    # after the async pull timeout (30 s; pulls resumed 26 s after a broker kill), so that is its W_p.
    "cpp": {"client_lock_lease_ms": 30_000, "lock_renew_interval_ms": 20_000, "rebalance_interval_ms": 10_000,
            "client_heartbeat_ms": 30_000, "consumer_offset_persist_ms": 5_000, "route_poll_ms": 30_000,
            "pull_delay_when_exception_ms": 30_000},
    # ali-ons 3.12.0 (client_config.js, mq_push_consumer.js defaults): no locks
    "ons": {"rebalance_interval_ms": 10_000, "client_heartbeat_ms": 30_000, "consumer_offset_persist_ms": 5_000,
            "route_poll_ms": 30_000, "pull_delay_when_exception_ms": 3_000},
    # Apache's RocketMQ 5 Python client 5.1.2 (PushConsumer): heartbeat 10 s, route update 30 s,
    # assignment scan 5 s (its rebalance), a failed receive retried after 1 s; no locks, and no
    # offsets to persist (each message is acked once its listener returns: 1 s covers the ack)
    "py5": {"rebalance_interval_ms": 5_000, "client_heartbeat_ms": 10_000, "consumer_offset_persist_ms": 1_000,
            "route_poll_ms": 30_000, "pull_delay_when_exception_ms": 1_000},
    # Apache's RocketMQ 5 Node.js client 1.0.8 (PushConsumer; BaseClient.js, PushConsumer.js,
    # ProcessQueue.js): the same periods as the Python one: heartbeat 10 s, route update 30 s,
    # assignment scan 5 s, a failed receive retried after 1 s (a failed ack too, without end)
    "node5": {"rebalance_interval_ms": 5_000, "client_heartbeat_ms": 10_000, "consumer_offset_persist_ms": 1_000,
              "route_poll_ms": 30_000, "pull_delay_when_exception_ms": 1_000},
}
# The same client as a SimpleConsumer (`py5-simple`): the same heartbeat and route update; it has no
# assignment scan (each receive takes the route's next queue), its wrapper retries a failed receive
# after 1 s and acks each message after consuming it: py5's timers describe it
REAL_CLIENT_TIMERS_MS["py5-simple"] = REAL_CLIENT_TIMERS_MS["py5"]
# The fault phase of a real-client run: two broker lock leases (120 s), long enough for a fault and
# the takeover after it, short enough that a run takes minutes, not the half hour 27 route polls
# would take at real scale.
REAL_CLIENT_FAULT_PHASE_X = 2.0
REAL_CLIENT_FAULT_PHASE_OF = "L_b"
# the mean gap between faults: one client rebalance (the default, a route poll, would leave room
# for a single fault in the phase at real scale)
REAL_CLIENT_FAULT_SPACING_OF = "R_b"
# what a run spends outside its timed phases: starting the cluster, read-back, stopping, the checker
REAL_CLIENT_OVERHEAD_MS = 120_000


def real_client_fault_phase_ms(bounds: Bounds) -> int:
    return round(REAL_CLIENT_FAULT_PHASE_X * getattr(bounds, REAL_CLIENT_FAULT_PHASE_OF))


def real_client_fault_spacing_ms(bounds: Bounds) -> int:
    return int(getattr(bounds, REAL_CLIENT_FAULT_SPACING_OF))


def real_client_run_ms(bounds: Bounds, fault_phase_ms: int) -> tuple[int, int]:
    """(typical, at most) length of a real-client run: the fault phase and converge always; warm-up
    and drain end early when deliveries come, up to their bounds; plus the fixed overhead."""
    fixed = fault_phase_ms + bounds.converge_ms + REAL_CLIENT_OVERHEAD_MS
    typical = fixed + bounds.R_b + bounds.drain_ms // 2
    # DRAIN_STALLS_MAX bounds is the runner's hard cap; a stalled drain stops after one
    return typical, fixed + bounds.warmup_ms + 2 * bounds.drain_ms
