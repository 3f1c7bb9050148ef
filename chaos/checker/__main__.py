"""`python -m chaos.checker RUN_DIR [--out DIR]`, also the entry for `spark-submit` on a cluster.

Under spark-submit the submitted master is used (see `session.make_spark`); ship the code with
`--py-files` or install mqlab on the executors.
"""

from __future__ import annotations

import argparse
import sys

from chaos.checker.pipeline import check_run
from chaos.checker.session import SparkUnavailable
from chaos.checker.verdict import EXIT_UNKNOWN


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.checker", description=__doc__)
    parser.add_argument("run_dir")
    parser.add_argument("--out", default=None, help="where verdict.json and report.html go (default: RUN_DIR)")
    parser.add_argument("--spark-master", default=None)
    parser.add_argument("--no-report", action="store_true")
    args = parser.parse_args(argv)
    try:
        out = check_run(args.run_dir, spark_master=args.spark_master, out_dir=args.out, report=not args.no_report)
    except (SparkUnavailable, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN
    print(f"{out.verdict.valid}: {out.verdict_path}")
    return out.verdict.exit_code


if __name__ == "__main__":
    sys.exit(main())
