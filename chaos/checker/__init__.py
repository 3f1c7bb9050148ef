"""The chaos checker: a PySpark job that reads a run's histories and decides.

    from chaos.checker import check_run
    out = check_run("runs/latest")          # verdict.json + report.html in the run dir
    out.verdict.valid                        # True | False | "unknown"

`schemas` is the history contract producers follow; `checks` holds the definitions
 (docs/chaos.md); `config` derives every bound from the run's timers.
Importing this package does not import PySpark; running a check does.
"""

from chaos.checker.config import Bounds, CheckerConfig
from chaos.checker.pipeline import REPORT_HTML, VERDICT_JSON, CheckOutput, check_run
from chaos.checker.verdict import EXIT_INVALID, EXIT_UNKNOWN, EXIT_VALID, CheckResult, Verdict, worst

__all__ = ["EXIT_INVALID", "EXIT_UNKNOWN", "EXIT_VALID", "REPORT_HTML", "VERDICT_JSON", "Bounds", "CheckOutput",
           "CheckResult", "CheckerConfig", "Verdict", "check_run", "worst"]
