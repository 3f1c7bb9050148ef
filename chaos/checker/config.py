"""What the checks compare against: the run's timers (from its Timing) and the suite's budgets.

The checker never uses a literal duration. Every bound is derived from the timers of the run
 (docs/chaos.md), read from `<run_dir>/timing.json` (or a node's `config.json`);
a timer the run does not record gets RocketMQ's default multiplied by the run's time scale,
which is inferred from the timers it does record. So the same history checked at k = 1/10
and k = 1/20 gives the same verdict.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# symbol -> (RocketMQ default ms, Timing field names that carry it, meaning)
TIMERS: dict[str, tuple[int, tuple[str, ...], str]] = {
    "L_b": (60_000, ("broker_lock_lease_ms", "lock_lease_broker_ms", "rebalance_lock_max_live_broker_ms"),
            "broker-side queue-lock lease"),
    "L_c": (30_000, ("client_lock_lease_ms", "lock_lease_client_ms", "rebalance_lock_max_live_ms",
                     "lock_max_live_ms"), "client-side lock validity"),
    "R_l": (20_000, ("lock_renew_interval_ms", "rebalance_lock_interval_ms", "lock_interval_ms",
                     "lock_renew_ms"), "lock refresh period"),
    "R_b": (20_000, ("rebalance_interval_ms",), "rebalance period"),
    "W_p": (1_000, ("pull_delay_when_exception_ms",), "pull retry after an error / not locked"),
    "P_c": (5_000, ("consumer_offset_persist_ms",), "client offset persist period"),
    "F_b": (5_000, ("broker_offset_flush_ms", "consumer_offset_flush_ms", "consumer_offset_persist_ms"),
            "broker offset flush period"),
    "S_s": (10_000, ("slave_sync_interval_ms",), "slave metadata + offset sync period"),
    "H": (30_000, ("client_heartbeat_ms",), "client heartbeat period"),
    "X_c": (120_000, ("consumer_channel_expiry_ms",), "broker drops a silent client after"),
    "K_c": (10_000, ("client_housekeeping_ms",), "broker's silent-client scan period"),
    "N_r": (30_000, ("route_poll_ms",), "client route refresh period"),
    "X_b": (120_000, ("broker_expiry_ms",), "name server drops a silent broker after"),
    "K_b": (10_000, ("broker_expiry_scan_ms",), "name server's silent-broker scan period"),
    "G_r": (30_000, ("register_interval_ms",), "broker registration period"),
    "U_d": (20_000, ("unlock_delay_ms", "unlock_delay_time_ms"), "delayed unlock of a dropped orderly queue"),
}

_DEFAULT_SCALE_KEYS = ("R_b", "P_c", "H", "N_r", "X_b", "G_r", "S_s", "X_c")


@dataclass(frozen=True)
class Bounds:
    """Timer values (ms) and where each came from; derived bounds are methods with their formula."""

    timers: dict[str, int]
    sources: dict[str, str]
    scale: float
    slack_ms: int
    slack_ratio: float

    def __getattr__(self, name: str) -> int:
        timers = self.__dict__.get("timers", {})
        if name in timers:
            return timers[name]
        raise AttributeError(name)

    def slack(self, bound_ms: float) -> float:
        """Scheduling and logging jitter allowed on top of a bound."""
        return self.slack_ms + self.slack_ratio * bound_ms

    def derived(self) -> dict[str, tuple[int, str]]:
        """name -> (ms, formula) for the report's bounds table."""
        t = self.timers
        return {
            "takeover after kill": (self.takeover_kill(), "from the holder's last lock: L_b + max(R_b, R_l) + W_p"),
            "takeover after stop": (self.takeover_graceful(), "from SIGTERM (unlockAll): R_b + W_p"),
            "takeover after rebalance": (self.takeover_rebalance(), "from the drop: U_d + R_b + W_p"),
            "takeover after lost lock": (self.takeover_lost(), "from the loss: R_b + R_l + W_p"),
            "takeover after pause/partition": (self.takeover_silent(),
                                               "from the fault: max(L_b, X_c + K_c) + R_b + W_p"),
            "first consume after assignment": (self.first_consume(), "from the lock grant: R_l + W_p"),
            "failover to slave (kill)": (self.failover_kill(), "N_r + W_p"),
            "failover to slave (silent)": (self.failover_silent(), "X_b + K_b + N_r + W_p"),
            "back on master": (self.switch_back(), "after the master returns: N_r + G_r + W_p"),
            "offset convergence": (self.convergence(), "S_s + P_c"),
            "expected-overlap pause": (t["L_b"] - t["L_c"], "a holder paused longer than L_b - L_c mid-batch"),
        }

    def takeover_kill(self) -> int:
        return self.L_b + max(self.R_b, self.R_l) + self.W_p

    def takeover_graceful(self) -> int:
        return self.R_b + self.W_p

    def takeover_rebalance(self) -> int:
        return self.U_d + self.R_b + self.W_p

    def takeover_lost(self) -> int:
        return self.R_b + self.R_l + self.W_p

    def takeover_silent(self) -> int:
        return max(self.L_b, self.X_c + self.K_c) + self.R_b + self.W_p

    def takeover_after_restart(self) -> int:
        """A restarted consumer's warm-up: route, rebalance, lock, first pull."""
        return self.N_r + self.R_b + self.R_l + self.W_p

    def first_consume(self) -> int:
        return self.R_l + self.W_p

    def failover_kill(self) -> int:
        return self.N_r + self.W_p

    def failover_silent(self) -> int:
        return self.X_b + self.K_b + self.N_r + self.W_p

    def switch_back(self) -> int:
        return self.N_r + self.G_r + self.W_p

    def convergence(self) -> int:
        return self.S_s + self.P_c

    def redelivery_window(self, cause: str) -> int:
        """B of docs/chaos.md: how much consumption a fault may repeat."""
        if cause == "broker":
            return self.P_c + max(self.F_b, self.S_s)
        return self.P_c


