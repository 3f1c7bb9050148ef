"""`python -m chaos.checker RUN_DIR [--out DIR] [--checks a,b]`, also the entry for `spark-submit`.

The chaos runner judges every run through this entry in a fresh process, so the Java gateway is
never forked from a process whose gRPC threads are alive (a fork there can take the gateway down).
Exit 0 valid, 1 invalid, 2 unknown or could not judge; a failure to judge is one line on stderr
(MQLAB_DEBUG=1 adds the traceback).

Under spark-submit the submitted master is used (see `session.make_spark`); ship the code with
`--py-files` or install mqlab on the executors.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from chaos.checker.pipeline import check_run
from chaos.checker.session import SparkUnavailable
from chaos.checker.verdict import EXIT_UNKNOWN


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.checker", description=__doc__)
    parser.add_argument("run_dir")
    parser.add_argument("--out", default=None, help="where verdict.json and report.html go (default: RUN_DIR)")
    parser.add_argument("--spark-master", default=None)
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument("--checks", default=None, help="comma-separated check names (default: every check)")
    args = parser.parse_args(argv)
    names = [n for n in args.checks.split(",") if n] if args.checks else None
    try:
        out = check_run(args.run_dir, spark_master=args.spark_master, out_dir=args.out, report=not args.no_report,
                        names=names)
    except (SparkUnavailable, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN
    except Exception as exc:  # whoever started us reads one line, not a traceback
        if os.environ.get("MQLAB_DEBUG"):
            traceback.print_exc()
        print(f"error: the checker failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
              file=sys.stderr)
        return EXIT_UNKNOWN
    print(f"{out.verdict.valid}: {out.verdict_path}")
    return out.verdict.exit_code


if __name__ == "__main__":
    sys.exit(main())
