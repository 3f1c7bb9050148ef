"""The job: load a run's histories, run every check, write verdict.json and report.html.

The same code runs in-process (`check_run`, `mqlab chaos check`) and under `spark-submit`
(`python -m chaos.checker RUN_DIR`), locally or on a cluster.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chaos.checker.config import CheckerConfig
from chaos.checker.verdict import CheckResult, Verdict, check_safe, jsonable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from chaos.checker.loader import History

VERDICT_JSON = "verdict.json"
# below this much history, an interpreted local session checks faster than a JIT-compiling one
SMALL_INPUT_BYTES = 256 * 1024 * 1024
REPORT_HTML = "report.html"


@dataclass
class CheckOutput:
    verdict: Verdict
    verdict_path: Path | None
    report_path: Path | None
    seconds: dict[str, float]


def run_checks(h: History, cfg: CheckerConfig, names: Iterable[str] | None = None) -> list[CheckResult]:
    from chaos.checker.checks import CHECKS

    # a run's own list (run.json "checks") when none is given: re-checking judges what the run asked
    wanted = list(names) if names is not None else [n for n in (cfg.checks or CHECKS) if n in CHECKS]
    results = []
    for name in wanted:
        definition, fn = CHECKS[name]
        started = time.monotonic()
        result = check_safe(name, definition, lambda fn=fn: fn(h, cfg))
        result.seconds = time.monotonic() - started
        results.append(result)
    return results


def verdict_for(h: History, cfg: CheckerConfig, results: list[CheckResult], extra: dict[str, Any] | None = None
                ) -> Verdict:
    b = cfg.bounds
    by_name = {r.name: r for r in results}
    loss: dict[str, Any] = {}
    if "lost" in by_name and "lost_allowed" in by_name["lost"].counts:
        c = by_name["lost"].counts
        loss = {"allowed": c["lost_allowed"], "unallowed": c["lost_unallowed"],
                "reused_offsets": c.get("lost_reused_offsets", 0)}
    elif "durability" in by_name and "allowed_loss" in by_name["durability"].counts:
        c = by_name["durability"].counts
        loss = {"allowed": c["allowed_loss"], "unallowed": c["unallowed_loss"],
                "reused_offsets": c.get("reused_offsets", 0)}
    info = {
        "inputs": {"files": h.present, **h.stats},
        "bounds_from": "bounds.json" if cfg.bounds_json else cfg.timing_origin,
        "timers_ms": b.timers, "timer_sources": b.sources, "time_scale": b.scale,
        "bounds_ms": {k: {"ms": v, "formula": f} for k, (v, f) in b.derived().items()},
        "slack": {"ms": b.slack_ms, "ratio": b.slack_ratio, "clock_ms": cfg.clock_slack_ms},
        "faults": [w.to_json() for w in h.faults],
        "storage_faults": [{"op": f.op, "node": f.node, "start_ms": f.start_ms, "detail": f.detail}
                           for f in h.storage_faults],
        # acknowledged messages never consumed: allowed by the run's durability mode, or not; of
        # the allowed, `reused_offsets` were acknowledged after a power loss at an offset it cut
        "loss": loss or None,
        # checks of the suite the run's consumers cannot feed (chaos.real_clients), and checks that found
        # nothing of theirs in the run's histories, with why
        "checks_set_aside": {**{k: v for k, v in cfg.checks_set_aside.items() if k not in by_name},
                             **{r.name: r.set_aside for r in results if r.set_aside}} or None,
        **(extra or {}),
    }
    return Verdict.of(results, suite=cfg.suite, seed=cfg.seed, run_dir=str(h.run_dir) if h.run_dir else None,
                      info=jsonable(info))


def check_run(run_dir: str | Path, *, spark: SparkSession | None = None, spark_master: str | None = None,
              out_dir: str | Path | None = None, config: CheckerConfig | None = None, report: bool = True,
              names: Iterable[str] | None = None) -> CheckOutput:
    """Check one run dir end to end; the session is made (and stopped) here unless one is given."""
    from chaos.checker.loader import load_history
    from chaos.checker.session import make_spark

    run_dir = Path(run_dir)
    out = Path(out_dir) if out_dir is not None else run_dir
    cfg = config or CheckerConfig.from_run_dir(run_dir)
    seconds: dict[str, float] = {}
    t = time.monotonic()
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()  # embedded in a job or a test: use it, leave it running
    own = spark is None
    session = spark or make_spark(spark_master, small_input=input_bytes(run_dir) < SMALL_INPUT_BYTES)
    seconds["spark_start"] = time.monotonic() - t
    try:
        t = time.monotonic()
        h = load_history(session, run_dir)
        h.stats  # noqa: B018 - reads every input once and fixes the time span
        seconds["load"] = time.monotonic() - t
        t = time.monotonic()
        results = run_checks(h, cfg, names)
        seconds["checks"] = time.monotonic() - t
        verdict = verdict_for(h, cfg, results, {"spark_master": session.sparkContext.master})
        # a judgement of some of the run's checks only (a switched selftest case, a test) is no account
        # of the run: its findings and coverage (seconds each) are left to a whole judgement
        if names is None or cfg.checks is None or set(cfg.checks) <= set(names):
            t = time.monotonic()
            verdict.info["client_findings"] = findings_safe(h, cfg)  # beside the verdict, never part of it
            seconds["findings"] = time.monotonic() - t
            t = time.monotonic()
            verdict.info.update(coverage_safe(h, cfg))  # which paths the run reached: never part of the verdict
            seconds["coverage"] = time.monotonic() - t
        verdict_path = verdict.write(out / VERDICT_JSON)
        report_path = None
        if report:
            from chaos.checker.report import write_report

            t = time.monotonic()
            report_path = write_report(h, cfg, verdict, out / REPORT_HTML)
            seconds["report"] = time.monotonic() - t
        verdict.info["seconds"] = {k: round(v, 2) for k, v in seconds.items()}
        verdict.write(out / VERDICT_JSON)
        h.unpersist()
        return CheckOutput(verdict, verdict_path, report_path, seconds)
    finally:
        if own:
            session.stop()


def findings_safe(h: History, cfg: CheckerConfig) -> dict[str, Any]:
    """Client findings (chaos.checker.findings); a failure to compute them is reported, never raised."""
    from chaos.checker.findings import KINDS, client_findings

    try:
        return jsonable(client_findings(h, cfg))
    except Exception as exc:  # findings are advisory: they must not cost the run its verdict
        return {"count": 0, "by_kind": {}, "findings": [], "kinds": KINDS,
                "error": f"findings could not be computed: {type(exc).__name__}: {exc}"[:2000]}


def coverage_safe(h: History, cfg: CheckerConfig) -> dict[str, Any]:
    """verdict.json's coverage keys (chaos.checker.coverage); a failure to count is reported, never raised."""
    from chaos.checker.coverage import coverage_info

    return coverage_info(h, cfg)


def input_bytes(run_dir: str | Path) -> int:
    """Bytes of history files under the run dir (what the session will read)."""
    run_dir = Path(run_dir)
    total = 0
    for path in run_dir.rglob("*"):
        if path.suffix in (".jsonl", ".parquet", ".json") and path.is_file():
            total += path.stat().st_size
    return total