def bounds_from_timing(timing: dict[str, Any] | None, *, slack_ms: int, slack_ratio: float,
                       origin: str = "timing.json") -> Bounds:
    timing = {k: v for k, v in (timing or {}).items() if isinstance(v, int | float) and v > 0}
    found: dict[str, tuple[int, str]] = {}
    for symbol, (_, keys, _) in TIMERS.items():
        for key in keys:
            if key in timing:
                found[symbol] = (int(timing[key]), f"{origin}:{key}")
                break
    ratios = [found[s][0] / TIMERS[s][0] for s in _DEFAULT_SCALE_KEYS if s in found]
    scale = statistics.median(ratios) if ratios else 1.0
    timers: dict[str, int] = {}
    sources: dict[str, str] = {}
    for symbol, (default, _, _) in TIMERS.items():
        if symbol in found:
            timers[symbol], sources[symbol] = found[symbol]
        else:
            timers[symbol] = max(1, round(default * scale))
            sources[symbol] = "default" if scale == 1.0 else f"default x{scale:g}"
    return Bounds(timers=timers, sources=sources, scale=scale, slack_ms=slack_ms, slack_ratio=slack_ratio)


@dataclass(frozen=True)
class CheckerConfig:
    """Bounds, budgets and switches for one check run; `from_run_dir` reads the run's own."""

    suite: str | None = None
    seed: int | None = None
    timing: dict[str, Any] = field(default_factory=dict)
    timing_origin: str = "defaults"
    # a bound is exceeded only beyond bound + slack_ms + slack_ratio * bound
    slack_ms: int = 1_000
    slack_ratio: float = 0.25
    # events this close in time are treated as simultaneous (cross-process logging jitter)
    clock_slack_ms: int = 50
    # duplicates: None derives the budget from the faults (docs/chaos.md)
    duplicate_budget: int | None = None
    # a duplicate is explained by a cause within this many ms of its two deliveries
    duplicate_explain_slack_ms: int | None = None
    pull_batch_size: int = 32
    # consume queues are dense (no tag filtering): a gap in delivered offsets is a skip
    dense_queues: bool = True
    # RocketMQ 4.9 lets a returning master overwrite the slave's newer offsets (#1094, #2513):
    # report such regressions (counted against the duplicate budget) instead of failing
    allow_master_return_regression: bool = True
    # overlapping orderly consumers caused by a holder paused past L_b - L_c mid-batch are
    # RocketMQ's design (no fencing); True makes them failures
    fail_expected_overlaps: bool = False
    max_examples: int = 20

    @property
    def bounds(self) -> Bounds:
        return bounds_from_timing(self.timing, slack_ms=self.slack_ms, slack_ratio=self.slack_ratio,
                                  origin=self.timing_origin)

    def explain_slack_ms(self) -> int:
        if self.duplicate_explain_slack_ms is not None:
            return self.duplicate_explain_slack_ms
        b = self.bounds
        return b.P_c + b.R_b + self.slack_ms

    @classmethod
    def from_run_dir(cls, run_dir: str | Path, **overrides: Any) -> CheckerConfig:
        """timing.json (or a node's config.json "timing") and run.json's suite, seed, checker overrides."""
        run_dir = Path(run_dir)
        values: dict[str, Any] = {}
        timing_path = run_dir / "timing.json"
        if timing_path.is_file():
            raw = _read_json(timing_path)
            values["timing"] = raw.get("timing", raw) if isinstance(raw, dict) else {}
            values["timing_origin"] = "timing.json"
        else:
            for config_path in sorted(run_dir.glob("*/config.json")):
                raw = _read_json(config_path)
                if isinstance(raw, dict) and isinstance(raw.get("timing"), dict):
                    values["timing"] = raw["timing"]
                    values["timing_origin"] = f"{config_path.parent.name}/config.json"
                    break
        run_json = run_dir / "run.json"
        if run_json.is_file():
            raw = _read_json(run_json)
            if isinstance(raw, dict):
                values.update({k: raw[k] for k in ("suite", "seed") if k in raw})
                known = {f.name for f in dataclasses.fields(cls)}
                values.update({k: v for k, v in (raw.get("checker") or {}).items() if k in known})
        values.update(overrides)
        return cls(**values)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
