"""What the checks compare against: the run's bounds (from `chaos.bounds`) and the suite's budgets.

The checker never uses a literal duration and derives no bound of its own: `chaos.bounds` is the
one place bounds come from. A run's own `<run_dir>/bounds.json` is used when present (re-checking
an old run gives the verdict it had); otherwise the bounds are derived from `<run_dir>/timing.json`
(or a node's `config.json`), a timer the run does not record getting RocketMQ's default times the
run's time scale, inferred from the timers it does record (docs/chaos.md).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.bounds import (
    DERIVED_FORMULAS,
    JUDGE_SLACK_MS,
    JUDGE_SLACK_RATIO,
    RunBounds,
    bounds_from_json,
    bounds_from_timing_fields,
)
from nodes.common import constants as c

# symbol -> what the timer means (the report's timers table); values come from `chaos.bounds`
TIMERS: dict[str, str] = {
    "L_b": "broker-side queue-lock lease", "L_c": "client-side lock validity", "R_l": "lock refresh period",
    "R_b": "rebalance period", "P_c": "client offset persist period", "F_b": "broker offset flush period",
    "S_s": "slave metadata + offset sync period", "H": "client heartbeat period",
    "X_c": "broker drops a silent client after", "K_c": "broker's silent-client scan period",
    "N_r": "client route refresh period", "X_b": "name server drops a silent broker after",
    "K_b": "name server's silent-broker scan period", "G_r": "broker registration period",
    "W_p": "pull retry after an error / not locked", "U_d": "delayed unlock of a dropped orderly queue",
    "A_h": "slave reconnect backoff ceiling",
    "T_s": "producer send timeout (unscaled)", "I_p": "producer's longest avoidance of a failed broker",
    "D_c": "broker's disk check period (refuse above 90 %, write again below)",
}


@dataclass(frozen=True)
class Bounds:
    """The checker's view of one run's bounds (`chaos.bounds`, the single source) with the slack
    a measurement may exceed them by. Timers read as attributes (`b.L_b`); derived bounds are
    methods; `judge` turns a measurement into a row that shows the bound and the slack."""

    run: RunBounds
    slack_ms: int
    slack_ratio: float

    def __getattr__(self, name: str) -> int:
        run = self.__dict__.get("run")
        if run is not None and name in run.bounds.timers():
            return run.bounds.timers()[name]
        raise AttributeError(name)

    @property
    def timers(self) -> dict[str, int]:
        return self.run.bounds.timers()

    @property
    def sources(self) -> dict[str, str]:
        return self.run.sources

    @property
    def scale(self) -> float:
        return self.run.scale

    def slack(self, bound_ms: float) -> int:
        """Scheduling and logging jitter allowed on top of a bound."""
        return round(self.slack_ms + self.slack_ratio * bound_ms)

    def limit(self, bound_ms: float) -> int:
        return round(bound_ms) + self.slack(bound_ms)

    def judge(self, what: str, measured_ms: float, bound_ms: float) -> dict[str, Any]:
        """measured_ms, bound_ms, slack_ms, limit_ms, verdict (ok | slow) and a `judged` sentence."""
        slack = self.slack(bound_ms)
        ok = measured_ms <= bound_ms + slack
        sign = "<=" if ok else ">"
        return {"measured_ms": measured_ms, "bound_ms": bound_ms, "slack_ms": slack, "limit_ms": round(bound_ms) + slack,
                "verdict": "ok" if ok else "slow",
                "judged": f"{what} {measured_ms:,.0f} ms {sign} bound {bound_ms:,.0f} ms + slack {slack:,} ms"}

    def derived(self) -> dict[str, tuple[int, str]]:
        """name -> (ms, formula) for the report's bounds table and verdict.json."""
        return {name: (self.run.ms(name), formula) for name, formula in DERIVED_FORMULAS}

    def takeover_kill(self) -> int:
        return self.run.ms("takeover_after_kill_ms")

    def takeover_graceful(self) -> int:
        return self.run.ms("takeover_after_stop_ms")

    def takeover_rebalance(self) -> int:
        return self.run.ms("takeover_after_rebalance_ms")

    def takeover_lost(self) -> int:
        return self.run.ms("takeover_after_lost_lock_ms")

    def takeover_master_return(self) -> int:
        return self.run.ms("takeover_after_master_return_ms")

    def takeover_silent(self) -> int:
        return self.run.ms("takeover_after_partition_ms")

    def takeover_after_restart(self) -> int:
        """A restarted consumer's warm-up: route, rebalance, lock, first pull."""
        return self.run.ms("warmup_ms")

    def rebalance_bound(self, kind: str, *, orderly: bool = False) -> int:
        """How long ownership may take to settle after a change of `kind`: route | join | silent;
        an orderly group adds the handover of a queue's lock."""
        base = self.run.ms(f"rebalance_after_{kind}_ms")
        return base + (self.run.ms("rebalance_orderly_extra_ms") if orderly else 0)

    def first_consume(self) -> int:
        return self.run.ms("first_consume_ms")

    def failover_kill(self) -> int:
        return self.run.ms("failover_read_kill_ms")

    def failover_silent(self) -> int:
        return self.run.ms("failover_read_silent_ms")

    def switch_back(self) -> int:
        return self.run.ms("switch_back_ms")

    def convergence(self) -> int:
        return self.run.ms("converge_ms")

    def redelivery_window(self, cause: str) -> int:
        """B of docs/chaos.md: how much consumption a fault may repeat."""
        if cause == "broker":
            return self.run.ms("dup_window_broker_fault_ms")
        return self.run.ms("dup_window_consumer_kill_ms")


