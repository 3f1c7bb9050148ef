"""The one place a SparkSession is made.

Defaults suit a small machine: `local[*]`, no UI, no console progress, few shuffle partitions,
everything bound to 127.0.0.1, Python workers on this interpreter (not whatever `python3` is
on PATH). `master` (or `SPARK_MASTER`) points the same job at a cluster; under `spark-submit`
the submitted master wins and nothing here overrides it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JAVA_INSTALL_HINT = ("the checker runs on Spark, which needs Java 17: install it with "
                     "`apt-get install -y openjdk-17-jre-headless` (or set JAVA_HOME to a Java 17+ runtime)")
PYSPARK_INSTALL_HINT = "the checker needs PySpark: install it with `pip install -e '.[checker]'`"
DEFAULT_MASTER = "local[*]"


class SparkUnavailable(RuntimeError):
    """Spark cannot start here; the message says what to install."""


def java_executable() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("java")


def require_java() -> str:
    java = java_executable()
    if java is None:
        raise SparkUnavailable(f"no `java` found on PATH; {JAVA_INSTALL_HINT}")
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SparkUnavailable(f"`{java} -version` failed ({exc}); {JAVA_INSTALL_HINT}") from exc
    if out.returncode != 0:
        raise SparkUnavailable(f"`{java} -version` exited {out.returncode}; {JAVA_INSTALL_HINT}")
    return java


def make_spark(master: str | None = None, *, app_name: str = "mqlab-checker", driver_memory: str = "1g",
               shuffle_partitions: int | None = None, small_input: bool = False,
               conf: dict[str, str] | None = None) -> SparkSession:
    """A SparkSession for the checker; see the module docstring for the settings."""
    require_java()
    try:
        from pyspark.sql import SparkSession

        from chaos.checker.py4j_names import remember_java_names
    except ImportError as exc:
        raise SparkUnavailable(PYSPARK_INSTALL_HINT) from exc
    remember_java_names()  # every check asks the JVM for the same names again and again
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit chose the master already
    chosen = master or os.environ.get("SPARK_MASTER") or DEFAULT_MASTER
    local = not submitted and chosen.startswith("local")
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    cores = os.cpu_count() or 2
    partitions = shuffle_partitions or (1 if small_input else max(2, min(cores * 2, 16)) if local else 64)
    builder = (SparkSession.builder.appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", str(partitions))
               .config("spark.default.parallelism", str(partitions))
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true")
               .config("spark.pyspark.python", sys.executable))
    if not submitted:
        builder = builder.master(chosen).config("spark.driver.memory", driver_memory)
    if local:
        builder = (builder.config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1"))
    if small_input:
        # Small inputs (tests, short chaos runs): compiling code costs more than running it. C1 only, no whole-stage codegen, interpreted
        # expressions and no adaptive re-planning halve the CPU of a check run (measured: 25 s -> 13 s). Almost all the
        # rest is the driver planning queries, so the JVM's own overhead counts: the serial collector (no concurrent
        # marking threads on a 1 GiB heap) cut the CPU of a session's start and first checks by about a fifth.
        # Even a session that checks many small inputs (a test process) stays at C1: the optimising
        # compiler (C2) made 13 checker tests 10% faster alone but cost 42% more CPU (JVM CPU 158 s
        # vs 111 s), which a machine already busy with other work pays in time.
        builder = (builder.config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
                   .config("spark.sql.adaptive.enabled", "false")
                   .config("spark.sql.codegen.wholeStage", "false")
                   .config("spark.sql.codegen.factoryMode", "NO_CODEGEN")
                   # PySpark's DataFrame debugging records the Python call site of every Column and
                   # DataFrame call, five py4j round trips each: half the Python CPU of a check.
                   .config("spark.python.sql.dataFrameDebugging.enabled", "false"))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:
        text = str(exc)
        if "JAVA_HOME" in text or "Java gateway process exited" in text:
            raise SparkUnavailable(f"Spark could not start Java ({text.strip()[:300]}); {JAVA_INSTALL_HINT}") from exc
        raise
    spark.sparkContext.setLogLevel("ERROR")
    return spark
