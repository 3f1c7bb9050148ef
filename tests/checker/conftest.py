"""One local SparkSession for every checker test (pyspark-notes §1.6)."""

from __future__ import annotations

import pytest

from chaos.checker.session import SparkUnavailable, java_executable, make_spark


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/checker/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark():
    # A missing Java fails the run: a skipped checker suite would count as passing.
    if java_executable() is None:
        pytest.fail("no java on PATH: apt-get install -y openjdk-17-jre-headless")
    try:
        session = make_spark("local[2]", app_name="mqlab-checker-tests", small_input=True)
    except SparkUnavailable as exc:
        pytest.fail(str(exc))
    yield session
    session.stop()


@pytest.fixture(scope="session")
def clean_run_dir(tmp_path_factory):
    """The clean orderly history written as the processes would: one directory per node, JSONL."""
    from checker.builders import clean_orderly_run

    return clean_orderly_run().write(tmp_path_factory.mktemp("clean") / "run")


@pytest.fixture(scope="session")
def clean_output(spark, clean_run_dir):
    """Every check, verdict.json and report.html for the clean history: the clean twin of every anomaly."""
    from chaos.checker.pipeline import check_run

    return check_run(clean_run_dir, spark=spark)


@pytest.fixture(autouse=True)
def _fresh_cache(request):
    """Cached frames of one test must not slow every later query's cache lookup."""
    yield
    if "spark" in request.fixturenames:
        request.getfixturevalue("spark").catalog.clearCache()