def bounds_from_timing(timing: dict[str, Any] | None, *, slack_ms: int, slack_ratio: float,
                       origin: str = "timing.json") -> Bounds:
    return Bounds(bounds_from_timing_fields(timing, origin), slack_ms, slack_ratio)


@dataclass(frozen=True)
class CheckerConfig:
    """Bounds, budgets and switches for one check run; `from_run_dir` reads the run's own."""

    suite: str | None = None
    seed: int | None = None
    timing: dict[str, Any] = field(default_factory=dict)
    timing_origin: str = "defaults"
    # the run's own bounds.json (`chaos.bounds.Bounds.to_json`): when present it wins over `timing`
    bounds_json: dict[str, Any] | None = None
    # a bound is exceeded only beyond bound + slack_ms + slack_ratio * bound (chaos.bounds says why)
    slack_ms: int = JUDGE_SLACK_MS
    slack_ratio: float = JUDGE_SLACK_RATIO
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
    # broker node -> {"broker_name", "broker_id", "broker_role", "flush_disk_type"} (each broker's
    # config.json): the durability mode the run promised
    store_modes: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the checks the run asked for (run.json "checks"); None: every check
    checks: tuple[str, ...] | None = None
    # the suite's checks the run set aside, with why (run.json "checks_set_aside": a real client
    # journals too little for them); shown beside the verdict, never part of it
    checks_set_aside: dict[str, str] = field(default_factory=dict)
    # the coverage paths the run's suite claims (run.json "claims"); None: the suite's own (chaos.suites)
    claims: tuple[str, ...] | None = None
    # overlapping orderly consumers caused by a holder paused past L_b - L_c mid-batch are
    # RocketMQ's design (no fencing); True makes them failures
    fail_expected_overlaps: bool = False
    # the consumers are a real RocketMQ client (`--client`): what its own bugs cause is a client
    # finding (chaos.checker.findings), not a broker fault: one stopped without unlocking leaves the
    # broker only the lease to wait out (takeover judged as after a kill), one that consumed on after
    # its unlock restarts at the committed offset (order: an explained rewind)
    real_client_findings: bool = False
    # the consumers consume by POP (a RocketMQ 5 client): every client of the group receives from
    # every queue by design, so two clients taking turns on a queue is no shared-queue finding
    pop_consumers: bool = False
    # POP: the brokers' revive interval (Timing.pop_revive_interval_ms of the run) and a group's
    # delivery attempts before the DLQ (retry_max_times + 1)
    pop_revive_interval_ms: int = c.POP_REVIVE_INTERVAL_MS
    pop_max_attempts: int = c.GROUP_RETRY_MAX_TIMES + 1
    max_examples: int = 20

    @property
    def bounds(self) -> Bounds:
        if self.bounds_json:
            return Bounds(bounds_from_json(self.bounds_json), self.slack_ms, self.slack_ratio)
        return bounds_from_timing(self.timing, slack_ms=self.slack_ms, slack_ratio=self.slack_ratio,
                                  origin=self.timing_origin)

    def explain_slack_ms(self) -> int:
        if self.duplicate_explain_slack_ms is not None:
            return self.duplicate_explain_slack_ms
        b = self.bounds
        return b.P_c + b.R_b + self.slack_ms

    @classmethod
    def from_run_dir(cls, run_dir: str | Path, **overrides: Any) -> CheckerConfig:
        """bounds.json, else timing.json (or a node's config.json "timing"); run.json's suite, seed and
        checker overrides."""
        run_dir = Path(run_dir)
        values: dict[str, Any] = {}
        bounds_path = run_dir / "bounds.json"
        if bounds_path.is_file():
            raw = _read_json(bounds_path)
            if isinstance(raw, dict) and isinstance(raw.get("timers"), dict):
                values["bounds_json"] = raw
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
        modes = {}
        for config_path in sorted(run_dir.glob("*/config.json")):
            raw = _read_json(config_path)
            if isinstance(raw, dict) and (raw.get("role") == "broker" or "broker_role" in raw):
                store = raw.get("store") if isinstance(raw.get("store"), dict) else {}
                modes[raw.get("node_id") or config_path.parent.name] = {
                    "broker_name": raw.get("broker_name"), "broker_id": raw.get("broker_id"),
                    "broker_role": raw.get("broker_role"), "flush_disk_type": store.get("flush_disk_type", "ASYNC_FLUSH")}
        if modes:
            values["store_modes"] = modes
        run_json = run_dir / "run.json"
        if run_json.is_file():
            raw = _read_json(run_json)
            if isinstance(raw, dict):
                values.update({k: raw[k] for k in ("suite", "seed") if k in raw})
                if isinstance(raw.get("checks"), list):
                    values["checks"] = tuple(str(x) for x in raw["checks"])
                if isinstance(raw.get("checks_set_aside"), dict):
                    values["checks_set_aside"] = {str(k): str(v) for k, v in raw["checks_set_aside"].items()}
                if isinstance(raw.get("claims"), list):
                    values["claims"] = tuple(str(x) for x in raw["claims"])
                known = {f.name for f in dataclasses.fields(cls)}
                values.update({k: v for k, v in (raw.get("checker") or {}).items() if k in known})
        values.update(overrides)
        return cls(**values)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
