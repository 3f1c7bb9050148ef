"""The checker tests: every one is a `spark` test (the `spark` fixture lives in tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads xdist_group marks into node ids
def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/checker/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.spark)
            # the users of the clean run's full check share one xdist worker (`--dist loadgroup`),
            # so that check runs once, not once per worker
            if {"clean_output", "clean_run_dir"} & set(getattr(item, "fixturenames", ())):
                item.add_marker(pytest.mark.xdist_group("clean-run"))


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
