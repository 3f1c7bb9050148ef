"""`python -m chaos.checker RUN_DIR [--out DIR] [--checks a,b]`, also the entry for `spark-submit`.

Exit 0 valid, 1 invalid, 2 unknown or could not judge; a failure to judge is one line on stderr
(MQLAB_DEBUG=1 adds the traceback).

`--serve --answer-fd N` judges one run dir per JSON line on stdin (`{"run_dir", "checks",
"report"}`) with one SparkSession kept for all of them, and answers each with one JSON line
(`{"exit", "error"}`) on file descriptor N; it stops at the end of stdin. The chaos runner judges
through this mode (`chaos.judge`), in a process of its own, so the Java gateway is never forked
from a process whose gRPC threads are alive (a fork there can take the gateway down).

Under spark-submit the submitted master is used (see `session.make_spark`); ship the code with
`--py-files` or install mqlab on the executors.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from typing import IO, TYPE_CHECKING, Any

from chaos.checker.pipeline import SMALL_INPUT_BYTES, check_run, input_bytes
from chaos.checker.session import SparkUnavailable, make_spark
from chaos.checker.verdict import EXIT_UNKNOWN

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.checker", description=__doc__)
    parser.add_argument("run_dir", nargs="?")
    parser.add_argument("--out", default=None, help="where verdict.json and report.html go (default: RUN_DIR)")
    parser.add_argument("--spark-master", default=None)
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument("--checks", default=None, help="comma-separated check names (default: every check)")
    parser.add_argument("--serve", action="store_true", help="judge run dirs named on stdin, one JSON line each")
    parser.add_argument("--answer-fd", type=int, default=None, help="with --serve: where the answers go")
    args = parser.parse_args(argv)
    if args.serve:
        if args.answer_fd is None:
            parser.error("--serve needs --answer-fd")
        with os.fdopen(args.answer_fd, "w", encoding="utf-8") as answers:
            return serve(sys.stdin, answers, spark_master=args.spark_master)
    if args.run_dir is None:
        parser.error("RUN_DIR is required (or --serve)")
    names = [n for n in args.checks.split(",") if n] if args.checks else None
    try:
        out = check_run(args.run_dir, spark_master=args.spark_master, out_dir=args.out, report=not args.no_report,
                        names=names)
    except (SparkUnavailable, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN
    except Exception as exc:  # whoever started us reads one line, not a traceback
        print(f"error: {_failure(exc)}", file=sys.stderr)
        return EXIT_UNKNOWN
    print(f"{out.verdict.valid}: {out.verdict_path}")
    return out.verdict.exit_code


def serve(requests: IO[str], answers: IO[str], *, spark_master: str | None = None) -> int:
    """Judge each requested run dir with one session, made for the first run's input size and made
    again when a run of the other size comes (`session.make_spark`'s small-input settings)."""
    spark: SparkSession | None = None
    small: bool | None = None
    try:
        for line in requests:
            if not line.strip():
                continue
            answer: dict[str, Any]
            try:
                request = json.loads(line)
                run_dir, report, names = str(request["run_dir"]), bool(request.get("report", True)), request.get("checks")
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                answer = {"exit": EXIT_UNKNOWN, "error": f"unreadable request {line.strip()[:200]!r}: {exc!r}"}
            else:
                try:
                    if not os.path.isdir(run_dir):  # answered without a session
                        raise FileNotFoundError(f"{run_dir} is not a directory")
                    wanted_small = input_bytes(run_dir) < SMALL_INPUT_BYTES
                    if spark is not None and wanted_small != small:
                        spark.stop()
                        spark = None
                    if spark is None:
                        spark, small = make_spark(spark_master, small_input=wanted_small), wanted_small
                    out = check_run(run_dir, spark=spark, report=report, names=names)
                    answer = {"exit": out.verdict.exit_code, "error": None}
                except (SparkUnavailable, FileNotFoundError) as exc:
                    answer = {"exit": EXIT_UNKNOWN, "error": str(exc).splitlines()[0] if str(exc) else repr(exc)}
                except Exception as exc:  # one run's failure is its answer; the next run is judged as usual
                    answer = {"exit": EXIT_UNKNOWN, "error": _failure(exc)}
            if answer["error"]:
                print(f"error: {answer['error']}", file=sys.stderr, flush=True)
            answers.write(json.dumps(answer) + "\n")
            answers.flush()
    finally:
        if spark is not None:
            spark.stop()
    return 0


def _failure(exc: BaseException) -> str:
    if os.environ.get("MQLAB_DEBUG"):
        traceback.print_exc()
    return f"the checker failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


if __name__ == "__main__":
    sys.exit(main())
