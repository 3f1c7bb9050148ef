"""Judge run dirs in a `python -m chaos.checker` process of their own and read the verdicts back.

A run process has used gRPC (its channels' threads may still be alive); forking Spark's Java
gateway from such a process sometimes kills the gateway. The checker therefore always runs in
a process of its own, started fresh (fork and exec: it inherits no gRPC state). When it cannot
start or dies without a verdict, the run dir is left as it is and the reason is one line;
`mqlab chaos check RUN_DIR` judges it later.

    judged = judge(run_dir, names=suite.checks)          # one run: a checker process for it alone
    with CheckerProcess() as checker:                   # many runs (matrix, selftest): one process
        judged = checker.judge(run_dir, names=...)      #   and one warm JVM for all of them

A kept process saves every run after the first the JVM's start and its first, slowest pass
through each check.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from chaos.checker.pipeline import REPORT_HTML, VERDICT_JSON, CheckOutput
from chaos.checker.verdict import EXIT_INVALID, EXIT_UNKNOWN, EXIT_VALID, CheckResult, Verdict

CHECKER_LOG = "checker.log"  # the checker's stdout and stderr while it judged this run (Spark's own log lines)
POLL_S = 0.25
STOP_WAIT_S = 30.0  # a checker told to stop (or that closed its answers) gets this long to exit


@dataclass
class Judged:
    output: CheckOutput | None
    error: str | None = None  # why no verdict: one line


def judge(run_dir: Path, *, names: Iterable[str] | None = None, spark_master: str | None = None,
          report: bool = True, on_wait: Callable[[], object] | None = None) -> Judged:
    """Judge `run_dir` in a checker process started for it alone; a verdict it wrote is returned, else the reason."""
    with CheckerProcess(spark_master=spark_master) as checker:
        return checker.judge(run_dir, names=names, report=report, on_wait=on_wait)


class CheckerProcess:
    """One `python -m chaos.checker --serve` child judging run dirs one at a time, started on the
    first `judge` and again after it died; `close()` (or leaving the `with`) stops it.

    Requests go to the child's stdin, one JSON line each; answers come back one JSON line each on a
    pipe of their own (the child's stdout and stderr carry Spark's log lines). An interrupt or
    error while waiting kills the child: a checker never outlives the run that started it."""

    def __init__(self, *, spark_master: str | None = None) -> None:
        self.spark_master = spark_master
        self._proc: subprocess.Popen[bytes] | None = None
        self._answers: IO[str] | None = None
        self._log_dir: tempfile.TemporaryDirectory[str] | None = None
        self._log_path: Path | None = None
        self.started = 0  # checker processes started so far

    @property
    def pid(self) -> int | None:
        """The running checker's pid (None before the first run or after it stopped)."""
        return self._proc.pid if self._proc is not None else None

    def __enter__(self) -> CheckerProcess:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def judge(self, run_dir: Path, *, names: Iterable[str] | None = None, report: bool = True,
              on_wait: Callable[[], object] | None = None) -> Judged:
        run_dir = Path(run_dir)
        verdict_path = run_dir / VERDICT_JSON
        verdict_path.unlink(missing_ok=True)  # only a verdict written by this check counts
        try:
            proc = self._running()
        except OSError as exc:
            return Judged(None, f"the checker could not start: {exc}")
        assert self._log_path is not None
        log_from = self._log_path.stat().st_size
        request = {"run_dir": str(run_dir), "checks": list(names) if names is not None else None, "report": report}
        answer: dict[str, Any] | None = None
        try:
            try:
                assert proc.stdin is not None
                proc.stdin.write((json.dumps(request) + "\n").encode())
                proc.stdin.flush()
            except OSError:
                pass  # it died: its exit is reported below
            else:
                answer = self._answer(proc, on_wait)
        except BaseException:  # Ctrl-C or an error here: the checker does not outlive the run
            _copy_tail(self._log_path, log_from, run_dir / CHECKER_LOG)
            self.close(kill=True)
            raise
        _copy_tail(self._log_path, log_from, run_dir / CHECKER_LOG)
        if answer is None:
            rc = self._reap()
            return Judged(None, f"the checker exited {rc} without a verdict: {_last_error(run_dir / CHECKER_LOG)}")
        rc = int(answer.get("exit", EXIT_UNKNOWN))
        if rc in (EXIT_VALID, EXIT_INVALID, EXIT_UNKNOWN) and verdict_path.is_file():
            try:
                verdict = verdict_from_json(json.loads(verdict_path.read_text()))
            except (ValueError, KeyError, TypeError) as exc:
                return Judged(None, f"the checker wrote an unreadable {VERDICT_JSON}: {exc}")
            report_path = run_dir / REPORT_HTML
            return Judged(CheckOutput(verdict, verdict_path, report_path if report and report_path.is_file() else None,
                                      dict(verdict.info.get("seconds") or {})))
        return Judged(None, f"the checker gave no verdict: {answer.get('error') or 'no reason given'}")

    def close(self, *, kill: bool = False) -> None:
        """Stop the checker: at the end of its requests (it stops Spark and exits), or at once."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if kill:
                proc.kill()
            with contextlib.suppress(OSError):
                if proc.stdin is not None:
                    proc.stdin.close()  # end of requests
            try:
                proc.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._answers is not None:
            self._answers.close()
            self._answers = None
        if self._log_dir is not None:
            self._log_dir.cleanup()
            self._log_dir = None

    # ---- the child ---------------------------------------------------------------------------

    def _running(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self.close()
        self._log_dir = tempfile.TemporaryDirectory(prefix="mqlab-checker-")
        self._log_path = Path(self._log_dir.name) / CHECKER_LOG
        read_fd, write_fd = os.pipe()
        cmd = [sys.executable, "-m", "chaos.checker", "--serve", "--answer-fd", str(write_fd)]
        if self.spark_master:
            cmd += ["--spark-master", self.spark_master]
        try:
            with self._log_path.open("wb") as log:
                self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                                              pass_fds=(write_fd,))
        except OSError:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)  # the child holds the only write end: its exit ends our reads
        self._answers = os.fdopen(read_fd, "r", encoding="utf-8")
        self.started += 1
        return self._proc

    def _answer(self, proc: subprocess.Popen[bytes], on_wait: Callable[[], object] | None) -> dict[str, Any] | None:
        """The child's answer line, or None when it exited (or closed its answer pipe) first."""
        assert self._answers is not None
        while True:
            ready, _, _ = select.select([self._answers], [], [], POLL_S)
            if ready:
                line = self._answers.readline()
                if not line:
                    return None
                try:
                    return json.loads(line)
                except ValueError:
                    return {"exit": EXIT_UNKNOWN, "error": f"unreadable answer from the checker: {line[:200]!r}"}
            if proc.poll() is not None:
                return None
            if on_wait is not None:
                on_wait()

    def _reap(self) -> int | None:
        """The exit code of a child that gave no answer (it is stopped as `close` stops it)."""
        proc = self._proc
        self.close()
        return proc.returncode if proc is not None else None


def _copy_tail(log_path: Path, offset: int, dest: Path) -> None:
    """What the checker logged while judging one run, into that run's dir."""
    try:
        with log_path.open("rb") as src, dest.open("wb") as out:
            src.seek(offset)
            out.write(src.read())
    except OSError:
        pass


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
