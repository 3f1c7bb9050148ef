"""Judge a run dir in a fresh `python -m chaos.checker` process and read its verdict back.

A run process has used gRPC (its channels' threads may still be alive); forking Spark's Java
gateway from such a process sometimes kills the gateway. The checker therefore always starts in
a process of its own. When it cannot start or dies without a verdict, the run dir is left as it
is and the reason is one line; `mqlab chaos check RUN_DIR` judges it later.

    judged = judge(run_dir, names=suite.checks)
    if judged.output is None: print(judged.error)
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.checker.pipeline import REPORT_HTML, VERDICT_JSON, CheckOutput
from chaos.checker.verdict import EXIT_INVALID, EXIT_UNKNOWN, EXIT_VALID, CheckResult, Verdict

CHECKER_LOG = "checker.log"  # the checker process's stdout and stderr (Spark's own log lines)
POLL_S = 0.25


@dataclass
class Judged:
    output: CheckOutput | None
    error: str | None = None  # why no verdict: one line


def judge(run_dir: Path, *, names: Iterable[str] | None = None, spark_master: str | None = None,
          report: bool = True, on_wait: Callable[[], object] | None = None) -> Judged:
    """Run the checker on `run_dir` in a child process; a verdict it wrote is returned, else the reason."""
    run_dir = Path(run_dir)
    verdict_path = run_dir / VERDICT_JSON
    verdict_path.unlink(missing_ok=True)  # only a verdict written by this check counts
    cmd = [sys.executable, "-m", "chaos.checker", str(run_dir)]
    if names is not None:
        cmd += ["--checks", ",".join(names)]
    if spark_master:
        cmd += ["--spark-master", spark_master]
    if not report:
        cmd.append("--no-report")
    log_path = run_dir / CHECKER_LOG
    try:
        with log_path.open("w", encoding="utf-8") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            try:
                while True:
                    try:
                        proc.wait(timeout=POLL_S)
                        break
                    except subprocess.TimeoutExpired:
                        if on_wait is not None:
                            on_wait()
            finally:  # Ctrl-C or an error here: the checker does not outlive the run
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    except OSError as exc:
        return Judged(None, f"the checker could not start: {exc}")
    rc = proc.returncode
    if rc in (EXIT_VALID, EXIT_INVALID, EXIT_UNKNOWN) and verdict_path.is_file():
        try:
            verdict = verdict_from_json(json.loads(verdict_path.read_text()))
        except (ValueError, KeyError, TypeError) as exc:
            return Judged(None, f"the checker wrote an unreadable {VERDICT_JSON}: {exc}")
        report_path = run_dir / REPORT_HTML
        return Judged(CheckOutput(verdict, verdict_path, report_path if report and report_path.is_file() else None,
                                  dict(verdict.info.get("seconds") or {})))
    return Judged(None, f"the checker exited {rc} without a verdict: {_last_error(log_path)}")


def verdict_from_json(data: dict[str, Any]) -> Verdict:
    """The `Verdict` a checker process wrote (verdict.json), for printing and exit codes."""
    checks = {}
    for name, c in data["checks"].items():
        checks[name] = CheckResult(
            name=name, valid=c["valid"], definition=c.get("definition", ""), counts=c.get("counts") or {},
            examples=c.get("examples") or [], reason=c.get("reason"), parts=c.get("parts") or {},
            skipped=c.get("skipped") or {}, measurements=c.get("measurements") or [], error=c.get("error"),
            seconds=float(c.get("seconds") or 0.0))
    known = {"valid", "checks", "suite", "seed", "run_dir"}
    return Verdict(valid=data["valid"], checks=checks, suite=data.get("suite"), seed=data.get("seed"),
                   run_dir=data.get("run_dir"), info={k: v for k, v in data.items() if k not in known})


def _last_error(log_path: Path) -> str:
    """The checker's own one-line reason, else the log's last line."""
    try:
        lines = [line.strip() for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    for line in reversed(lines):
        if line.startswith("error:"):
            return line.removeprefix("error:").strip()[:400]
    return (lines[-1][:400] if lines else "no output") + f" (see {log_path})"
